# The README's commands. Everything runs in a local virtual environment, .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup run test lab lint export recording record record-dry-run accept-recording \
	benchmark clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(INSTALLED): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -e .
	touch $@

setup: $(INSTALLED) ## Create .venv and install the pinned requirements

run: $(INSTALLED) ## Set up, run every notebook from the recording, print the headline results
	$(BIN)/python -m tools.execute

test: $(INSTALLED) ## Run every test: nbval on each notebook, the recording, links, store, live mode
	tools/test.sh

lab: $(INSTALLED) ## Open the notebooks in JupyterLab
	$(BIN)/jupyter lab notebooks/

lint: $(INSTALLED) ## ruff on the code and the notebooks
	$(BIN)/ruff check .

export: $(INSTALLED) ## Write the code the notebooks teach into memorybook/ (after editing a notebook)
	$(BIN)/python -m tools.export

recording: $(INSTALLED) ## Rebuild json_cache/ from data/published_figures.csv
	$(BIN)/python -m tools.build_recording

record-dry-run: $(INSTALLED) ## List the calls a live recording would make and their cost; sends nothing
	$(BIN)/python -m tools.record --dry-run

record: $(INSTALLED) ## Record live (TYPESAFE_API_KEY) into json_cache/json_cache.new.json and compare
	$(BIN)/python -m tools.record

accept-recording: $(INSTALLED) ## After review: the new recording replaces the committed one
	$(BIN)/python -m tools.record --accept

benchmark: $(INSTALLED) ## Time the notebooks against empty ones, a live recording, and the store
	$(BIN)/python -m benchmarks.collection_benchmark
	$(BIN)/python -m benchmarks.live_recording_benchmark
	$(BIN)/python -m benchmarks.store_benchmark

clean: ## Remove .venv and every generated cache
	rm -rf $(VENV) build .pytest_cache .ruff_cache *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
