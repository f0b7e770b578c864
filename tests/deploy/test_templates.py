"""The SAM templates `sagegate package` generates: what API Gateway and Lambda will be told."""
from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.media import BINARY_TYPES, ImageFormat
from sagegate.deploy import capture_template, jobs, stream_template
from sagegate.deploy.check import (
    SAM_TRANSLATE,
    budget_stack_path,
    cache_stack_path,
    write_stacks,
)
from sagegate.deploy.iam import llm_models
from sagegate.deploy.policy import policy_path, stream_policy_path
from sagegate.deploy.stages import load_stage
from sagegate.deploy.templates import budget_template, cache_template
from tests.deploy.conftest import ROOT, Package

pytestmark = pytest.mark.deploy

# Open in every stage: liveness, and the web page with its files and the API's description
# (they hold nothing secret; the page asks for the API key itself).
OPEN_ROUTES = {("/health", "get"), ("/", "get"), ("/static/{name}", "get"),
               ("/openapi.yaml", "get")}
# Served by the streaming function (in STREAM mode); every other method by APIHandler.
STREAMED = {("/v1/chat/completions", "post"), ("/v1/completions", "post")}
STREAMING_URI = ("arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2021-11-15/"
                 "functions/${StreamingHandler.Arn}/response-streaming-invocations")


@pytest.fixture(scope="module", params=["dev", "prod"])
def built(request: pytest.FixtureRequest, package: Callable[[str], Package]) -> Package:
    return package(request.param)


def definition(pkg: Package) -> dict[str, Any]:
    return pkg.resource("RestAPI")["Properties"]["DefinitionBody"]  # type: ignore[no-any-return]


def methods(pkg: Package) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, verb, spec) for path, verbs in definition(pkg)["paths"].items()
            for verb, spec in verbs.items()]


def test_every_route_but_the_open_ones_requires_an_api_key(built: Package) -> None:
    for path, verb, spec in methods(built):
        if (path, verb) in OPEN_ROUTES or verb == "options":
            assert "security" not in spec, (path, verb)
        else:
            assert spec.get("security") == [{"api_key": []}], (path, verb)
    assert definition(built)["securityDefinitions"]["api_key"]["name"] == "x-api-key"


def test_the_openapi_description_opens_the_same_routes(built: Package) -> None:
    import yaml

    document = yaml.safe_load((ROOT / "chalicelib" / "openapi.yaml").read_text())
    described_open = {(path, verb) for path, verbs in document["paths"].items()
                      for verb, spec in verbs.items() if spec.get("security") == []}
    assert described_open == OPEN_ROUTES
    assert {(path, verb) for path, verb, _ in methods(built) if verb != "options"} == {
        (path, verb) for path, verbs in document["paths"].items() for verb in verbs}


def test_no_cors_preflight_while_no_origin_is_configured(built: Package) -> None:
    assert not [verb for _, verb, _ in methods(built) if verb == "options"]


def test_binary_media_types_cover_every_body_in_and_out(built: Package) -> None:
    binary = set(definition(built)["x-amazon-apigateway-binary-media-types"])
    assert set(BINARY_TYPES) <= binary
    assert {fmt.media_type for fmt in ImageFormat} <= binary


def test_the_usage_plan_throttles_and_meters_the_stages_key(built: Package) -> None:
    plan = built.resource("ApiUsagePlan")["Properties"]
    assert plan["ApiStages"] == [{"ApiId": {"Ref": "RestAPI"}, "Stage": {"Ref": "RestAPI.Stage"}}]
    assert set(plan["Throttle"]) == {"RateLimit", "BurstLimit"}
    assert set(plan["Quota"]) == {"Limit", "Period"}
    link = built.resource("ApiUsagePlanKey")["Properties"]
    assert link == {"KeyId": {"Ref": "ApiKey"}, "KeyType": "API_KEY",
                    "UsagePlanId": {"Ref": "ApiUsagePlan"}}
    assert built.resource("ApiKey")["Properties"]["Enabled"] is True
    assert "ApiKeyId" in built.template["Outputs"]


def test_the_function_runs_from_the_layer_beside_the_template(built: Package) -> None:
    function = built.resource("APIHandler")["Properties"]
    layer = built.resource("DependenciesLayer")["Properties"]
    assert function["Layers"] == [{"Ref": "DependenciesLayer"}]
    assert (built.directory / function["CodeUri"]).is_file()
    assert (built.directory / layer["ContentUri"]).is_file()
    version = (ROOT / ".python-version").read_text().strip()
    assert layer["CompatibleRuntimes"] == [function["Runtime"]] == [f"python{version}"]
    assert layer["CompatibleArchitectures"] == function["Architectures"] == ["x86_64"]


def test_the_function_is_named_for_its_policy_and_log_group(built: Package) -> None:
    name = f"sagegate-{built.stage}"
    function = built.resource("APIHandler")
    assert function["Properties"]["FunctionName"] == name
    stage = load_stage(built.stage)
    jobs_table = ["JobsTable"] if jobs.enabled(stage) else []
    stream = ["CaptureStream"] if capture_template.enabled(stage) else []
    assert function["DependsOn"] == ["ApiHandlerLogGroup", "PredictionCache", "TokenBudgets",
                                     *stream, *jobs_table]
    group = built.resource("ApiHandlerLogGroup")["Properties"]
    assert group["LogGroupName"] == f"/aws/lambda/{name}"
    assert group["RetentionInDays"] > 0


def test_the_role_carries_the_committed_policy_and_nothing_else(built: Package) -> None:
    role = built.resource("ApiHandlerRole")["Properties"]
    assert [p["PolicyDocument"] for p in role["Policies"]] == \
        [json.loads(policy_path(built.stage).read_text())]
    assert "ManagedPolicyArns" not in role


def test_the_shared_cache_table_is_the_one_the_function_and_its_policy_name(
        built: Package) -> None:
    """dev and prod: an on-demand DynamoDB table, keyed by ``key``, items expiring on
    ``expires_at``, encrypted, named as the function's CACHE_TABLE, which is the table the
    role may read and write."""
    name = f"sagegate-{built.stage}-prediction-cache"
    table = built.resource("PredictionCache")
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Delete"
    props = table["Properties"]
    assert props["TableName"] == name
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in props
    assert props["KeySchema"] == [{"AttributeName": "key", "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": "key", "AttributeType": "S"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["SSESpecification"]["SSEEnabled"] is True
    tags = {tag["Key"]: tag["Value"] for tag in props["Tags"]}
    assert tags == built.resource("APIHandler")["Properties"]["Tags"]
    assert tags["stage"] == built.stage and tags["project"] == "sagegate"
    variables = built.resource("APIHandler")["Properties"]["Environment"]["Variables"]
    assert variables["CACHE_TABLE"] == name
    role = built.resource("ApiHandlerRole")["Properties"]
    jobs_table = f"table/{jobs.table(load_stage(built.stage))}"  # test_job_functions.py
    granted = [statement for policy in role["Policies"]
               for statement in policy["PolicyDocument"]["Statement"]
               if any(action.startswith("dynamodb:") for action in statement["Action"])
               and not statement["Resource"].endswith((jobs_table, "-token-budgets"))]
    assert [(g["Action"], g["Resource"].rsplit(":", 1)[-1]) for g in granted] == [
        (["dynamodb:GetItem", "dynamodb:PutItem"], f"table/{name}")]
    assert built.template["Outputs"]["PredictionCacheTable"] == {
        "Description": "The function's CACHE_TABLE", "Value": {"Ref": "PredictionCache"}}


def test_the_stand_alone_cache_stack_is_the_same_table(built: Package, tmp_path: Path) -> None:
    """`sagegate chalice-deploy` deploys the table as its own stack: the very resource
    `sagegate package` merges (`sagegate check` writes, lints and scans that stack too; written
    here, not read from a build/ another command may not have made)."""
    stage = load_stage(built.stage)
    template = cache_template(stage)
    assert template["Resources"] == {"PredictionCache": built.resource("PredictionCache")}
    written = cache_stack_path(stage.name, tmp_path)
    assert written in write_stacks(stage, tmp_path)
    assert json.loads(written.read_text()) == json.loads(json.dumps(template))


def test_timeouts_and_throttles_protect_the_endpoint(built: Package) -> None:
    function = built.resource("APIHandler")["Properties"]
    assert function["Timeout"] < 29
    assert function["ReservedConcurrentExecutions"] > 0
    settings = built.resource("RestAPI")["Properties"]["MethodSettings"]
    assert settings[0]["ResourcePath"] == "/*" and settings[0]["HttpMethod"] == "*"
    assert {"ThrottlingRateLimit", "ThrottlingBurstLimit"} <= set(settings[0])


def test_api_gateway_says_how_to_send_a_smaller_image(built: Package) -> None:
    responses = definition(built)["x-amazon-apigateway-gateway-responses"]
    too_large = responses["REQUEST_TOO_LARGE"]
    assert too_large["statusCode"] == 413
    body = json.loads(too_large["responseTemplates"]["application/json"])
    assert body["Code"] == "PayloadTooLarge"
    assert "Resize the image on the client" in body["Message"]
    assert responses["THROTTLED"]["statusCode"] == 429


def test_every_accepted_scanner_finding_says_why(built: Package) -> None:
    for name, resource in built.template["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert skip["id"].startswith("CKV_") and len(skip["comment"]) > 40, (name, skip)


def test_snapstart_serves_published_versions_behind_the_live_alias(built: Package) -> None:
    function = built.resource("APIHandler")["Properties"]
    assert function["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert function["AutoPublishAlias"] == "live"
    assert function["AutoPublishAliasAllProperties"] is True
    assert "ProvisionedConcurrencyConfig" not in function  # SnapStart excludes it
    permission = built.resource("APIHandlerInvokePermission")["Properties"]
    assert permission["FunctionName"] == {"Ref": "APIHandler.Alias"}
    for path, verb, spec in methods(built):
        uri = spec["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
        if (path, verb) in STREAMED:  # no SnapStart: it invokes $LATEST
            assert uri == STREAMING_URI, (path, verb, uri)
        else:
            assert "${APIHandlerAliaslive}" in uri and ".Arn" not in uri, (path, verb, uri)


def sam_transform(pkg: Package) -> dict[str, Any]:
    """The template expanded by aws-sam-translator (in the IaC virtualenv, ``make iac-tools``),
    run as ``sagegate check`` runs it."""
    python = ROOT / ".venv" / "iac" / "bin" / "python"
    assert python.exists(), "run `make iac-tools` (make test does) for aws-sam-translator"
    target = pkg.directory / "transformed.json"
    subprocess.run([str(python), "-I", str(SAM_TRANSLATE),
                    str(pkg.directory / "sam.json"), str(target)],
                   check=True, capture_output=True, timeout=120)
    return json.loads(target.read_text())  # type: ignore[no-any-return]


def test_sams_own_transform_points_every_integration_at_the_alias(built: Package) -> None:
    expanded = sam_transform(built)
    resources = expanded["Resources"]
    by_type: dict[str, list[str]] = {}
    for name, resource in resources.items():
        by_type.setdefault(resource["Type"], []).append(name)
    [alias] = by_type["AWS::Lambda::Alias"]
    [version] = by_type["AWS::Lambda::Version"]
    assert resources[alias]["Properties"]["Name"] == "live"
    assert resources[alias]["Properties"]["FunctionVersion"] == {
        "Fn::GetAtt": [version, "Version"]}
    assert resources["APIHandler"]["Properties"]["SnapStart"] == {
        "ApplyOn": "PublishedVersions"}
    assert resources["APIHandlerInvokePermission"]["Properties"]["FunctionName"] == {
        "Ref": alias}
    body = resources["RestAPI"]["Properties"]["Body"]
    uris = [spec["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
            for path, verbs in body["paths"].items() for verb, spec in verbs.items()
            if (path, verb) not in STREAMED]
    assert uris and all(f"${{{alias}}}" in uri for uri in uris), uris
    for path, verb in STREAMED:  # SAM's expansion keeps the extension as written
        integration = body["paths"][path][verb]["x-amazon-apigateway-integration"]
        assert integration["responseTransferMode"] == "STREAM"
        assert integration["uri"] == {"Fn::Sub": STREAMING_URI}
    streaming = resources["StreamingHandler"]
    assert streaming["Type"] == "AWS::Lambda::Function"
    assert "SnapStart" not in streaming["Properties"]  # (and the one version is the API's)


def test_the_streaming_function_runs_the_api_functions_code_through_its_own_loop(
        built: Package) -> None:
    """The same zip, layer, runtime, architecture, memory, environment and tracing as
    APIHandler; its own runtime loop (the exec wrapper), handler, name, log group and role; a
    longer timeout; no SnapStart (a runtime loop of its own gets no restore hooks)."""
    api = built.resource("APIHandler")["Properties"]
    resource = built.resource("StreamingHandler")
    function = resource["Properties"]
    assert resource["Type"] == "AWS::Serverless::Function"
    for same in ("CodeUri", "Layers", "Runtime", "Architectures", "MemorySize", "Tracing",
                 "Tags"):
        assert function[same] == api[same], same
    assert (built.directory / function["CodeUri"]).is_file()
    assert function["Environment"]["Variables"] == {
        **api["Environment"]["Variables"],
        "AWS_LAMBDA_EXEC_WRAPPER": "/var/task/chalicelib/lambdastream/bootstrap"}
    assert function["Handler"] == "chalicelib.lambdastream.handler.handle"
    assert (ROOT / "chalicelib" / "lambdastream" / "bootstrap").is_file()
    assert function["FunctionName"] == f"sagegate-{built.stage}-stream"
    assert function["Timeout"] == 300 > api["Timeout"]
    assert function["ReservedConcurrentExecutions"] > 0
    assert function["Role"] == {"Fn::GetAtt": ["StreamingHandlerRole", "Arn"]}
    for absent in ("SnapStart", "AutoPublishAlias", "ProvisionedConcurrencyConfig"):
        assert absent not in function, absent
    stage = load_stage(built.stage)
    capture = ["CaptureStream"] if capture_template.enabled(stage) else []
    assert resource["DependsOn"] == ["StreamingHandlerLogGroup", "PredictionCache",
                                     "TokenBudgets", *capture]
    group = built.resource("StreamingHandlerLogGroup")["Properties"]
    assert group == {"LogGroupName": f"/aws/lambda/sagegate-{built.stage}-stream",
                     "RetentionInDays": built.resource("ApiHandlerLogGroup")["Properties"][
                         "RetentionInDays"]}
    assert built.template["Outputs"]["StreamingHandlerArn"] == {
        "Value": {"Fn::GetAtt": ["StreamingHandler", "Arn"]}}


def test_the_completion_routes_stream_from_the_streaming_function(built: Package) -> None:
    """Chalice's two methods (the API key, the usage plan, the responses) with their integration
    alone changed: InvokeWithResponseStream in STREAM mode, for as long as the function may run;
    every other method still invokes APIHandler."""
    timeout = built.resource("StreamingHandler")["Properties"]["Timeout"]
    chalices = definition(built)["paths"]["/predict"]["post"]["x-amazon-apigateway-integration"]
    for path, verb in STREAMED:
        method = definition(built)["paths"][path][verb]
        assert method["security"] == [{"api_key": []}], path
        assert method["responses"] == definition(built)["paths"]["/predict"]["post"]["responses"]
        integration = method["x-amazon-apigateway-integration"]
        assert integration == {
            **chalices, "uri": {"Fn::Sub": STREAMING_URI}, "responseTransferMode": "STREAM",
            "timeoutInMillis": timeout * 1000}, path
        assert 29_000 < integration["timeoutInMillis"] <= 900_000
    for path, verb, spec in methods(built):
        if (path, verb) not in STREAMED:
            integration = spec["x-amazon-apigateway-integration"]
            assert "StreamingHandler" not in json.dumps(integration), (path, verb)
            assert "responseTransferMode" not in integration, (path, verb)
    assert stream_template.ROUTES.keys() == {path for path, _ in STREAMED}


def test_api_gateway_may_invoke_the_streaming_function_from_those_methods_only(
        built: Package) -> None:
    permissions = {name: resource["Properties"]
                   for name, resource in built.template["Resources"].items()
                   if resource["Type"] == "AWS::Lambda::Permission"
                   and "StreamingHandler" in json.dumps(resource["Properties"]["FunctionName"])}
    api_arn = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${RestAPI}"
    assert sorted(p["SourceArn"]["Fn::Sub"] for p in permissions.values()) == sorted(
        f"{api_arn}/*/POST{path}" for path, _ in STREAMED)
    for permission in permissions.values():
        assert permission["FunctionName"] == {"Fn::GetAtt": ["StreamingHandler", "Arn"]}
        assert permission["Action"] == "lambda:InvokeFunction"
        assert permission["Principal"] == "apigateway.amazonaws.com"


def test_the_streaming_role_carries_its_committed_policy_and_nothing_else(
        built: Package) -> None:
    stage = load_stage(built.stage)
    role = built.resource("StreamingHandlerRole")["Properties"]
    [document] = [p["PolicyDocument"] for p in role["Policies"]]
    assert document == json.loads(stream_policy_path(stage).read_text())
    assert "ManagedPolicyArns" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "lambda.amazonaws.com"}
    [invoke] = [s for s in document["Statement"] if s["Sid"] == "InvokeLanguageModels"]
    assert {arn.rsplit("/", 1)[-1] for arn in invoke["Resource"]} == {
        model.endpoint for model in llm_models(stage)} == {"smollm2"}


def test_the_token_budgets_table_is_the_one_both_functions_and_their_roles_name(
        built: Package) -> None:
    name = f"sagegate-{built.stage}-token-budgets"
    table = built.resource("TokenBudgets")
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Delete"
    props = table["Properties"]
    assert props["TableName"] == name
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": "key", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert {t["Key"]: t["Value"] for t in props["Tags"]} == \
        built.resource("APIHandler")["Properties"]["Tags"]
    assert {skip["id"] for skip in table["Metadata"]["checkov"]["skip"]} == {
        "CKV_AWS_28", "CKV_AWS_119"}
    for function, role in (("APIHandler", "ApiHandlerRole"),
                           ("StreamingHandler", "StreamingHandlerRole")):
        assert "TokenBudgets" in built.resource(function)["DependsOn"]
        variables = built.resource(function)["Properties"]["Environment"]["Variables"]
        assert variables["TOKEN_BUDGET_TABLE"] == name
        granted = [(s["Action"], s["Resource"].rsplit(":", 1)[-1])
                   for policy in built.resource(role)["Properties"]["Policies"]
                   for s in policy["PolicyDocument"]["Statement"]
                   if isinstance(s["Resource"], str) and s["Resource"].endswith("-token-budgets")]
        assert granted == [(["dynamodb:UpdateItem", "dynamodb:GetItem"], f"table/{name}")], role
    assert built.template["Outputs"]["TokenBudgetsTable"]["Value"] == {"Ref": "TokenBudgets"}


def test_the_stand_alone_budgets_stack_is_the_same_table(built: Package, tmp_path: Path) -> None:
    stage = load_stage(built.stage)
    template = budget_template(stage)
    assert template["Resources"] == {"TokenBudgets": built.resource("TokenBudgets")}
    written = budget_stack_path(stage.name, tmp_path)
    assert written in write_stacks(stage, tmp_path)
    assert json.loads(written.read_text()) == json.loads(json.dumps(template))
