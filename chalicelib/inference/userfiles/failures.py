"""Translating what users' code raises into sagegate's errors, and bounding what it is given
and what it builds, so a failure is logged once under the answer's request id."""
from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from chalicelib.core.errors import (
    HandlerError,
    InvalidInputError,
    InvalidJSONError,
    PayloadTooLargeError,
    SagegateError,
    SignatureMismatchError,
)
from chalicelib.core.media import MediaType, bare
from chalicelib.inference import tensors

logger = logging.getLogger("sagegate.handlers")

HANDLER_FAILED = ("The model's handler failed; the service's log has the details under this "
                  "answer's request_id.")
MAX_MESSAGE = 512
"""The longest message taken from a user's exception (InvalidInput, or an exposed failure)."""
MAX_JSON_DEPTH = 512
"""The deepest JSON nesting a handler model's body may have: below every common parser's own
limit (orjson's 1024, a pure-Python parser's 1000 frames), so a handler parsing the body
itself never meets a RecursionError for it."""
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
_REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("sagegate_handler_request",
                                                                  default="")


@contextlib.contextmanager
def request_scope(request_id: str) -> Iterator[None]:
    """Name the request the user's code runs for: a failure's log line carries its id, the
    one the client's answer shows (Lambda's own request id is another)."""
    token = _REQUEST_ID.set(request_id)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)


def run_user_code(where: str, name: str, function: Callable[..., Any], *args: Any,
                  refusal: Callable[[], bool] = lambda: False, expose: bool = False) -> Any:
    """``function(*args)``, its failures translated (see the package docstring); ``refusal``:
    an error raised now is the client's (the input side)."""
    try:
        return function(*args)
    except SagegateError:
        raise
    except (ValueError, TypeError) as error:
        if refusal():
            message = _text(error) or f"The model's {name} refused the input."
            logger.info("%s: %s refused the request: %s", where, name, message)
            raise InvalidInputError(message) from None
        raise _failed(where, name, error, expose) from None
    except (RecursionError, MemoryError) as error:
        if refusal():  # the request's size or depth: the client's
            logger.warning("%s: %s raised %s (request_id %s)", where, name,
                           type(error).__name__, _REQUEST_ID.get() or "unknown")
            raise _too_complex(name, error) from None
        raise _failed(where, name, error, expose) from None
    except (Exception, SystemExit) as error:
        raise _failed(where, name, error, expose) from None


def _text(error: BaseException) -> str:
    """An exception's message, bounded (a broken ``__str__`` gives none)."""
    try:
        return str(error).strip()[:MAX_MESSAGE]
    except Exception:
        return ""


def _failed(where: str, name: str, error: BaseException, expose: bool) -> HandlerError:
    """The HandlerError for an exception the user's code raised, logged with its traceback
    (call it in the ``except`` block)."""
    request_id = _REQUEST_ID.get()
    logger.exception("%s: %s raised (request_id %s)%s", where, name, request_id or "unknown",
                     _advice(error), extra={"request_id": request_id})
    details: dict[str, object] = {"function": name}
    if expose:  # the model's owner chose to show it: type and message only, never a traceback
        details["exception"] = {"type": type(error).__name__, "message": _text(error)}
    return HandlerError(HANDLER_FAILED, details=details)


def _advice(error: BaseException) -> str:
    """For the log: the container's ``data`` is a stream, not the ``bytes`` a file expected."""
    if isinstance(error, AttributeError) and "'_io.BytesIO' object" in _text(error):
        return (" (data is a stream, as in every release of the SageMaker TF Serving "
                "container: read the body with data.read())")
    return ""


def _too_complex(name: str, error: BaseException) -> SagegateError:
    if isinstance(error, MemoryError):
        return PayloadTooLargeError(f"The model's {name} ran out of memory reading the "
                                    "request: send a smaller one.")
    return InvalidInputError(f"The model's {name} could not read the request: it is nested "
                             "too deeply.")


def bound_json_depth(body: bytes) -> None:
    """Refuse a JSON (or JSON lines) body nesting deeper than :data:`MAX_JSON_DEPTH`, without
    parsing it: strings are cut out, the brackets left are counted (no recursion, no Python
    loop over the body).

    Raises:
        InvalidJSONError: it nests deeper (the image route's error for a body too deep).
    """
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    if len(brackets) <= MAX_JSON_DEPTH:
        return
    codes = np.frombuffer(brackets, dtype=np.uint8)
    # an opening bracket goes one level down, a closing one up: the deepest point is the peak
    opening = (codes == ord("[")) | (codes == ord("{"))
    steps = opening.astype(np.int32) * 2 - 1
    if int(np.cumsum(steps, dtype=np.int32).max()) > MAX_JSON_DEPTH:
        raise InvalidJSONError(f"The request body is not valid JSON for this model: it nests "
                               f"deeper than {MAX_JSON_DEPTH} levels.")


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(code for code in range(256) if code not in b"[]{}")


def check_batch(body: bytes, content_type: str, name: str) -> None:
    """Refuse (``SignatureMismatchError``) a TF Serving REST body the user's code built with more
    than :data:`~chalicelib.inference.tensors.MAX_INSTANCES` instances (the endpoint's bound)."""
    if bare(content_type) != MediaType.JSON or body.lstrip()[:1] != b"{":
        return
    try:
        document = json.loads(body)
    except Exception:  # not JSON (or too deep to read): the endpoint's to refuse
        return
    count = _batch_size(document)
    if count > tensors.MAX_INSTANCES:
        raise SignatureMismatchError(
            f"The model's {name} made a request of {count} instances; at most "
            f"{tensors.MAX_INSTANCES} per request: send fewer records.")


def _batch_size(document: Any) -> int:
    """How many instances a TF Serving REST body holds (``instances`` rows, or ``inputs``
    columns' first axis); 0 when it is not one."""
    if not isinstance(document, dict):
        return 0
    for key in ("instances", "inputs"):
        value = document.get(key)
        if isinstance(value, list):
            return len(value)
        if isinstance(value, dict):
            return max((len(column) for column in value.values()
                        if isinstance(column, list)), default=0)
    return 0


def shape_of(value: Any) -> str:
    """What a handler returned, for the log: types, never contents."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(item).__name__ for item in value)})"
    return f"a {type(value).__name__}"


def wrong_return(where: str, name: str, value: Any, required: str) -> HandlerError:
    """Log what a user's function returned instead of ``required``; the client's error."""
    logger.error("%s: %s returned %s; it must return %s", where, name, shape_of(value), required)
    return HandlerError(HANDLER_FAILED, details={"function": name})
