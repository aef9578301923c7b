# Two entry points for a newcomer: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint bench bench-compare clean modules compiled interpreted

# The editable install, then the broker's hot modules as TXMQ_COMPILE says (mypyc_build.py,
# docs/adr/0007). Default 1: the modules txmq/compiled.py lists compiled to C in place, with
# mypyc's free-instance race fixed in the generated C (mypyc_patch.py; ADR 0007, "The
# free-instance race"); an edit of a listed source, or of a module they import (mypyc inlines
# its constants: compiled.py's IMPORTED), rebuilds (make compares times; the broker
# and the tests compare hashes and refuse a stale or unpatched build). TXMQ_COMPILE=0 builds
# interpreted (no .so files); without a C compiler that happens anyway.
TXMQ_COMPILE ?= 1
COMPILED_SOURCES := $(addprefix src/,$(shell cd src && $(PY) -c 'from txmq.compiled import COMPILED, IMPORTED; print(*COMPILED, *IMPORTED)'))
BUILT := $(VENV)/.compiled-$(TXMQ_COMPILE)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,spark]'
	$(MAKE) --no-print-directory modules
	touch $(STAMP)

$(BUILT): $(COMPILED_SOURCES) src/txmq/compiled.py mypyc_build.py mypyc_patch.py
	$(MAKE) --no-print-directory modules

# Build the modules as TXMQ_COMPILE says. `make interpreted` removes them, e.g. for a debugger
# or a profiler on the .py files (the next plain `make test` compiles again; `make
# TXMQ_COMPILE=0 test` tests interpreted); `make compiled` compiles them now.
modules:
	rm -f $(VENV)/.compiled-*
	TXMQ_COMPILE=$(TXMQ_COMPILE) $(VENV)/bin/python mypyc_build.py
	touch $(BUILT)

compiled:
	$(MAKE) --no-print-directory modules TXMQ_COMPILE=1

interpreted:
	$(MAKE) --no-print-directory modules TXMQ_COMPILE=0

demo: $(STAMP) $(BUILT)
	$(VENV)/bin/txmq demo

# The default suite on TEST_WORKERS pytest-xdist workers (0: one process, as before); a module
# stays on one worker, and tests/spark/ shares one (one Spark session; tests/conftest.py).
TEST_WORKERS ?= 2

test: $(STAMP) $(BUILT)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile

test-slow: $(STAMP) $(BUILT)
	$(VENV)/bin/pytest -q -m slow

bench: $(STAMP) $(BUILT)
	$(VENV)/bin/python benchmarks/run_all.py

bench-compare: $(STAMP) $(BUILT)
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(VENV)/bin/python benchmarks/compare.py

clean:
	rm -rf $(VENV) build *.egg-info src/txmq/compiled.json
	find src -name '*.so' -delete
