"""The IAM policies: exactly the function's own resources, never a wildcard in prod."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.registry.loading import load_registry
from sagegate.deploy import jobs
from sagegate.deploy.iam import llm_models
from sagegate.deploy.policy import (
    policy_path,
    render,
    render_stream,
    stream_policy_path,
)
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import DEPLOY_STAGES, load_config, load_stage

pytestmark = pytest.mark.deploy


def load_policy(stage: str) -> dict[str, Any]:
    return json.loads(policy_path(stage).read_text())  # type: ignore[no-any-return]


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    found = policy["Statement"]
    return found if isinstance(found, list) else [found]


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def account_and_region(policy: dict[str, Any]) -> tuple[str, str]:
    """Where the committed (or `sagegate policy`-rendered) file was rendered for."""
    arn = next(as_list(s["Resource"])[0] for s in statements(policy)
               if s["Sid"] == "InvokeOwnEndpoint")
    _, _, _, region, account, _ = arn.split(":", 5)
    return account, region


# The only wildcards a least-privilege resource may hold: the last component, under a parent
# that is itself named in full.
SCOPED_WILDCARDS = {
    "logs": re.compile(r"log-group:[^*:]+:\*"),  # the log streams of one named log group
    "s3": re.compile(r"[^*/]+(/[^*]+)?/\*"),  # the objects under one named bucket (and prefix)
}


def is_scoped(resource: str) -> bool:
    """Whether ``resource`` is an ARN that names its service, region, account and resource,
    with a wildcard at most in the one place :data:`SCOPED_WILDCARDS` allows for its service."""
    parts = resource.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn":
        return False
    _, partition, service, region, account, path = parts
    if "*" in partition + service + region + account:
        return False
    if "*" not in path and "?" not in path:
        return True
    allowed = SCOPED_WILDCARDS.get(service)
    return allowed is not None and allowed.fullmatch(path) is not None


def assert_no_wildcards(policy: dict[str, Any]) -> None:
    for statement in statements(policy):
        assert statement["Effect"] == "Allow"
        assert "NotResource" not in statement and "NotAction" not in statement
        for resource in as_list(statement["Resource"]):
            assert is_scoped(resource), resource
        for action in as_list(statement["Action"]):
            assert "*" not in action and "?" not in action, statement


def test_prod_policy_has_no_wildcard_resource_or_action() -> None:
    assert_no_wildcards(load_policy("prod"))


@pytest.mark.parametrize("resource", [
    "*",
    "arn:aws:sagemaker:us-east-1:123456789012:endpoint/*",
    "arn:aws:sagemaker:us-east-1:123456789012:endpoint/efficientnet-*",
    "arn:aws:sagemaker:us-east-1:123456789012:endpoint/efficientnet-lite?",
    "arn:aws:sagemaker:*:123456789012:endpoint/efficientnet-lite0",
    "arn:aws:sagemaker:us-east-1:*:endpoint/efficientnet-lite0",
    "arn:aws:logs:us-east-1:123456789012:log-group:*",
    "arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/*:*",
    "arn:aws:s3:::*/captures/*",
    "arn:aws:firehose:us-east-1:123456789012:deliverystream/*",
    "arn:aws:dynamodb:us-east-1:123456789012:table/*",
    "arn:aws:dynamodb:us-east-1:123456789012:table/sagegate-prod-*",
    "arn:aws:dynamodb:us-east-1:123456789012:table/sagegate-prod-prediction-cache/index/*",
])
def test_the_wildcard_check_refuses_a_wildcard_anywhere_in_the_resource(resource: str) -> None:
    policy = load_policy("prod")
    statements(policy)[0]["Resource"] = resource  # a hand-edited InvokeOwnEndpoint, say
    with pytest.raises(AssertionError):
        assert_no_wildcards(policy)


@pytest.mark.parametrize("resource", [
    "arn:aws:sagemaker:us-east-1:123456789012:endpoint/efficientnet-lite0",
    "arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/sagegate-prod:*",
    "arn:aws:s3:::capture-bucket/sagegate/prod/*",
    "arn:aws:s3:::capture-bucket/*",
    "arn:aws:dynamodb:us-east-1:123456789012:table/sagegate-prod-prediction-cache",
])
def test_the_wildcard_check_allows_the_functions_own_scoped_resources(resource: str) -> None:
    assert is_scoped(resource)


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_committed_policies_are_what_the_stage_config_renders(stage: str) -> None:
    policy = load_policy(stage)
    assert policy == render(load_stage(stage), *account_and_region(policy))


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_each_action_is_granted_only_on_the_functions_own_resources(stage: str) -> None:
    policy = load_policy(stage)
    account, region = account_and_region(policy)
    config = load_stage(stage)
    granted = {action: statement["Resource"] for statement in statements(policy)
               for action in as_list(statement["Action"])}
    # every registered model's endpoint (chalicelib/models/), its experiment's arms' and
    # shadows' endpoints, and nothing else
    registry = load_registry(Settings.from_env(config.env), config.env)
    wanted = {config.endpoint_name, *(model.endpoint for model in registry.models.values())}
    for model in registry.models.values():
        if model.experiment is not None:
            wanted |= {target.endpoint for target in (*model.experiment.arms,
                                                      *model.experiment.shadows)}
    assert sorted(granted["sagemaker:InvokeEndpoint"]) == sorted(
        f"arn:aws:sagemaker:{region}:{account}:endpoint/{name.lower()}" for name in wanted)
    assert {"iris", "sentiment", "efficientnet-lite0-int8"} <= wanted
    own_logs = f"arn:aws:logs:{region}:{account}:log-group:/aws/lambda/sagegate-{stage}:*"
    assert granted["logs:CreateLogStream"] == granted["logs:PutLogEvents"] == own_logs
    assert "logs:CreateLogGroup" not in granted  # the deployment creates it, with retention


def with_env(stage: Stage, **env: str) -> Stage:
    return dataclasses.replace(stage, env={**stage.env, **env})


def test_s3_capture_adds_put_object_under_its_prefix_only() -> None:
    stage = with_env(load_stage("prod"), CAPTURE_MODE="both",
                     CAPTURE_DESTINATION="s3://capture-bucket/sagegate/prod/")
    capture = statements(render(stage, "111122223333", "eu-west-1"))[-1]
    assert capture["Action"] == ["s3:PutObject"]
    assert capture["Resource"] == "arn:aws:s3:::capture-bucket/sagegate/prod/*"


def test_firehose_capture_adds_put_record_batch_on_its_stream_only() -> None:
    stage = with_env(load_stage("prod"), CAPTURE_MODE="input",
                     CAPTURE_DESTINATION="firehose://sagegate-capture")
    capture = statements(render(stage, "111122223333", "eu-west-1"))[-1]
    assert capture["Action"] == ["firehose:PutRecordBatch"]
    assert capture["Resource"] == \
        "arn:aws:firehose:eu-west-1:111122223333:deliverystream/sagegate-capture"


def test_capture_off_grants_nothing_for_it() -> None:
    stage = with_env(load_stage("prod"), CAPTURE_MODE="off", CAPTURE_DESTINATION="s3://b/p",
                     CACHE_TABLE="", TOKEN_BUDGET_TABLE="")
    actions = {a for s in statements(render(stage, "111122223333", "eu-west-1"))
               for a in s["Action"]}
    assert actions == {"sagemaker:InvokeEndpoint", "logs:CreateLogStream", "logs:PutLogEvents"}


CACHE_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem"]


def cache_statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in statements(policy) if s["Sid"] == "ReadWritePredictionCache"]


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_the_stages_cache_table_is_read_and_written_by_key_only(stage: str) -> None:
    """dev and prod share a cache table: GetItem and PutItem on that table's ARN, nothing
    else of DynamoDB (no Query, Scan, Delete, no index), and no wildcard."""
    policy = load_policy(stage)
    account, region = account_and_region(policy)
    table = load_stage(stage).cache_table
    assert table == f"sagegate-{stage}-prediction-cache"
    [statement] = cache_statements(policy)
    assert statement["Action"] == CACHE_ACTIONS
    assert statement["Resource"] == f"arn:aws:dynamodb:{region}:{account}:table/{table}"
    assert is_scoped(statement["Resource"])
    jobs_table = f"table/{jobs.table(load_stage(stage))}"  # dev's (test_job_functions.py)
    budgets = f"table/{load_stage(stage).budget_table}"  # the token budgets' (below)
    dynamodb = [a for s in statements(policy) for a in as_list(s["Action"])
                if a.startswith("dynamodb:") and not s["Resource"].endswith((jobs_table, budgets))]
    assert dynamodb == CACHE_ACTIONS


def test_no_cache_table_grants_no_dynamodb() -> None:
    stage = with_env(load_stage("prod"), CACHE_TABLE="", TOKEN_BUDGET_TABLE="")
    policy = render(stage, "111122223333", "eu-west-1")
    assert not cache_statements(policy)
    assert not [a for s in statements(policy) for a in as_list(s["Action"])
                if a.startswith("dynamodb:")]


@pytest.mark.parametrize("stage", ["local", "test"])
def test_local_stages_keep_the_in_process_cache_only(stage: str) -> None:
    assert load_stage(stage).cache_table == ""


def test_the_cache_grant_follows_the_stages_table_account_region_and_partition() -> None:
    stage = with_env(load_stage("prod"), CACHE_TABLE="team.predictions_v2")
    [statement] = cache_statements(render(stage, "111122223333", "cn-north-1"))
    assert statement["Resource"] == \
        "arn:aws-cn:dynamodb:cn-north-1:111122223333:table/team.predictions_v2"
    assert_no_wildcards(render(stage, "111122223333", "cn-north-1"))


@pytest.mark.parametrize("table", ["*", "sagegate-*", "a", "t/index/x", "x:y"])
def test_a_table_name_dynamodb_would_refuse_stops_the_stage(table: str, tmp_path: Path) -> None:
    config = load_config()
    config["stages"]["prod"]["environment_variables"]["CACHE_TABLE"] = table
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="not a DynamoDB table name"):
        load_stage("prod", path)


def test_xray_is_the_only_wildcard_and_only_when_opted_in() -> None:
    stage = dataclasses.replace(load_stage("dev"), xray=True)
    wildcards = [s for s in statements(render(stage, "111122223333", "eu-west-1"))
                 if s["Resource"] == "*"]
    assert [s["Action"] for s in wildcards] == [["xray:PutTraceSegments",
                                                 "xray:PutTelemetryRecords"]]


def test_arns_follow_the_regions_partition_and_sagemakers_lower_case() -> None:
    stage = with_env(load_stage("prod"), ENDPOINT_NAME="My-Endpoint")
    policy = render(stage, "111122223333", "cn-north-1")
    assert "arn:aws-cn:sagemaker:cn-north-1:111122223333:endpoint/my-endpoint" in \
        statements(policy)[0]["Resource"]


@pytest.mark.parametrize("account,region", [("12345", "us-east-1"), ("123456789012", "mars-1"),
                                            ("*", "us-east-1"), ("123456789012", "*")])
def test_rejects_a_malformed_account_or_region(account: str, region: str) -> None:
    with pytest.raises(ValueError):
        render(load_stage("prod"), account, region)


def test_an_inference_component_a_model_names_is_granted_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from sagegate.deploy import policy as policy_module

    models = [types.SimpleNamespace(endpoint="shared", inference_component="Iris-IC",
                                    experiment=None),
              types.SimpleNamespace(endpoint="iris", inference_component=None, experiment=None)]
    monkeypatch.setattr(policy_module, "models", lambda stage: models)
    document = render(load_stage("prod"), "123456789012", "us-east-1")
    (invoke,) = [s for s in statements(document) if s["Sid"] == "InvokeOwnEndpoint"]
    assert "arn:aws:sagemaker:us-east-1:123456789012:inference-component/iris-ic" in \
        invoke["Resource"]
    assert "arn:aws:sagemaker:us-east-1:123456789012:endpoint/shared" in invoke["Resource"]
    assert len([r for r in invoke["Resource"] if ":inference-component/" in r]) == 1
    assert_no_wildcards(document)


def test_every_arm_and_shadow_of_an_experiment_is_granted_and_nothing_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from chalicelib.registry.experiments import Arm, Experiment, Shadow
    from sagegate.deploy import policy as policy_module

    experiment = Experiment("e", (Arm("a", "lite0", weight=9),
                                  Arm("b", "lite0-int8", inference_component="Int8-IC",
                                      weight=1)),
                            shadows=(Shadow("s", "lite0-shadow"),))
    models = [types.SimpleNamespace(endpoint="lite0", inference_component=None,
                                    experiment=experiment)]
    monkeypatch.setattr(policy_module, "models", lambda stage: models)
    document = render(load_stage("prod"), "123456789012", "us-east-1")
    (invoke,) = [s for s in statements(document) if s["Sid"] == "InvokeOwnEndpoint"]
    arn = "arn:aws:sagemaker:us-east-1:123456789012"
    granted = set(invoke["Resource"])
    assert {f"{arn}:endpoint/lite0", f"{arn}:endpoint/lite0-int8",
            f"{arn}:endpoint/lite0-shadow", f"{arn}:inference-component/int8-ic"} <= granted
    stage_endpoint = f"{arn}:endpoint/{load_stage('prod').endpoint_name.lower()}"
    assert granted - {stage_endpoint} == {f"{arn}:endpoint/lite0", f"{arn}:endpoint/lite0-int8",
                                          f"{arn}:endpoint/lite0-shadow",
                                          f"{arn}:inference-component/int8-ic"}
    assert_no_wildcards(document)


BUDGET_ACTIONS = ["dynamodb:UpdateItem", "dynamodb:GetItem"]


def load_stream_policy(stage: str) -> dict[str, Any]:
    return json.loads(stream_policy_path(load_stage(stage)).read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_committed_streaming_policies_are_what_the_stage_config_renders(stage: str) -> None:
    policy = load_stream_policy(stage)
    assert policy == render_stream(load_stage(stage), *account_and_region(load_policy(stage)))


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_the_streaming_role_invokes_the_language_models_only(stage: str) -> None:
    """InvokeEndpoint on the llm models' endpoints (none of the image, tensor or Cortex ones),
    its own log group, the cache and budgets tables as the API's, the capture; nothing of jobs,
    no wildcard."""
    policy = load_stream_policy(stage)
    account, region = account_and_region(load_policy(stage))
    config = load_stage(stage)
    assert_no_wildcards(policy)
    granted: dict[str, list[str]] = {}
    for statement in statements(policy):
        for action in as_list(statement["Action"]):
            granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    llm = {model.endpoint for model in llm_models(config)}
    assert llm == {"smollm2"}
    assert granted["sagemaker:InvokeEndpoint"] == [
        f"arn:aws:sagemaker:{region}:{account}:endpoint/{name}" for name in sorted(llm)]
    assert not {"iris", "sentiment", config.endpoint_name} & {
        arn.rsplit("/", 1)[-1] for arn in granted["sagemaker:InvokeEndpoint"]}
    assert granted["logs:PutLogEvents"] == [
        f"arn:aws:logs:{region}:{account}:log-group:/aws/lambda/sagegate-{stage}-stream:*"]
    table = f"arn:aws:dynamodb:{region}:{account}:table"
    assert granted["dynamodb:PutItem"] == [f"{table}/{config.cache_table}"]
    assert granted["dynamodb:UpdateItem"] == [f"{table}/{config.budget_table}"]
    assert sorted(granted["dynamodb:GetItem"]) == sorted(
        [f"{table}/{config.cache_table}", f"{table}/{config.budget_table}"])
    api = {action for statement in statements(load_policy(stage))
           for action in as_list(statement["Action"])}
    assert set(granted) <= api  # nothing the API function cannot do (jobs: the API's alone)
    assert not any(action.startswith(("s3:Get", "sns:", "sqs:")) for action in granted)


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_both_roles_count_token_budgets_on_the_stages_table_only(stage: str) -> None:
    config = load_stage(stage)
    assert config.budget_table == f"sagegate-{stage}-token-budgets"
    for policy in (load_policy(stage), load_stream_policy(stage)):
        account, region = account_and_region(load_policy(stage))
        [statement] = [s for s in statements(policy) if s["Sid"] == "CountTokenBudgets"]
        assert statement["Action"] == BUDGET_ACTIONS
        assert statement["Resource"] == \
            f"arn:aws:dynamodb:{region}:{account}:table/{config.budget_table}"
        assert not [s for s in statements(policy) if s["Sid"] != "CountTokenBudgets"
                    and config.budget_table in json.dumps(s["Resource"])]


def test_no_budget_table_grants_nothing_for_it() -> None:
    stage = with_env(load_stage("prod"), TOKEN_BUDGET_TABLE="")
    for policy in (render(stage, "111122223333", "eu-west-1"),
                   render_stream(stage, "111122223333", "eu-west-1")):
        assert policy is not None
        assert "dynamodb:UpdateItem" not in json.dumps(policy)


def test_a_stage_without_a_language_model_has_no_streaming_role(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sagegate.deploy import policy as policy_module

    monkeypatch.setattr(policy_module, "llm_models", lambda stage: [])
    assert render_stream(load_stage("prod"), "111122223333", "eu-west-1") is None


def test_a_language_models_arms_shadows_and_components_are_the_streaming_roles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from chalicelib.registry.experiments import Arm, Experiment, Shadow
    from sagegate.deploy import policy as policy_module

    experiment = Experiment("e", (Arm("a", "chat-a", weight=9),
                                  Arm("b", "chat-b", inference_component="Chat-IC", weight=1)),
                            shadows=(Shadow("s", "chat-shadow"),))
    chosen = [types.SimpleNamespace(endpoint="chat", inference_component=None,
                                    experiment=experiment)]
    monkeypatch.setattr(policy_module, "llm_models", lambda stage: chosen)
    document = render_stream(load_stage("prod"), "123456789012", "us-east-1")
    assert document is not None
    [invoke] = [s for s in statements(document) if s["Sid"] == "InvokeLanguageModels"]
    arn = "arn:aws:sagemaker:us-east-1:123456789012"
    assert set(invoke["Resource"]) == {
        f"{arn}:endpoint/chat", f"{arn}:endpoint/chat-a", f"{arn}:endpoint/chat-b",
        f"{arn}:endpoint/chat-shadow", f"{arn}:inference-component/chat-ic"}
    assert_no_wildcards(document)
