"""Every InvokeEndpoint error code chalicelib.inference.endpoint maps, each through the Chalice app.

A real botocore client with a Stubber answers each attempt with the error SageMaker would
send; the client gets the status and ``Code`` below, after exactly the attempts listed (the
retryable codes: every attempt the policy allows). The table must name every code the module
maps and every error InvokeEndpoint's own service model declares: a code added to either
without an expectation here fails :func:`test_the_table_covers_every_mapped_code`.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import boto3
import pytest

from chalicelib.core.retries import classify
from chalicelib.inference.endpoint import UNAVAILABLE_CODES
from tests import imagefactory
from tests.functional.conftest import Harness, make_settings

PNG = imagefactory.png(imagefactory.gradient(320, 240))  # always re-encoded: never forwarded
FORWARDED_JPEG = imagefactory.jpeg(320, 240)  # forwarded untouched when passthrough is on
ACCOUNT = "123456789012"
ATTEMPTS = 3  # the harness's RetryPolicy


@dataclasses.dataclass(frozen=True)
class Mapping:
    """An endpoint error and the answer the client must get for it."""

    code: str
    http_status: int
    status: int
    answer: str
    attempts: int = 1
    message: str = f"something failed in account {ACCOUNT}"
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    passthrough: bool = False

    @property
    def id(self) -> str:
        return f"{self.code}-{self.answer}"


def _unavailable(code: str, http_status: int) -> Mapping:
    return Mapping(code, http_status, 503, "EndpointUnavailable", attempts=ATTEMPTS)


MAPPINGS = [
    # busy or not ready: retried, then 503 with Retry-After
    _unavailable("ThrottlingException", 400),
    _unavailable("Throttling", 400),
    _unavailable("TooManyRequestsException", 429),
    _unavailable("ModelNotReadyException", 429),
    _unavailable("ServiceUnavailable", 503),
    # any other throttling code botocore's standard mode knows: the same
    _unavailable("SlowDown", 400),
    _unavailable("RequestLimitExceeded", 400),
    # the service failed: retried, then 502
    Mapping("InternalFailure", 500, 502, "EndpointError", attempts=ATTEMPTS),
    Mapping("InternalDependencyException", 530, 502, "EndpointError", attempts=ATTEMPTS),
    # an unknown code with a transient status (500, 502, 503, 504), as botocore retries it
    Mapping("SomethingNew", 503, 502, "EndpointError", attempts=ATTEMPTS),
    Mapping("RequestTimeout", 400, 502, "EndpointError", attempts=ATTEMPTS),
    # the model failed: its status and message, never retried
    Mapping("ModelError", 424, 502, "ModelError",
            fields={"OriginalStatusCode": 500, "OriginalMessage": "out of memory",
                    "LogStreamArn": f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:x"}),
    # ... unless sagegate forwarded the client's own bytes and the model refused them
    Mapping("ModelError", 424, 400, "InvalidImage", passthrough=True,
            fields={"OriginalStatusCode": 400, "OriginalMessage": "cannot identify image",
                    "LogStreamArn": f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:x"}),
    # ValidationError: by what SageMaker's message says
    Mapping("ValidationError", 400, 502, "EndpointNotFound",
            message=f"Endpoint efficientnet-lite0 of account {ACCOUNT} not found."),
    Mapping("ValidationError", 400, 400, "InvalidVariant",
            message="Variant Nope not found for endpoint efficientnet-lite0.",
            headers={"X-Target-Variant": "Nope"}),
    Mapping("ValidationError", 400, 502, "EndpointError",
            message=f"Request body of account {ACCOUNT} exceeds 6291456 bytes."),
    # anything else: 502, not retried
    Mapping("AccessDeniedException", 403, 502, "EndpointError"),
    Mapping("UnrecognizedClientException", 403, 502, "EndpointError"),
]


def _modeled_errors() -> set[str]:
    client = boto3.client("sagemaker-runtime", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    operation = client.meta.service_model.operation_model("InvokeEndpoint")
    return {shape.error_code or shape.name for shape in operation.error_shapes}


def test_the_table_covers_every_mapped_code() -> None:
    covered = {mapping.code for mapping in MAPPINGS}
    declared = _modeled_errors()
    assert {"ModelError", "ValidationError", "InternalFailure"} <= declared  # the model loaded
    missing = (UNAVAILABLE_CODES | declared) - covered
    assert not missing, f"no expectation for {sorted(missing)}"


@pytest.mark.parametrize("mapping", MAPPINGS, ids=lambda mapping: mapping.id)
def test_the_table_retries_what_the_shared_classifier_retries(mapping: Mapping) -> None:
    retried = classify(mapping.code, mapping.http_status) is not None
    assert (mapping.attempts == ATTEMPTS) == retried


@pytest.mark.parametrize("mapping", MAPPINGS, ids=lambda mapping: mapping.id)
def test_every_endpoint_error_maps_to_its_answer(harness: Harness, mapping: Mapping) -> None:
    if mapping.passthrough:
        harness.use(make_settings(passthrough=True))
    for _ in range(mapping.attempts):
        harness.stubber.add_client_error(
            "invoke_endpoint", service_error_code=mapping.code,
            service_message=mapping.message, http_status_code=mapping.http_status,
            modeled_fields=mapping.fields or None)
    image = FORWARDED_JPEG if mapping.passthrough else PNG
    response = harness.post("/predict", image, "image/jpeg" if mapping.passthrough
                            else "image/png", **mapping.headers)

    body = response.json_body
    assert (response.status_code, body["Code"]) == (mapping.status, mapping.answer), body
    assert body["Message"] and body["request_id"] == response.headers["X-Request-Id"]
    assert ACCOUNT not in json.dumps(body)  # SageMaker's messages are never echoed
    # attempts: every one queued was used (the harness checks none is left), no more
    assert len(harness.sleeps) == mapping.attempts - 1
    if mapping.answer == "EndpointUnavailable":
        assert response.headers["Retry-After"] == "1"
    if mapping.answer in ("EndpointUnavailable", "EndpointError") and \
            mapping.code != "ValidationError":
        assert body["endpoint_error"] == mapping.code
    if mapping.answer == "ModelError":
        assert body["original_status_code"] == 500
        assert body["original_message"] == "out of memory"


def _throttle(harness: Harness, times: int, headers: dict[str, str] | None = None) -> None:
    for _ in range(times):
        harness.stubber.add_client_error(
            "invoke_endpoint", service_error_code="ThrottlingException",
            service_message="Rate exceeded", http_status_code=400,
            response_meta={"HTTPHeaders": headers or {}})


def test_the_endpoints_own_retry_after_reaches_the_client(harness: Harness) -> None:
    """SageMaker's wait is both the floor of sagegate's backoff and the client's advice."""
    _throttle(harness, ATTEMPTS, {"retry-after": "7"})
    response = harness.post("/predict", PNG, "image/png")
    assert (response.status_code, response.headers["Retry-After"]) == (503, "7")
    assert harness.sleeps == [7.0] * (ATTEMPTS - 1)


def test_an_empty_retry_quota_sends_the_client_away_for_longer(harness: Harness) -> None:
    """Every request of the process has been failing: no retry, and a longer Retry-After."""
    quota = harness.endpoint.quota
    while quota.acquire(throttled=True):
        pass
    _throttle(harness, 1)
    response = harness.post("/predict", PNG, "image/png")
    assert response.status_code == 503 and response.json_body["Code"] == "EndpointUnavailable"
    assert response.headers["Retry-After"] == "10"  # RetryPolicy.quota_wait
    assert harness.sleeps == []  # one attempt, the stubber's only answer
