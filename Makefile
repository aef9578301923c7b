# Two entry points for a newcomer: `make demo` and `make test`. Both create .venv on first use
# with the same editable install of the package that `pip install` gives (pure Python; no build
# step of our own: docs/adr/0007).
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-repeat lint bench bench-compare clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/txmq demo

# The default suite on TEST_WORKERS pytest-xdist workers (0: one process); a module stays on one
# worker, and tests/spark/ shares one (one Spark session; tests/conftest.py). Three on a 2-core
# machine: the tests mostly wait on brokers, child processes and sockets (2 workers kept the
# cores ~30 % busy: 12.9 min for ~7.5 CPU-min; 3 workers took 8.4 min).
TEST_WORKERS ?= 3

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

# TXMQ_REQUIRE_TOOLS=1: a test that skips fails instead (a tool its session fixture could not
# install, say; tests/conftest.py), so a green run ran every test. Skip reasons and the 15
# slowest tests are printed at the end.
test: lint
	TXMQ_REQUIRE_TOOLS=1 $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

test-slow: $(STAMP)
	$(VENV)/bin/pytest -q -m slow --durations=15

# The tests most exposed to timing, N runs in a row (`make test-repeat N=20`): the kill -9 crash
# tests, the store's concurrency tests, the replication tests and the Spark driver-kill test.
# Each run draws fresh seeds (a failure prints its TXMQ_SEED); the last line counts the runs.
N ?= 5
REPEAT_TESTS ?= tests/crash tests/unit/test_store_concurrency.py \
	$(wildcard tests/integration/test_replication*.py) tests/spark/test_stream_crash.py

test-repeat: $(STAMP)
	@failed=0; for i in $$(seq $(N)); do \
		echo "test-repeat: run $$i of $(N)"; \
		TXMQ_REQUIRE_TOOLS=1 $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile \
			-p no:cacheprovider $(REPEAT_TESTS) || failed=$$((failed + 1)); \
	done; \
	echo "test-repeat: $(N) runs, $$failed failed"; test $$failed -eq 0

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/run_all.py

bench-compare: $(STAMP)
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(VENV)/bin/python benchmarks/compare.py

clean:
	rm -rf $(VENV) build *.egg-info
