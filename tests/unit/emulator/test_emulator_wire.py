"""Error answers on the wire: a real boto3 client parses what the emulator renders.

No socket: a ``before-send`` hook hands botocore the rendered HTTP answer, so botocore's own
rest-json parser and error factory decide which exception class is raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator import errors


class RawBody:
    """The part of urllib3's response botocore reads."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, amt: int = 1024, decode_content: bool = False) -> Iterator[bytes]:
        yield self.body

    def read(self, amt: int | None = None) -> bytes:
        body, self.body = self.body, b""
        return body


def client_answering(error: errors.EmulatorError) -> Any:
    client = boto3.client(
        "sagemaker-runtime", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing", aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )  # fmt: skip
    status, headers, body = errors.render(error)
    headers = {**headers, "x-amzn-RequestId": "rid-1", "Content-Length": str(len(body))}

    def answer(request: Any, **kwargs: Any) -> AWSResponse:
        return AWSResponse(request.url, status, headers, RawBody(body))

    client.meta.events.register("before-send.sagemaker-runtime.InvokeEndpoint", answer)
    return client


def invoke(client: Any) -> None:
    client.invoke_endpoint(EndpointName="e", Body=b"x", ContentType="image/jpeg")


@pytest.mark.parametrize(
    "error",
    [
        errors.ValidationError("Endpoint e of account 123456789012 not found."),
        errors.ModelNotReadyException("loading"),
        errors.InternalFailure("failed"),
        errors.ServiceUnavailable("unavailable"),
        errors.InternalDependencyException("dependency"),
    ],
    ids=lambda error: error.CODE,
)
def test_boto3_raises_the_modeled_exception_class(error: errors.EmulatorError) -> None:
    client = client_answering(error)

    with pytest.raises(getattr(client.exceptions, error.CODE)) as raised:
        invoke(client)

    assert raised.value.response["Error"] == {"Code": error.CODE, "Message": error.message}
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == error.STATUS
    assert raised.value.response["ResponseMetadata"]["RequestId"] == "rid-1"


def test_boto3_reads_model_error_members() -> None:
    error = errors.model_error(415, "content type not supported", "e", "123456789012", "eu-west-1")
    client = client_answering(error)

    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client)

    response = raised.value.response
    assert response["OriginalStatusCode"] == 415
    assert response["OriginalMessage"] == "content type not supported"
    assert response["LogStreamArn"] == (
        "arn:aws:logs:eu-west-1:123456789012:log-group:/aws/sagemaker/Endpoints/e"
    )
    assert response["Error"]["Message"].startswith("Received client error (415) from primary")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424


def test_server_side_model_error_says_server_error() -> None:
    error = errors.model_error(503, "busy", "e", "1", "us-east-1")

    assert error.message.startswith("Received server error (503)")
    assert error.wire_body()["ErrorCode"] == "SERVER_ERROR_FROM_MODEL"


def test_throttling_is_a_client_error_with_its_code() -> None:
    client = client_answering(errors.ThrottlingException("slow down"))

    with pytest.raises(ClientError) as raised:
        invoke(client)

    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
