# The README's two commands: `make demo` (the main job) and `make test` (the whole suite), and the
# maintainer's: `make lint`, `make fmt`, `make typecheck`, `make quick`, `make bench`.
# Each creates or updates the virtualenv itself, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test quick lint fmt typecheck lint-imports bench clean

# The package with its test and lint tools; the benchmark's extra packages only for `make bench`.
$(BIN)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The build backend too: tests build a wheel without build isolation (tests/unit/test_packaging.py).
	$(BIN)/python -m pip install --quiet 'setuptools>=77' wheel
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(BIN)/.installed-bench: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

# The main job: a leader-kill chaos scenario on a real 3-member local cluster, verified by both
# engines — the embedded DuckDB verdict at once, then the same SQL on Spark (the warm server of
# `clusterlab spark start` if one is up) — ending with the HTML report's path (`clusterlab demo` is
# the simulator walk-through).
demo: $(BIN)/.installed
	$(BIN)/clusterlab run leader-kill --engine spark

# The whole suite (ci/suite): the lint step, pytest -n auto keeping the chaos runs' traces, the Spark
# check of all of them, the golden-trace regression.
test: $(BIN)/.installed
	PYTHON=$(BIN)/python ci/suite

# Unit and simulator tests only: a minute or two, no processes, no Spark.
quick: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n auto tests/unit tests/sim

# ruff, ruff format --check, the import-linter contracts and mypy (ci/lint).
lint: $(BIN)/.installed
	PYTHON=$(BIN)/python ci/lint

fmt: $(BIN)/.installed
	$(BIN)/python -m ruff format .
	$(BIN)/python -m ruff check --fix .

typecheck: $(BIN)/.installed
	PYTHON=$(BIN)/python ci/lint mypy

lint-imports: $(BIN)/.installed
	PYTHON=$(BIN)/python ci/lint lint-imports

# The benchmark's own tests (its peers and the Spark bench at a tiny scale), then the benchmarks.
bench: $(BIN)/.installed-bench
	$(BIN)/python -m pytest -q -p no:cacheprovider benchmarks/tests
	$(BIN)/python -m benchmarks.codec_bench
	$(BIN)/python -m benchmarks.apply_bench
	$(BIN)/python -m benchmarks.sim_bench
	$(BIN)/python -m benchmarks.cluster_bench
	$(BIN)/python -m benchmarks.spark_bench

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
