# sagegate: `make run` serves the API locally against the emulator; `make test` runs every check.
# The project's Python is the one .python-version names (pyenv and uv read the same file):
# the interpreter decides the Lambda runtime Chalice targets (python3.13, Amazon Linux 2023).
PYTHON_VERSION := $(shell cat .python-version)
PYTHON ?= $(or $(shell command -v python$(PYTHON_VERSION) 2>/dev/null),python$(PYTHON_VERSION))
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
API_PORT ?= 8000
EMULATOR_PORT ?= 8080

.PHONY: help venv run test lint typecheck unit functional integration bench bench-coldstart clean

help:
	@echo "make run    - emulator + chalice local on 127.0.0.1 (no AWS account needed)"
	@echo "make test   - ruff, mypy and every test tier"
	@echo "make bench  - side-by-side benchmarks against the 2018 reference"
	@echo "make fuzz   - long Hypothesis run over bodies, content types, queries (FUZZ_EXAMPLES=20000)"
	@echo "make bench-coldstart - Lambda cold start: python3.11 vs $(PYTHON_VERSION), init, SnapStart"
	@echo "make package STAGE=prod - Lambda layer + chalice package (SAM), sizes; docs/DEPLOY.md"
	@echo "make deploy STAGE=prod BUCKET=... - SAM/CloudFormation deploy (needs AWS)"

$(STAMP): requirements.txt requirements-layer.txt requirements-dev.txt .python-version
	@$(PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(v != "$(PYTHON_VERSION)")' \
	  2>/dev/null || { echo "sagegate needs Python $(PYTHON_VERSION) (.python-version), and" \
	  "'$(PYTHON)' is not it: install Python $(PYTHON_VERSION) (pyenv install $(PYTHON_VERSION))" \
	  "or run make PYTHON=/path/to/python$(PYTHON_VERSION)" >&2; exit 1; }
	@# a virtualenv left by another Python (an older checkout) is rebuilt, not reused
	@test ! -x $(PY) || $(PY) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON_VERSION)")' \
	  || { echo "$(VENV) is not Python $(PYTHON_VERSION): recreating it" >&2; rm -rf $(VENV); }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
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

FUZZ_EXAMPLES ?= 20000
.PHONY: fuzz
fuzz: $(STAMP)
	SAGEGATE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/pytest -q --timeout=0 \
	  tests/functional/test_fuzz.py

bench-coldstart: $(STAMP)
	$(PY) -m bench.coldstart

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .chalice/deployments build

include deploy.mk
