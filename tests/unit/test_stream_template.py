"""The streaming function's resources in the merge template (sagegate/deploy/stream_template.py),
without packaging: sizes, the integration, what a stage without a language model gets."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sagegate.deploy import stream_template, templates
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import load_stage

STREAMED = ("/v1/chat/completions", "/v1/completions")


def with_stream(stage: Stage, **settings: Any) -> Stage:
    return dataclasses.replace(stage, lambda_functions={**stage.lambda_functions,
                                                        "stream": settings})


def test_the_timeout_defaults_to_300_seconds_and_is_the_integrations_too() -> None:
    stage = with_stream(load_stage("prod"))
    assert stream_template.timeout(stage) == stream_template.DEFAULT_TIMEOUT == 300
    longer = with_stream(stage, lambda_timeout=900)
    for path, methods in stream_template.integrations(longer).items():
        integration = methods["post"]["x-amazon-apigateway-integration"]
        assert integration["timeoutInMillis"] == 900_000, path
        assert integration["responseTransferMode"] == "STREAM"
        assert "/2021-11-15/functions/${StreamingHandler.Arn}/response-streaming-invocations" in \
            integration["uri"]["Fn::Sub"]
    assert tuple(stream_template.integrations(longer)) == STREAMED


@pytest.mark.parametrize("value", [0, 901, "300", True, 30.5, None])
def test_a_timeout_lambda_or_api_gateway_would_refuse_stops_the_package(value: Any) -> None:
    stage = with_stream(load_stage("prod"), lambda_timeout=value)
    with pytest.raises(ValueError, match=r"lambda_functions\.stream\.lambda_timeout"):
        templates.merge_template(stage)


def test_memory_is_the_api_functions_unless_the_stream_sets_its_own() -> None:
    prod = load_stage("prod")
    function = templates.merge_template(with_stream(prod))["Resources"]["StreamingHandler"]
    assert function["Properties"]["MemorySize"] == prod.lambda_memory_size == 1769
    assert "ReservedConcurrentExecutions" not in function["Properties"]
    own = with_stream(prod, lambda_memory_size=512, reserved_concurrency=3)
    properties = templates.merge_template(own)["Resources"]["StreamingHandler"]["Properties"]
    assert (properties["MemorySize"], properties["ReservedConcurrentExecutions"]) == (512, 3)


def test_a_stage_without_a_language_model_gets_no_streaming_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_template, "llm_models", lambda stage: [])
    template = templates.merge_template(load_stage("prod"))
    assert not [name for name in template["Resources"] if name.startswith("StreamingHandler")]
    assert "paths" not in template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]
    assert "StreamingHandlerArn" not in template["Outputs"]
    assert template["Resources"]["APIHandler"]["DependsOn"] == [
        "ApiHandlerLogGroup", "PredictionCache", "TokenBudgets"]


def test_the_streaming_role_needs_its_rendered_policy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"policy-prod-stream\.json is missing: run sagegate "
                                         r"policy --stage prod"):
        templates.merge_template(load_stage("prod"), root=tmp_path)
    (tmp_path / ".chalice").mkdir()
    document = {"Version": "2012-10-17", "Statement": []}
    (tmp_path / ".chalice" / "policy-prod-stream.json").write_text(json.dumps(document))
    role = templates.merge_template(load_stage("prod"), root=tmp_path)["Resources"][
        "StreamingHandlerRole"]
    assert role["Properties"]["Policies"] == [{"PolicyName": "StreamingHandlerRolePolicy",
                                               "PolicyDocument": document}]


def test_no_budget_table_no_table_and_nothing_waits_for_one() -> None:
    prod = load_stage("prod")
    stage = dataclasses.replace(prod, env={**prod.env, "TOKEN_BUDGET_TABLE": ""})
    resources = templates.merge_template(stage)["Resources"]
    assert "TokenBudgets" not in resources
    assert "TokenBudgets" not in resources["APIHandler"]["DependsOn"]
    assert "TokenBudgets" not in resources["StreamingHandler"]["DependsOn"]
    with pytest.raises(ValueError, match="sets no TOKEN_BUDGET_TABLE"):
        templates.budget_template(stage)


def test_snapstart_points_the_api_functions_integrations_and_leaves_the_streams_alone() -> None:
    def integration(uri: str) -> dict[str, Any]:
        return {"post": {"x-amazon-apigateway-integration": {"uri": {"Fn::Sub": uri}}}}

    api = ("arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/"
           "${APIHandler.Arn}/invocations")
    stream = stream_template.integrations(load_stage("prod"))[STREAMED[0]]["post"][
        "x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
    template = {"Resources": {
        "APIHandler": {"Properties": {}},
        "APIHandlerInvokePermission": {"Properties": {"FunctionName": {"Ref": "APIHandler"}}},
        "StreamingHandler": {"Properties": {}},
        "RestAPI": {"Properties": {"DefinitionBody": {"paths": {
            "/predict": integration(api), STREAMED[0]: integration(stream),
            STREAMED[1]: integration(stream)}}}}}}
    assert templates.apply_snapstart(template) == 1
    paths = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]["paths"]
    assert "${APIHandlerAliaslive}" in \
        paths["/predict"]["post"]["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
    for path in STREAMED:
        assert paths[path]["post"]["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"] == stream
    assert "SnapStart" not in template["Resources"]["StreamingHandler"]["Properties"]
