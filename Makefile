# accelpolicy developer entry points. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Built control-plane binaries and Go caches live outside the clone so a fresh clone reuses them.
ACCELPOLICY_CACHE ?= $(HOME)/.cache/accelpolicy
export ACCELPOLICY_CACHE

.PHONY: help install test unit lint controlplane demo bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BIN)/accelpolicy: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

install: $(BIN)/accelpolicy  ## create .venv with the accelpolicy console script

lint: install  ## layer contracts (import-linter)
	$(BIN)/lint-imports

unit: install  ## tests that need no cluster
	$(BIN)/python -m pytest -m 'not controlplane and not e2e'

test: install lint  ## everything: unit, rule suites, control plane, e2e
	$(BIN)/python -m pytest

bench: install  ## benchmarks (figures, not pass/fail)
	$(BIN)/python benchmarks/derive.py
	$(BIN)/python benchmarks/webhook.py

clean:  ## remove the venv and caches inside the clone (not the control-plane cache)
	rm -rf $(VENV) .pytest_cache
