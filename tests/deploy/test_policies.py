"""The IAM policies: exactly the function's own resources, never a wildcard in prod."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from scripts.iam_policy import policy_path, render
from scripts.stage_config import DEPLOYED_STAGES, Stage, load_stage

pytestmark = pytest.mark.deploy


def load_policy(stage: str) -> dict[str, Any]:
    return json.loads(policy_path(stage).read_text())  # type: ignore[no-any-return]


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    found = policy["Statement"]
    return found if isinstance(found, list) else [found]


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def account_and_region(policy: dict[str, Any]) -> tuple[str, str]:
    """Where the committed (or `make policy`-rendered) file was rendered for."""
    arn = next(s["Resource"] for s in statements(policy) if s["Sid"] == "InvokeOwnEndpoint")
    _, _, _, region, account, _ = arn.split(":", 5)
    return account, region


def test_prod_policy_has_no_wildcard_resource_or_action() -> None:
    for statement in statements(load_policy("prod")):
        assert statement["Effect"] == "Allow"
        assert "NotResource" not in statement and "NotAction" not in statement
        for resource in as_list(statement["Resource"]):
            assert resource != "*", statement
            service_region_account = resource.split(":")[2:5]
            assert "*" not in "".join(service_region_account), resource
        for action in as_list(statement["Action"]):
            assert "*" not in action, statement


@pytest.mark.parametrize("stage", DEPLOYED_STAGES)
def test_committed_policies_are_what_the_stage_config_renders(stage: str) -> None:
    policy = load_policy(stage)
    assert policy == render(load_stage(stage), *account_and_region(policy))


@pytest.mark.parametrize("stage", DEPLOYED_STAGES)
def test_each_action_is_granted_only_on_the_functions_own_resources(stage: str) -> None:
    policy = load_policy(stage)
    account, region = account_and_region(policy)
    config = load_stage(stage)
    granted = {action: statement["Resource"] for statement in statements(policy)
               for action in as_list(statement["Action"])}
    assert granted["sagemaker:InvokeEndpoint"] == \
        f"arn:aws:sagemaker:{region}:{account}:endpoint/{config.endpoint_name.lower()}"
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
    stage = with_env(load_stage("prod"), CAPTURE_MODE="off", CAPTURE_DESTINATION="s3://b/p")
    actions = {a for s in statements(render(stage, "111122223333", "eu-west-1"))
               for a in s["Action"]}
    assert actions == {"sagemaker:InvokeEndpoint", "logs:CreateLogStream", "logs:PutLogEvents"}


def test_xray_is_the_only_wildcard_and_only_when_opted_in() -> None:
    stage = dataclasses.replace(load_stage("dev"), xray=True)
    wildcards = [s for s in statements(render(stage, "111122223333", "eu-west-1"))
                 if s["Resource"] == "*"]
    assert [s["Action"] for s in wildcards] == [["xray:PutTraceSegments",
                                                 "xray:PutTelemetryRecords"]]


def test_arns_follow_the_regions_partition_and_sagemakers_lower_case() -> None:
    stage = with_env(load_stage("prod"), ENDPOINT_NAME="My-Endpoint")
    policy = render(stage, "111122223333", "cn-north-1")
    assert statements(policy)[0]["Resource"] == \
        "arn:aws-cn:sagemaker:cn-north-1:111122223333:endpoint/my-endpoint"


@pytest.mark.parametrize("account,region", [("12345", "us-east-1"), ("123456789012", "mars-1"),
                                            ("*", "us-east-1"), ("123456789012", "*")])
def test_rejects_a_malformed_account_or_region(account: str, region: str) -> None:
    with pytest.raises(ValueError):
        render(load_stage("prod"), account, region)
