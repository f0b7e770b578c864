"""OpenAI's routes (``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET
/v1/models``, and ``GET /v1/usage``: the caller's token budgets): the request handed to
:mod:`chalicelib.llm`, every failure answered in OpenAI's error shape (never sagegate's
``{"Code", "Message"}`` here), and a stream delivered two ways.

Where the stage has token budgets (:mod:`chalicelib.llm.budgets`), :func:`answer` reserves the
request's tokens before any is delivered (a stream's while the model's prefill runs), settles
them with what the endpoint spent (a stream's when its body is closed, whichever server streams
it), and puts the tightest window's ``x-ratelimit-*-tokens`` headers on every answer.

Chalice cannot stream: under it (Lambda, ``chalice local``) a ``stream: true`` request is
answered whole, the same ``text/event-stream`` body of ``data:`` lines, once the model has
finished (:func:`serve`). A server that can stream calls :func:`serve_streaming` with the
request and writes each chunk as it is made, with the same services and the same log line,
and closes the body after the response's end (:class:`LoggedBody`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from chalicelib.cache.prediction import BYPASS, HIT, request_cache_control
from chalicelib.core.errors import SagegateError
from chalicelib.core.observability import BUDGET_REJECTED, RequestLog, logger
from chalicelib.experiments import assign
from chalicelib.http.exchange import (
    ARM_HEADER,
    CACHE_HEADER,
    Exchange,
    Exchanges,
    HttpAnswer,
    ServedRequest,
)
from chalicelib.llm.budgets import (
    LIMIT_HEADER,
    BudgetExceeded,
    Reservation,
    TokenBudgets,
    reservation,
    tightest,
)
from chalicelib.llm.completions import EventStream, LlmService, Plan
from chalicelib.llm.errors import SERVER_ERROR, OpenAIError, from_sagegate
from chalicelib.llm.requests import CompletionRequest, Operation
from chalicelib.llm.streams import DONE, sse
from chalicelib.registry.experiments import Shadow
from chalicelib.registry.specs import ModelSpec

OPERATIONS = {"/v1/chat/completions": Operation.CHAT, "/v1/completions": Operation.TEXT}
MODELS, USAGE = "/v1/models", "/v1/usage"
RESERVED = "reserved"  # the log line's ``budget`` (else BUDGET_REJECTED)
JSON_HEADERS: Mapping[str, str] = {"Content-Type": "application/json"}
SSE_HEADERS: Mapping[str, str] = {"Content-Type": "text/event-stream; charset=utf-8",
                                  "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

Llm = Callable[[], LlmService]
"""The service, built on first use (a misconfiguration raises there, answered as OpenAI's)."""


@dataclasses.dataclass(frozen=True)
class OpenAIAnswer:
    """An OpenAI route's answer: a whole body, or a stream's events as they are made."""

    status: int
    headers: Mapping[str, str]
    body: bytes | EventStream


def answer(llm: Llm, exchange: Exchange) -> OpenAIAnswer:
    """The answer to the exchange's completion request (its route says which kind), its
    tokens reserved and settled in the caller's budgets (a stream's reservation made while
    the model's prefill runs, waited for before the answer: :class:`_Charge`)."""
    log = exchange.log
    log.api_key_id = api_key_id(exchange.request)
    charge = _Charge(log)
    try:
        service = llm()
        charge.budgets = service.budgets
        request = service.read(exchange.http_request().body, OPERATIONS[log.route])
        log.model = request.model.name
        charge.reserve(request)
        found = _served(service, request, exchange, charge)
    except OpenAIError as error:
        found = _error(charge.refusal_or(error), log)
    except SagegateError as error:
        found = _error(charge.refusal_or(from_sagegate(error)), log)
    except BaseException:  # a defect of ours: its 500 is the view's, the tokens given back
        charge.abandon()
        raise
    return charge.applied(found)


def api_key_id(request: ServedRequest) -> str | None:
    """The caller's API key's id, as API Gateway gives it (``requestContext.identity
    .apiKeyId``, set where the route requires a key; never the key itself)."""
    identity = request.context.get("identity")
    found = identity.get("apiKeyId") if isinstance(identity, Mapping) else None
    return str(found) if found else None


def _served(service: LlmService, request: CompletionRequest, exchange: Exchange,
            charge: _Charge) -> OpenAIAnswer:
    """The request routed (its arm and shadows, decided once, as a model route's), read from
    the cache when it may be, answered whole or as a stream; the budget's reservation granted
    (:meth:`_Charge.granted`, raising its refusal) before any answer is given or shadow copy
    made, a stream's once it is opened (a refused one is cancelled:
    :meth:`EventStream.cancel`)."""
    log, model = exchange.log, request.model
    routing = _routing(model, exchange)
    if routing is not None:
        log.arm = routing.arm.name
        request = dataclasses.replace(request, model=assign.on_target(model, routing.arm))
    http = exchange.request
    control = request_cache_control(
        http.headers, http.to_original_event().get("multiValueHeaders"))
    plan = Plan(log.arm, service.cache_use(request, control, log.arm))
    if request.stream:
        stream = service.stream(request, exchange.request_id, log, plan, charge.begin)
        try:
            charge.granted()
        except BaseException:
            stream.cancel()
            raise
        found = OpenAIAnswer(200, SSE_HEADERS, stream)
    else:
        charge.granted()
        found = OpenAIAnswer(200, JSON_HEADERS, _json(
            service.complete(request, exchange.request_id, log, plan)))
    if routing is not None and routing.shadows:
        log.shadows = _shadow_copies(service, routing.shadows, model, request, exchange)
    routed = {CACHE_HEADER: log.cache or BYPASS}
    if log.arm is not None:
        routed[ARM_HEADER] = log.arm
    return dataclasses.replace(found, headers={**found.headers, **routed})


class _Charge:
    """One request's token budget through its answer: reserved once its model is known,
    settled with what the endpoint spent (0 for a cache hit or a failure; a stream's when it
    ends), the tightest window's headers on the answer (a refusal's, the refusing window's).

    A whole answer's reservation is made before its call (the call is the whole
    generation: a request that may be refused must not run it), and so is a stream's whose key
    was short of budget lately (:meth:`TokenBudgets.crowded`). Another stream's is begun on the
    budgets' threads (:meth:`begin`) once the endpoint has answered the call, so it runs while
    the model's prefill does (begun sooner, its table calls' own CPU would delay the call's),
    and is waited for (:meth:`granted`) before the answer is given: no token reaches a client
    its budget has not granted. A refusal's log line is as it stood before the stream was
    opened (nothing of the opened stream: it was not served) with the refusal.
    """

    def __init__(self, log: RequestLog) -> None:
        self.log = log
        self.budgets: TokenBudgets | None = None
        self.model: ModelSpec | None = None
        self.held: Reservation | None = None
        self._begin: Callable[[], Callable[[], Reservation]] | None = None
        self._pending: Callable[[], Reservation] | None = None
        self._before: RequestLog | None = None

    def reserve(self, request: CompletionRequest) -> None:
        """Make the reservation (a whole answer's), or ready it for :meth:`begin` (a stream's).

        Raises:
            BudgetExceeded: (a whole answer's) a window has no room for the request.
        """
        self.model = request.model
        budgets = self.budgets
        if budgets is None:
            return
        ask = (self.log.api_key_id, request.model, reservation(request))
        if request.stream and not budgets.crowded(self.log.api_key_id):
            self._before = dataclasses.replace(self.log, stages_ms=dict(self.log.stages_ms))
            self._begin = functools.partial(budgets.reserving, *ask)
        else:
            self._pending = functools.partial(budgets.reserve, *ask)
            self.granted()

    def begin(self) -> None:
        """A stream's reservation begun, to run while the caller goes on (once)."""
        begin, self._begin = self._begin, None
        if begin is not None:
            self._pending = begin()

    def granted(self) -> None:
        """The reservation, begun if it was not (a stream from the cache: no call), waited for
        (once; nothing to wait for: none, or already made).

        Raises:
            BudgetExceeded: a window has no room for the request.
        """
        self.begin()
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            self.held = pending()
        except BudgetExceeded as refused:
            if self._before is not None:  # nothing of the opened stream's
                for field in dataclasses.fields(self.log):
                    setattr(self.log, field.name, getattr(self._before, field.name))
            self.log.budget, self.log.budget_errors = BUDGET_REJECTED, refused.errors or None
            raise
        self.log.budget, self.log.budget_errors = RESERVED, self.held.errors or None

    def refusal_or(self, error: OpenAIError) -> OpenAIError:
        """The answer to a failure before the answer began: the budget's refusal when a
        reservation begun is refused (as though it had been made first), else ``error`` (the
        reservation, granted, given back by :meth:`applied`). A stream's reservation not
        begun (its endpoint's call never answered) is not made."""
        self._begin = None
        try:
            self.granted()
        except BudgetExceeded as refused:
            return refused
        return error

    def abandon(self) -> None:
        """A defect of ours ended the request: the reservation, once made, given back."""
        self._begin = None
        try:
            self.granted()
        except BudgetExceeded:
            pass
        finally:
            self.settle()

    def applied(self, found: OpenAIAnswer) -> OpenAIAnswer:
        """``found`` with the budget's headers; a stream settled when it ends, else now."""
        held = self.held
        if held is None:
            if LIMIT_HEADER in found.headers:  # a refusal's own
                return found
            return _with(found, _standing(self.budgets, self.log, self.model))
        if isinstance(found.body, EventStream):
            found.body.then(self.settle)
        else:
            self.settle()
        return _with(found, held.headers())

    def settle(self) -> None:
        """The reservation moved to what the endpoint spent, as the log line counts it."""
        held, log = self.held, self.log
        if held is None:
            return
        spent = 0 if log.cache == HIT else (log.prompt_tokens or 0) + (log.completion_tokens
                                                                        or 0)
        held.settle(spent)
        log.budget_errors, log.budget_overrun = held.errors or None, held.overrun or None


def _with(found: OpenAIAnswer, headers: Mapping[str, str]) -> OpenAIAnswer:
    return dataclasses.replace(found, headers={**found.headers, **headers}) if headers \
        else found


def _standing(budgets: TokenBudgets | None, log: RequestLog,
              model: ModelSpec | None) -> dict[str, str]:
    """The headers of the caller's tightest window as it stands (an answer that reserved
    nothing: a refused body, ``GET /v1/models``)."""
    if budgets is None:
        return {}
    standings, errors, now = budgets.standings(log.api_key_id, model)
    log.budget_errors = errors or None
    found = tightest(standings)
    return {} if found is None else found.headers(now)


def _routing(model: ModelSpec, exchange: Exchange) -> assign.Routing | None:
    """The request's arm and shadows (None: no experiment), by the experiment's sticky key."""
    experiment = model.experiment
    if experiment is None:
        return None
    return assign.decide(experiment, model.name, exchange.request_id, caller=exchange.caller,
                         headers=exchange.request.headers, header=experiment.sticky_header)


def _shadow_copies(service: LlmService, shadows: tuple[Shadow, ...], model: ModelSpec,
                   request: CompletionRequest, exchange: Exchange) -> dict[str, int] | None:
    """Each sampled shadow's copy handed to the pool, run after the answer; how many were
    queued, dropped or skipped."""
    pool = service.pool()
    if pool is None:
        return None
    log, handed = exchange.log, dict[str, int]()
    dimensions = {name: value for name, value in
                  (("route", log.route), ("model", log.model), ("arm", log.arm)) if value}
    for shadow in shadows:
        copy = dataclasses.replace(request, model=assign.on_target(model, shadow))
        outcome = pool.submit(shadow.route(), functools.partial(
            service.shadow, copy, exchange.request_id, shadow.name, shadow.timeout_seconds),
            timeout_seconds=shadow.timeout_seconds, size=copy.prompt_bytes,
            dimensions=dimensions)
        handed[outcome] = handed.get(outcome, 0) + 1
    return handed or None


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _error(error: OpenAIError, log: RequestLog) -> OpenAIAnswer:
    log.error_code = error.code or error.kind
    return OpenAIAnswer(error.status, {**JSON_HEADERS, **error.headers}, _json(error.document()))


def serve(llm: Llm, exchanges: Exchanges) -> HttpAnswer:
    """The thread's request of an OpenAI route, answered whole (a stream's events buffered)."""
    exchange = exchanges.current()
    if exchange.log.route == USAGE:
        return usage(llm, exchange)
    if exchange.log.route not in OPERATIONS:
        return list_models(llm, exchange)
    found = answer(llm, exchange)
    if isinstance(found.body, bytes):
        return HttpAnswer(found.body.decode("utf-8"), found.headers, found.status)
    try:
        body = b"".join(found.body.events())
    finally:  # the exchange's end (capture, the cache), once the whole body is made
        found.body.close()
    return HttpAnswer(body.decode("utf-8"), found.headers, found.status)


def list_models(llm: Llm, exchange: Exchange) -> HttpAnswer:
    """``GET /v1/models`` (with the caller's budget's headers)."""
    log = exchange.log
    log.api_key_id = api_key_id(exchange.request)
    try:
        service = llm()
        headers = {**JSON_HEADERS, **_standing(service.budgets, log, None)}
        return HttpAnswer(_json(service.list_models()).decode(), headers)
    except SagegateError as error:
        return _failure(from_sagegate(error), log)


def usage(llm: Llm, exchange: Exchange) -> HttpAnswer:
    """``GET /v1/usage``: the caller's own key's token budgets, each window's limit, use,
    what is left and when it resets (``data`` empty where the stage has no budgets)."""
    log = exchange.log
    log.api_key_id = api_key_id(exchange.request)
    try:
        service = llm()
    except SagegateError as error:
        return _failure(from_sagegate(error), log)
    budgets = service.budgets
    document: dict[str, Any] = {"object": "list", "api_key_id": log.api_key_id,
                                "budgets": budgets is not None, "data": []}
    headers = dict(JSON_HEADERS)
    if budgets is not None:
        standings, errors, now = budgets.standings(log.api_key_id, None,
                                                   tuple(service.models.values()))
        log.budget_errors = errors or None
        document["data"] = [found.document(now) for found in standings]
        found = tightest(standings)
        headers.update({} if found is None else found.headers(now))
    return HttpAnswer(_json(document).decode(), headers)


def _failure(error: OpenAIError, log: RequestLog) -> HttpAnswer:
    log.error_code = error.code or error.kind
    return HttpAnswer(_json(error.document()).decode(), {**JSON_HEADERS, **error.headers},
                      error.status)


def serve_streaming(llm: Llm, exchanges: Exchanges,
                    request: ServedRequest) -> tuple[int, dict[str, str], LoggedBody]:
    """For a server that streams: ``request`` (a completion route's, its API key already
    checked) answered as its status, headers and body, whose events come as the model makes
    them (see :class:`LoggedBody`: the server must close it, once the response is written or
    the client has gone)."""
    started = time.perf_counter()
    with exchanges.serving(request) as log:
        found = answer(llm, exchanges.current())
    headers = {**found.headers, "X-Request-Id": log.request_id}
    if log.correlation_id:
        headers["X-Correlation-Id"] = log.correlation_id
    return found.status, headers, LoggedBody(found, log, started)


class LoggedBody:
    """An answer's body for a server that streams, event by event.

    The contract with the server: iterating it gives each event as it is made and ends right
    after the last (``[DONE]``, or an error event) without doing the exchange's bookkeeping,
    so the client waits for none of it; :meth:`close` does it, and the server calls it once,
    after writing the response's end (the chunked terminator), or when the client went away
    (the container's stream is closed with it), or when nothing was read at all.
    """

    def __init__(self, found: OpenAIAnswer, log: RequestLog, started: float) -> None:
        self._found, self._log, self._started = found, log, started
        self._events: Iterator[bytes] = iter([found.body]) if isinstance(found.body, bytes) \
            else found.body.events()
        self._ended = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self._events)

    def close(self) -> None:
        """End the exchange (once): the container's stream closed, the record handed to
        capture, a complete answer kept in the cache (:meth:`EventStream.close`), then the
        request's log line and metrics written."""
        if self._ended:
            return
        self._ended = True
        try:
            if isinstance(self._found.body, EventStream):
                self._found.body.close()
        finally:
            self._log.finish(self._found.status, None,
                             (time.perf_counter() - self._started) * 1000.0)


def too_large(length: int, limit: int) -> OpenAIError:
    """OpenAI's 413 for a body over the app's ``MAX_BODY_BYTES`` (a streaming server refuses it
    unread)."""
    return OpenAIError(413, f"The body is {length} bytes; this API takes at most {limit}.",
                       code="request_too_large")


def internal_error(code: str = "server_error") -> OpenAIError:
    """A defect of ours, as a client is told of it (the traceback is the log's): mid-stream
    ``server_error``; before the answer began, as a view's, ``internal_error``."""
    return OpenAIError(500, "Internal server error.", code=code, kind=SERVER_ERROR)


def deliver(events: Iterable[bytes], write: Callable[[bytes], None]) -> bytes:
    """A streaming server's body: each event written (one ``write``) as it is made, until
    ``[DONE]``, asking nothing more of ``events`` (whose close, after the server ended the
    body, does the bookkeeping: :class:`LoggedBody`). A defect of ours mid-stream ends it with
    OpenAI's ``server_error`` event.

    Returns:
        The last event written: :data:`DONE` for a stream delivered whole, else an error event.

    Raises:
        ConnectionError, TimeoutError: the client went away (or can take no more).
    """
    last = b""
    try:
        for last in events:
            write(last)
            if last == DONE:
                break
    except (ConnectionError, TimeoutError):
        raise
    except Exception:
        logger.exception("the stream failed")
        last = sse(internal_error().document())
        write(last)
    return last
