"""Each authentication mode, as `chalice package` sees it: app.py imported with the stage's env.

Chalice fixes a route's auth when app.py is imported, so each mode is checked in a fresh
interpreter that imports app.py with the mode's variables and renders the API definition with
the same generator `chalice package` uses.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.deploy.conftest import ROOT

pytestmark = pytest.mark.deploy

POOL = "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_AbCdEfGhI"
RENDER = ("import json, app; from chalice.deploy.swagger import CFNSwaggerGenerator; "
          "print(json.dumps(CFNSwaggerGenerator().generate_swagger(app.app)))")


def import_app(**env: str) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items()
             if k not in ("SAGEGATE_AUTH", "CORS_ALLOW_ORIGIN", "COGNITO_USER_POOL_ARNS")}
    return subprocess.run([sys.executable, "-c", RENDER], cwd=ROOT, env={**child, **env},
                          capture_output=True, text=True, timeout=60)


def swagger(**env: str) -> dict[str, Any]:
    done = import_app(**env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def security(doc: dict[str, Any], path: str, verb: str) -> Any:
    return doc["paths"][path][verb].get("security")


def test_iam_mode_requires_sigv4_on_every_route_but_health() -> None:
    doc = swagger(SAGEGATE_AUTH="iam")
    for path in ("/predict", "/resize"):
        assert security(doc, path, "post") == [{"sigv4": []}]
    assert security(doc, "/health", "get") is None
    assert doc["securityDefinitions"]["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"


def test_cognito_mode_requires_a_token_from_the_configured_pool() -> None:
    doc = swagger(SAGEGATE_AUTH="cognito", COGNITO_USER_POOL_ARNS=POOL)
    for path in ("/predict", "/resize"):
        assert security(doc, path, "post") == [{"SagegateUserPool": []}]
    assert security(doc, "/health", "get") is None
    authorizer = doc["securityDefinitions"]["SagegateUserPool"]["x-amazon-apigateway-authorizer"]
    assert authorizer == {"type": "cognito_user_pools", "providerARNs": [POOL]}


def test_a_configured_origin_gets_cors_preflights_for_that_origin_only() -> None:
    doc = swagger(SAGEGATE_AUTH="api-key", CORS_ALLOW_ORIGIN="https://app.example.com")
    preflight = doc["paths"]["/predict"]["options"]
    headers = preflight["x-amazon-apigateway-integration"]["responses"]["default"][
        "responseParameters"]
    assert headers["method.response.header.Access-Control-Allow-Origin"] == \
        "'https://app.example.com'"
    assert "security" not in preflight


def test_no_mode_leaves_every_route_open() -> None:
    doc = swagger()
    assert all("security" not in spec for verbs in doc["paths"].values()
               for spec in verbs.values())


@pytest.mark.parametrize("env,name", [
    ({"SAGEGATE_AUTH": "cognito"}, "COGNITO_USER_POOL_ARNS"),
    ({"SAGEGATE_AUTH": "api-key", "CORS_ALLOW_ORIGIN": "*"}, "CORS_ALLOW_ORIGIN"),
    ({"SAGEGATE_AUTH": "password"}, "SAGEGATE_AUTH"),
])
def test_a_bad_mode_fails_the_import_and_so_the_packaging(env: dict[str, str], name: str) -> None:
    done = import_app(**env)
    assert done.returncode != 0
    assert "ConfigurationError" in done.stderr and name in done.stderr
