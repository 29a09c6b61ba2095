# sim_pipeline: `make run` and `make test` are all a newcomer needs (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DOMAIN ?= retail
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: run test test-train dev bench lint clean

$(BIN)/sim-pipeline: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

$(DAGSTER_HOME):
	mkdir -p $(DAGSTER_HOME)

run: $(BIN)/sim-pipeline $(DAGSTER_HOME)  ## materialize every step for seed 0 and both sim agents, print the summary
	$(BIN)/sim-pipeline run --domain $(DOMAIN)

test: $(BIN)/sim-pipeline  ## the test suite (the trainer tests run too once the [train] extra is installed)
	$(BIN)/python -m pytest

$(VENV)/.train: $(BIN)/sim-pipeline
	$(BIN)/pip install --quiet "torch==2.13.0"  # the CPU wheel on this machine's disk, before anything asks for torch
	$(BIN)/pip install --quiet -e ".[dev,train]"
	touch $@

test-train: $(VENV)/.train  ## the test suite with the trainer tests required (what CI runs)
	SIM_PIPELINE_TRAIN_TESTS=required $(BIN)/python -m pytest

dev: $(BIN)/sim-pipeline $(DAGSTER_HOME)  ## the Dagster UI and daemon on http://127.0.0.1:3000
	$(BIN)/sim-pipeline policies sync
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench: $(BIN)/sim-pipeline  ## benchmarks; figures go to .bench/results.jsonl
	$(BIN)/python -m sim_pipeline_tests.bench

lint: $(BIN)/sim-pipeline
	$(BIN)/ruff check sim_pipeline sim_pipeline_tests

clean:
	rm -rf $(VENV) $(DAGSTER_HOME) data/warehouse .bench
