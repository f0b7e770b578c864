# sagegate: `make run` serves the API locally against the emulator; `make test` runs every check.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
API_PORT ?= 8000
EMULATOR_PORT ?= 8080

.PHONY: help venv run test lint typecheck unit functional integration bench clean

help:
	@echo "make run    - emulator + chalice local on 127.0.0.1 (no AWS account needed)"
	@echo "make test   - ruff, mypy and every test tier"
	@echo "make bench  - side-by-side benchmarks against the 2018 reference"
	@echo "make package STAGE=prod - Lambda layer + chalice package (SAM), sizes; docs/DEPLOY.md"
	@echo "make deploy STAGE=prod BUCKET=... - SAM/CloudFormation deploy (needs AWS)"

$(STAMP): requirements.txt requirements-layer.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	API_PORT=$(API_PORT) EMULATOR_PORT=$(EMULATOR_PORT) $(PY) -m scripts.run_local

lint: $(STAMP)
	$(VENV)/bin/ruff check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy app.py chalicelib emulator scripts bench

test: lint typecheck deploy-check
	$(VENV)/bin/pytest -q

unit functional integration: $(STAMP)
	$(VENV)/bin/pytest -q tests/$@

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .chalice/deployments build

include deploy.mk
