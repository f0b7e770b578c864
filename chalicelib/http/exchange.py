"""The request each thread is serving, its log line, and the answers the routes give.

Chalice keeps the request on the app object, shared by every thread. Lambda serves one request
per container, but ``chalice local`` is threaded: two concurrent requests would read each
other's bodies. ``app.py``'s middleware pins each thread's own request in an
:class:`Exchanges` instead, and the routes read it from there. chalicelib imports no web
framework: Chalice's request is read through :class:`ServedRequest`'s few attributes, and an
answer is an :class:`HttpAnswer` that ``app.py`` renders as Chalice's ``Response``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from chalicelib.core.errors import ConfigurationError, InvalidParameterError, SagegateError
from chalicelib.core.observability import RequestLog, logger
from chalicelib.reading.bodies import echo
from chalicelib.reading.options import HttpRequest


class ServedRequest(Protocol):
    """What sagegate reads of a request (Chalice's ``Request`` has these)."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def query_params(self) -> Mapping[str, str] | None: ...

    @property
    def context(self) -> MutableMapping[str, Any]: ...

    @property
    def raw_body(self) -> str | bytes: ...

    def to_original_event(self) -> Mapping[str, Any]: ...


class Answered(Protocol):
    """What the middleware tags of an answer (Chalice's ``Response`` has these)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> MutableMapping[str, Any]: ...

    @property
    def body(self) -> Any: ...


ALLOW_HEADERS = ("X-Request-Id", "X-Correlation-Id", "X-Target-Variant", "X-Target-Model",
                 "X-Target-Inference-Component", "X-Custom-Attributes", "Cache-Control")
"""The request headers a browser may send across origins (where CORS is on)."""
EXPOSE_HEADERS = ("X-Request-Id", "X-Correlation-Id", "Server-Timing", "Retry-After",
                  "X-Custom-Attributes", "x-ratelimit-limit-tokens",
                  "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")
"""The answer headers of every route a browser's script may read across origins."""

CACHE_HEADER = "X-Cache"
"""``hit``, ``miss`` or ``bypass``: whether the prediction cache answered (the model routes and
OpenAI's)."""
ARM_HEADER = "X-Sagegate-Arm"
"""The experiment arm that served the request (an ``experiment`` model's answers)."""

_NO_HEADERS: Mapping[str, str | list[str]] = MappingProxyType({})


class HttpAnswer(NamedTuple):
    """An answer as a route gives it (``body``: a JSON document, text or bytes; the middleware
    adds the request's ids to ``headers``); ``app.py`` renders it as Chalice's ``Response``."""

    body: Any
    headers: Mapping[str, str | list[str]] = _NO_HEADERS
    status_code: int = 200


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


def error_answer(error: SagegateError, request_id: str) -> HttpAnswer:
    """Any sagegate error as ``{"Code", "Message", "request_id", ...details}``; a
    misconfiguration is logged and says only that (its message names the stage's variables)."""
    if isinstance(error, ConfigurationError):
        logger.error("configuration error: %s", error.message)
        body: dict[str, Any] = {"Code": error.CODE, "Message": "The service is misconfigured."}
    else:
        body = {"Code": error.CODE, "Message": error.message, **error.details}
    body["request_id"] = request_id
    return HttpAnswer(body, dict(error.headers), error.STATUS_CODE)


@dataclasses.dataclass(frozen=True)
class Exchange:
    """The request a thread is serving, with its log line and its request id of record
    (:func:`request_id`), all three pinned together."""

    request: ServedRequest
    log: RequestLog
    request_id: str

    def http_request(self) -> HttpRequest:
        """The request as :mod:`chalicelib.reading` reads it (its size noted in the log).

        Raises:
            InvalidParameterError: a query parameter given more than once.
        """
        request = self.request
        raw = request.raw_body or b""
        self.log.body_bytes = len(raw)
        return HttpRequest(body=raw if isinstance(raw, bytes) else raw.encode("utf-8"),
                           content_type=request.headers.get("content-type"),
                           headers=request.headers, query=single_query(request))

    def caller(self) -> str | None:
        """The caller's identity, when auth identifies callers (a job is readable by its own)."""
        return _caller(self.request)


class Exchanges:
    """Each thread's request and its log line, pinned while the thread serves it; ``fallback``
    gives the request when none is pinned (a view called outside the middleware, as a test may)."""

    def __init__(self, fallback: Callable[[], ServedRequest | None]) -> None:
        self._fallback = fallback
        self._local = threading.local()

    @contextlib.contextmanager
    def serving(self, request: ServedRequest) -> Iterator[RequestLog]:
        """Pin ``request`` (and its new log line, yielded) to this thread while it is served."""
        self._local.request = request
        try:
            identity = request_id(request.context)
            log = RequestLog(identity, request.method,
                             request.context.get("resourcePath") or request.path,
                             correlation_id=correlation_id(request.headers))
            self._local.exchange = Exchange(request, log, identity)
            yield log
        finally:
            self._local.request = self._local.exchange = None

    def current(self) -> Exchange:
        """The thread's :class:`Exchange`."""
        exchange: Exchange | None = getattr(self._local, "exchange", None)
        assert exchange is not None, "only called while serving a request"
        return exchange

    def request(self) -> ServedRequest:
        """The request this thread is serving (pinned, else the fallback's)."""
        request: ServedRequest | None = getattr(self._local, "request", None) or self._fallback()
        assert request is not None, "only called while serving a request"
        return request

    def log(self) -> RequestLog:
        """The thread's request's log line."""
        return self.current().log

    def request_id(self) -> str:
        """The request id of record (:func:`request_id`)."""
        return request_id(self.request().context)

    def http_request(self) -> HttpRequest:
        """See :meth:`Exchange.http_request`."""
        return self.current().http_request()

    def caller(self) -> str | None:
        """See :meth:`Exchange.caller`."""
        return _caller(self.request())


def _caller(request: ServedRequest) -> str | None:
    # deferred: the request path's cold start loads no part of jobs (bench/imports.py)
    from chalicelib.jobs.records import owner_of

    return owner_of(request.context)


def single_query(request: ServedRequest) -> Mapping[str, str]:
    """The query string's parameters, each given once: the one place a route's parameters are read.

    API Gateway (and ``chalice local``) hands over every value of a repeated parameter
    (``multiValueQueryStringParameters``); Chalice's ``query_params`` answers the last, so
    ``?k=1&k=2`` would be read as ``k=2``, the client's other value dropped without a word.

    Raises:
        InvalidParameterError: a parameter given more than once (the first such name in
            alphabetical order: the event's object of values need not keep the request's).
    """
    params = request.query_params
    if not params:
        return {}
    every = request.to_original_event().get("multiValueQueryStringParameters") or {}
    repeated = sorted(name for name, values in every.items()
                      if isinstance(values, list) and len(values) > 1)
    if repeated:
        count = len(every[repeated[0]])
        times = "twice" if count == 2 else f"{count} times"
        raise InvalidParameterError(
            f"Query parameter {echo(repeated[0])} given {times}; send each parameter once.")
    return params


def answered(response: Answered, log: RequestLog, started: float) -> None:
    """Tag an answer in place, Chalice's own errors too, with the request's ids (an error's JSON
    body too) and write the request's log line and metrics; ``started`` is ``perf_counter()``'s."""
    response.headers["X-Request-Id"] = log.request_id
    if log.correlation_id:
        response.headers["X-Correlation-Id"] = log.correlation_id
    if response.status_code >= 400 and isinstance(response.body, dict):
        response.body.setdefault("request_id", log.request_id)
    log.finish(response.status_code, response.body, (time.perf_counter() - started) * 1000.0)
