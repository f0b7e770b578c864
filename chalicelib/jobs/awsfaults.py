"""The jobs room's one mapping of AWS failures: what S3 or DynamoDB (or the connection to
them) did that a retry may cure becomes one 503, ``JobsUnavailable`` with a ``Retry-After``.

What may be retried is decided as everywhere else (:func:`chalicelib.core.retries.classify`,
botocore's standard mode): a connection refused, reset or timed out, an answer cut short,
throttling, a transient code or a 5xx. Everything else keeps its meaning: S3's "no such key"
and a precondition failed, DynamoDB's refused conditional write; an access denied or a missing
table is a misconfiguration, not a reason to come back later.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import botocore.exceptions
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError

from chalicelib.core.aws import error_code
from chalicelib.core.errors import JobsUnavailableError
from chalicelib.core.retries import MAX_RETRY_AFTER_S, classify, upstream_hint

logger = logging.getLogger("sagegate.jobs")

TRANSPORT_ERRORS = (botocore.exceptions.ConnectionError, HTTPClientError,
                    IncompleteReadError)
"""The connection failed or the answer was cut short (``ReadTimeoutError`` is an
``HTTPClientError``)."""
RETRY_AFTER_SECONDS = 2
"""The ``Retry-After`` when the failure says nothing of its own: a connection refused or a 5xx
is usually over within seconds (a regional blip; locally, moto's server restarted)."""
THROTTLED_RETRY_AFTER_SECONDS = 5
"""... and when it was throttling: coming back at once only adds to the load."""

P = ParamSpec("P")
R = TypeVar("R")


def unavailable(error: BaseException) -> JobsUnavailableError | None:
    """The 503 an AWS failure is, or None when a retry would not cure it."""
    if isinstance(error, TRANSPORT_ERRORS):
        return _unavailable(type(error).__name__, RETRY_AFTER_SECONDS)
    if not isinstance(error, ClientError):
        return None
    meta = error.response.get("ResponseMetadata", {})
    code = error_code(error)
    throttled = classify(code, meta.get("HTTPStatusCode"))
    if throttled is None:
        return None
    wait = upstream_hint(meta.get("HTTPHeaders") or {})
    floor = THROTTLED_RETRY_AFTER_SECONDS if throttled else RETRY_AFTER_SECONDS
    return _unavailable(str(code or meta.get("HTTPStatusCode")), max(floor, wait or 0.0))


def _unavailable(what: str, wait: float) -> JobsUnavailableError:
    seconds = int(min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait))))
    return JobsUnavailableError(
        f"The jobs' storage did not answer ({what[:64]}): nothing was changed; send the same "
        f"request again in {seconds} s.", retry_after=seconds, details={"aws_error": what[:64]})


@contextlib.contextmanager
def aws_faults(operation: str) -> Iterator[None]:
    """Raise a block's AWS failures a retry may cure as ``JobsUnavailableError`` (logged
    with what AWS said, as ``operation``); every other exception passes unchanged."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        failure = unavailable(error)
        if failure is None:
            raise
        # the client sees the code only; the endpoint URL and AWS's message go to the log
        logger.warning("jobs: %s failed on AWS (%s: %s); answered %d", operation,
                       type(error).__name__, error, failure.STATUS_CODE)
        raise failure from None


def translated(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """:func:`aws_faults` as a decorator."""
    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with aws_faults(operation):
                return function(*args, **kwargs)
        return wrapper
    return decorate


def retriable(error: BaseException) -> bool:
    return unavailable(error) is not None


