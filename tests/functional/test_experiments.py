"""An experiment through the app: each request served by one arm (named in X-Sagegate-Arm),
sticky by a header, cached per arm, captured per arm; shadows get a copy after the answer,
captured as shadow traffic paired by the request id, and a failing shadow changes nothing the
caller sees."""
from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from chalice.test import Client

import app as app_module
from chalicelib.capture import Capturer
from chalicelib.capture.sinks import DirectorySink
from chalicelib.core.config import Settings
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.predictions import load_labels
from chalicelib.registry.loading import load_registry
from chalicelib.services import Services
from tests import httpfake

IRIS_ROW = json.dumps({"instances": [[5.1, 3.5, 1.4, 0.2]]}).encode()
SIGNATURE = {"inputs": [{"name": "features", "dtype": "float32", "shape": [-1, 4]}],
             "outputs": [{"name": "probabilities", "dtype": "float32", "shape": [-1, 3]}]}


class Runtime:
    """sagemaker-runtime in memory: each endpoint answers its own probabilities; ``down``
    endpoints fail; ``gate`` holds the shadow endpoint until the test opens it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.down: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        endpoint = params["EndpointName"]
        if endpoint == "iris-shadow":
            self.gate.wait(10)
        with self.lock:
            self.calls.append(endpoint)
        if endpoint in self.down:
            raise ClientError({"Error": {"Code": "ValidationError", "Message": "no such"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "InvokeEndpoint")
        scores = {"iris-a": [0.9, 0.05, 0.05], "iris-b": [0.1, 0.8, 0.1],
                  "iris-shadow": [0.2, 0.2, 0.6]}[endpoint]
        body = json.dumps({"predictions": [scores]}).encode()
        return {"Body": StreamingBody(io.BytesIO(body), len(body)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Client, Runtime,
                                                                            Services, Path]]:
    models = tmp_path / "models"
    for name, experiment in {"iris": {
            "sticky": "header:X-User",
            "arms": [{"name": "a", "endpoint": "iris-a", "weight": 50},
                     {"name": "b", "endpoint": "iris-b", "weight": 50}],
            "shadow": [{"name": "s", "endpoint": "iris-shadow", "sample": 1.0,
                        "timeout_seconds": 5}]}}.items():
        (models / name).mkdir(parents=True)
        (models / name / "model.json").write_text(json.dumps({
            "endpoint": "iris-a", "pipeline": "tensor", "signature": SIGNATURE,
            "experiment": experiment}))
    captures = tmp_path / "captures"
    settings = Settings.from_env({"ENDPOINT_NAME": "iris-a", "DEFAULT_MODEL": "iris"})
    runtime = Runtime()
    endpoint = EndpointClient(runtime,  # type: ignore[arg-type]
                              RetryPolicy(max_attempts=1, budget_seconds=10),
                              sleep=lambda _: None)
    registry = load_registry(settings, {"DEFAULT_MODEL": "iris"}, root=models)
    services = Services(settings, registry=registry, endpoint=endpoint,
                        capturer=Capturer("both", DirectorySink(captures)).background())
    monkeypatch.setattr(app_module, "services", services)
    with Client(app_module.app, stage_name="local") as client:
        yield client, runtime, services, captures


def records(services: Services, captures: Path) -> list[dict[str, Any]]:
    assert services.shadows.flush(10) and services.capturer.flush(10)
    return [json.loads(line) for path in sorted(captures.rglob("*.jsonl"))
            for line in path.open()]


def top_index(answer: Any) -> int:
    scores = json.loads(answer.body)["outputs"]["probabilities"][0]
    return scores.index(max(scores))


def post(client: Client, user: str, cache: str = "no-cache") -> Any:
    return client.http.post("/models/iris/predict", body=IRIS_ROW,
                            headers={"Content-Type": "application/json", "X-User": user,
                                     "Cache-Control": cache})


def test_each_caller_keeps_an_arm_and_the_answer_names_it(lab: Any) -> None:
    client, _, services, captures = lab
    arms = {}
    for user in [f"user-{n}" for n in range(40)]:
        seen = {post(client, user).headers["X-Sagegate-Arm"] for _ in range(3)}
        assert len(seen) == 1  # sticky by the header
        arms[user] = seen.pop()
    assert set(arms.values()) == {"a", "b"}
    answer = post(client, "user-0")
    expected = {"a": 0, "b": 1}[arms["user-0"]]
    assert top_index(answer) == expected  # the arm's endpoint answered
    primary = [r for r in records(services, captures)
               if r["eventMetadata"].get("invocationSource") != "ShadowExperiment"]
    assert {r["eventMetadata"]["sagegateArm"] for r in primary} == {"a", "b"}
    assert all(r["eventMetadata"]["sagegateLatencyMs"] >= 0 for r in primary)
    folders = {p.relative_to(captures).parts[0] for p in captures.rglob("*.jsonl")}
    assert folders == {"iris-a", "iris-b", "iris-shadow"}  # each arm under its endpoint


def test_the_cache_never_answers_one_arm_with_another_arms_answer(lab: Any) -> None:
    client, runtime, services, _ = lab
    users = {post(client, f"user-{n}", "").headers["X-Sagegate-Arm"]: f"user-{n}"
             for n in range(20)}
    runtime.calls.clear()
    services.shadows.flush(10)
    for arm, user in users.items():
        again = post(client, user, "")
        assert again.headers["X-Cache"] == "hit" and again.headers["X-Sagegate-Arm"] == arm
        assert top_index(again) == {"a": 0, "b": 1}[arm]


def test_a_shadow_gets_a_copy_after_the_answer_paired_by_the_request_id(
        lab: Any, capsys: pytest.CaptureFixture[str]) -> None:
    client, runtime, services, captures = lab
    runtime.gate.clear()  # the shadow endpoint holds every call
    answer = post(client, "user-7")
    assert answer.status_code == 200  # answered while the shadow is still held
    request_id = answer.headers["X-Request-Id"]
    assert not services.shadows.flush(0.05)
    assert '"shadows":{"queued":1}' in capsys.readouterr().out.replace(" ", "")
    runtime.gate.set()
    shadow = [r for r in records(services, captures)
              if r["eventMetadata"].get("invocationSource") == "ShadowExperiment"]
    assert [r["eventMetadata"]["inferenceId"] for r in shadow] == [request_id]
    assert shadow[0]["eventMetadata"]["sagegateArm"] == "s"
    assert "endpointOutput" in shadow[0]["captureData"]


def test_a_failing_shadow_changes_nothing_the_caller_sees_and_is_recorded(lab: Any) -> None:
    client, runtime, services, captures = lab
    runtime.down.add("iris-shadow")
    answer = post(client, "user-3")
    assert answer.status_code == 200 and answer.headers["X-Sagegate-Arm"] in ("a", "b")
    (failed,) = [r for r in records(services, captures)
                 if r["eventMetadata"].get("invocationSource") == "ShadowExperiment"]
    assert failed["eventMetadata"]["sagegateError"]["Code"]
    assert "endpointOutput" not in failed["captureData"]
    assert failed["eventMetadata"]["inferenceId"] == answer.headers["X-Request-Id"]


def test_where_the_handler_would_wait_for_shadows_none_is_made(
        lab: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A Lambda environment without the after-response extension (SnapStart's): a shadow call
    would hold the response, so the copy is skipped and counted, never made."""
    client, runtime, services, captures = lab
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sagegate-dev")
    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.13")
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    monkeypatch.delenv("AWS_LAMBDA_RUNTIME_API", raising=False)
    runtime.gate.clear()  # a shadow call, if one were made, would hang here
    answer = post(client, "user-5")
    assert answer.status_code == 200
    assert services.shadows.off is not None and services.shadows.skipped == 1
    assert services.shadows.flush(0.05)  # nothing was handed over
    assert "iris-shadow" not in runtime.calls
    printed = capsys.readouterr().out.replace(" ", "")
    assert '"shadows":{"skipped":1}' in printed  # the request's log line
    assert '"ShadowSkipped":[1' in printed  # and its metrics
    runtime.gate.set()
    assert not [r for r in records(services, captures)
                if r["eventMetadata"].get("invocationSource") == "ShadowExperiment"]


def test_the_catalog_shows_the_experiment(lab: Any) -> None:
    client, *_ = lab
    described = json.loads(client.http.get("/models/iris").body)
    assert described["experiment"]["sticky"] == "header:X-User"
    assert [arm["name"] for arm in described["experiment"]["arms"]] == ["a", "b"]
    assert described["experiment"]["shadow"][0]["endpoint"] == "iris-shadow"


def test_an_image_models_arms_each_call_their_own_endpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default image model's settings are the flat ones: its arm on another endpoint
    must not be served by the flat settings' pipeline (which calls the flat endpoint)."""
    from tests import imagefactory
    from tests.functional.conftest import probabilities

    called: list[str] = []

    class ImageRuntime:
        def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
            called.append(params["EndpointName"])
            body = json.dumps(probabilities({285: 0.8})).encode()
            return {"Body": StreamingBody(io.BytesIO(body), len(body)),
                    "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}

    models = tmp_path / "models" / "lite0"
    models.mkdir(parents=True)
    (models / "model.json").write_text(json.dumps({
        "endpoint": "$ENDPOINT_NAME", "pipeline": "image-classification",
        "experiment": {"sticky": "header:X-User",
                       "arms": [{"name": "a", "endpoint": "efficientnet-lite0", "weight": 1},
                                {"name": "b", "endpoint": "lite0-b", "weight": 1}]}}))
    settings = Settings.from_env({"ENDPOINT_NAME": "efficientnet-lite0",
                                  "DEFAULT_MODEL": "lite0"})
    endpoint = EndpointClient(ImageRuntime(),  # type: ignore[arg-type]
                              RetryPolicy(max_attempts=1, budget_seconds=10),
                              sleep=lambda _: None)
    env = {"DEFAULT_MODEL": "lite0", "ENDPOINT_NAME": "efficientnet-lite0"}
    registry = load_registry(settings, env, root=tmp_path / "models",
                             labels=load_labels(settings.labels))  # as Services loads it
    monkeypatch.setattr(app_module, "services",
                        Services(settings, registry=registry, endpoint=endpoint))
    with Client(app_module.app, stage_name="local") as client:
        for n in range(30):
            answer = client.http.post("/predict", body=imagefactory.jpeg(64 + n, 48),
                                      headers={"Content-Type": "image/jpeg",
                                               "X-User": f"user-{n}"})
            assert answer.status_code == 200
            arm = answer.headers["X-Sagegate-Arm"]
            assert called[-1] == {"a": "efficientnet-lite0", "b": "lite0-b"}[arm]
    assert set(called) == {"efficientnet-lite0", "lite0-b"}


def test_arms_and_shadows_on_one_endpoint_each_call_their_own_variant(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SageMaker's production variants as arms (and a shadow) of one endpoint: each call
    names its own target's TargetVariant, for an image model and a tensor model."""
    from tests import imagefactory
    from tests.functional.conftest import probabilities

    calls: list[tuple[str, str | None]] = []

    class VariantRuntime:
        def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
            calls.append((params["EndpointName"], params.get("TargetVariant")))
            image = params["ContentType"].startswith(("image/", "application/x-image"))
            body = json.dumps(probabilities({285: 0.8}) if image
                              else {"predictions": [[0.9, 0.05, 0.05]]}).encode()
            return {"Body": StreamingBody(io.BytesIO(body), len(body)),
                    "ContentType": "application/json",
                    "InvokedProductionVariant": params.get("TargetVariant") or "AllTraffic"}

    experiment = {"sticky": "header:X-User",
                  "arms": [{"name": "blue", "endpoint": "ep", "variant": "Blue", "weight": 1},
                           {"name": "green", "endpoint": "ep", "variant": "Green", "weight": 1}],
                  "shadow": [{"name": "red", "endpoint": "ep", "variant": "Red"}]}
    for name, document in {
            "lite0": {"endpoint": "ep", "pipeline": "image-classification",
                      "variant": "Blue", "experiment": experiment},
            "flowers": {"endpoint": "ep", "pipeline": "tensor", "signature": SIGNATURE,
                        "experiment": experiment}}.items():
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "model.json").write_text(json.dumps(document))
    env = {"DEFAULT_MODEL": "lite0", "ENDPOINT_NAME": "ep"}
    settings = Settings.from_env(env)
    endpoint = EndpointClient(VariantRuntime(),  # type: ignore[arg-type]
                              RetryPolicy(max_attempts=1, budget_seconds=10),
                              sleep=lambda _: None)
    registry = load_registry(settings, env, root=tmp_path / "models",
                             labels=load_labels(settings.labels))
    services = Services(settings, registry=registry, endpoint=endpoint)
    monkeypatch.setattr(app_module, "services", services)
    bodies = {"lite0": ("image/jpeg", imagefactory.jpeg(64, 48)),
              "flowers": ("application/json", IRIS_ROW)}
    with Client(app_module.app, stage_name="local") as client:
        for model, (content_type, body) in bodies.items():
            for n in range(12):
                calls.clear()
                answer = client.http.post(f"/models/{model}/predict", body=body, headers={
                    "Content-Type": content_type, "X-User": f"user-{n}",
                    "Cache-Control": "no-cache"})
                assert answer.status_code == 200, answer.body
                assert services.shadows.flush(10)
                arm = answer.headers["X-Sagegate-Arm"]
                assert sorted(calls) == sorted(
                    [("ep", {"blue": "Blue", "green": "Green"}[arm]), ("ep", "Red")]), model
        # a variant the client names wins over the arm's; a shadow, another model, keeps its own
        calls.clear()
        answer = client.http.post("/models/flowers/predict?variant=Violet", body=IRIS_ROW,
                                  headers={"Content-Type": "application/json"})
        assert services.shadows.flush(10) and answer.status_code == 200
        assert calls == [("ep", "Violet"), ("ep", "Red")]


def test_a_shadow_call_is_cut_at_its_own_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage's own endpoint client (botocore, over HTTP): a shadow endpoint that never
    answers is cut at the shadow's timeout_seconds (1 s), not at the stage's read timeout
    (20 s), and recorded as a timeout; the caller's answer never waited for it."""
    gate = threading.Event()  # the hanging endpoint answers only once the test is over

    def route(request: dict[str, Any]) -> httpfake.Answer:
        endpoint = request["path"].split("/")[2]
        if endpoint == "iris-hang":
            gate.wait(30)
        body = json.dumps({"predictions": [[0.9, 0.05, 0.05]]}).encode()
        return 200, {"Content-Type": "application/json",
                     "X-Amzn-Invoked-Production-Variant": "AllTraffic"}, body

    models = tmp_path / "models"
    (models / "iris").mkdir(parents=True)
    (models / "iris" / "model.json").write_text(json.dumps({
        "endpoint": "iris-a", "pipeline": "tensor", "signature": SIGNATURE, "experiment": {
            "arms": [{"name": "a", "endpoint": "iris-a", "weight": 1}],
            "shadow": [{"name": "s", "endpoint": "iris-hang", "timeout_seconds": 1}]}}))
    settings = Settings.from_env({"ENDPOINT_NAME": "iris-a", "DEFAULT_MODEL": "iris"})
    assert settings.endpoint_read_timeout >= 10  # what a shadow must not be given
    captures = tmp_path / "captures"
    with httpfake.serve(route) as url:
        try:
            for name, value in {"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url,
                                "AWS_ACCESS_KEY_ID": "testing",
                                "AWS_SECRET_ACCESS_KEY": "testing",
                                "AWS_DEFAULT_REGION": "us-east-1"}.items():
                monkeypatch.setenv(name, value)
            services = Services(settings, registry=load_registry(
                settings, {"DEFAULT_MODEL": "iris"}, root=models),
                capturer=Capturer("both", DirectorySink(captures)).background())
            monkeypatch.setattr(app_module, "services", services)
            with Client(app_module.app, stage_name="local") as client:
                answer = client.http.post("/models/iris/predict", body=IRIS_ROW,
                                          headers={"Content-Type": "application/json"})
            assert answer.status_code == 200 and answer.headers["X-Sagegate-Arm"] == "a"
            assert services.shadows.flush(8), "the shadow call outlived its timeout"
            assert not gate.is_set()  # it was cut: the endpoint never answered it
            (cut,) = [r for r in records(services, captures)
                      if r["eventMetadata"].get("invocationSource") == "ShadowExperiment"]
            assert cut["eventMetadata"]["sagegateError"]["Code"] == "EndpointTimeout"
            assert cut["eventMetadata"]["inferenceId"] == answer.headers["X-Request-Id"]
        finally:
            gate.set()
