"""Python 3.13 on AL2023 and SnapStart: runtime table, stage switch, runtime hooks, deploy path."""
from __future__ import annotations

import json
import random
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
import snapshot_restore_py
from botocore.config import Config
from botocore.stub import Stubber

from chalicelib.core import lifecycle
from chalicelib.inference.endpoint import EndpointClient, Invocation
from sagegate.deploy import runtime as lambda_runtime
from sagegate.deploy import snapstart, stages

ROOT = Path(__file__).resolve().parents[2]
TARGET = snapstart.Target(function_name="sagegate-prod", rest_api_id="a1b2c3d4e5",
                          api_stage="api", region="eu-west-1", account="123456789012")


# --- the runtime table -----------------------------------------------------------------------
def test_al2023_runtimes_load_wheels_up_to_glibc_2_34() -> None:
    platforms = lambda_runtime.RUNTIMES["python3.13"].manylinux_platforms("x86_64")
    assert platforms[0] == "manylinux2014_x86_64"
    assert platforms[1:] == [f"manylinux_2_{minor}_x86_64" for minor in range(17, 35)]


def test_the_al2_runtime_stops_at_glibc_2_26() -> None:
    platforms = lambda_runtime.RUNTIMES["python3.11"].manylinux_platforms("x86_64")
    assert platforms[-1] == "manylinux_2_26_x86_64"
    assert "manylinux_2_28_x86_64" not in platforms


def test_the_project_python_is_the_runtime_chalice_targets() -> None:
    version = (ROOT / ".python-version").read_text().strip()
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == version
    runtime = lambda_runtime.current()
    assert runtime.name == f"python{version}"
    assert runtime.os == "Amazon Linux 2023" and runtime.snapstart


def test_a_python_lambda_does_not_run_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no managed runtime python3\.9"):
        lambda_runtime.runtime_for("3.9")


# --- the stage switch ------------------------------------------------------------------------
def test_deployed_stages_have_snapstart_on() -> None:
    for name in stages.DEPLOY_STAGES:
        assert stages.load_stage(name).snapstart is True


@pytest.mark.parametrize("value,runtime,message", [
    ("yes", "python3.13", "must be true or false"),
    (True, "python3.11", "does not support python3.11"),
])
def test_a_bad_snapstart_switch_is_refused(value: Any, runtime: str, message: str) -> None:
    config = {"stages": {"prod": {"snapstart": value}}}
    with pytest.raises(ValueError, match=message):
        stages._snapstart(config, "prod", runtime)


def test_snapstart_can_be_switched_off_per_stage() -> None:
    config = {"snapstart": True, "stages": {"prod": {"snapstart": False}, "dev": {}}}
    assert stages._snapstart(config, "prod", "python3.13") is False
    assert stages._snapstart(config, "dev", "python3.13") is True


# --- the runtime hooks -----------------------------------------------------------------------
class _Holder:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_hooks_close_every_holder_and_reseed_after_a_restore() -> None:
    holders = [_Holder(), _Holder()]
    reseeded: list[int] = []
    hooks = lifecycle.Hooks(lambda: holders, reseed=lambda: reseeded.append(1))
    hooks.before_snapshot()
    assert [h.closed for h in holders] == [1, 1] and reseeded == []
    hooks.after_restore()
    assert [h.closed for h in holders] == [2, 2] and reseeded == [1]
    assert hooks.restores == 1


def test_copies_restored_from_one_snapshot_draw_different_jitter() -> None:
    random.seed(1234)  # the state every copy of a snapshot would share
    shared = random.getstate()
    hooks = lifecycle.Hooks(list)
    draws = []
    for _ in range(2):
        random.setstate(shared)
        hooks.after_restore()
        draws.append([random.random() for _ in range(4)])
    random.setstate(shared)
    assert draws[0] != draws[1]
    assert [random.random() for _ in range(4)] not in draws


def test_register_hands_both_hooks_to_the_runtime() -> None:
    before = snapshot_restore_py.get_before_snapshot()
    after = snapshot_restore_py.get_after_restore()
    sizes = len(before), len(after)
    hooks = lifecycle.Hooks(list)
    try:
        assert lifecycle.register(hooks) is True
        assert before[-1][0] == hooks.before_snapshot
        assert after[-1][0] == hooks.after_restore
    finally:
        del before[sizes[0]:], after[sizes[1]:]


def test_the_app_registers_its_hooks_at_import() -> None:
    import app

    registered = [func for func, _, _ in snapshot_restore_py.get_after_restore()]
    assert app.SNAPSTART_HOOKS.after_restore in registered


def test_only_a_lambda_environment_counts_as_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_LAMBDA_FUNCTION_NAME", "AWS_EXECUTION_ENV", "LAMBDA_TASK_ROOT"):
        monkeypatch.delenv(name, raising=False)
    assert not lifecycle.on_lambda()
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sagegate-prod")
    assert not lifecycle.on_lambda()  # a stray variable is not Lambda
    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.13")
    assert lifecycle.on_lambda()


class _Probabilities(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"[0.25, 0.75]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Probabilities)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_closing_drops_botocores_pooled_connections_and_the_client_still_works(
        endpoint_url: str) -> None:
    client = boto3.client("sagemaker-runtime", endpoint_url=endpoint_url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(retries={"total_max_attempts": 1}))
    endpoint = EndpointClient(client)
    call = Invocation("e", b"x", "application/x-image", "application/json")
    assert json.loads(endpoint.invoke(call).body) == [0.25, 0.75]
    manager = client._endpoint.http_session._manager
    assert len(manager.pools) == 1  # a keep-alive connection is pooled
    endpoint.close()  # what the before-snapshot hook does
    assert len(manager.pools) == 0
    assert json.loads(endpoint.invoke(call).body) == [0.25, 0.75]


# --- the chalice deploy path -----------------------------------------------------------------
def _clients() -> tuple[Any, Any]:
    session = boto3.session.Session(region_name="eu-west-1", aws_access_key_id="testing",
                                    aws_secret_access_key="testing")
    return session.client("lambda"), session.client("apigateway")


def _resources(uri: str) -> dict[str, Any]:
    proxy = {"type": "AWS_PROXY", "uri": uri}
    return {"items": [
        {"id": "root", "path": "/"},
        {"id": "r1", "path": "/predict", "resourceMethods": {
            "POST": {"methodIntegration": proxy},
            "OPTIONS": {"methodIntegration": {"type": "MOCK"}}}},
        {"id": "r2", "path": "/health", "resourceMethods": {
            "GET": {"methodIntegration": proxy}}},
        {"id": "r3", "path": "/other", "resourceMethods": {
            "GET": {"methodIntegration": {"type": "AWS_PROXY",
                                          "uri": TARGET.integration_uri("arn:other")}}}},
    ]}


def _expect_repoint(api: Stubber, old: str, new: str) -> None:
    api.add_response("get_resources", _resources(TARGET.integration_uri(old)),
                     {"restApiId": TARGET.rest_api_id, "embed": ["methods"]})
    for resource, verb in (("r1", "POST"), ("r2", "GET")):
        api.add_response("update_integration", {}, {
            "restApiId": TARGET.rest_api_id, "resourceId": resource, "httpMethod": verb,
            "patchOperations": [{"op": "replace", "path": "/uri",
                                 "value": TARGET.integration_uri(new)}]})
    api.add_response("create_deployment", {"id": "d1"}, {
        "restApiId": TARGET.rest_api_id, "stageName": "api",
        "description": f"sagegate: integrations -> {new}"})


def test_enable_publishes_a_snapstart_version_behind_live_and_repoints_the_api() -> None:
    lam, api = _clients()
    with Stubber(lam) as lam_stub, Stubber(api) as api_stub:
        lam_stub.add_response("update_function_configuration", {}, {
            "FunctionName": "sagegate-prod", "SnapStart": {"ApplyOn": "PublishedVersions"}})
        lam_stub.add_response("get_function", {"Configuration": {"LastUpdateStatus": "Successful"}},
                              {"FunctionName": "sagegate-prod"})
        lam_stub.add_response("publish_version", {"Version": "7"}, {
            "FunctionName": "sagegate-prod",
            "Description": "sagegate: published by sagegate chalice-deploy (SnapStart)"})
        lam_stub.add_response("get_function_configuration", {"State": "Active"},
                              {"FunctionName": "sagegate-prod", "Qualifier": "7"})
        lam_stub.add_client_error("update_alias", "ResourceNotFoundException", http_status_code=404)
        lam_stub.add_response("create_alias", {}, {
            "FunctionName": "sagegate-prod", "Name": "live", "FunctionVersion": "7",
            "Description": "What API Gateway invokes (SnapStart)"})
        lam_stub.add_response("add_permission", {}, {
            "FunctionName": "sagegate-prod", "Qualifier": "live",
            "StatementId": "sagegate-apigateway-live", "Action": "lambda:InvokeFunction",
            "Principal": "apigateway.amazonaws.com",
            "SourceArn": "arn:aws:execute-api:eu-west-1:123456789012:a1b2c3d4e5/*"})
        _expect_repoint(api_stub, TARGET.function_arn, TARGET.alias_arn)
        assert snapstart.enable(lam, api, TARGET) == "7"
        lam_stub.assert_no_pending_responses()
        api_stub.assert_no_pending_responses()


def test_enable_again_moves_the_alias_and_keeps_the_permission() -> None:
    lam, api = _clients()
    with Stubber(lam) as lam_stub, Stubber(api) as api_stub:
        lam_stub.add_response("update_function_configuration", {})
        lam_stub.add_response("get_function", {"Configuration": {"LastUpdateStatus": "Successful"}})
        lam_stub.add_response("publish_version", {"Version": "8"})
        lam_stub.add_response("get_function_configuration", {"State": "Active"})
        lam_stub.add_response("update_alias", {}, {
            "FunctionName": "sagegate-prod", "Name": "live", "FunctionVersion": "8"})
        lam_stub.add_client_error("add_permission", "ResourceConflictException",
                                  http_status_code=409)
        _expect_repoint(api_stub, TARGET.function_arn, TARGET.alias_arn)
        assert snapstart.enable(lam, api, TARGET) == "8"
        lam_stub.assert_no_pending_responses()


def test_disable_serves_latest_again() -> None:
    lam, api = _clients()
    with Stubber(lam) as lam_stub, Stubber(api) as api_stub:
        lam_stub.add_response("update_function_configuration", {}, {
            "FunctionName": "sagegate-prod", "SnapStart": {"ApplyOn": "None"}})
        lam_stub.add_response("get_function", {"Configuration": {"LastUpdateStatus": "Successful"}})
        _expect_repoint(api_stub, TARGET.alias_arn, TARGET.function_arn)
        snapstart.disable(lam, api, TARGET)
        api_stub.assert_no_pending_responses()
