# Deployment: the Lambda layer, `chalice package` / `chalice deploy`, IAM policies and the
# template checks. docs/DEPLOY.md walks through every target and why it is built this way.
#
# Offline (run by `make test` through deploy-check):  layer-zip  package  deploy-check
# Need the AWS CLI and credentials:                    policy  layer  deploy  chalice-deploy

STAGE ?= prod
DEPLOY_STAGES := dev prod
PKG_FORMAT ?= cloudformation
AWS ?= aws
BUILD := build
LAYER_DIR := $(BUILD)/layer
LAYER_ZIP := $(LAYER_DIR)/layer.zip
PKG_DIR = $(BUILD)/package-$(STAGE)
STACK = sagegate-$(STAGE)
CHALICE := $(VENV)/bin/chalice
IAC_VENV := $(VENV)/iac
IAC_STAMP := $(IAC_VENV)/.installed
# Evaluated only by the targets that talk to AWS.
REGION ?= $(or $(AWS_REGION),$(AWS_DEFAULT_REGION),$(shell $(AWS) configure get region 2>/dev/null))
ACCOUNT ?= $(shell $(AWS) sts get-caller-identity --query Account --output text 2>/dev/null)
# `chalice package` insists on a region name; the template itself uses ${AWS::Region}.
PACKAGE_REGION := us-east-1
# The layer targets the runtime Chalice picks from the venv's Python (python3.13: Amazon Linux
# 2023); scripts/lambda_runtime.py computes the manylinux tags its glibc loads.
LAYER_PYTHON := $(PYTHON_VERSION)
# A failed `chalice package`/`deploy` can leave a cached zip without its dependencies.
CHALICE_FAILED = { rm -rf .chalice/deployments; \
	echo "chalice failed: removed the stale .chalice/deployments cache" >&2; exit 1; }

.PHONY: layer-zip layer package deploy chalice-deploy policy deploy-check iac-tools check-stage

check-stage:
	@case " $(DEPLOY_STAGES) " in *" $(STAGE) "*) ;; \
	  *) echo "STAGE must be one of: $(DEPLOY_STAGES)" >&2; exit 2;; esac

# --- the layer: numpy + OpenCV built for Lambda ------------------------------------------
layer-zip: $(LAYER_ZIP)

$(LAYER_ZIP): requirements-layer.txt scripts/zipdir.py scripts/lambda_runtime.py deploy.mk \
		.python-version | $(STAMP)
	@test "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = $(LAYER_PYTHON) \
	  || { echo "the layer's .pyc files need Python $(LAYER_PYTHON) in $(VENV)" >&2; exit 1; }
	rm -rf $(LAYER_DIR) && mkdir -p $(LAYER_DIR)
	$(PY) -m pip install --quiet --no-compile --require-hashes --only-binary=:all: \
	  --implementation cp --python-version $(LAYER_PYTHON) \
	  $$($(PY) -m scripts.lambda_runtime platforms) \
	  --target $(LAYER_DIR)/python -r requirements-layer.txt
	@# test suites and console scripts are never used at run time; RECORD files hash the
	@# scripts' interpreter path, which would make the zip differ from checkout to checkout
	find $(LAYER_DIR)/python -depth -type d -name tests -exec rm -rf {} +
	rm -rf $(LAYER_DIR)/python/bin
	rm -f $(LAYER_DIR)/python/*.dist-info/RECORD
	@# /opt is read-only on Lambda: without .pyc files every cold start compiles numpy again
	$(PY) -m compileall -q -j 0 --invalidation-mode unchecked-hash $(LAYER_DIR)/python
	$(PY) -m scripts.zipdir $(LAYER_ZIP) $(LAYER_DIR) python

layer: check-stage $(LAYER_ZIP)
	@test -n "$(BUCKET)" || { echo "usage: make layer STAGE=$(STAGE) BUCKET=<s3 bucket>" >&2; exit 2; }
	@test -n "$(REGION)" || { echo "set REGION (or configure the AWS CLI)" >&2; exit 2; }
	key=sagegate/$(STAGE)/layer-$$(md5sum $(LAYER_ZIP) | cut -c1-12).zip && \
	$(AWS) s3 cp --region $(REGION) $(LAYER_ZIP) s3://$(BUCKET)/$$key && \
	arn=$$($(AWS) lambda publish-layer-version --region $(REGION) \
	  --layer-name sagegate-$(STAGE)-dependencies \
	  --description "numpy, OpenCV and the other compiled dependencies" \
	  --content S3Bucket=$(BUCKET),S3Key=$$key \
	  --compatible-runtimes python$(LAYER_PYTHON) --compatible-architectures x86_64 \
	  --query LayerVersionArn --output text) && \
	$(PY) -m scripts.stage_config record-layer --stage $(STAGE) --arn "$$arn"

# --- IAM: least privilege, rendered for the account -------------------------------------
policy: check-stage $(STAMP)
	@test -n "$(ACCOUNT)" -a -n "$(REGION)" || \
	  { echo "usage: make policy STAGE=$(STAGE) ACCOUNT=<12 digits> REGION=<region>" >&2; exit 2; }
	$(PY) -m scripts.iam_policy --stage $(STAGE) --account $(ACCOUNT) --region $(REGION)

# --- packaging (offline) -------------------------------------------------------------------
package: check-stage $(STAMP) $(LAYER_ZIP)
	rm -rf $(PKG_DIR) && mkdir -p $(BUILD)
	find chalicelib -name __pycache__ -prune -exec rm -rf {} +
ifeq ($(PKG_FORMAT),terraform)
	@# Terraform output cannot take --merge-template: the layer is the ARN in the stage's
	@# "layers" (make layer); the usage plan and the log group are yours (docs/DEPLOY.md).
	@# Chalice 1.34 cannot write log_retention_in_days as Terraform, so it packages a copy
	@# of the project whose config leaves it out.
	@test -n "$$($(PY) -m scripts.stage_config show --stage $(STAGE) --key layers)" || \
	  echo "warning: stages.$(STAGE).layers is empty: run make layer first" >&2
	rm -rf $(BUILD)/terraform-src && mkdir -p $(BUILD)/terraform-src/.chalice
	cp -r app.py chalicelib requirements.txt $(BUILD)/terraform-src/
	cp .chalice/policy-$(STAGE).json $(BUILD)/terraform-src/.chalice/
	$(PY) -m scripts.stage_config terraform-config --stage $(STAGE) \
	  > $(BUILD)/terraform-src/.chalice/config.json
	PYTHONDONTWRITEBYTECODE=1 AWS_DEFAULT_REGION=$(PACKAGE_REGION) $(CHALICE) \
	  --project-dir $(BUILD)/terraform-src package --pkg-format terraform --stage $(STAGE) \
	  $(CURDIR)/$(PKG_DIR)
	$(PY) -m scripts.artifact_sizes $(PKG_DIR)/deployment.zip $(LAYER_ZIP)
else
	$(PY) -m scripts.sam_template merge --stage $(STAGE) > $(BUILD)/merge-$(STAGE).json
	PYTHONDONTWRITEBYTECODE=1 AWS_DEFAULT_REGION=$(PACKAGE_REGION) $(CHALICE) package \
	  --stage $(STAGE) --merge-template $(BUILD)/merge-$(STAGE).json $(PKG_DIR) \
	  || $(CHALICE_FAILED)
	$(PY) -m scripts.sam_template snapstart --stage $(STAGE) --template $(PKG_DIR)/sam.json
	cp $(LAYER_ZIP) $(PKG_DIR)/layer.zip
	$(PY) -m scripts.artifact_sizes $(PKG_DIR)/deployment.zip $(PKG_DIR)/layer.zip
endif

# --- checks run by `make test` ---------------------------------------------------------------
$(IAC_STAMP): requirements-iac.txt | $(STAMP)
	test -x $(IAC_VENV)/bin/python || $(PYTHON) -m venv $(IAC_VENV)
	$(IAC_VENV)/bin/python -m pip install --quiet --require-hashes -r requirements-iac.txt
	touch $(IAC_STAMP)

iac-tools: $(IAC_STAMP)

deploy-check: $(IAC_STAMP) $(LAYER_ZIP)
	@for stage in $(DEPLOY_STAGES); do \
	  $(MAKE) --no-print-directory package STAGE=$$stage PKG_FORMAT=cloudformation || exit 1; \
	  $(PY) -m scripts.sam_template usage-plan --stage $$stage > $(BUILD)/usage-plan-$$stage.json \
	    || exit 1; \
	done
	@for stage in $(DEPLOY_STAGES); do \
	  $(IAC_VENV)/bin/python scripts/sam_translate.py $(BUILD)/package-$$stage/sam.json \
	    $(BUILD)/package-$$stage/transformed.json || exit 1; \
	done
	$(IAC_VENV)/bin/cfn-lint $(foreach s,$(DEPLOY_STAGES),$(BUILD)/package-$(s)/sam.json \
	  $(BUILD)/package-$(s)/transformed.json $(BUILD)/usage-plan-$(s).json)
	@# --skip-download: offline, no Prisma Cloud calls (so no severities: every finding counts)
	$(IAC_VENV)/bin/checkov --quiet --compact --skip-download --framework cloudformation \
	  $(foreach s,$(DEPLOY_STAGES),-f $(BUILD)/package-$(s)/sam.json -f $(BUILD)/usage-plan-$(s).json)
	@echo "deploy-check: cfn-lint and checkov passed for: $(DEPLOY_STAGES)"

# --- deploying (needs AWS) -------------------------------------------------------------------
# SAM/CloudFormation: one stack with the layer, function, API, usage plan and key.
deploy: check-stage
	@test -n "$(BUCKET)" || { echo "usage: make deploy STAGE=$(STAGE) BUCKET=<s3 bucket>" >&2; exit 2; }
	$(MAKE) --no-print-directory policy package STAGE=$(STAGE) PKG_FORMAT=cloudformation
	$(AWS) cloudformation package --region $(REGION) --template-file $(PKG_DIR)/sam.json \
	  --s3-bucket $(BUCKET) --s3-prefix sagegate/$(STAGE) --use-json \
	  --output-template-file $(PKG_DIR)/packaged.json
	$(AWS) cloudformation deploy --region $(REGION) --template-file $(PKG_DIR)/packaged.json \
	  --stack-name $(STACK) --capabilities CAPABILITY_IAM --no-fail-on-empty-changeset \
	  $(if $(PARAMS),--parameter-overrides $(PARAMS))
	$(AWS) cloudformation describe-stacks --region $(REGION) --stack-name $(STACK) \
	  --query 'Stacks[0].Outputs' --output table

# Chalice: the function zip goes up directly; the layer is the ARN `make layer` recorded.
chalice-deploy: check-stage $(STAMP)
	@test -n "$$($(PY) -m scripts.stage_config show --stage $(STAGE) --key layers)" || \
	  { echo "stages.$(STAGE).layers is empty: run make layer STAGE=$(STAGE) BUCKET=... first" >&2; \
	    exit 2; }
	$(MAKE) --no-print-directory policy STAGE=$(STAGE)
	@# Chalice 1.34 gives log_retention_in_days to "/aws/lambda/<app>-<stage>-api_handler",
	@# not to the function's own group: create that one, with the stage's retention, first.
	group=/aws/lambda/$$($(PY) -m scripts.stage_config show --stage $(STAGE) --key function-name) && \
	days=$$($(PY) -m scripts.stage_config show --stage $(STAGE) --key log-retention) && \
	{ out=$$($(AWS) logs create-log-group --region $(REGION) --log-group-name $$group 2>&1) || \
	  echo "$$out" | grep -q ResourceAlreadyExistsException || { echo "$$out" >&2; exit 1; }; } && \
	{ [ -z "$$days" ] || $(AWS) logs put-retention-policy --region $(REGION) \
	  --log-group-name $$group --retention-in-days $$days; }
	find chalicelib -name __pycache__ -prune -exec rm -rf {} +
	PYTHONDONTWRITEBYTECODE=1 AWS_DEFAULT_REGION=$(REGION) $(CHALICE) deploy --stage $(STAGE) \
	  || $(CHALICE_FAILED)
	@# chalice deploy wires API Gateway to $$LATEST, which SnapStart never serves: publish a
	@# version behind the "live" alias and point the API at it (scripts/snapstart.py)
	@if [ "$$($(PY) -m scripts.stage_config show --stage $(STAGE) --key snapstart)" = true ]; then \
	  $(PY) -m scripts.snapstart enable --stage $(STAGE) --region $(REGION); fi
	@if [ "$$($(PY) -m scripts.stage_config show --stage $(STAGE) --key auth)" = api-key ]; then \
	  mkdir -p $(BUILD) && \
	  $(PY) -m scripts.sam_template usage-plan --stage $(STAGE) > $(BUILD)/usage-plan-$(STAGE).json && \
	  $(AWS) cloudformation deploy --region $(REGION) --stack-name $(STACK)-usage-plan \
	    --template-file $(BUILD)/usage-plan-$(STAGE).json --no-fail-on-empty-changeset \
	    --parameter-overrides RestApiId=$$($(PY) -m scripts.stage_config rest-api-id --stage $(STAGE)) \
	    $(PARAMS) && \
	  $(AWS) cloudformation describe-stacks --region $(REGION) --stack-name $(STACK)-usage-plan \
	    --query 'Stacks[0].Outputs' --output table; \
	fi
