"""API keys under ``chalice local`` (:mod:`sagegate.local.chalice_local`,
:mod:`sagegate.local.auth`): Chalice's own local gateway with sagegate's key check, called in
process on a small app, and the key ``sagegate run`` plans for each kind of stage."""
from __future__ import annotations

import json
import re
import types
from typing import Any, cast

import pytest
from chalice import Chalice, CORSConfig, local
from chalice.config import Config

from emulator import process
from sagegate.local import processes, stack
from sagegate.local.auth import (
    API_KEY_ENV,
    UncheckableAuth,
    local_api_key,
)
from sagegate.local.chalice_local import ApiKeyGateway, local_key, requires_api_key
from sagegate.local.preflight import StartError, check_auth, check_settings, preflight, stage_env
from sagegate.local.stack import parse_args

KEY = "k" * 40


def small_app(api_key_required: bool = True) -> Chalice:
    app = Chalice("keyed")
    cors = CORSConfig(allow_origin="https://app.example.com")

    @app.route("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.route("/models/{name}", api_key_required=api_key_required, cors=cors)
    def model(name: str) -> dict[str, str]:
        return {"name": name}

    return app


def gateway(key: str = KEY, app: Chalice | None = None) -> ApiKeyGateway:
    return ApiKeyGateway(app or small_app(), Config(), key)


def call(gw: ApiKeyGateway, path: str, method: str = "GET",
         **headers: str) -> tuple[int, dict[str, Any], Any]:
    """Status, headers and JSON body of the gateway's answer, as the server would send it."""
    try:
        response = gw.handle_request(method=method, path=path, headers=headers, body=None)
    except local.LocalGatewayException as error:
        return error.CODE, error.headers, json.loads(error.body or b"null")
    body = response["body"]
    return response["statusCode"], response["headers"], json.loads(body) if body else None


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "wrong"}, {"x-api-key": ""},
                                     {"x-api-key": KEY[:-1]}, {"x-api-key": KEY + "k"},
                                     {"x-api-key": "é" * 40}])
def test_a_route_that_requires_a_key_answers_api_gateways_403_without_it(
        headers: dict[str, str]) -> None:
    status, sent, body = call(gateway(), "/models/iris", **headers)
    assert (status, body) == (403, {"message": "Forbidden"})
    assert sent["x-amzn-ErrorType"] == "ForbiddenException"
    assert sent["x-amzn-RequestId"]


@pytest.mark.parametrize("name", ["x-api-key", "X-Api-Key", "X-API-KEY"])
def test_the_right_key_in_any_header_case_is_let_through(name: str) -> None:
    assert call(gateway(), "/models/iris", **{name: KEY})[::2] == (200, {"name": "iris"})


def test_open_routes_need_no_key() -> None:
    assert call(gateway(), "/health")[::2] == (200, {"status": "ok"})


def test_a_cors_preflight_needs_no_key_as_on_api_gateway() -> None:
    status, headers, _ = call(gateway(), "/models/iris", method="OPTIONS")
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == "https://app.example.com"


def test_an_unknown_route_keeps_api_gateways_own_answer() -> None:
    status, _, body = call(gateway(), "/nowhere")
    assert (status, body) == (403, {"message": "Missing Authentication Token"})


def test_an_empty_local_key_lets_no_one_in() -> None:
    assert call(gateway(""), "/models/iris", **{"x-api-key": ""})[0] == 403


def test_an_app_without_key_routes_needs_no_key() -> None:
    app = small_app(api_key_required=False)
    assert not requires_api_key(app)
    assert local_key(app, {API_KEY_ENV: KEY}) == ""
    assert call(gateway("", app), "/models/iris")[0] == 200


def test_the_child_uses_the_configured_key_or_says_its_new_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    app = small_app()
    assert requires_api_key(app)
    assert local_key(app, {API_KEY_ENV: f" {KEY} "}) == KEY
    assert capsys.readouterr().err == ""
    fresh = local_key(app, {})
    assert re.fullmatch(r"[0-9a-f]{40}", fresh)
    assert fresh in capsys.readouterr().err


# ---------------------------------------------------------------- what sagegate run plans

def test_an_open_stage_has_no_key() -> None:
    assert local_api_key("local", {"SAGEGATE_AUTH": "none"}) is None
    assert local_api_key("test", {}) is None


def test_an_api_key_stage_gets_a_fresh_key_each_run_unless_one_is_set() -> None:
    env = {"SAGEGATE_AUTH": "api-key"}
    first, second = local_api_key("dev", env), local_api_key("dev", env)
    assert first and second and first != second
    assert local_api_key("dev", {**env, API_KEY_ENV: KEY}) == KEY


@pytest.mark.parametrize(("env", "named"), [
    ({"SAGEGATE_AUTH": "iam"}, "IAM"),
    ({"SAGEGATE_AUTH": "cognito", "COGNITO_USER_POOL_ARNS":
      "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_AbC"}, "Cognito"),
])
def test_iam_and_cognito_stages_refuse_to_start_with_one_line(env: dict[str, str],
                                                              named: str) -> None:
    with pytest.raises(UncheckableAuth):
        local_api_key("prod", env)
    with pytest.raises(StartError) as refused:
        check_auth("prod", env)
    message = str(refused.value)
    assert "\n" not in message
    assert f"stage 'prod' authenticates with {named}" in message
    assert "cannot be checked on this machine" in message


def test_a_bad_auth_setting_is_one_line_naming_it() -> None:
    with pytest.raises(StartError, match="SAGEGATE_AUTH must be one of"):
        check_auth("dev", {"SAGEGATE_AUTH": "magic"})


def test_sagegate_run_plans_a_key_for_the_dev_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse_args(["--stage", "dev", "--api-port", str(process.free_port()),
                       "--emulator-port", str(process.free_port())])
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert preflight(args, {}).api_key == KEY
    monkeypatch.delenv(API_KEY_ENV)
    assert re.fullmatch(r"[0-9a-f]{40}", preflight(args, {}).api_key or "")


def test_the_ready_lines_print_the_key_and_use_it_in_every_example() -> None:
    api = cast(processes.ApiProcess, types.SimpleNamespace(url="http://127.0.0.1:8000", pid=1))
    emulator = cast(process.EmulatorProcess,
                    types.SimpleNamespace(url="http://127.0.0.1:8080", pid=2))
    settings = check_settings("local", {"ENDPOINT_NAME": "efficientnet-lite0"})
    lines = stack._banner(api, emulator, settings, KEY).splitlines()
    assert any(line.startswith(f"API key: {KEY} ") and API_KEY_ENV in line for line in lines)
    examples = [line for line in lines if line.lstrip().startswith(("curl", ".venv"))]
    assert examples and all(KEY in line for line in examples)
    open_lines = stack._banner(api, emulator, settings).splitlines()
    assert not any("API key" in line or "x-api-key" in line for line in open_lines)


def test_the_dev_stage_captures_locally_where_its_stream_would_deliver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's Firehose does not lay records out by endpoint and hour: `sagegate run --stage
    dev` captures through the S3 sink to the stream's destination, on moto's server."""
    args = parse_args(["--stage", "dev", "--api-port", str(process.free_port()),
                       "--emulator-port", str(process.free_port())])
    monkeypatch.setenv(API_KEY_ENV, KEY)
    settings = preflight(args, {}).settings
    assert settings.capture_destination == "s3://sagegate-dev-data/captures"
    assert stage_env("dev", {})["CAPTURE_DESTINATION"] == settings.capture_destination
    assert stage_env("local", {})["CAPTURE_DESTINATION"] == "captures"  # untouched
