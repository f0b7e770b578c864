"""The SAM templates `make package` generates: what API Gateway and Lambda will be told."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.imaging import CONTENT_TYPES
from chalicelib.requests import BINARY_TYPES
from scripts.iam_policy import policy_path
from tests.deploy.conftest import Package

pytestmark = pytest.mark.deploy

OPEN_ROUTES = {("/health", "get")}


@pytest.fixture(scope="module", params=["dev", "prod"])
def built(request: pytest.FixtureRequest, package: Callable[[str], Package]) -> Package:
    return package(request.param)


def definition(pkg: Package) -> dict[str, Any]:
    return pkg.resource("RestAPI")["Properties"]["DefinitionBody"]  # type: ignore[no-any-return]


def methods(pkg: Package) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, verb, spec) for path, verbs in definition(pkg)["paths"].items()
            for verb, spec in verbs.items()]


def test_every_route_but_health_requires_an_api_key(built: Package) -> None:
    for path, verb, spec in methods(built):
        if (path, verb) in OPEN_ROUTES or verb == "options":
            assert "security" not in spec, (path, verb)
        else:
            assert spec.get("security") == [{"api_key": []}], (path, verb)
    assert definition(built)["securityDefinitions"]["api_key"]["name"] == "x-api-key"


def test_no_cors_preflight_while_no_origin_is_configured(built: Package) -> None:
    assert not [verb for _, verb, _ in methods(built) if verb == "options"]


def test_binary_media_types_cover_every_body_in_and_out(built: Package) -> None:
    binary = set(definition(built)["x-amazon-apigateway-binary-media-types"])
    assert set(BINARY_TYPES) <= binary
    assert set(CONTENT_TYPES.values()) <= binary


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
    assert layer["CompatibleRuntimes"] == [function["Runtime"]] == ["python3.11"]
    assert layer["CompatibleArchitectures"] == function["Architectures"] == ["x86_64"]


def test_the_function_is_named_for_its_policy_and_log_group(built: Package) -> None:
    name = f"sagegate-{built.stage}"
    function = built.resource("APIHandler")
    assert function["Properties"]["FunctionName"] == name
    assert function["DependsOn"] == ["ApiHandlerLogGroup"]
    group = built.resource("ApiHandlerLogGroup")["Properties"]
    assert group["LogGroupName"] == f"/aws/lambda/{name}"
    assert group["RetentionInDays"] > 0


def test_the_role_carries_the_committed_policy_and_nothing_else(built: Package) -> None:
    role = built.resource("ApiHandlerRole")["Properties"]
    assert [p["PolicyDocument"] for p in role["Policies"]] == \
        [json.loads(policy_path(built.stage).read_text())]
    assert "ManagedPolicyArns" not in role


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
