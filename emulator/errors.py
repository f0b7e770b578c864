"""SageMaker runtime errors as the real service puts them on the wire.

botocore's rest-json parser reads the error code from the ``x-amzn-ErrorType`` header
(anything after ``:`` is dropped) and the message from ``message``/``Message`` in the JSON
body, then parses the modeled members (``OriginalStatusCode`` ...) from the body by name.
That is all boto3 needs to raise ``client.exceptions.<Code>``.
"""

from __future__ import annotations

import json
from typing import ClassVar

MAX_BODY_BYTES = 6 * 1024 * 1024
"""InvokeEndpoint's ``BodyBlob`` maximum (6,291,456 bytes)."""

CONTAINER_NAME = "primary"
"""What SageMaker calls the only container of a single-container variant in messages."""


class EmulatorError(Exception):
    """Base of the errors the emulated runtime answers with.

    Attributes:
        CODE: the error code boto3 maps to ``client.exceptions.<CODE>``.
        STATUS: the HTTP status of the answer.
    """

    CODE: ClassVar[str] = "InternalFailure"
    STATUS: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def wire_body(self) -> dict[str, object]:
        """Returns the JSON document sent as the error body."""
        return {"message": self.message}


class ValidationError(EmulatorError):
    """Bad request: unknown endpoint or variant, invalid name, body too large."""

    CODE = "ValidationError"
    STATUS = 400


class ThrottlingException(EmulatorError):
    """Generic AWS throttle; not modeled for InvokeEndpoint, botocore retries it."""

    CODE = "ThrottlingException"
    STATUS = 400


class ModelNotReadyException(EmulatorError):
    """The model is still loading (multi-model or serverless endpoints)."""

    CODE = "ModelNotReadyException"
    STATUS = 429


class InternalFailure(EmulatorError):
    """The service failed."""

    CODE = "InternalFailure"
    STATUS = 500


class ServiceUnavailable(EmulatorError):
    """The service is unavailable: retry with backoff."""

    CODE = "ServiceUnavailable"
    STATUS = 503


class InternalDependencyException(EmulatorError):
    """An internal dependency of the service failed."""

    CODE = "InternalDependencyException"
    STATUS = 530


class UnknownOperationException(EmulatorError):
    """No operation at this method and path (what AWS front doors answer)."""

    CODE = "UnknownOperationException"
    STATUS = 404


class ModelError(EmulatorError):
    """The model container answered with a non-2xx status."""

    CODE = "ModelError"
    STATUS = 424

    def __init__(
        self, message: str, original_status: int, original_message: str, log_stream_arn: str
    ) -> None:
        super().__init__(message)
        self.original_status = original_status
        self.original_message = original_message
        self.log_stream_arn = log_stream_arn

    def wire_body(self) -> dict[str, object]:
        """Returns the JSON document sent as the error body, with the modeled members."""
        kind = "CLIENT" if self.original_status < 500 else "SERVER"
        return {
            "ErrorCode": f"{kind}_ERROR_FROM_MODEL",
            "LogStreamArn": self.log_stream_arn,
            "Message": self.message,
            "OriginalMessage": self.original_message,
            "OriginalStatusCode": self.original_status,
        }


ERRORS: dict[str, type[EmulatorError]] = {
    cls.CODE: cls
    for cls in (
        ValidationError,
        ThrottlingException,
        ModelNotReadyException,
        InternalFailure,
        ServiceUnavailable,
        InternalDependencyException,
    )
}
"""Errors without extra members, by code (ModelError is built by :func:`model_error`)."""


def model_error(
    original_status: int, original_message: str, endpoint: str, account: str, region: str
) -> ModelError:
    """Builds the ModelError SageMaker answers when the container answered non-2xx.

    Args:
        original_status: the container's HTTP status.
        original_message: the container's response body, as text.
        endpoint: the endpoint name (used in the log group name).
        account: the AWS account id shown in the message.
        region: the AWS region shown in the log stream ARN.

    Returns:
        The error, with a message shaped like the real service's.
    """
    kind = "client" if 400 <= original_status < 500 else "server"
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    message = (
        f"Received {kind} error ({original_status}) from {CONTAINER_NAME} with message "
        f'"{original_message}". See https://{region}.console.aws.amazon.com/cloudwatch/home'
        f"?region={region}#logEventViewer:group={group} in account {account} "
        "for more information."
    )
    arn = f"arn:aws:logs:{region}:{account}:log-group:{group}"
    return ModelError(message, original_status, original_message, arn)


INVOCATION_TIMED_OUT = (
    f"Your invocation timed out while waiting for a response from container {CONTAINER_NAME}. "
    "Review the latency metrics for each container in Amazon CloudWatch, resolve the issue, "
    "and try again."
)
"""SageMaker's message when a container has not answered InvokeEndpoint within 60 s."""


def invocation_timeout(endpoint: str, account: str, region: str) -> ModelError:
    """The ModelError SageMaker answers when the container did not answer in time (HTTP 424,
    ``Received server error (0) from primary with message "Your invocation timed out ..."``)."""
    return model_error(0, INVOCATION_TIMED_OUT, endpoint, account, region)


def violation(field: str, value: str | None, constraint: str) -> str:
    """Describes one request member that fails a constraint, as AWS front doors do.

    Args:
        field: the request member, in lower camel case (``endpointName``).
        value: the offending value, or None for sensitive members (the body).
        constraint: what the member must satisfy.

    Returns:
        ``Value '...' at 'field' failed to satisfy constraint: ...``.
    """
    shown = "" if value is None else f" '{value}'"
    return f"Value{shown} at '{field}' failed to satisfy constraint: {constraint}"


def validation_error(violations: list[str]) -> ValidationError:
    """Builds the ValidationError for one or more violations.

    Args:
        violations: results of :func:`violation`.

    Returns:
        ``N validation error(s) detected: v1; v2``.
    """
    plural = "error" if len(violations) == 1 else "errors"
    summary = f"{len(violations)} validation {plural} detected: "
    return ValidationError(summary + "; ".join(violations))


def render(error: EmulatorError) -> tuple[int, dict[str, str], bytes]:
    """Renders an error as an HTTP answer.

    Args:
        error: the error to send.

    Returns:
        ``(status, headers, body)``; the headers include ``x-amzn-ErrorType``.
    """
    body = json.dumps(error.wire_body()).encode()
    headers = {"Content-Type": "application/json", "x-amzn-ErrorType": error.CODE}
    return error.STATUS, headers, body
