"""The hardening issue, end to end through the app: each item's class, not just its instance.

(The hostile corpus, tests/functional/test_corpus.py, holds the many-cases side of each.)
"""
from __future__ import annotations

import base64
import gc
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from chalicelib.core.retries import RetryQuota
from tests import imagefactory
from tests.corpus.generate import _photo, _png_header_only
from tests.functional.conftest import Harness, endpoint_response, make_settings, probabilities
from tests.functional.test_errors import FailingClient, use_client

JPEG = imagefactory.jpeg(320, 240)
CAT = probabilities({285: 0.83})


@pytest.fixture
def passthrough(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """Production defaults (passthrough on); yields the bodies the endpoint received."""
    harness.use(make_settings(passthrough=True))
    sent: list[bytes] = []
    harness.stubber.client.meta.events.register_first(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **_: sent.append(params["Body"]))
    yield sent


def error_of(response: Any) -> tuple[int, str, str]:
    body = json.loads(response.body)
    return response.status_code, body["Code"], body["Message"]


# --- 1, 2: one bound on pixels and aspect ratio, passthrough included ---------------------

def test_a_65500x1_jpeg_is_not_passed_through_to_the_endpoint(
        harness: Harness, passthrough: list[bytes]) -> None:
    strip = imagefactory.jpeg(image=np.full((1, 65500, 3), 128, np.uint8))
    status, code, message = error_of(harness.post("/predict", strip, "image/jpeg"))
    assert (status, code) == (400, "InvalidImage") and "aspect ratio" in message
    assert "at most 20:1" in message and passthrough == []


def test_a_panorama_within_the_limit_is_still_passed_through(
        harness: Harness, passthrough: list[bytes]) -> None:
    panorama = imagefactory.jpeg(image=_photo(900, 100))  # 9:1, small enough to forward
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    assert harness.post("/predict", panorama, "image/jpeg").status_code == 200
    assert passthrough == [panorama]


@pytest.mark.parametrize("size,box", [((20_000, 1), 224), ((1_000_000, 1), 2048)])
def test_fill_bombs_are_refused_before_decoding(harness: Harness, size: tuple[int, int],
                                                box: int) -> None:
    bomb = _png_header_only(*size)  # a valid PNG: every row is there
    assert len(bomb) < 2000
    response = harness.post(f"/resize?width={box}&height={box}&mode=fill", bomb, "image/png")
    status, code, message = error_of(response)
    assert (status, code) == (400, "InvalidImage") and "aspect ratio" in message


# --- 8: corrupt JPEGs, on the passthrough path too -----------------------------------------

def test_half_a_jpeg_with_an_eoi_is_refused_on_the_passthrough_path(
        harness: Harness, passthrough: list[bytes]) -> None:
    whole = imagefactory.jpeg(image=_photo(640, 480))
    half = whole[: len(whole) // 2] + b"\xff\xd9"
    status, code, message = error_of(harness.post("/predict", half, "image/jpeg"))
    assert (status, code) == (400, "InvalidImage") and "truncated" in message
    assert passthrough == []


def test_a_header_claiming_6000x6000_over_451x300_data_is_refused(
        harness: Harness, passthrough: list[bytes]) -> None:
    from tests.corpus.generate import _with_frame_size

    forged = _with_frame_size(imagefactory.jpeg(451, 300), 6000, 6000)
    status, code, message = error_of(harness.post("/predict", forged, "image/jpeg"))
    assert (status, code) == (400, "InvalidImage") and "truncated" in message


def test_allow_corrupt_images_lets_them_through(harness: Harness,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    harness.use(make_settings(allow_corrupt_images=True))
    whole = imagefactory.jpeg(image=_photo(1920, 1080))
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    half = whole[: len(whole) // 2] + b"\xff\xd9"
    assert harness.post("/predict", half, "image/jpeg").status_code == 200


# --- 9: Accept negotiation on /resize ------------------------------------------------------

@pytest.mark.parametrize("accept,content_type", [
    ("image/jpeg;q=0, application/json", "application/json"),
    ("image/*", "image/jpeg"),
    ("image/png, image/*;q=0.5", "image/png"),
    ("image/webp, application/json;q=0.5", "image/webp"),
    # API Gateway sends binary only if the first type is binary: JSON, which is acceptable
    ("application/json;q=0.5, image/webp", "application/json"),
    ("text/html;q=0.1, image/png", "image/png"),  # JSON refused: the image, as asked
    ("*/*", "application/json"),
    (None, "application/json"),
])
def test_resize_answers_what_accept_prefers(harness: Harness, accept: str | None,
                                            content_type: str) -> None:
    headers = {"Accept": accept} if accept else {}
    response = harness.post("/resize?width=16&height=16", JPEG, "image/jpeg", **headers)
    assert response.status_code == 200, response.body
    if content_type == "application/json":  # Chalice adds that header only on the way out
        assert "Content-Type" not in response.headers
        assert json.loads(response.body)["width"] == 16
    else:
        assert response.headers["Content-Type"] == content_type
        assert response.body[:4] in (b"\xff\xd8\xff\xe0", b"\x89PNG", b"RIFF")


def test_an_explicit_format_q0_is_not_acceptable(harness: Harness) -> None:
    response = harness.post("/resize?width=16&height=16&format=png", JPEG, "image/jpeg",
                            Accept="image/png;q=0")
    assert error_of(response)[:2] == (406, "NotAcceptable")


# --- 10: messages that say what is wrong ---------------------------------------------------

def test_image_in_the_query_of_a_binary_body_is_named_as_a_query_parameter(
        harness: Harness) -> None:
    status, code, message = error_of(harness.post("/predict?image=x", JPEG, "image/jpeg"))
    assert (status, code) == (400, "InvalidParameter")
    assert message == ("Unknown query parameter(s) 'image'; known: custom_attributes, "
                       "inference_component, k, target_model, topk, variant.")


def test_topk_on_resize_is_reported_as_topk(harness: Harness) -> None:
    body = json.dumps({"image": base64.b64encode(JPEG).decode(), "width": 8, "height": 8,
                       "topk": 3})
    status, _, message = error_of(harness.post("/resize", body))
    assert status == 400 and "'topk'" in message and "'k'" not in message


def test_a_binary_body_without_content_type_gets_a_hint(harness: Harness) -> None:
    response = harness.client.http.post("/predict", body=JPEG, headers={})
    status, code, message = error_of(response)
    assert (status, code) == (400, "InvalidJSON") and "Content-Type: image/jpeg" in message


def test_a_5000_digit_k_is_an_invalid_parameter_with_its_range(harness: Harness) -> None:
    body = b'{"image": "' + base64.b64encode(JPEG) + b'", "k": ' + b"7" * 5000 + b"}"
    status, code, message = error_of(harness.post("/predict", body))
    assert (status, code) == (400, "InvalidParameter") and "from 1 to 1000000" in message


def test_image_jpg_is_read_as_jpeg(harness: Harness) -> None:
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    assert harness.post("/predict", JPEG, "image/jpg").status_code == 200


@pytest.mark.parametrize("route", ["/predict", "/resize"])
@pytest.mark.parametrize("value", [[], {}, [[1]]])
def test_wrong_types_are_400_on_every_route(harness: Harness, route: str, value: Any) -> None:
    for field in ("format", "mode", "width") if route == "/resize" else ("k", "variant"):
        body = json.dumps({"image": base64.b64encode(JPEG).decode(), "width": 8, "height": 8,
                           field: value} if route == "/resize" else
                          {"image": base64.b64encode(JPEG).decode(), field: value})
        status, code, message = error_of(harness.post(route, body))
        assert (status, code) == (400, "InvalidParameter") and f'"{field}"' in message


# --- 12: no reference cycles on the error path ---------------------------------------------

def garbage_per_request(run: Callable[[], None], requests: int = 20) -> float:
    run()  # warm: lazy imports and caches are not garbage
    gc.collect()
    gc.disable()
    try:
        for _ in range(requests):
            run()
        return gc.collect() / requests
    finally:
        gc.enable()


def test_failed_requests_leave_no_more_cycles_than_successful_ones(harness: Harness) -> None:
    harness.use(make_settings(cache_memory_bytes=0))  # every request reaches the endpoint
    # every outage request is retried (three answers each): a quota that never runs dry
    harness.endpoint.quota = RetryQuota(capacity=10**9)

    def ok() -> None:
        harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
        assert harness.post("/predict", JPEG, "image/jpeg").status_code == 200

    def outage() -> None:
        for _ in range(3):
            harness.stubber.add_client_error("invoke_endpoint", "ServiceUnavailable",
                                             http_status_code=503)
        assert harness.post("/predict", JPEG, "image/jpeg").status_code == 503

    def not_found() -> None:
        harness.stubber.add_client_error("invoke_endpoint", "ValidationError",
                                         "Endpoint x of account 1 not found.", 400)
        assert harness.post("/predict", JPEG, "image/jpeg").status_code == 502

    baseline = garbage_per_request(ok)
    assert garbage_per_request(outage) <= baseline + 1
    assert garbage_per_request(not_found) <= baseline + 1


@pytest.mark.parametrize("error", [EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
                                   ReadTimeoutError(endpoint_url="http://127.0.0.1:9")])
def test_connection_failures_leave_no_cycles(harness: Harness, monkeypatch: pytest.MonkeyPatch,
                                             error: Exception) -> None:
    use_client(harness, FailingClient(error))
    assert garbage_per_request(lambda: harness.post("/predict", JPEG, "image/jpeg")) <= 1


def test_client_errors_leave_no_cycles(harness: Harness) -> None:
    for body, ctype in ((b"[" * 10_000, "application/json"), (JPEG[:400], "image/jpeg"),
                        (JPEG, "text/plain")):
        assert garbage_per_request(lambda b=body, c=ctype: harness.post("/predict", b, c)) <= 1
