"""Which request is which: the request id of record and the client's own correlation id."""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, MutableMapping
from typing import Any

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}\Z")
_KEY = "sagegate_request_id"  # where the id is kept in the request's context, once chosen


def request_id(context: MutableMapping[str, Any]) -> str:
    """The request id of record: API Gateway's (``chalice local`` has none: a new uuid4),
    chosen once per request and kept in its ``context``.

    It is what logs, the capture's ``inferenceId`` and the endpoint's ``InferenceId`` carry,
    so it is never the client's: a client's id goes along as :func:`correlation_id`.
    """
    if _KEY not in context:
        context[_KEY] = context.get("requestId") or str(uuid.uuid4())
    return str(context[_KEY])


def correlation_id(headers: Mapping[str, str]) -> str | None:
    """The client's own id for the request (``X-Correlation-Id``, or ``X-Request-Id`` as
    clients commonly send it), when it is a well-formed one; logged and echoed, never the
    request id of record."""
    for name in ("x-correlation-id", "x-request-id"):
        candidate = headers.get(name, "")
        if _REQUEST_ID_RE.match(candidate):
            return str(candidate)
    return None
