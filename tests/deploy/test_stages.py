"""The stages in .chalice/config.json: sized, time-boxed, authenticated and least-privileged."""
from __future__ import annotations

import dataclasses

import pytest
from chalice.config import Config

from chalicelib.core.access import Access, AuthMode
from chalicelib.core.config import Settings
from chalicelib.core.config_names import API_GATEWAY_TIMEOUT_SECONDS
from sagegate.deploy.iam import models as iam_models
from sagegate.deploy.stages import DEPLOY_STAGES, check_shadows, load_config, load_stage
from sagegate.deploy.templates import merge_template

pytestmark = pytest.mark.deploy

ONE_VCPU_MB = 1769  # Lambda gives a function one full vCPU at 1,769 MB
# Cold start (imports, ~0.3 s measured) plus decoding the largest image allowed (~0.8 s
# measured for 39 MP at one vCPU) must fit beside the endpoint's budget in the Lambda timeout.
OWN_WORK_SECONDS = 2.0


def chalice_config(stage: str) -> Config:
    return Config(chalice_stage=stage, config_from_disk=load_config())


def test_local_dev_prod_and_test_stages_exist() -> None:
    assert set(load_config()["stages"]) == {"local", "dev", "prod", "test"}


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_the_retry_budget_fits_in_lambda_which_fits_in_api_gateway(stage: str) -> None:
    settings = Settings.from_env(load_stage(stage).env)
    timeout = chalice_config(stage).lambda_timeout
    assert timeout < API_GATEWAY_TIMEOUT_SECONDS
    assert settings.request_budget_seconds + OWN_WORK_SECONDS <= timeout
    assert (settings.endpoint_connect_timeout + settings.endpoint_read_timeout
            <= settings.request_budget_seconds)


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_deployed_stages_get_a_full_vcpu_logs_retention_and_a_concurrency_cap(stage: str) -> None:
    config = chalice_config(stage)
    assert config.lambda_memory_size >= ONE_VCPU_MB
    assert config.log_retention_in_days
    assert config.reserved_concurrency and config.reserved_concurrency > 0
    assert config.api_gateway_endpoint_type == "REGIONAL"
    assert config.tags["project"] == "sagegate"
    assert isinstance(config.xray_enabled, bool)


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_deployed_stages_use_their_own_policy_file_not_autogen(stage: str) -> None:
    config = chalice_config(stage)
    assert config.autogen_policy is False
    assert config.iam_policy_file == f"policy-{stage}.json"
    assert config.automatic_layer is False


def test_prod_requires_an_api_key_and_answers_no_cross_origin_browser() -> None:
    """docs/DEPLOY.md, Stages: prod is `api-key` with CORS off (no CORS headers at all), as
    Lambda itself reads it, and API Gateway's own error answers carry no origin either."""
    stage = load_stage("prod")
    access = Access.from_env(stage.env, deployed=True)
    assert access.auth == AuthMode.API_KEY
    assert access.cors_origin == ""
    api = merge_template(stage)["Resources"]["RestAPI"]["Properties"]
    responses = api["DefinitionBody"]["x-amazon-apigateway-gateway-responses"]
    assert responses  # the check below is not vacuous
    headers = {header for response in responses.values()
               for header in response.get("responseParameters", {})}
    assert not any("Access-Control" in header for header in headers), headers


@pytest.mark.parametrize("stage", ["local", "dev", "prod", "test"])
def test_only_local_allows_any_origin(stage: str) -> None:
    origin = Config(chalice_stage=stage, config_from_disk=load_config()) \
        .environment_variables.get("CORS_ALLOW_ORIGIN", "")
    assert (origin == "*") == (stage == "local")


@pytest.mark.parametrize("stage", ["local", "dev", "prod", "test"])
def test_every_stage_has_valid_settings(stage: str) -> None:
    env = Config(chalice_stage=stage, config_from_disk=load_config()).environment_variables
    Settings.from_env(env)
    Access.from_env(env)


def test_a_shadow_that_could_not_finish_in_the_invocation_refuses_the_stage() -> None:
    from chalicelib.registry.experiments import Arm, Experiment, Shadow
    from chalicelib.registry.specs import ModelSpec

    stage = load_stage("dev")
    timeout = int(chalice_config("dev").lambda_timeout)

    def model(seconds: float) -> ModelSpec:
        experiment = Experiment("e", (Arm("a", "iris"),),
                                shadows=(Shadow("s", "iris-next", timeout_seconds=seconds),))
        return dataclasses.replace(
            next(m for m in iam_models(stage) if m.name == "iris"), experiment=experiment)

    check_shadows(stage, timeout, [model(timeout - 1)])  # fits
    with pytest.raises(ValueError, match=r"^models/iris/model.json: experiment.shadow\[0\]"
                       r".timeout_seconds \(28\) must be below stages.dev's lambda_timeout"):
        check_shadows(stage, timeout, [model(timeout)])
    check_shadows(stage, timeout)  # the registered models' shadows fit every deployed stage
