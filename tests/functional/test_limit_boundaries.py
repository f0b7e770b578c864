"""The body and pixel limits at their edges, through the real app: exactly at a limit is
accepted, one over is refused with a 413 before anything reaches a model's code or the
endpoint. Every route that takes a body is checked, the model routes too; the images over the
pixel limit are headers only, so nothing big is ever decoded."""
from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.stub import ANY

from chalicelib.core.errors import ImageTooLargeError
from chalicelib.images import imaging, sizing
from chalicelib.images.probe import probe
from tests import imagefactory
from tests.functional.conftest import (
    ENDPOINT,
    Harness,
    endpoint_response,
    make_settings,
    probabilities,
)

JPEG = imagefactory.jpeg(96, 64)
JSON_UPLOAD = json.dumps({"image": base64.b64encode(JPEG).decode()}).encode()
IRIS_ROW = [5.1, 3.5, 1.4, 0.2]
TFS_ROW = b'{"signature_name":"serving_default","instances":[[5.1,3.5,1.4,0.2]]}'
SETOSA = json.dumps({"predictions": [[0.97, 0.02, 0.01]]}).encode()
MODEL_BODY = json.dumps({"instances": [IRIS_ROW]}).encode().ljust(1500)  # trailing blanks: legal
DEFAULT_PIXELS = 40_000_000  # Settings' default max_image_pixels


@pytest.fixture
def endpoint_calls(harness: Harness) -> list[dict[str, Any]]:
    """Every InvokeEndpoint call the app makes, recorded before botocore sends it."""
    calls: list[dict[str, Any]] = []
    harness.stubber.client.meta.events.register_first(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **_: calls.append(params))
    return calls


def expect_image_call(harness: Harness) -> None:
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(probabilities({285: 0.9})),
        {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/x-image",
         "Accept": "application/json", "InferenceId": ANY})


def assert_refused(response: Any, status: int, code: str) -> dict[str, Any]:
    body = json.loads(response.body)
    assert (response.status_code, body["Code"]) == (status, code), body
    return body


@pytest.mark.parametrize("body,content_type", [(JPEG, "image/jpeg"),
                                               (JSON_UPLOAD, "application/json")],
                         ids=["raw", "base64-json"])
def test_a_predict_body_exactly_at_the_limit_is_served(harness: Harness, body: bytes,
                                                       content_type: str) -> None:
    harness.use(make_settings(max_body_bytes=len(body)))
    expect_image_call(harness)
    response = harness.post("/predict", body, content_type)
    assert response.status_code == 200, response.body


@pytest.mark.parametrize("body,content_type", [(JPEG, "image/jpeg"),
                                               (JSON_UPLOAD, "application/json")],
                         ids=["raw", "base64-json"])
@pytest.mark.parametrize("path", ["/predict", "/resize?width=32&height=32"])
def test_one_byte_over_the_limit_is_413_before_the_endpoint(
        harness: Harness, endpoint_calls: list[dict[str, Any]], path: str, body: bytes,
        content_type: str) -> None:
    harness.use(make_settings(max_body_bytes=len(body) - 1))
    refused = assert_refused(harness.post(path, body, content_type), 413, "PayloadTooLarge")
    assert f"Request body is {len(body)} bytes; the limit is {len(body) - 1}." in \
        refused["Message"]
    assert endpoint_calls == []


def test_a_resize_body_exactly_at_the_limit_is_resized(harness: Harness) -> None:
    harness.use(make_settings(max_body_bytes=len(JPEG)))
    response = harness.post("/resize?width=32&height=32", JPEG, "image/jpeg")
    assert response.status_code == 200, response.body


def test_a_model_body_exactly_at_the_limit_is_served(harness: Harness) -> None:
    harness.use(make_settings(max_body_bytes=len(MODEL_BODY)))
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(SETOSA),
        {"EndpointName": "iris", "Body": TFS_ROW, "ContentType": "application/json",
         "Accept": "application/json", "InferenceId": ANY})
    response = harness.post("/models/iris/predict", MODEL_BODY)
    assert response.status_code == 200, response.body


@pytest.mark.parametrize("model", ["iris", "iris-cortex", "sentiment", "efficientnet-lite0"])
def test_a_model_body_one_byte_over_is_413_before_the_handler_or_the_endpoint(
        harness: Harness, endpoint_calls: list[dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    """Every pipeline's route, a handler file's included: the size is checked before the
    body is read, so the model's own code never runs on it."""
    services = harness.use(make_settings(max_body_bytes=len(MODEL_BODY) - 1))
    served: list[str] = []
    real_serve = services.server.serve

    def serve(*args: Any, **kwargs: Any) -> Any:
        served.append(args[0].name)
        return real_serve(*args, **kwargs)

    monkeypatch.setattr(services.server, "serve", serve)
    response = harness.post(f"/models/{model}/predict", MODEL_BODY)
    refused = assert_refused(response, 413, "PayloadTooLarge")
    assert f"the limit is {len(MODEL_BODY) - 1}" in refused["Message"]
    assert (served, endpoint_calls) == ([], [])


def test_an_image_exactly_at_the_pixel_limit_is_served_and_one_pixel_row_more_is_not(
        harness: Harness, endpoint_calls: list[dict[str, Any]]) -> None:
    pixels = 96 * 64
    harness.use(make_settings(max_image_pixels=pixels))
    expect_image_call(harness)
    assert harness.post("/predict", JPEG, "image/jpeg").status_code == 200
    taller = imagefactory.jpeg(96, 65)
    refused = assert_refused(harness.post("/predict", taller, "image/jpeg"), 413,
                             "ImageTooLarge")
    assert f"the limit is {pixels} pixels" in refused["Message"]
    harness.use(make_settings(max_image_pixels=pixels - 1))
    assert_refused(harness.post("/predict", JPEG, "image/jpeg"), 413, "ImageTooLarge")
    assert len(endpoint_calls) == 1


@pytest.mark.parametrize("header_only", [
    imagefactory.png_bomb(8000, 5001), imagefactory.png_bomb(8001, 5000),
    imagefactory.jpeg_bomb(8000, 5001), imagefactory.jpeg_bomb(5001, 8000),
], ids=["png-row-over", "png-column-over", "jpeg-row-over", "jpeg-column-over"])
@pytest.mark.parametrize("path", ["/predict", "/resize?width=32&height=32"])
def test_just_over_the_default_pixel_limit_is_413_from_the_header(
        harness: Harness, endpoint_calls: list[dict[str, Any]], path: str,
        header_only: bytes) -> None:
    assert make_settings().max_image_pixels == DEFAULT_PIXELS
    info = probe(header_only)
    assert DEFAULT_PIXELS < info.width * info.height < DEFAULT_PIXELS * 1.001
    content_type = f"image/{info.format}"
    refused = assert_refused(harness.post(path, header_only, content_type), 413,
                             "ImageTooLarge")
    assert f"the limit is {DEFAULT_PIXELS} pixels" in refused["Message"]
    assert endpoint_calls == []


@pytest.mark.parametrize("header_only", [imagefactory.png_bomb(8000, 5000),
                                         imagefactory.jpeg_bomb(5000, 8000)],
                         ids=["png", "jpeg"])
def test_exactly_the_default_pixel_limit_passes_the_header_checks(header_only: bytes) -> None:
    """At the limit the checks let it through (decoding it is then the decoder's business:
    these files hold a header only, so they are probed, never decoded)."""
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    info = imaging.inspect(header_only, plan, sizing.Limits(max_pixels=DEFAULT_PIXELS))
    assert info.width * info.height == DEFAULT_PIXELS
    with pytest.raises(ImageTooLargeError, match="the limit is 39999999 pixels"):
        imaging.inspect(header_only, plan, sizing.Limits(max_pixels=DEFAULT_PIXELS - 1))
