"""OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``: every answer of
the OpenAI routes that is not a completion, and the last ``data:`` line of a stream that
failed. sagegate's own errors (the endpoint's, the settings') are translated here, once."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from chalicelib.core.errors import ConfigurationError, SagegateError
from chalicelib.core.observability import logger

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


class OpenAIError(Exception):
    """A refusal or failure as OpenAI words it (``status`` its HTTP status)."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = INVALID_REQUEST,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind
        self.headers = dict(headers or {})

    def document(self) -> dict[str, Any]:
        """The error as OpenAI's clients read it."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def invalid(message: str, param: str | None, code: str) -> OpenAIError:
    """A 400 for the request's ``param``."""
    return OpenAIError(400, message, param=param, code=code)


def from_sagegate(error: SagegateError) -> OpenAIError:
    """One of sagegate's errors in OpenAI's shape: its status, its code in snake case, a 4xx
    as the request's fault and a 5xx as the server's; a misconfiguration logged, not told."""
    if isinstance(error, ConfigurationError):
        logger.error("configuration error: %s", error.message)
        return OpenAIError(500, "The service is misconfigured.", code="configuration_error",
                           kind=SERVER_ERROR)
    status = error.STATUS_CODE
    return OpenAIError(status, error.message, code=snake_case(error.CODE),
                       kind=INVALID_REQUEST if status < 500 else SERVER_ERROR,
                       headers=error.headers)


def snake_case(code: str) -> str:
    """``EndpointUnavailable`` -> ``endpoint_unavailable``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", code).lower()
