"""Which routes each authentication mode protects, without deploying: ``app.py`` is imported
once per mode with the stage's variables set (as ``chalice package`` imports it), and every
route it declares is checked. Only the page, its files, the API description and ``/health``
are open; any other route, one added later included, carries the mode's protection. In
``api-key`` mode the app is also called through Chalice's local gateway with sagegate's key
check (what ``sagegate run`` serves): without the key every protected route is API Gateway's
403, and the open ones answer."""
from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from chalice import CognitoUserPoolAuthorizer, IAMAuthorizer, local
from chalice.app import RouteEntry
from chalice.config import Config

from sagegate.local.chalice_local import ApiKeyGateway
from tests.functional.conftest import Harness

ROOT = Path(__file__).resolve().parents[2]
OPEN_ROUTES = {"/", "/static/{name}", "/openapi.yaml", "/health"}
# routes that exist today: the walk below must not pass by finding nothing to check
KNOWN_PROTECTED = {"/predict", "/resize", "/models", "/models/{name}",
                   "/models/{name}/predict", "/health/details"}
POOL = "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_AbCdEfGhI"
KEY = "k" * 40
ACCESS_VARIABLES = ("SAGEGATE_AUTH", "SAGEGATE_OPEN_API", "CORS_ALLOW_ORIGIN",
                    "COGNITO_USER_POOL_ARNS")
MODES: dict[str, dict[str, str]] = {
    "none": {"SAGEGATE_AUTH": "none"},
    "api-key": {"SAGEGATE_AUTH": "api-key"},
    "iam": {"SAGEGATE_AUTH": "iam"},
    "cognito": {"SAGEGATE_AUTH": "cognito", "COGNITO_USER_POOL_ARNS": POOL},
}


def import_app(mode: str) -> ModuleType:
    """A fresh ``app.py`` module imported with ``mode``'s variables (the tests' own ``app``
    module is left as it is)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ACCESS_VARIABLES:
            patch.delenv(name, raising=False)
        for name, value in MODES[mode].items():
            patch.setenv(name, value)
        spec = importlib.util.spec_from_file_location(f"app_{mode.replace('-', '_')}",
                                                      ROOT / "app.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=list(MODES))
def imported(request: pytest.FixtureRequest) -> tuple[str, ModuleType]:
    return request.param, import_app(request.param)


def routes(module: ModuleType) -> Iterator[tuple[str, str, RouteEntry]]:
    for path, methods in module.app.routes.items():
        for method, entry in methods.items():
            yield path, method, entry


def protection(entry: RouteEntry) -> Any:
    """What API Gateway asks of a caller of this route (None: nothing)."""
    if entry.api_key_required:
        return "api-key" if entry.authorizer is None else ("api-key", entry.authorizer)
    if isinstance(entry.authorizer, IAMAuthorizer):
        return "iam"
    if isinstance(entry.authorizer, CognitoUserPoolAuthorizer):
        return ("cognito", tuple(entry.authorizer.to_swagger()[
            "x-amazon-apigateway-authorizer"]["providerARNs"]))
    return entry.authorizer


def expected_protection(mode: str) -> Any:
    return {"none": None, "api-key": "api-key", "iam": "iam",
            "cognito": ("cognito", (POOL,))}[mode]


def test_exactly_the_open_routes_are_open_and_every_other_has_the_modes_protection(
        imported: tuple[str, ModuleType]) -> None:
    mode, module = imported
    seen = {path for path, _, _ in routes(module)}
    assert seen >= OPEN_ROUTES | KNOWN_PROTECTED
    wrong = {f"{method} {path}": protection(entry) for path, method, entry in routes(module)
             if protection(entry) != (None if path in OPEN_ROUTES
                                      else expected_protection(mode))}
    assert wrong == {}, f"{mode}: routes with the wrong protection"


def test_the_tests_own_app_is_the_open_local_stage() -> None:
    """The functional tier's ``app`` module is imported with no mode: every route is open
    there, which is why protection is checked on the fresh imports above."""
    import app as app_module

    assert all(protection(entry) is None for _, _, entry in routes(app_module))


# ------------------------------------------------ through Chalice's local gateway (api-key)

def concrete(path: str) -> str:
    """A request path for a route: ``{name}`` becomes a model or a page file that exists."""
    return re.sub(r"\{name\}", "app.js" if path.startswith("/static/") else "iris", path)


def call(gateway: ApiKeyGateway, method: str, path: str, **headers: str) -> tuple[int, Any]:
    body = b"{}" if method == "POST" else None
    try:
        answer = gateway.handle_request(method=method, path=path,
                                        headers={"content-type": "application/json",
                                                 **headers}, body=body)
    except local.LocalGatewayException as error:
        return error.CODE, json.loads(error.body or b"null")
    return answer["statusCode"], answer["body"]


@pytest.fixture(scope="module")
def keyed_app() -> ModuleType:
    return import_app("api-key")


def test_without_the_key_every_protected_route_is_403_and_the_open_ones_answer(
        keyed_app: ModuleType, harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    import app as app_module

    monkeypatch.setattr(keyed_app, "services", app_module.services)  # the harness's
    gateway = ApiKeyGateway(keyed_app.app, Config(), KEY)
    for path, method, _ in routes(keyed_app):
        status, body = call(gateway, method, concrete(path))
        if path in OPEN_ROUTES:
            assert status == 200, (method, path, status, body)
        else:
            assert (status, body) == (403, {"message": "Forbidden"}), (method, path)
    status, body = call(gateway, "GET", "/models/iris", **{"x-api-key": KEY})
    assert status == 200 and json.loads(body)["name"] == "iris"
