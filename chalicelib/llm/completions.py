"""One OpenAI request served: its container called through the endpoint client, its answer a
``chat.completion`` / ``text_completion`` with ``usage``, or a stream of chunks.

Usage comes from the container when it says (LMI's and TGI's ``details``, a chat answer's
``usage``); otherwise the completion's tokens are counted from the stream's token lines, and
what is still unknown is estimated from the text's size (4 bytes a token). The request's log
line says which, for each count (``usage_source``: ``container``, ``counted`` or
``estimated``), with the time
to the first token and the tokens per second of a stream (:class:`Tally`).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Protocol

from chalicelib.cache.prediction import CacheControl, CacheUse, PredictionCache
from chalicelib.calls import InvokeResult
from chalicelib.capture import Capturer
from chalicelib.capture.records import Exchange
from chalicelib.core.errors import InvalidEndpointResponseError, ModelError, SagegateError
from chalicelib.core.media import MediaType
from chalicelib.core.observability import RequestLog
from chalicelib.inference.endpoint import EndpointClient, EndpointStream, Invocation
from chalicelib.llm.budgets import TokenBudgets
from chalicelib.llm.errors import SERVER_ERROR as SERVER_ERROR_TYPE
from chalicelib.llm.errors import OpenAIError, from_sagegate
from chalicelib.llm.requests import CompletionRequest, Operation, read_request
from chalicelib.llm.schemas import SCHEMAS, Completion, Piece
from chalicelib.llm.streams import DONE, Chunks, lines, sse
from chalicelib.registry.specs import LlmSchema, ModelSpec

logger = logging.getLogger("sagegate.llm")  # a child of Powertools' JSON logger
SERVER_ERROR = "The server had an error while processing your request."
"""What a client is told of a failure that is sagegate's own (the log has its traceback)."""
BYTES_PER_TOKEN = 4  # the estimate when a container gives no count
OWNER = "sagegate"  # GET /v1/models' owned_by
CAPTURE_SECONDS = 10.0
"""What writing a record may take (after the answer's last chunk: never a chunk's delay)."""
CACHED = "cached"  # usage_source of an answer from the prediction cache
DISCONNECTED = "client_disconnected"  # a record's ``partial``: the client went away
_WORDS = re.compile(r"\s*\S+|\s+")  # a cached answer's chunks: a word each


class Pool(Protocol):
    """Where shadow copies run after the answer (the experiments' ``Shadows``)."""

    def submit(self, target: Hashable, call: Callable[[], None], *, timeout_seconds: float,
               size: int = 0, dimensions: Mapping[str, str] | None = None) -> str: ...


@dataclasses.dataclass(frozen=True)
class Plan:
    """How the route serves one request: its experiment arm (None: none) and its use of the
    prediction cache (None: none)."""

    arm: str | None = None
    cache: CacheUse | None = None


NO_PLAN = Plan()


@dataclasses.dataclass
class Tally:
    """One answer's tokens and timing, as it comes (``clock`` is ``perf_counter``'s)."""

    started: float
    prompt_bytes: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    counted: int = 0
    text_bytes: int = 0
    first_at: float | None = None
    last_at: float | None = None
    finish: str | None = None

    def add(self, piece: Piece, now: float) -> None:
        """Note one line of the stream."""
        if piece.tokens or piece.text:
            self.first_at = self.first_at if self.first_at is not None else now
            self.last_at = now
        self.counted += piece.tokens
        self.text_bytes += len(piece.text.encode("utf-8"))
        self.prompt_tokens = piece.prompt_tokens if piece.prompt_tokens is not None \
            else self.prompt_tokens
        self.completion_tokens = piece.completion_tokens \
            if piece.completion_tokens is not None else self.completion_tokens
        self.finish = piece.finish_reason or self.finish

    def usage(self) -> tuple[dict[str, int], dict[str, str]]:
        """OpenAI's ``usage``, and where each count came from."""
        prompt, completion = self.prompt_tokens, self.completion_tokens
        sources = {"prompt": "container", "completion": "container"}
        if prompt is None:
            prompt, sources["prompt"] = math.ceil(self.prompt_bytes / BYTES_PER_TOKEN), \
                "estimated"
        if completion is None and self.counted:
            completion, sources["completion"] = self.counted, "counted"
        elif completion is None:
            completion, sources["completion"] = \
                math.ceil(self.text_bytes / BYTES_PER_TOKEN), "estimated"
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}, sources

    def note(self, log: RequestLog, streamed: bool) -> dict[str, int]:
        """Write the usage and timing into the request's log line; the usage."""
        usage, source = self.usage()
        log.prompt_tokens, log.completion_tokens = usage["prompt_tokens"], \
            usage["completion_tokens"]
        log.usage_source, log.finish_reason, log.streamed = source, self.finish, streamed
        if streamed and self.first_at is not None:
            log.time_to_first_token_ms = round((self.first_at - self.started) * 1000.0, 2)
            log.tokens_per_second = _rate(usage["completion_tokens"] - 1,
                                          (self.last_at or self.first_at) - self.first_at)
        elif not streamed and self.last_at is not None:
            log.tokens_per_second = _rate(usage["completion_tokens"],
                                          self.last_at - self.started)
        return usage


def _rate(tokens: int, seconds: float) -> float | None:
    return round(tokens / seconds, 2) if tokens > 0 and seconds > 0 else None


class LlmService:
    """The OpenAI routes' work for the registry's llm models, on the endpoint client every
    model shares: each exchange captured (the body sent and the assembled completion, after
    its last chunk), a greedy one (``Sampling.greedy``) answered from the prediction cache
    when the model's ``cache`` allows.

    Args:
        models: every registered model (the llm models are served).
        budget_seconds: the time an answer, or a stream's first event, may take to come.
        capturer: data capture (None: none).
        cache: the prediction cache (None: none).
        pool: where shadow copies run (built on first use; None: no shadows).
        budgets: the per-key token budgets (None: off), which the routes reserve and
            settle (:mod:`chalicelib.http.completions`).
    """

    def __init__(self, models: Mapping[str, ModelSpec], endpoint: EndpointClient,
                 budget_seconds: float, *, capturer: Capturer | None = None,
                 cache: PredictionCache | None = None, pool: Callable[[], Pool] | None = None,
                 budgets: TokenBudgets | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time) -> None:
        self.models = {name: model for name, model in models.items() if model.llm is not None}
        self._endpoint = endpoint
        self._budget = budget_seconds
        self._capturer, self._cache, self._pool = capturer, cache, pool
        self.budgets = budgets
        self._clock, self._wall = clock, wall

    def list_models(self) -> dict[str, Any]:
        """``GET /v1/models``: the llm models, as OpenAI lists models."""
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": OWNER}
            for name in sorted(self.models)]}

    def read(self, body: bytes, operation: Operation) -> CompletionRequest:
        """See :func:`~chalicelib.llm.requests.read_request`."""
        return read_request(body, operation, self.models)

    def cache_use(self, request: CompletionRequest, control: CacheControl,
                  arm: str | None = None) -> CacheUse:
        """The request's use of the prediction cache: none unless the model's ``cache`` is on
        and the request asks for greedy decoding (``Sampling.greedy``: a sampled answer is
        never replayed, a seed's included: containers differ in its use); an arm's entries are
        its own."""
        name = request.model.name
        scope = {"model": name} if arm is None else {"model": name, "arm": arm}
        if self._cache is None:
            return CacheUse(None)
        return self._cache.request(control, enabled=request.model.cache
                                   and request.sampling.greedy, scope=scope)

    def pool(self) -> Pool | None:
        """Where shadow copies run (None: nowhere)."""
        return None if self._pool is None else self._pool()

    def _invocation(self, request: CompletionRequest, request_id: str,
                    body: bytes | None = None) -> Invocation:
        model = request.model
        return Invocation(endpoint_name=model.endpoint,
                          body=SCHEMAS[request.llm.schema].body(request) if body is None
                          else body,
                          content_type=MediaType.JSON, accept=model.accept,
                          target_variant=model.variant, target_model=model.target_model,
                          inference_component=model.inference_component,
                          inference_id=request_id[:64])

    def complete(self, request: CompletionRequest, request_id: str, log: RequestLog,
                 plan: Plan = NO_PLAN) -> dict[str, Any]:
        """A whole answer (``chat.completion`` or ``text_completion``), from the cache when
        the plan's use of it finds one; captured.

        Raises:
            SagegateError: (a subclass) the endpoint failed, or its answer is not its schema's.
        """
        started = self._clock()
        sent = SCHEMAS[request.llm.schema].body(request)
        deadline = time.monotonic() + self._budget
        cache = plan.cache
        if cache is not None and cache.active:
            result = cache.fetch(_key_fields(request), sent, lambda: self._call(
                request, request_id, log, sent, deadline), deadline)
        else:
            result = self._call(request, request_id, log, sent, deadline)
        document = json.loads(result.body)
        hit = result.attempts == 0
        if hit:
            document = self._replayed(document, request, request_id, log, streamed=False)
        _note_cache(log, cache)
        self._capture(request, request_id, log, started, sent, document, plan.arm, hit=hit)
        return document

    def _call(self, request: CompletionRequest, request_id: str, log: RequestLog,
              sent: bytes, deadline: float) -> InvokeResult:
        """The endpoint's answer as OpenAI's document (JSON), usage noted in ``log``."""
        started = self._clock()
        result = self._endpoint.invoke(self._invocation(request, request_id, sent), deadline)
        log.endpoint, log.variant, log.attempts = request.model.endpoint, result.variant, \
            result.attempts
        completion = SCHEMAS[request.llm.schema].answer(result.body, request)
        tally = Tally(started, request.prompt_bytes, completion.prompt_tokens,
                      completion.completion_tokens, text_bytes=len(completion.text.encode()),
                      last_at=self._clock(), finish=completion.finish_reason)
        usage = tally.note(log, streamed=False)
        document = self._document(request, request_id, completion, usage)
        return InvokeResult(_dumps(document), MediaType.JSON, result.variant, None,
                            max(1, result.attempts))

    def _replayed(self, document: dict[str, Any], request: CompletionRequest,
                  request_id: str, log: RequestLog, streamed: bool) -> dict[str, Any]:
        """A cached answer under this request's id and time, its usage in the log line."""
        found = document.get("usage")
        usage: Mapping[str, Any] = found if isinstance(found, dict) else {}
        log.endpoint = request.model.endpoint
        log.prompt_tokens, log.completion_tokens = usage.get("prompt_tokens"), \
            usage.get("completion_tokens")
        log.usage_source = {"prompt": CACHED, "completion": CACHED}
        log.finish_reason, log.streamed = _choice(document)[1], streamed
        return {**document, "id": completion_id(request, request_id),
                "created": int(self._wall())}

    def _document(self, request: CompletionRequest, request_id: str, completion: Completion,
                  usage: dict[str, int]) -> dict[str, Any]:
        name = request.model.name
        if completion.document is not None and request.llm.schema == LlmSchema.OPENAI:
            return {**completion.document, "model": name,
                    "usage": completion.document.get("usage") or usage}
        if request.operation == Operation.CHAT:
            choice: dict[str, Any] = {
                "index": 0, "message": {"role": "assistant", "content": completion.text,
                                        "refusal": None},
                "logprobs": None, "finish_reason": completion.finish_reason}
        else:
            choice = {"index": 0, "text": completion.text, "logprobs": None,
                      "finish_reason": completion.finish_reason}
        return {"id": completion_id(request, request_id), "object": str(request.operation),
                "created": int(self._wall()), "model": name, "system_fingerprint": None,
                "choices": [choice], "usage": usage}

    def stream(self, request: CompletionRequest, request_id: str, log: RequestLog,
               plan: Plan = NO_PLAN,
               answered: Callable[[], None] | None = None) -> EventStream:
        """The answer as OpenAI's stream: from the cache when the plan's use of it finds one
        (its text a chunk a word), else the container's stream, opened now (a failure before
        its first event is an error answer, not a stream; ``answered`` called once the
        endpoint has answered the call, while its first event is awaited:
        :meth:`EndpointClient.invoke_stream`), its chunks made as its lines are read. The
        exchange's end (the record captured, a complete answer kept in the cache) is
        :meth:`EventStream.close`'s, after the last event was delivered.

        Raises:
            SagegateError: (a subclass) the stream could not be opened.
        """
        started = self._clock()
        chunks = Chunks(request.operation, completion_id(request, request_id),
                        int(self._wall()), request.model.name, request.include_usage)
        whole = SCHEMAS[request.llm.schema].body(dataclasses.replace(
            request, stream=False, include_usage=False))  # the cache's key: streamed or not
        found = None if plan.cache is None else plan.cache.peek(_key_fields(request), whole)
        _note_cache(log, plan.cache)
        if found is not None:
            document = self._replayed(json.loads(found.body), request, request_id, log,
                                      streamed=True)
            return EventStream(_replay(request, document, chunks), functools.partial(
                self._capture, request, request_id, log, started, whole, document, plan.arm,
                hit=True))
        sent = SCHEMAS[request.llm.schema].body(request)
        deadline = time.monotonic() + self._budget
        upstream = self._endpoint.invoke_stream(
            self._invocation(request, request_id, sent), deadline, answered)
        log.endpoint, log.variant, log.attempts = request.model.endpoint, upstream.variant, \
            upstream.attempts
        exchange = _Streamed(request, request_id, log, plan, sent, whole,
                             Tally(started, request.prompt_bytes), deadline)
        return EventStream(self._events(exchange, upstream, chunks),
                           functools.partial(self._ended, exchange, upstream), upstream.close)

    def _events(self, exchange: _Streamed, upstream: EndpointStream,
                chunks: Chunks) -> Iterator[bytes]:
        """:meth:`_chunks`, a failure ending them with an error event (the exchange's end is
        :meth:`_ended`'s)."""
        try:
            yield from self._chunks(exchange, upstream, chunks)
        except SagegateError as error:
            yield sse(exchange.failed(from_sagegate(error)))
        except Exception:  # a bug of ours: the client still gets an error event, not a cut stream
            logger.exception("a completion stream failed")
            yield sse(exchange.failed(OpenAIError(500, SERVER_ERROR, code="server_error",
                                                  kind=SERVER_ERROR_TYPE)))

    def _chunks(self, exchange: _Streamed, upstream: EndpointStream,
                chunks: Chunks) -> Iterator[bytes]:
        """The stream's events as the container's lines are read: the role chunk, a chunk a
        piece of text, the finish, the usage when asked (unless an ``openai`` container sent
        its own), ``[DONE]``; a model's error ends them (raised as ``ModelError``)."""
        request, log, tally = exchange.request, exchange.log, exchange.tally
        schema = SCHEMAS[request.llm.schema]
        passed = request.llm.schema == LlmSchema.OPENAI
        usage_sent = False
        if not passed:
            yield sse(chunks.first())
        for line in lines(upstream.parts()):
            piece = schema.piece(_line(line), request)
            if piece.error is not None:
                raise ModelError(f"The model failed: {piece.error}")
            tally.add(piece, self._clock())
            exchange.texts.append(piece.text)
            if passed and piece.chunk is not None:
                usage_sent = usage_sent or piece.chunk.get("usage") is not None
                yield sse(chunks.passed(piece.chunk))
            elif piece.text:
                yield sse(chunks.delta(piece.text))
        exchange.usage = usage = tally.note(log, streamed=True)
        exchange.ended = True
        if not passed:
            yield sse(chunks.finish(tally.finish or "stop"))
        if request.include_usage and not usage_sent:
            yield sse(chunks.usage(usage))
        yield DONE

    def _ended(self, exchange: _Streamed, upstream: EndpointStream) -> None:
        """The end of a stream, however it ended (its last event delivered, a failure, its
        client gone, closed before it began): the upstream closed, the usage counted, the
        record of what was made, and a complete answer kept in the cache."""
        upstream.close()
        request, tally = exchange.request, exchange.tally
        if exchange.usage is None:
            exchange.usage = tally.note(exchange.log, streamed=True)
        completion = Completion("".join(exchange.texts), tally.finish or "stop")
        document = self._document(request, exchange.request_id, completion, exchange.usage)
        if not exchange.ended and exchange.error is None:  # the client went away
            document["choices"][0]["finish_reason"] = None
        self._capture(request, exchange.request_id, exchange.log, tally.started,
                      exchange.sent, document, exchange.plan.arm, error=exchange.error,
                      partial=None if exchange.ended or exchange.error else DISCONNECTED)
        cache = exchange.plan.cache
        if exchange.ended and cache is not None and cache.active:
            cache.keep(_key_fields(request), exchange.whole, InvokeResult(
                _dumps(document), MediaType.JSON, exchange.log.variant, None, 1),
                exchange.deadline)

    def shadow(self, request: CompletionRequest, request_id: str, name: str,
               timeout_seconds: float) -> None:
        """One shadow call of ``request`` (its target's model), whole, within its own
        timeout; captured as shadow traffic paired with the caller's by its id (a failure as
        a record of its error)."""
        request = dataclasses.replace(request, stream=False, include_usage=False)
        log = RequestLog(request_id, "POST", "shadow")  # its own figures, never written
        started, began = self._clock(), time.monotonic()
        sent = SCHEMAS[request.llm.schema].body(request)
        try:
            result = self._call(request, request_id, log, sent, began + timeout_seconds)
        except SagegateError as error:
            if self._capturer is not None:
                self._capturer.capture_shadow_failure(
                    request.model.endpoint, request.model.variant, request_id, name,
                    error.as_failure(), (self._clock() - started) * 1000.0)
            return
        self._capture(request, request_id, log, started, sent, json.loads(result.body), name,
                      shadow=True)

    def _capture(self, request: CompletionRequest, request_id: str, log: RequestLog,
                 started: float, sent: bytes, document: dict[str, Any], arm: str | None, *,
                 hit: bool = False, shadow: bool = False, error: Mapping[str, str] | None = None,
                 partial: str | None = None) -> None:
        """The exchange's Model Monitor record: the body sent, the assembled completion, and
        its figures (``sagegateLlm``)."""
        if self._capturer is None:
            return
        figures = {"model": request.model.name, "operation": str(request.operation),
                   "streamed": bool(log.streamed), "promptTokens": log.prompt_tokens,
                   "completionTokens": log.completion_tokens, "usageSource": log.usage_source,
                   "finishReason": log.finish_reason,
                   "timeToFirstTokenMs": log.time_to_first_token_ms,
                   "tokensPerSecond": log.tokens_per_second, "partial": partial}
        outcome = self._capturer.capture_exchange(Exchange(
            endpoint=request.model.endpoint, variant=log.variant or "AllTraffic",
            inference_id=request_id, sent=sent, sent_content_type=MediaType.JSON,
            received=_dumps(document), received_content_type=MediaType.JSON,
            cache_hit=hit, arm=arm, latency_ms=(self._clock() - started) * 1000.0,
            shadow=shadow, error=error, answered_at=self._wall(),
            llm={key: value for key, value in figures.items() if value is not None}),
            CAPTURE_SECONDS)
        if not shadow:
            log.capture = outcome


@dataclasses.dataclass
class _Streamed:
    """One streamed exchange as it goes: what was sent, the text so far, how it ended."""

    request: CompletionRequest
    request_id: str
    log: RequestLog
    plan: Plan
    sent: bytes
    whole: bytes
    """The body the answer is cached under (the request's, not streamed)."""
    tally: Tally
    deadline: float
    """The request's (``time.monotonic``'s): the stream's first event, and the cache's write."""
    texts: list[str] = dataclasses.field(default_factory=list)
    usage: dict[str, int] | None = None
    ended: bool = False
    error: dict[str, str] | None = None

    def failed(self, failure: OpenAIError) -> dict[str, Any]:
        """Note the failure that ends the stream (log line, record); its error event."""
        self.log.error_code = failure.code or failure.kind
        self.error = {"Code": failure.code or failure.kind, "Message": failure.message}
        return failure.document()


def completion_id(request: CompletionRequest, request_id: str) -> str:
    """The answer's ``id``, as OpenAI's: ``chatcmpl-`` or ``cmpl-`` and the request's id."""
    return ("chatcmpl-" if request.operation == Operation.CHAT else "cmpl-") + request_id


def _replay(request: CompletionRequest, document: Mapping[str, Any],
            chunks: Chunks) -> Iterator[bytes]:
    """A cached answer as a stream: its text a word a chunk, its finish, its usage, [DONE]."""
    text, finish = _choice(document)
    yield sse(chunks.first())
    for word in _WORDS.findall(text):
        yield sse(chunks.delta(word))
    yield sse(chunks.finish(finish or "stop"))
    if request.include_usage:
        yield sse(chunks.usage(document.get("usage") or {}))
    yield DONE


def _key_fields(request: CompletionRequest) -> dict[str, Any]:
    """Besides the body sent, what changes the answer: the target and the route."""
    model = request.model
    return {"endpoint": model.endpoint, "variant": model.variant,
            "target_model": model.target_model,
            "inference_component": model.inference_component,
            "schema": str(request.llm.schema), "operation": str(request.operation)}


def _note_cache(log: RequestLog, cache: CacheUse | None) -> None:
    if cache is not None:
        log.cache, log.cache_tier = cache.status, cache.tier
        log.cache_errors = cache.errors or None


def _choice(document: Mapping[str, Any]) -> tuple[str, str | None]:
    """An answer's text and finish reason (chat or text completion)."""
    choices = document.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices \
        and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    reason = choice.get("finish_reason")
    return text if isinstance(text, str) else "", reason if isinstance(reason, str) else None


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _line(line: bytes) -> Mapping[str, Any]:
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        raise InvalidEndpointResponseError("A line of the model's stream is not JSON.") \
            from None
    if not isinstance(document, dict):
        raise InvalidEndpointResponseError("A line of the model's stream is not an object.")
    return document


class EventStream:
    """A stream's ``data:`` events, each as it is made, and the exchange's end (``end``: the
    container's stream closed, the record handed to capture, a complete answer kept in the
    cache), run once: by :meth:`close`, whether or not an event was read, or when iterating
    the stream itself reaches its end.

    A server that writes the events as they come iterates :meth:`events` instead, whose end
    (right after ``[DONE]``, or an error event) does no bookkeeping, and calls :meth:`close`
    once the response is written: the client waits for none of it.

    A stream never answered (its request refused once it was opened) is dropped by
    :meth:`cancel`: ``abort`` (the container's stream closed: its generation stops) and nothing
    else.
    """

    def __init__(self, events: Iterator[bytes], end: Callable[[], None],
                 abort: Callable[[], None] | None = None) -> None:
        self._events, self._end, self._abort = events, end, abort
        self._then: list[Callable[[], None]] = []
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._events)
        except StopIteration:
            self.close()
            raise

    def events(self) -> Iterator[bytes]:
        """The events alone: their iteration ends after the last, the exchange's end left to
        :meth:`close`."""
        return self._events

    def then(self, step: Callable[[], None]) -> None:
        """Run ``step`` at the end, after the end's work, whether or not it failed (the
        token budget's settlement, with the usage the end counted)."""
        self._then.append(step)

    def close(self) -> None:
        """End the exchange (once): stop making events, then the end's work, then the steps
        added by :meth:`then`."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop()
            self._end()
        finally:
            for step in self._then:
                step()

    def cancel(self) -> None:
        """Drop a stream whose answer is not given (once, instead of :meth:`close`): no event
        made, the container's stream closed, nothing of the exchange's end (no record, no
        cache entry, no usage, no :meth:`then` step): it was not served."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop()
        finally:
            if self._abort is not None:
                self._abort()

    def _stop(self) -> None:
        """No more events made (their generator closed)."""
        close = getattr(self._events, "close", None)
        if callable(close):
            close()
