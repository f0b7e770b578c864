"""Error answers never carry internal addresses, account details, credentials or tracebacks.

Each failure below carries such details in the exception botocore raises (or in the text of a
bug); the client must see only sagegate's code and message, and the logs never the API key.
"""
from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from tests import imagefactory
from tests.functional.conftest import Harness
from tests.functional.test_errors import FailingClient, use_client

JPEG = imagefactory.jpeg(320, 240)
INTERNAL_URL = "https://runtime.sagemaker.vpce-0a1b2c3d.internal.example:8443"
ACCOUNT = "123456789012"
ROLE_ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/sagegate-prod/sagegate-prod"
ENDPOINT_ARN = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:endpoint/efficientnet-lite0"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
API_KEY = "sgk-0123456789abcdefghijklmnopqrstuvwxyz"
LEAKS = ("runtime.sagemaker", "vpce-0a1b2c3d", "internal.example", "8443", ACCOUNT, "arn:aws",
         SECRET, API_KEY, "Traceback", "botocore", "File \"", "Errno")


def assert_clean(response: Any) -> dict[str, Any]:
    text = response.body.decode()
    for leak in LEAKS:
        assert leak not in text, leak
    for name, value in response.headers.items():
        assert not any(leak in f"{name}: {value}" for leak in LEAKS), (name, value)
    return json.loads(text)  # type: ignore[no-any-return]


@pytest.mark.parametrize("error,status", [
    (EndpointConnectionError(endpoint_url=INTERNAL_URL), 503),
    (ConnectTimeoutError(endpoint_url=INTERNAL_URL), 503),
    (ConnectionClosedError(endpoint_url=INTERNAL_URL), 503),
    (ReadTimeoutError(endpoint_url=INTERNAL_URL), 504),
])
def test_connection_failures_do_not_reveal_the_endpoint_address(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, error: Exception, status: int) -> None:
    assert INTERNAL_URL in str(error)  # botocore's own message names the address...
    use_client(harness, FailingClient(error))
    response = harness.post("/predict", JPEG, "image/jpeg", **{"x-api-key": API_KEY})
    assert response.status_code == status
    assert_clean(response)  # ...the client's answer does not


def test_access_denied_does_not_reveal_the_role_account_or_endpoint_arn(harness: Harness) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", service_error_code="AccessDeniedException", http_status_code=403,
        service_message=f"User: {ROLE_ARN} is not authorized to perform: "
                        f"sagemaker:InvokeEndpoint on resource: {ENDPOINT_ARN}")
    response = harness.post("/predict", JPEG, "image/jpeg")
    assert response.status_code == 502
    assert assert_clean(response)["Code"] == "EndpointError"


def test_a_bug_quoting_credentials_answers_a_plain_500(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    use_client(harness, FailingClient(RuntimeError(
        f"signing failed with secret {SECRET} for {INTERNAL_URL}")))
    response = harness.post("/predict", JPEG, "image/jpeg", **{"x-api-key": API_KEY})
    assert response.status_code == 500
    assert assert_clean(response)["Code"] == "InternalServerError"


def test_error_paths_never_log_the_api_key_or_the_image(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    encoded = base64.b64encode(JPEG).decode()
    use_client(harness, FailingClient(EndpointConnectionError(endpoint_url=INTERNAL_URL)))
    harness.post("/predict", JPEG, "image/jpeg", **{"x-api-key": API_KEY,
                                                    "Authorization": API_KEY})
    harness.post("/predict", json.dumps({"image": encoded, "k": 0}), **{"x-api-key": API_KEY})
    harness.post("/predict", json.dumps({"image": encoded[:-9] + "%%%"}),
                 **{"x-api-key": API_KEY})
    harness.post("/predict", b"{not json", "application/json", **{"x-api-key": API_KEY})
    harness.post("/predict", b"text", "text/plain", **{"x-api-key": API_KEY})
    captured = capsys.readouterr()
    logs = captured.out + captured.err + caplog.text
    assert logs.count('"status":') >= 5  # every request was logged...
    assert API_KEY not in logs  # ...without the key
    for fragment in (encoded[:48], encoded[len(encoded) // 2:][:48], repr(JPEG[:16])[2:-1]):
        assert fragment not in logs  # ...and without the image, in base64 or as bytes
