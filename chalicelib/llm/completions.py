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
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from chalicelib.core.errors import InvalidEndpointResponseError, SagegateError
from chalicelib.core.media import MediaType
from chalicelib.core.observability import RequestLog
from chalicelib.inference.endpoint import EndpointClient, EndpointStream, Invocation
from chalicelib.llm.errors import from_sagegate
from chalicelib.llm.requests import CompletionRequest, Operation, read_request
from chalicelib.llm.schemas import SCHEMAS, Completion, Piece
from chalicelib.llm.streams import DONE, Chunks, lines, sse
from chalicelib.registry.specs import LlmSchema, ModelSpec

BYTES_PER_TOKEN = 4  # the estimate when a container gives no count
OWNER = "sagegate"  # GET /v1/models' owned_by


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
    model shares.

    Args:
        models: every registered model (the llm ones are served).
        budget_seconds: the time an answer, or a stream's first event, may take to come.
    """

    def __init__(self, models: Mapping[str, ModelSpec], endpoint: EndpointClient,
                 budget_seconds: float, *, clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time) -> None:
        self.models = {name: model for name, model in models.items() if model.llm is not None}
        self._endpoint = endpoint
        self._budget = budget_seconds
        self._clock, self._wall = clock, wall

    def list_models(self) -> dict[str, Any]:
        """``GET /v1/models``: the llm models, as OpenAI lists models."""
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": OWNER}
            for name in sorted(self.models)]}

    def read(self, body: bytes, operation: Operation) -> CompletionRequest:
        """See :func:`~chalicelib.llm.requests.read_request`."""
        return read_request(body, operation, self.models)

    def _invocation(self, request: CompletionRequest, request_id: str) -> Invocation:
        model = request.model
        return Invocation(endpoint_name=model.endpoint,
                          body=SCHEMAS[request.llm.schema].body(request),
                          content_type=MediaType.JSON, accept=model.accept,
                          target_variant=model.variant, target_model=model.target_model,
                          inference_component=model.inference_component,
                          inference_id=request_id[:64])

    def complete(self, request: CompletionRequest, request_id: str,
                 log: RequestLog) -> dict[str, Any]:
        """A whole answer (``chat.completion`` or ``text_completion``).

        Raises:
            SagegateError: (a subclass) the endpoint failed, or its answer is not its schema's.
        """
        started = self._clock()
        result = self._endpoint.invoke(self._invocation(request, request_id),
                                       time.monotonic() + self._budget)
        log.endpoint, log.variant, log.attempts = request.model.endpoint, result.variant, \
            result.attempts
        completion = SCHEMAS[request.llm.schema].answer(result.body, request)
        tally = Tally(started, request.prompt_bytes, completion.prompt_tokens,
                      completion.completion_tokens, text_bytes=len(completion.text.encode()),
                      last_at=self._clock(), finish=completion.finish_reason)
        usage = tally.note(log, streamed=False)
        return self._document(request, request_id, completion, usage)

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
            prefix = "chatcmpl-"
        else:
            choice = {"index": 0, "text": completion.text, "logprobs": None,
                      "finish_reason": completion.finish_reason}
            prefix = "cmpl-"
        return {"id": prefix + request_id, "object": str(request.operation),
                "created": int(self._wall()), "model": name, "system_fingerprint": None,
                "choices": [choice], "usage": usage}

    def stream(self, request: CompletionRequest, request_id: str,
               log: RequestLog) -> EventStream:
        """The answer as OpenAI's stream: the container's stream is opened now (a failure
        before its first event is an error answer, not a stream), its chunks made as its
        lines are read.

        Raises:
            SagegateError: (a subclass) the stream could not be opened.
        """
        started = self._clock()
        upstream = self._endpoint.invoke_stream(self._invocation(request, request_id),
                                                time.monotonic() + self._budget)
        log.endpoint, log.variant, log.attempts = request.model.endpoint, upstream.variant, \
            upstream.attempts
        prefix = "chatcmpl-" if request.operation == Operation.CHAT else "cmpl-"
        chunks = Chunks(request.operation, prefix + request_id, int(self._wall()),
                        request.model.name, request.include_usage)
        tally = Tally(started, request.prompt_bytes)
        return EventStream(self._events(request, upstream, chunks, tally, log), upstream)

    def _events(self, request: CompletionRequest, upstream: EndpointStream, chunks: Chunks,
                tally: Tally, log: RequestLog) -> Iterator[bytes]:
        schema = SCHEMAS[request.llm.schema]
        passed = request.llm.schema == LlmSchema.OPENAI
        try:
            if not passed:
                yield sse(chunks.first())
            for line in lines(upstream.parts()):
                piece = schema.piece(_line(line), request)
                if piece.error is not None:
                    log.error_code = "model_error"
                    yield sse({"error": {"message": f"The model failed: {piece.error}",
                                         "type": "server_error", "param": None,
                                         "code": "model_error"}})
                    return
                tally.add(piece, self._clock())
                if passed and piece.chunk is not None:
                    yield sse(chunks.passed(piece.chunk))
                elif piece.text:
                    yield sse(chunks.delta(piece.text))
            usage = tally.note(log, streamed=True)
            if not passed:
                yield sse(chunks.finish(tally.finish or "stop"))
            if request.include_usage:
                yield sse(chunks.usage(usage))
            yield DONE
        except SagegateError as error:
            failure = from_sagegate(error)
            log.error_code = failure.code
            yield sse(failure.document())
        finally:
            upstream.close()
            if log.usage_source is None:
                tally.note(log, streamed=True)


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
    """A stream's ``data:`` events, each as it is made; :meth:`close` (a client gone) stops it
    and closes the container's stream, also when no event was read yet."""

    def __init__(self, events: Iterator[bytes], upstream: EndpointStream) -> None:
        self._events, self._upstream = events, upstream

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    def __next__(self) -> bytes:
        return next(self._events)

    def close(self) -> None:
        """Stop: the generator's ``finally`` closes the upstream; an unstarted one has none."""
        close = getattr(self._events, "close", None)
        if callable(close):
            close()
        self._upstream.close()
