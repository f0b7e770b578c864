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

.PHONY: help venv lock run test lint typecheck unit functional integration bench bench-coldstart \
	bench-worstcase \
	clean

help:
	@echo "make run    - emulator + chalice local on 127.0.0.1 (no AWS account needed)"
	@echo "make test   - ruff, mypy and every test tier"
	@echo "make bench  - side-by-side benchmarks against the 2018 reference"
	@echo "make fuzz   - long Hypothesis run over bodies, content types, queries (FUZZ_EXAMPLES=20000)"
	@echo "make bench-coldstart - Lambda cold start: python3.11 vs $(PYTHON_VERSION), init, SnapStart"
	@echo "make bench-worstcase - the most preprocessing a crafted upload can cost"
	@echo "make package STAGE=prod - Lambda layer + chalice package (SAM), sizes; docs/DEPLOY.md"
	@echo "make deploy STAGE=prod BUCKET=... - SAM/CloudFormation deploy (needs AWS)"
	@echo "make lock   - recompile every requirements*.txt lock (hashes) from its .in file"

$(STAMP): requirements.txt requirements-layer.txt requirements-dev.txt .python-version
	@$(PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(v != "$(PYTHON_VERSION)")' \
	  2>/dev/null || { echo "sagegate needs Python $(PYTHON_VERSION) (.python-version), and" \
	  "'$(PYTHON)' is not it: install Python $(PYTHON_VERSION) (pyenv install $(PYTHON_VERSION))" \
	  "or run make PYTHON=/path/to/python$(PYTHON_VERSION)" >&2; exit 1; }
	@# a virtualenv left by another Python (an older checkout) is rebuilt, not reused
	@test ! -x $(PY) || $(PY) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON_VERSION)")' \
	  || { echo "$(VENV) is not Python $(PYTHON_VERSION): recreating it" >&2; rm -rf $(VENV); }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# the lock pins every package with its hashes: nothing unpinned or unchecked is installed
	$(PY) -m pip install --quiet --require-hashes -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

# Locks: each requirements*.in (what a person edits) compiles to the requirements*.txt beside
# it, every transitive package pinned with --hash lines; pip installs them with
# --require-hashes, and Chalice's pip download of requirements.txt checks the hashes too.
# uv rather than pip-tools: pip-compile resolves for the interpreter that runs it, so it cannot
# lock the function and the layer for Lambda's platform from another machine; uv resolves for a
# named platform and Python (--python-platform, --python-version) and writes pip's
# requirements format. uv itself is pinned in requirements-dev.in. --no-config: no uv.toml
# or environment-specific settings; uv reads no pip configuration either, so it resolves from
# the default registry by name. Locks carry no index URLs or paths (uv emits none unless asked).
# The function and layer are locked for the Lambda runtime (x86_64, the runtime's glibc from
# scripts/lambda_runtime.py: manylinux_2_34 for python3.13); dev and iac for Linux x86_64,
# dev constrained by the function and layer locks so shared packages get the same versions.
UV := $(VENV)/bin/uv
# uv keeps a lock's pins unless its input asks otherwise: make lock LOCK_ARGS=--upgrade moves
# everything to the newest versions, LOCK_ARGS="--upgrade-package numpy" one package.
LOCK_ARGS ?=
UV_COMPILE = $(UV) pip compile --quiet --no-config --generate-hashes \
	--python-version $(PYTHON_VERSION) --custom-compile-command "make lock" $(LOCK_ARGS)
LAMBDA_PLATFORM = $(shell $(PY) -c 'from scripts.lambda_runtime import ARCHITECTURE, current; \
	major, minor = current().glibc; print(f"{ARCHITECTURE}-manylinux_{major}_{minor}")')
LINUX_PLATFORM := x86_64-unknown-linux-gnu

lock: $(STAMP)
	$(UV_COMPILE) --python-platform $(LAMBDA_PLATFORM) requirements.in -o requirements.txt
	$(UV_COMPILE) --python-platform $(LAMBDA_PLATFORM) --only-binary :all: \
	  requirements-layer.in -o requirements-layer.txt
	$(UV_COMPILE) --python-platform $(LINUX_PLATFORM) -c requirements.txt \
	  -c requirements-layer.txt requirements-dev.in -o requirements-dev.txt
	$(UV_COMPILE) --python-platform $(LINUX_PLATFORM) requirements-iac.in -o requirements-iac.txt

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

bench-worstcase: $(STAMP)
	$(PY) -m bench.worstcase

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .chalice/deployments build

include deploy.mk
