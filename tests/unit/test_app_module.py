"""app.py holds routes and event declarations only: it reads no environment variable itself
(the stage's, read once, come from chalicelib.core: Access and Deployment), every route renders
sagegate's errors as their answers, and each event function is declared from the Deployment,
for a misconfigured stage too (its routes answer the misconfiguration)."""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from chalice.test import Client

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
TREE = ast.parse(APP.read_text(encoding="utf-8"))


def test_app_py_reads_no_environment_variable() -> None:
    """No ``os`` at all: not ``os.environ``, ``os.getenv`` nor an ``environ`` imported."""
    imported = {alias.name for node in ast.walk(TREE) if isinstance(node, ast.Import)
                for alias in node.names}
    from_imported = {(node.module, alias.name) for node in ast.walk(TREE)
                     if isinstance(node, ast.ImportFrom) for alias in node.names}
    names = {node.id for node in ast.walk(TREE) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(TREE) if isinstance(node, ast.Attribute)}
    assert "os" not in imported and not any(module == "os" for module, _ in from_imported)
    assert not {"environ", "getenv", "environb"} & (names | attributes)


def test_every_route_renders_sagegate_errors() -> None:
    import app

    entries = [(path, method, entry) for path, methods in app.app.routes.items()
               for method, entry in methods.items()]
    assert len(entries) >= 13
    bare = [f"{method} {path}" for path, method, entry in entries
            if not getattr(entry.view_function, app.RENDERS_ERRORS, False)]
    assert bare == []


def test_routes_are_declared_through_the_one_declaration_that_renders_errors() -> None:
    """``app.route`` is called in ``route()`` only: a view declared around it (its errors
    Chalice's 500) would be caught here before any request finds it."""
    calls = [node for node in ast.walk(TREE) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "route"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "app"]
    [declaring] = [node for node in TREE.body
                   if isinstance(node, ast.FunctionDef) and node.name == "route"]
    inside = {id(node) for node in ast.walk(declaring)}
    assert calls and all(id(node) in inside for node in calls)


def test_a_view_that_forgets_nothing_still_answers_its_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The mark is what it says: a sagegate error raised by a view is its answer."""
    import app
    from chalicelib.core.errors import ModelNotFoundError

    class Broken:
        @property
        def registry(self) -> Any:
            raise ModelNotFoundError("No model 'x'.")

        def handler_ended(self, context: Any) -> None:
            pass

    monkeypatch.setattr(app, "services", Broken())
    with Client(app.app, stage_name="local") as client:
        response = client.http.get("/models/x")
    body = json.loads(response.body)
    assert (response.status_code, body["Code"]) == (404, "ModelNotFound")
    assert body["request_id"] == response.headers["X-Request-Id"]


def fresh_app(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> ModuleType:
    """app.py imported afresh under ``env`` (as ``chalice package`` imports it for a stage)."""
    for name in ("MONITOR_BASELINE", "JOBS_BUCKET", "JOBS_SUCCESS_TOPIC", "JOBS_ERROR_TOPIC",
                 "JOB_REDRIVE_PERIOD_SECONDS", "JOBS_PREFIX", "AWS_LAMBDA_FUNCTION_NAME",
                 "AWS_EXECUTION_ENV"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("app_fresh", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_stage_without_events_declares_no_function(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fresh_app(monkeypatch, {})
    assert module.app.event_sources == []
    assert not any(hasattr(module, name) for name in (
        "monitor", "job_runner", "job_results", "job_failures", "job_redrive"))


def test_a_misconfigured_stage_declares_its_functions_and_its_routes_say_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings refuse this stage (a bucket and a prefix S3 would not take, an endpoint name
    SageMaker would not): app.py imports all the same, declares what the stage asks for from
    the values as they are, and its routes answer 500 ConfigurationError."""
    module = fresh_app(monkeypatch, {
        "ENDPOINT_NAME": "not an endpoint", "MONITOR_BASELINE": "s3://b/baselines/",
        "MONITOR_SCHEDULE": "rate(2 hours)", "JOBS_BUCKET": "Jobs_Bucket", "JOBS_PREFIX": "x",
        "JOBS_SUCCESS_TOPIC": "done", "JOBS_ERROR_TOPIC": "failed",
        "JOB_REDRIVE_PERIOD_SECONDS": "soon"})
    sources = {source.name: source for source in module.app.event_sources}
    assert set(sources) == {"monitor", "job_redrive", "job_runner", "job_results",
                            "job_failures"}
    assert sources["monitor"].schedule_expression == "rate(2 hours)"
    assert sources["job_redrive"].schedule_expression == "rate(5 minutes)"
    assert (sources["job_runner"].bucket, sources["job_runner"].prefix) == ("Jobs_Bucket",
                                                                            "xtickets/")
    assert (sources["job_results"].topic, sources["job_failures"].topic) == ("done", "failed")
    with Client(module.app, stage_name="local") as client:
        response = client.http.get("/health")
    assert (response.status_code, json.loads(response.body)["Code"]) == (500, "ConfigurationError")
