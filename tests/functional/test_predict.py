from __future__ import annotations

import base64
import json
from typing import Any

import cv2
import numpy as np
import pytest
from botocore.stub import ANY

from tests import imagefactory
from tests.functional.conftest import ENDPOINT, Harness, endpoint_response, probabilities

CAT = probabilities({285: 0.83, 281: 0.1, 282: 0.05})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def expect_invoke(harness: Harness, body: Any = CAT, **params: Any) -> None:
    expected = {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/x-image",
                "Accept": "application/json", "InferenceId": ANY, **params}
    harness.stubber.add_response("invoke_endpoint", endpoint_response(body), expected)


def test_json_base64_returns_labelled_top_k(harness: Harness, jpeg_640: bytes) -> None:
    expect_invoke(harness)
    response = harness.post("/predict", json.dumps({"image": b64(jpeg_640), "k": 3}))
    assert response.status_code == 200
    body = response.json_body
    assert [p["index"] for p in body["predictions"]] == [285, 281, 282]
    assert [p["label"] for p in body["predictions"]] == ["Egyptian cat", "tabby", "tiger cat"]
    assert body["predictions"][0]["probability"] == pytest.approx(0.83)
    assert body["endpoint"] == ENDPOINT and body["variant"] == "AllTraffic"
    assert body["request_id"] == response.headers["X-Request-Id"]
    assert "endpoint;dur=" in response.headers["Server-Timing"]


def test_sends_the_resized_image_with_the_request_id(harness: Harness) -> None:
    seen: dict[str, Any] = {}

    def capture(**params: Any) -> None:
        seen.update(params)

    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    harness.stubber.client.meta.events.register_first("before-parameter-build.sagemaker-runtime.InvokeEndpoint",
                            lambda params, **_: capture(**params))
    response = harness.post("/predict", imagefactory.jpeg(1920, 1080), "image/jpeg",
                            **{"X-Request-Id": "trace-123"})
    assert response.status_code == 200
    # the endpoint and the answer get the request id of record; the client's id is echoed
    assert seen["InferenceId"] == response.json_body["request_id"] != "trace-123"
    assert response.json_body["request_id"] == response.headers["X-Request-Id"]
    assert response.headers["X-Correlation-Id"] == "trace-123"
    sent = cv2.imdecode(np.frombuffer(seen["Body"], np.uint8), cv2.IMREAD_COLOR)
    assert sent.shape == (256, 455, 3)  # shorter side 256, aspect kept


def test_legacy_2018_body(harness: Harness, jpeg_640: bytes) -> None:
    expect_invoke(harness)
    response = harness.post("/predict", json.dumps({"data": b64(jpeg_640), "topk": 2}))
    assert response.status_code == 200
    assert len(response.json_body["predictions"]) == 2


def test_data_url_from_a_browser(harness: Harness, jpeg_640: bytes) -> None:
    expect_invoke(harness)
    url = "data:image/jpeg;base64," + b64(jpeg_640)
    assert harness.post("/predict", json.dumps({"image": url})).status_code == 200


@pytest.mark.parametrize("ctype,data", [
    ("image/jpeg", imagefactory.jpeg(320, 240)), ("application/x-image", imagefactory.jpeg()),
    ("image/png", imagefactory.png_rgba()), ("image/webp", imagefactory.webp()),
    ("application/octet-stream", imagefactory.png_16bit()),
])
def test_binary_bodies_with_k_in_query(harness: Harness, ctype: str, data: bytes) -> None:
    expect_invoke(harness)
    response = harness.post("/predict?k=1", data, ctype)
    assert response.status_code == 200, response.body
    assert [p["index"] for p in response.json_body["predictions"]] == [285]


def test_default_k_is_five_and_large_k_returns_all(harness: Harness, jpeg_640: bytes) -> None:
    expect_invoke(harness)  # once: the second request's answer is the cached one
    assert len(harness.post("/predict", jpeg_640, "image/jpeg").json_body["predictions"]) == 5
    everything = harness.post("/predict?k=5000", jpeg_640, "image/jpeg").json_body["predictions"]
    assert len(everything) == 1000
    assert [p["probability"] for p in everything] == sorted(
        (p["probability"] for p in everything), reverse=True)


def test_variant_and_custom_attributes_pass_through(harness: Harness, jpeg_640: bytes) -> None:
    harness.stubber.add_response(
        "invoke_endpoint",
        endpoint_response(CAT, variant="Challenger", CustomAttributes="echo=1"),
        {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/x-image",
         "Accept": "application/json", "InferenceId": ANY, "TargetVariant": "Challenger",
         "CustomAttributes": "echo=1"})
    response = harness.post("/predict", jpeg_640, "image/jpeg",
                            **{"X-Target-Variant": "Challenger", "X-Custom-Attributes": "echo=1"})
    assert response.json_body["variant"] == "Challenger"
    assert response.headers["X-Custom-Attributes"] == "echo=1"


def test_variant_field_in_json(harness: Harness, jpeg_640: bytes) -> None:
    expect_invoke(harness, TargetVariant="B")
    body = json.dumps({"image": b64(jpeg_640), "variant": "B"})
    assert harness.post("/predict", body).status_code == 200


def test_health_needs_no_endpoint_call(harness: Harness) -> None:
    response = harness.client.http.get("/health")
    assert response.status_code == 200
    assert response.json_body == {
        "status": "ok", "endpoint": ENDPOINT, "model_input": {"width": 224, "height": 224},
        "resize": {"mode": "shorter-side", "shorter_side": 256}, "labels": 1000}
