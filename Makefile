# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Each creates or updates the virtualenv itself, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

# The main job: a leader-kill chaos scenario on a real 3-member local cluster, verified locally and
# with Spark, ending with the HTML report's path (`clusterlab demo` still runs the simulator's demo).
demo: $(BIN)/.installed
	$(BIN)/clusterlab run leader-kill

# The whole suite (ci/suite): ruff, pytest -n auto keeping the chaos runs' traces, the Spark check of
# all of them, the golden-trace regression.
test: $(BIN)/.installed
	$(BIN)/ruff check .
	PYTHON=$(BIN)/python ci/suite

bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks.codec_bench
	$(BIN)/python -m benchmarks.sim_bench
	$(BIN)/python -m benchmarks.cluster_bench
	$(BIN)/python -m benchmarks.spark_bench

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
