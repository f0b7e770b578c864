"""One JSON log line and one EMF metric set per request; data capture through the real app."""
from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from chalicelib.capture import Capturer
from chalicelib.capture.records import CaptureRecord
from chalicelib.capture.sinks import DirectorySink
from tests import imagefactory
from tests.functional.conftest import ENDPOINT, Harness, endpoint_response, probabilities

CAT = probabilities({285: 0.83, 281: 0.1, 282: 0.05})
SECRET_KEY = "k3y-Th4t-Must-N0t-Leak-0123456789"


Documents = list[dict[str, Any]]


def emitted(capsys: pytest.CaptureFixture[str]) -> tuple[Documents, Documents]:
    """(request log lines, EMF metric documents) written to stdout."""
    out = capsys.readouterr().out
    documents = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    logs = [d for d in documents if d.get("message") == "request"]
    metrics = [d for d in documents if "_aws" in d]
    return logs, metrics


@pytest.fixture
def capture_dir(harness: Harness, tmp_path: Path) -> Path:
    harness.use(capturer=Capturer("both", DirectorySink(tmp_path)))
    return tmp_path


def captured(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(root.rglob("*.jsonl")) for line in path.open()]


def test_a_prediction_logs_one_line_with_every_stage(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    image = imagefactory.jpeg(1920, 1080)
    response = harness.post("/predict", image, "image/jpeg", **{"X-Request-Id": "trace-7"})
    assert response.status_code == 200
    (line,), metrics = emitted(capsys)
    assert line["level"] == "INFO" and line["service"] == "sagegate"
    # the client's id is carried along, never the request id of record (API Gateway's)
    assert line["correlation_id"] == "trace-7" and line["route"] == "/predict"
    assert line["request_id"] == response.headers["X-Request-Id"] != "trace-7"
    assert response.headers["X-Correlation-Id"] == "trace-7"
    assert (line["method"], line["status"]) == ("POST", 200)
    assert line["image_in"] == {"format": "jpeg", "width": 1920, "height": 1080,
                                "bytes": len(image)}
    assert line["image_out"]["width"] == 455 and line["image_out"]["height"] == 256
    assert (line["endpoint"], line["variant"], line["attempts"]) == (ENDPOINT, "AllTraffic", 1)
    assert set(line["stages_ms"]) == {"parse", "cache", "preprocess", "endpoint",
                                      "postprocess", "capture"}
    assert line["total_ms"] >= sum(line["stages_ms"].values()) - 0.1
    assert "error_code" not in line

    (document,) = metrics
    names = {m["Name"] for m in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"Requests", "Latency", "EndpointLatency", "PreprocessLatency", "BytesIn",
            "BytesToEndpoint"} <= names
    assert document["route"] == "/predict" and document["BytesIn"] == [len(image)]


def test_an_error_logs_its_code_and_counts_it(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    response = harness.post("/predict", b'{"image": "not base64!"}')
    assert response.status_code == 400
    (line,), metrics = emitted(capsys)
    assert (line["status"], line["error_code"]) == (400, "InvalidBase64")
    assert line["request_id"] == response.headers["X-Request-Id"]
    errors = [m for m in metrics if "Errors" in m]
    assert len(errors) == 1 and errors[0]["code"] == "InvalidBase64"


def test_an_endpoint_failure_is_logged_as_an_error(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", service_error_code="ModelError", http_status_code=424,
        service_message="boom", modeled_fields={"OriginalStatusCode": 500})
    response = harness.post("/predict", imagefactory.jpeg(), "image/jpeg")
    assert response.status_code == 502
    (line,), _ = emitted(capsys)
    assert (line["level"], line["error_code"]) == ("ERROR", "ModelError")
    assert "endpoint" in line["stages_ms"]  # the stages that ran are logged even on error


def test_logs_never_hold_image_bytes_or_keys(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    image = imagefactory.jpeg(64, 64)
    encoded = base64.b64encode(image).decode()
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    harness.post("/predict", json.dumps({"image": encoded}), **{"x-api-key": SECRET_KEY,
                                                               "Authorization": SECRET_KEY})
    harness.post("/predict", json.dumps({"image": encoded[:-5] + "!!!!!"}),
                 **{"x-api-key": SECRET_KEY})
    out = capsys.readouterr().out
    assert out.count('"message":"request"') == 2
    assert SECRET_KEY not in out
    assert encoded[:40] not in out and encoded[-40:-5] not in out


def test_health_and_chalice_own_errors_are_logged_too(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    harness.client.http.get("/health")
    harness.client.http.get("/predict")  # 405, answered by Chalice inside the function
    logs, _ = emitted(capsys)
    assert [(line["route"], line["status"]) for line in logs] == [("/health", 200),
                                                                  ("/predict", 405)]
    assert logs[1]["error_code"] == "MethodNotAllowedError"


def test_one_capture_record_per_successful_prediction(
        harness: Harness, capture_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sent: dict[str, Any] = {}
    harness.stubber.client.meta.events.register_first(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **_: sent.update(params))
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT, variant="Blue"))
    response = harness.post("/predict", imagefactory.jpeg(), "image/jpeg",
                            **{"X-Custom-Attributes": "trace=1"})
    assert response.status_code == 200
    harness.post("/predict", b"{}")  # a 400: nothing reached the endpoint, nothing captured
    (record,) = captured(capture_dir)
    assert record["eventMetadata"]["inferenceId"] == response.json_body["request_id"]
    assert record["eventMetadata"]["customAttributes"] == ["trace=1"]
    data = record["captureData"]
    assert base64.b64decode(data["endpointInput"]["data"]) == sent["Body"]
    assert data["endpointInput"]["observedContentType"] == "application/x-image"
    assert json.loads(data["endpointOutput"]["data"]) == pytest.approx(CAT)
    assert list(capture_dir.glob(f"{ENDPOINT}/Blue/*/*/*/*/*.jsonl"))
    logs, _ = emitted(capsys)
    assert [line.get("capture") for line in logs if line["route"] == "/predict"] == \
        ["written", None]


class BrokenSink:
    def write(self, records: Sequence[CaptureRecord]) -> None:
        raise ConnectionError("capture bucket unreachable")


def test_a_capture_failure_never_fails_the_request(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    harness.use(capturer=Capturer("both", BrokenSink()))
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    response = harness.post("/predict", imagefactory.jpeg(), "image/jpeg")
    assert response.status_code == 200
    out = capsys.readouterr().out
    documents = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    (warning,) = [d for d in documents if d.get("level") == "WARNING"]
    assert "data capture failed: ConnectionError" in warning["message"]
    (line,) = [d for d in documents if d.get("message") == "request"]
    assert line["capture"] == "failed" and line["status"] == 200
    (metrics,) = [d for d in documents if "_aws" in d]
    assert metrics["CaptureFailures"] == [1.0]


def test_metrics_are_named_as_the_environment_says_when_they_are_written(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The namespace is read when metrics are flushed, not frozen at import."""
    harness.client.http.get("/health")
    _, before = emitted(capsys)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "shop-classifier")
    harness.client.http.get("/health")
    _, after = emitted(capsys)
    assert {m["_aws"]["CloudWatchMetrics"][0]["Namespace"] for m in before} == {"sagegate"}
    assert {m["_aws"]["CloudWatchMetrics"][0]["Namespace"] for m in after} == {"shop-classifier"}
