# The README's commands. Everything runs in a local virtual environment, .venv/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
INSTALLED := $(VENV)/.installed
# JupyterLab refuses to run as root unless told it may (containers and CI run as root).
AS_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.DEFAULT_GOAL := help
.PHONY: help setup lock upgrade run test lab lint pattern recording record record-calls \
	record-dry-run \
	accept-recording benchmark serve site dist clean

help: ## List the targets
	@awk -F':.*## ' '/^[a-z-]+:.*## / { name[++n] = $$1; text[n] = $$2; \
		if (length($$1) > width) width = length($$1) } \
		END { for (i = 1; i <= n; i++) printf "  make %-" width "s   %s\n", name[i], text[i] }' \
		$(MAKEFILE_LIST)

# Before anything is made: the Python that PYTHON names must be one requires-python allows, and
# when PYTHON is named (not left at its default), .venv must have been made from it. Otherwise it
# stops with one message saying what it found, what it needs and what to do.
CHECK_PYTHON = command -v $(PYTHON) >/dev/null 2>&1 || { echo "make setup: PYTHON=$(PYTHON) is \
	not a command here. Name an installed Python $(OLDEST_PYTHON) or later, e.g. \
	\`make setup PYTHON=python3.12\`. Nothing was set up." >&2; exit 1; }; \
	NAMED_PYTHON='$(PYTHON)' $(PYTHON) tools/check_python.py $(1) || { status=$$?; \
	[ $$status -lt 126 ] || echo "make setup: PYTHON=$(PYTHON) is a command that did not start \
	Python (exit $$status; what it said is above): a version manager's shim for a version it has \
	not enabled, or a broken link. Name the Python by its full path. Nothing was set up." >&2; \
	exit $$status; }
ifneq ($(origin PYTHON),file)
$(UV) $(INSTALLED): | named-python
endif
.PHONY: named-python
named-python:
	@$(call CHECK_PYTHON,$(VENV))

# uv, at the version and hashes requirements.txt pins: the one bootstrap step that needs nothing
# but python3. The venv starts without a pip of its own (ensurepip takes 2 s, and uv installs the
# locked pip with the rest): python3's own pip unpacks uv's wheel beside it or, where python3 has
# no pip, a pip that ensurepip gives the venv does; uv sync then installs uv properly. A .venv
# left without uv by an interrupted try is made anew; a failed step removes the .venv it made.
$(UV):
	@$(CHECK_PYTHON)
	rm -rf $(VENV)
	$(PYTHON) -m venv --without-pip $(VENV) || { rm -rf $(VENV); exit 1; }
	awk '/^uv==/ { found = 1 } found { print; if ($$0 !~ /\\$$/) exit }' requirements.txt \
		>$(VENV)/uv-pin.txt
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
		--target $(VENV)/uv-wheel -r $(VENV)/uv-pin.txt 2>/dev/null \
	|| { $(BIN)/python -m ensurepip --default-pip >/dev/null && $(BIN)/python -m pip install \
		--quiet --disable-pip-version-check --no-deps --require-hashes \
		--target $(VENV)/uv-wheel -r $(VENV)/uv-pin.txt; } || { rm -rf $(VENV); exit 1; }
	cp $(VENV)/uv-wheel/bin/uv $@
	rm -rf $(VENV)/uv-wheel

# Exactly uv.lock, the dev group included: uv removes whatever the lock does not list, then adds
# this project, editable. --locked stops when uv.lock no longer matches pyproject.toml (run
# `make lock`) instead of resolving anew. --python keeps the venv's own Python: uv would otherwise
# make .venv anew on whichever Python it finds when the venv's does not suit requires-python.
# --compile-bytecode: uv, unlike pip, leaves no .pyc files by default, and where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) every process, kernel and test
# would then compile each module it imports again. When the first sync fails, the .venv goes too.
# Then the kernel configuration that gives the notebooks in notebooks/ the collection's set-up.
$(INSTALLED): uv.lock pyproject.toml Makefile dev/memorybook_dev/ipython_kernel_config.py | $(UV)
	$(UV) sync --quiet --locked --no-python-downloads --python $(BIN)/python --compile-bytecode \
		|| { [ -e $@ ] || rm -rf $(VENV); exit 1; }
	mkdir -p $(VENV)/etc/ipython
	cp dev/memorybook_dev/ipython_kernel_config.py $(VENV)/etc/ipython/ipython_kernel_config.py
	touch $@

setup: $(INSTALLED) ## Create .venv and install exactly uv.lock (the lock), and this project

# requirements.txt, the same lock for plain pip: exactly the versions of uv.lock (as
# constraints), with hashes, for every platform, from the oldest Python pyproject.toml allows.
# --no-strip-extras keeps `jsonschema[format-nongpl]==...`: without the extra in the pin, pip
# refuses a hashed lock that holds a distribution below its newest version when another one asks
# for it with an extra (pypa/pip#9644), as jupyter-events asks for jsonschema. The input is this
# project (`-e .`, read from stdin) and the dev group, which asks for the project again with both
# its extras (memorybook[service,postgres]): given `-e .`, uv takes the project from this folder
# instead of looking for it on the index. The project itself is not written out, nor the
# collection's own tooling (dev/): pip installs them with `pip install -e . -e dev`.
OLDEST_PYTHON := $(shell sed -n 's/^requires-python = ">=\([0-9.]*\).*/\1/p' pyproject.toml)
define LOCK_FOR_PIP
$(UV) export --quiet --frozen --all-groups --no-emit-project --no-emit-package memorybook-dev \
	--no-hashes --no-header --no-annotate -o $(VENV)/uv-lock-versions.txt
echo '-e .' | $(UV) pip compile --quiet - --group pyproject.toml:dev --universal \
	--python-version $(OLDEST_PYTHON) --no-strip-extras --generate-hashes \
	--no-emit-package memorybook --no-emit-package memorybook-dev \
	--constraints $(VENV)/uv-lock-versions.txt --custom-compile-command 'make lock' \
	-o requirements.txt
endef

lock: | $(UV) ## After changing the requirements in pyproject.toml: update uv.lock, requirements.txt
	$(UV) lock --quiet
	$(LOCK_FOR_PIP)

upgrade: | $(UV) ## Move every pin to the newest version pyproject.toml allows (then `make setup test`)
	$(UV) lock --quiet --upgrade
	$(LOCK_FOR_PIP)

run: $(INSTALLED) ## Set up, run every notebook from the recording, print the headline results
	$(BIN)/python -m tools.execute

test: $(INSTALLED) ## Run every test: nbval on each notebook, the recording, links, store, live mode
	tools/test.sh

lab: $(INSTALLED) ## Open the notebooks in JupyterLab
	$(BIN)/jupyter lab $(AS_ROOT) notebooks/

lint: $(INSTALLED) ## ruff on the code and the notebooks
	$(BIN)/ruff check .

pattern: $(INSTALLED) ## Print notebook 1's pattern as one script (run beside the recording: 3/6, then 6/6)
	@$(BIN)/python -m tools.pattern

recording: $(INSTALLED) ## Rebuild json_cache/ from data/published_figures.csv
	$(BIN)/python -m tools.build_recording

record-dry-run: $(INSTALLED) ## List the calls a live recording would make and their cost; sends nothing
	$(BIN)/python -m tools.record --dry-run

record: $(INSTALLED) ## Record live (TYPESAFE_API_KEY) into json_cache/json_cache.new.json and compare
	$(BIN)/python -m tools.record

record-calls: $(INSTALLED) ## The same calls and report as `make record`, without running the notebooks
	$(BIN)/python -m tools.record --calls-only

accept-recording: $(INSTALLED) ## After review: the new recording replaces the committed one
	$(BIN)/python -m tools.record --accept

benchmark: $(INSTALLED) ## Time set-up, the notebooks and tests, a live recording, the store, the service
	$(BIN)/python -m benchmarks.setup_benchmark
	$(BIN)/python -m benchmarks.collection_benchmark
	$(BIN)/python -m benchmarks.live_recording_benchmark
	$(BIN)/python -m benchmarks.store_benchmark
	$(BIN)/python -m benchmarks.store_cost_benchmark
	$(BIN)/python -m benchmarks.service_benchmark
	$(BIN)/python -m benchmarks.large_bodies_benchmark
	$(BIN)/python -m benchmarks.read_benchmark

# Notebook 9's app, on this machine only. `PORT=8080 make serve` picks another port; `HOST=...`
# another address, which beyond loopback needs MEMORYBOOK_SERVICE_TOKEN: the check says so in one
# line and starts nothing (memorybook/service_settings.py).
PORT ?= 8000
HOST ?= 127.0.0.1
serve: $(INSTALLED) ## Run notebook 9's web service on 127.0.0.1:$PORT (8000); Ctrl-C saves pending gates
	@$(BIN)/python -m memorybook.service_settings '$(HOST)'
	$(BIN)/uvicorn --factory memorybook.service:create_app --host '$(HOST)' --port $(PORT)

# The site (mkdocs.yml, tools/site_build.py): the notebooks as committed, nothing re-run.
# Material prints at every start that it reaches its end of life in May 2027; mkdocs.yml says so
# once instead.
site: $(INSTALLED) ## Build the static site into site/ from the committed notebooks; fails on a broken link
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build
	@echo "make site: open site/index.html (the notebooks, the reference, nothing re-run)"

# What a release publishes (.github/workflows/release.yml), checked as PyPI reads it
dist: $(INSTALLED) ## Build the sdist and the wheel into dist/ and check them with twine
	$(BIN)/python -m tools.dist dist

clean: ## Remove .venv and every generated cache
	rm -rf $(VENV) build dist site .pytest_cache .ruff_cache *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
