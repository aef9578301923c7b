# Two entry points for a newcomer: `make demo` and `make test`. Both create .venv on first use
# with the same editable install of the package that `pip install` gives (pure Python; no build
# step of our own: docs/adr/0007).
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint bench bench-compare clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/txmq demo

# The default suite on TEST_WORKERS pytest-xdist workers (0: one process); a module stays on one
# worker, and tests/spark/ shares one (one Spark session; tests/conftest.py).
TEST_WORKERS ?= 2

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile

test-slow: $(STAMP)
	$(VENV)/bin/pytest -q -m slow

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/run_all.py

bench-compare: $(STAMP)
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(VENV)/bin/python benchmarks/compare.py

clean:
	rm -rf $(VENV) build *.egg-info
