"""The prediction cache through the real app and a stubbed botocore client: a repeated input
never reaches the endpoint twice (the Stubber has no second response queued), top-k and
handlers still run per request, Cache-Control, per-model bypass, variants, errors, capture,
the log line and metrics."""
from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY

import app as app_module
from chalicelib.cache.prediction import MemoryTier, PredictionCache
from chalicelib.capture import Capturer
from chalicelib.capture.sinks import DirectorySink
from chalicelib.core.config import Settings
from chalicelib.inference.userfiles.tfs import TfsHandler
from chalicelib.registry.loading import MODELS_DIR, load_model, load_registry
from tests import imagefactory
from tests.functional.conftest import ENDPOINT, Harness, endpoint_response, probabilities
from tests.functional.test_models import IRIS_ROW, expect_iris, post_json
from tests.functional.test_observability import emitted

CAT = probabilities({285: 0.83, 281: 0.1, 282: 0.05})
JPEG = imagefactory.jpeg(640, 480)


def expect_invoke(harness: Harness, body: Any = CAT, variant: str = "AllTraffic",
                  **params: Any) -> None:
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(body, variant=variant),
        {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/x-image",
         "Accept": "application/json", "InferenceId": ANY, **params})


def predict(harness: Harness, query: str = "", **headers: str) -> Any:
    return harness.post("/predict" + query, JPEG, "image/jpeg", **headers)


def test_a_repeated_image_is_answered_from_the_cache_with_top_k_per_request(
        harness: Harness) -> None:
    expect_invoke(harness)
    first = predict(harness, "?k=1")
    assert first.status_code == 200 and first.headers["X-Cache"] == "miss"
    second = predict(harness, "?k=5")  # nothing queued: an endpoint call would fail
    assert second.status_code == 200, second.body
    assert second.headers["X-Cache"] == "hit"
    assert [p["index"] for p in first.json_body["predictions"]] == [285]
    assert [p["index"] for p in second.json_body["predictions"]][:3] == [285, 281, 282]
    assert len(second.json_body["predictions"]) == 5
    assert second.json_body["variant"] == "AllTraffic"
    assert "cache;dur=" in second.headers["Server-Timing"]
    assert "preprocess" not in second.headers["Server-Timing"]  # a hit decodes nothing
    assert "endpoint" not in second.headers["Server-Timing"]


def test_the_same_image_as_json_base64_is_the_same_upload(harness: Harness) -> None:
    import base64

    expect_invoke(harness)
    assert predict(harness).headers["X-Cache"] == "miss"
    response = harness.post("/predict", json.dumps({"image": base64.b64encode(JPEG).decode()}))
    assert response.headers["X-Cache"] == "hit"


def test_no_cache_skips_the_read_and_still_writes(harness: Harness) -> None:
    expect_invoke(harness)
    expect_invoke(harness, probabilities({7: 0.9}))
    assert predict(harness).headers["X-Cache"] == "miss"
    fresh = predict(harness, **{"Cache-Control": "no-cache"})
    assert fresh.headers["X-Cache"] == "miss"
    assert fresh.json_body["predictions"][0]["index"] == 7
    cached = predict(harness)
    assert cached.headers["X-Cache"] == "hit"
    assert cached.json_body["predictions"][0]["index"] == 7  # no-cache's answer was stored


@pytest.mark.parametrize("headers", [
    {"Pragma": "no-cache"}, {"Pragma": "No-Cache"},
    {"Cache-Control": "max-age=0"}, {"Cache-Control": "Max-Age=0, no-transform"},
    {"Cache-Control": "public, NO-CACHE"}, {"Cache-Control": 'no-cache="x, y", private'},
    {"Cache-Control": "x-unknown", "Pragma": "no-cache"},
    {"Cache-Control": "max-age=1, max-age=2"},  # doubtful: answered fresh
], ids=["pragma", "pragma-capitals", "max-age-0", "max-age-0-among-others", "no-cache-among-others",
        "no-cache-with-quoted-list", "pragma-with-unknown-cache-control", "max-age-twice"])
def test_revalidation_asks_the_endpoint_and_stores_its_answer(
        harness: Harness, headers: dict[str, str]) -> None:
    expect_invoke(harness)
    expect_invoke(harness, probabilities({7: 0.9}))
    assert predict(harness).headers["X-Cache"] == "miss"
    fresh = predict(harness, **headers)
    assert fresh.status_code == 200, fresh.body
    assert fresh.headers["X-Cache"] == "miss"
    assert fresh.json_body["predictions"][0]["index"] == 7
    cached = predict(harness)
    assert cached.headers["X-Cache"] == "hit"
    assert cached.json_body["predictions"][0]["index"] == 7  # the fresh answer was stored


def test_pragma_is_ignored_beside_a_cache_control_it_understands(harness: Harness) -> None:
    """RFC 9111 5.4: Pragma counts only where Cache-Control is absent (or not understood)."""
    expect_invoke(harness)
    assert predict(harness).headers["X-Cache"] == "miss"
    response = predict(harness, **{"Cache-Control": "max-age=3600", "Pragma": "no-cache"})
    assert response.headers["X-Cache"] == "hit"


def _api_gateway_event(multi_value_headers: dict[str, list[str]]) -> dict[str, Any]:
    """A REST API proxy event for POST /predict of JPEG with these header lines (API Gateway
    puts the last line of each in "headers" and every line in "multiValueHeaders")."""
    headers = {"Content-Type": "image/jpeg", "Accept": "application/json"}
    multi = {name: [value] for name, value in headers.items()} | multi_value_headers
    return {"resource": "/predict", "path": "/predict", "httpMethod": "POST",
            "headers": {**headers, **{name: lines[-1] for name, lines in
                                      multi_value_headers.items()}},
            "multiValueHeaders": multi, "queryStringParameters": None,
            "multiValueQueryStringParameters": None, "pathParameters": None,
            "stageVariables": None, "body": base64.b64encode(JPEG).decode(),
            "isBase64Encoded": True,
            "requestContext": {"resourcePath": "/predict", "path": "/api/predict",
                               "httpMethod": "POST", "stage": "api", "requestId": "r-1",
                               "identity": {"sourceIp": "203.0.113.7"}}}


@pytest.mark.parametrize("lines,status", [
    (["no-cache", "max-age=3600"], "miss"),  # "headers" has only the second line
    (["max-age=3600", "no-transform"], "hit")])
def test_every_line_of_a_repeated_cache_control_counts(
        harness: Harness, lines: list[str], status: str) -> None:
    expect_invoke(harness)
    if status == "miss":
        expect_invoke(harness)
    assert predict(harness).headers["X-Cache"] == "miss"
    answer = app_module.app(_api_gateway_event({"Cache-Control": lines}), None)
    assert answer["statusCode"] == 200, answer["body"]
    assert answer["headers"]["X-Cache"] == status


def test_no_store_writes_nothing_but_may_read(harness: Harness) -> None:
    expect_invoke(harness)
    expect_invoke(harness)
    assert predict(harness, **{"Cache-Control": "no-store"}).headers["X-Cache"] == "miss"
    assert predict(harness).headers["X-Cache"] == "miss"  # nothing was stored
    assert predict(harness, **{"Cache-Control": "no-store"}).headers["X-Cache"] == "hit"


def test_a_variant_asked_for_only_hits_answers_of_that_variant(harness: Harness) -> None:
    expect_invoke(harness)
    expect_invoke(harness, probabilities({9: 0.9}), variant="Challenger",
                  TargetVariant="Challenger")
    assert predict(harness).headers["X-Cache"] == "miss"
    challenger = predict(harness, **{"X-Target-Variant": "Challenger"})
    assert challenger.headers["X-Cache"] == "miss"
    again = predict(harness, **{"X-Target-Variant": "Challenger"})
    assert again.headers["X-Cache"] == "hit"
    assert again.json_body["variant"] == "Challenger"
    assert again.json_body["predictions"][0]["index"] == 9
    assert predict(harness).json_body["variant"] == "AllTraffic"


def test_errors_are_never_cached(harness: Harness) -> None:
    harness.stubber.add_client_error("invoke_endpoint", "ModelError", "boom", 424,
                                     response_meta={"OriginalStatusCode": 500})
    expect_invoke(harness)
    assert predict(harness).status_code == 502
    answered = predict(harness)
    assert answered.status_code == 200 and answered.headers["X-Cache"] == "miss"


def captured(folder: Path) -> list[dict[str, Any]]:
    """The capture records under ``folder``, oldest first (once the app's capturer stored
    what it held: a background writer stores records after the response)."""
    assert app_module.services.capturer.flush(10)
    records = [json.loads(line) for path in folder.rglob("*.jsonl") for line in path.open()]
    return sorted(records, key=lambda r: "sagegateCacheHit" in r["eventMetadata"])


def test_a_hit_writes_a_record_marked_as_a_hit_with_the_served_answer(
        harness: Harness, tmp_path: Path) -> None:
    harness.use(capturer=Capturer("both", DirectorySink(tmp_path)))
    expect_invoke(harness)
    predict(harness)
    hit = predict(harness)
    assert hit.headers["X-Cache"] == "hit"
    miss_record, hit_record = captured(tmp_path)
    assert "sagegateCacheHit" not in miss_record["eventMetadata"]
    assert hit_record["eventMetadata"]["sagegateCacheHit"] is True
    assert hit_record["eventMetadata"]["inferenceId"] == hit.headers["X-Request-Id"]
    output = hit_record["captureData"]["endpointOutput"]
    assert output == miss_record["captureData"]["endpointOutput"]  # the cached body, as it came
    assert json.loads(output["data"]) == json.loads(json.dumps(CAT))
    sent = hit_record["captureData"]["endpointInput"]  # nothing decoded: the client's upload
    assert (sent["observedContentType"], sent["encoding"]) == ("application/x-image", "BASE64")
    assert base64.b64decode(sent["data"]) == JPEG


def test_capture_cache_hits_off_writes_no_record_for_a_hit(
        harness: Harness, tmp_path: Path) -> None:
    harness.use(capturer=Capturer("both", DirectorySink(tmp_path), cache_hits=False))
    expect_invoke(harness)
    predict(harness)
    assert predict(harness).headers["X-Cache"] == "hit"
    assert len(captured(tmp_path)) == 1


@pytest.mark.parametrize("setting", ["true", "false"])
def test_the_capture_cache_hits_setting_decides_whether_a_hit_is_captured(
        harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        setting: str) -> None:
    settings = dataclasses.replace(
        app_module.services.settings, capture_mode="both", capture_destination=str(tmp_path),
        capture_cache_hits=Settings.from_env({"ENDPOINT_NAME": "x",
                                              "CAPTURE_CACHE_HITS": setting}).capture_cache_hits)
    monkeypatch.setattr(app_module.services, "_settings", settings)
    monkeypatch.setattr(app_module.services, "_capturer", None)
    expect_invoke(harness)
    predict(harness)
    assert predict(harness).headers["X-Cache"] == "hit"
    assert len(captured(tmp_path)) == (2 if setting == "true" else 1)


def test_the_log_line_and_metrics_say_what_the_cache_did(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    expect_invoke(harness)
    predict(harness)
    predict(harness)
    logs, metrics = emitted(capsys)
    assert [(line["cache"], line.get("cache_tier")) for line in logs] == [
        ("miss", None), ("hit", "memory")]
    assert logs[1]["attempts"] == 0 and "image_out" not in logs[1]
    assert logs[1]["image_in"] == {"bytes": len(JPEG)}
    assert logs[1]["capture"] == logs[0]["capture"]  # a hit is captured as a miss is
    assert "cache" in logs[1]["stages_ms"]
    counted = [{name for name in ("CacheHits", "CacheMisses", "CacheErrors") if name in m}
               for m in metrics if "Requests" in m]
    assert counted == [{"CacheMisses"}, {"CacheHits"}]
    assert metrics[1]["model"] == ENDPOINT and metrics[1]["route"] == "/predict"


def test_a_model_with_cache_false_is_a_bypass(harness: Harness, tmp_path: Path) -> None:
    folder = tmp_path / "fresh-iris"
    shutil.copytree(MODELS_DIR / "iris", folder)
    document = json.loads((folder / "model.json").read_text())
    (folder / "model.json").write_text(json.dumps({**document, "cache": False}))
    settings = app_module.services.settings
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    registry.models["fresh-iris"] = load_model(folder, settings, {})
    assert registry.models["fresh-iris"].cache is False
    app_module.services._registry = registry
    for _ in range(2):
        expect_iris(harness)
        response = post_json(harness, "/models/fresh-iris/predict", [IRIS_ROW])
        assert response.status_code == 200 and response.headers["X-Cache"] == "bypass"


def test_the_tensor_pipeline_hits_the_cache(
        harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    harness.use(capturer=Capturer("both", DirectorySink(tmp_path)))
    expect_iris(harness)
    first = post_json(harness, "/models/iris/predict", [IRIS_ROW])
    # the same tensor, another spelling: the same body sent, so the same key
    second = post_json(harness, "/models/iris/predict?k=1", {"instances": [IRIS_ROW]})
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("miss", "hit")
    assert len(json.loads(first.body)["predictions"][0]) == 3
    assert len(json.loads(second.body)["predictions"][0]) == 1  # top-k computed per request
    assert json.loads(second.body)["request_id"] == second.headers["X-Request-Id"]
    assert second.headers["X-Amzn-Invoked-Production-Variant"] == "AllTraffic"
    miss_record, hit_record = captured(tmp_path)  # the hit is traffic too, marked as one
    assert hit_record["eventMetadata"]["sagegateCacheHit"] is True
    # a tensor hit's input is the request body the pipeline made, the same as the miss's
    assert hit_record["captureData"] == miss_record["captureData"]
    logs, _ = emitted(capsys)
    assert logs[-1]["cache"] == "hit" and logs[-1]["capture"] == "written"


def test_the_inference_py_runs_on_a_cached_answer(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    harness.stubber.add_response("invoke_endpoint",
                                 endpoint_response(b'{"predictions": [[0.93]]}'))
    outputs: list[Any] = []
    first = post_json(harness, "/models/sentiment/predict", {"text": "I loved this film"})
    server = app_module.services.server
    handler = server.handler(app_module.services.registry.get("sentiment"), TfsHandler.load)
    original = handler.output_handler

    def counting(response: Any, context: Any) -> Any:
        outputs.append(response.content)
        return original(response, context)

    monkeypatch.setitem(server._handlers, "sentiment",
                        dataclasses.replace(handler, output_handler=counting))
    second = post_json(harness, "/models/sentiment/predict", {"text": "I loved this film"})
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("miss", "hit")
    assert json.loads(second.body) == {"predictions": [[0.93]]}
    assert outputs == [b'{"predictions": [[0.93]]}']  # the handler ran on the cached answer


def test_an_edited_handler_file_is_a_new_key(harness: Harness, tmp_path: Path) -> None:
    settings = app_module.services.settings
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    cache = PredictionCache(MemoryTier(1 << 20), None)  # one cache, shared by both versions
    seen = []
    for version in ("v1", "v1", "v2"):
        folder = tmp_path / version / "sentiment"
        if not folder.exists():
            shutil.copytree(MODELS_DIR / "sentiment", folder)
        if version == "v2":
            with (folder / "inference.py").open("a") as handle:
                handle.write("\n# edited: the same request body, maybe another answer\n")
        registry.models["sentiment"] = load_model(folder, settings, {})
        services = harness.use(settings)
        services._registry, services._cache = registry, cache
        if (version == "v1" and not seen) or version == "v2":
            harness.stubber.add_response("invoke_endpoint",
                                         endpoint_response(b'{"predictions": [[0.5]]}'))
        response = post_json(harness, "/models/sentiment/predict", {"text": "fine"})
        seen.append(response.headers["X-Cache"])
    assert seen == ["miss", "hit", "miss"]


def test_an_edited_endpoint_accept_is_a_new_key(harness: Harness, tmp_path: Path) -> None:
    """The same request to the same model, whose model.json now asks the endpoint for another
    media type: the endpoint's answer changes, so the old one must not be served (the table
    tier outlives a deploy)."""
    settings = app_module.services.settings
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    cache = PredictionCache(MemoryTier(1 << 20), None)  # one cache, shared by both versions
    seen: list[str] = []
    for accept in ("application/json", "application/json", "application/jsonlines"):
        folder = tmp_path / accept.replace("/", "-") / "sentiment"
        if not folder.exists():
            shutil.copytree(MODELS_DIR / "sentiment", folder)
            document = json.loads((folder / "model.json").read_text())
            (folder / "model.json").write_text(json.dumps({**document, "accept": accept}))
        registry.models["sentiment"] = load_model(folder, settings, {})
        services = harness.use(settings)
        services._registry, services._cache = registry, cache
        if not seen or accept != "application/json":
            harness.stubber.add_response(
                "invoke_endpoint", endpoint_response(b'{"predictions": [[0.5]]}'),
                {"EndpointName": "sentiment", "Body": ANY, "ContentType": "application/json",
                 "Accept": accept, "InferenceId": ANY})
        response = post_json(harness, "/models/sentiment/predict", {"text": "fine"})
        assert response.status_code == 200, response.body
        seen.append(response.headers["X-Cache"])
    assert seen == ["miss", "hit", "miss"]
    harness.stubber.assert_no_pending_responses()
