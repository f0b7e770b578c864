"""Every error mapping, end to end through the Chalice app."""
from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

import app as app_module
from tests import imagefactory
from tests.functional.conftest import Harness, endpoint_response, probabilities

JPEG = imagefactory.jpeg(320, 240)


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.body
    body = response.json_body
    assert body["Code"] == code
    assert body["Message"]
    assert body["request_id"] == response.headers["X-Request-Id"]
    assert "Traceback" not in response.body.decode()
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize("body,code", [
    (b"{not json", "InvalidJSON"),
    (b"[1, 2]", "InvalidJSON"),
    (json.dumps({"k": 3}).encode(), "MissingImage"),
    (json.dumps({"image": "%%%not-base64%%%"}).encode(), "InvalidBase64"),
    (json.dumps({"image": base64.b64encode(b"plain text").decode()}).encode(), "InvalidImage"),
    (json.dumps({"image": base64.b64encode(imagefactory.truncated(JPEG)).decode()}).encode(),
     "InvalidImage"),
    (json.dumps({"image": base64.b64encode(imagefactory.corrupt_jpeg()).decode()}).encode(),
     "InvalidImage"),
    (json.dumps({"image": base64.b64encode(JPEG).decode(), "K": 3}).encode(), "InvalidParameter"),
])
def test_malformed_requests_are_400(harness: Harness, body: bytes, code: str) -> None:
    assert_error(harness.post("/predict", body), 400, code)


@pytest.mark.parametrize("k", ["0", "-1", "2.5", "abc", "true"])
def test_bad_k_in_query_is_400(harness: Harness, k: str) -> None:
    assert_error(harness.post(f"/predict?k={k}", JPEG, "image/jpeg"), 400, "InvalidParameter")


@pytest.mark.parametrize("k", [0, -1, 2.5, "abc", True, None])
def test_bad_k_in_json_is_400(harness: Harness, k: object) -> None:
    body = {"image": base64.b64encode(JPEG).decode(), "k": k}
    if k is None:
        body["k"] = {"nested": 1}
    assert_error(harness.post("/predict", json.dumps(body)), 400, "InvalidParameter")


def test_body_over_limit_is_413(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.functional.conftest import make_settings

    harness.use(make_settings(max_body_bytes=10_000))
    body = assert_error(harness.post("/predict", b"\xff" * 10_001, "image/jpeg"),
                        413, "PayloadTooLarge")
    assert "smaller" in body["Message"]


def test_image_over_pixel_limit_is_413(harness: Harness) -> None:
    assert_error(harness.post("/predict", imagefactory.png_bomb(), "image/png"),
                 413, "ImageTooLarge")
    assert_error(harness.post("/predict", imagefactory.jpeg_bomb(), "image/jpeg"),
                 413, "ImageTooLarge")


def test_unsupported_content_type_is_415(harness: Harness) -> None:
    body = assert_error(harness.post("/predict", b"hello", "text/plain"),
                        415, "UnsupportedMediaType")
    assert "image/jpeg" in body["Message"]


def test_wrong_method_keeps_the_error_shape(harness: Harness) -> None:
    response = harness.client.http.get("/predict")
    assert response.status_code == 405
    assert response.json_body["request_id"] == response.headers["X-Request-Id"]


def add_error(harness: Harness, code: str, status: int, **fields: Any) -> None:
    harness.stubber.add_client_error("invoke_endpoint", service_error_code=code,
                                     service_message=f"{code} happened", http_status_code=status,
                                     modeled_fields=fields or None)


def test_unknown_endpoint_is_502_endpoint_not_found(harness: Harness) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", service_error_code="ValidationError", http_status_code=400,
        service_message="Endpoint efficientnet-lite0 of account 123456789012 not found.")
    body = assert_error(harness.post("/predict", JPEG, "image/jpeg"), 502, "EndpointNotFound")
    assert "123456789012" not in json.dumps(body)


def test_unknown_variant_is_400(harness: Harness) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", service_error_code="ValidationError", http_status_code=400,
        service_message="Variant Nope not found for endpoint efficientnet-lite0.")
    assert_error(harness.post("/predict", JPEG, "image/jpeg", **{"X-Target-Variant": "Nope"}),
                 400, "InvalidVariant")


def test_model_error_carries_the_containers_status_and_message(harness: Harness) -> None:
    add_error(harness, "ModelError", 424, OriginalStatusCode=400,
              OriginalMessage="cannot identify image file",
              LogStreamArn="arn:aws:logs:us-east-1:123456789012:log-group:x")
    body = assert_error(harness.post("/predict", JPEG, "image/jpeg"), 502, "ModelError")
    assert body["original_status_code"] == 400
    assert body["original_message"] == "cannot identify image file"
    assert "arn:aws:logs" not in json.dumps(body)


@pytest.mark.parametrize("code,status", [("ThrottlingException", 400),
                                         ("ModelNotReadyException", 429),
                                         ("ServiceUnavailable", 503)])
def test_retryable_errors_are_retried_then_503_with_retry_after(
        harness: Harness, code: str, status: int) -> None:
    for _ in range(3):
        add_error(harness, code, status)
    response = harness.post("/predict", JPEG, "image/jpeg")
    assert_error(response, 503, "EndpointUnavailable")
    assert response.headers["Retry-After"] == "1"
    assert harness.sleeps == [0.05, 0.1]  # full jitter with rng=0.5: 0.5*0.1, 0.5*0.2


def test_a_retry_that_succeeds_answers_200(harness: Harness) -> None:
    add_error(harness, "ServiceUnavailable", 503)
    harness.stubber.add_response("invoke_endpoint",
                                 endpoint_response(probabilities({1: 0.9})))
    response = harness.post("/predict", JPEG, "image/jpeg")
    assert response.status_code == 200
    assert response.json_body["predictions"][0]["index"] == 1


def test_internal_failure_is_retried_then_502(harness: Harness) -> None:
    for _ in range(3):
        add_error(harness, "InternalFailure", 500)
    assert_error(harness.post("/predict", JPEG, "image/jpeg"), 502, "EndpointError")


def test_access_denied_is_not_retried(harness: Harness) -> None:
    add_error(harness, "AccessDeniedException", 403)
    assert_error(harness.post("/predict", JPEG, "image/jpeg"), 502, "EndpointError")
    assert harness.sleeps == []


@pytest.mark.parametrize("body", [b"not json", b"[NaN]", json.dumps([0.5, 0.5]).encode(),
                                  b'{"error": "oops"}'])
def test_malformed_endpoint_output_is_502(harness: Harness, body: bytes) -> None:
    harness.stubber.add_response("invoke_endpoint", endpoint_response(body))
    assert_error(harness.post("/predict", JPEG, "image/jpeg"), 502, "InvalidEndpointResponse")


def test_non_json_endpoint_content_type_is_502(harness: Harness) -> None:
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(probabilities({1: 0.9}), content_type="text/csv"))
    assert_error(harness.post("/predict", JPEG, "image/jpeg"), 502, "InvalidEndpointResponse")


class FailingClient:
    """An in-memory fake for failures a Stubber cannot produce (timeouts, lost connections)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def invoke_endpoint(self, **_: Any) -> Any:
        self.calls += 1
        raise self.error


def use_client(harness: Harness, fake: FailingClient) -> None:
    from chalicelib.inference.endpoint import EndpointClient

    harness.use(endpoint=EndpointClient(fake, sleep=lambda _: None))  # type: ignore[arg-type]


def test_timeout_is_504_and_not_retried(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FailingClient(ReadTimeoutError(endpoint_url="http://127.0.0.1:9"))
    use_client(harness, fake)
    assert_error(harness.post("/predict", JPEG, "image/jpeg"), 504, "EndpointTimeout")
    assert fake.calls == 1


def test_unreachable_endpoint_is_503(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FailingClient(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    use_client(harness, fake)
    assert_error(harness.post("/predict", JPEG, "image/jpeg"), 503, "EndpointUnavailable")
    assert fake.calls == 3


def test_a_bug_is_a_plain_500_without_traceback(harness: Harness,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    use_client(harness, FailingClient(KeyError("secret-internal-detail")))
    response = harness.post("/predict", JPEG, "image/jpeg")
    body = assert_error(response, 500, "InternalServerError")
    assert "secret-internal-detail" not in response.body.decode()
    assert body["Message"] == "An internal server error occurred."


def test_misconfiguration_does_not_leak_details(harness: Harness,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.core.config import Settings
    from chalicelib.services import Services

    # chalice.test.Client applies the stage's environment on every call, so make the
    # environment itself bad through the stage's own parser instead of deleting a variable
    monkeypatch.setattr(app_module, "services", Services(
        read_settings=lambda: Settings.from_env({"ENDPOINT_NAME": "bad_name!"})))
    body = assert_error(harness.client.http.get("/health"), 500, "ConfigurationError")
    assert "ENDPOINT_NAME" not in body["Message"]


def test_invalid_client_request_id_is_replaced(harness: Harness) -> None:
    response = harness.post("/predict", b"x", "text/plain", **{"X-Request-Id": "bad id\twith<>"})
    assert response.headers["X-Request-Id"] != "bad id\twith<>"
    assert len(response.headers["X-Request-Id"]) == 36
