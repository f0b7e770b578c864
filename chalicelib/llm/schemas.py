"""What each container schema is sent and what it answers, one class per schema
(:data:`SCHEMAS`): the body for a request, a whole answer read into a :class:`Completion`, and
one line of its stream read into a :class:`Piece`.

* ``lmi`` and ``tgi`` (:class:`Generate`): ``{"inputs", "parameters"}`` ->
  ``{"generated_text", "details"}`` (TGI answers a list of one); streams of
  ``{"token": {...}}`` lines, the last adding ``generated_text`` and ``details``;
* ``lmi-chat`` (:class:`LmiChat`): chat requests as LMI's chat body (OpenAI's fields, no model;
  a stream asks for its usage chunk) -> a ``chat.completion`` (streamed:
  ``chat.completion.chunk`` lines); text completions as ``lmi``'s;
* ``openai`` (:class:`PassThrough`): the client's body, without ``model``, as it came.

Finish reasons are OpenAI's (``eos_token`` and ``stop_sequence`` are ``stop``).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Protocol

from chalicelib.core.errors import InvalidEndpointResponseError
from chalicelib.llm.requests import CompletionRequest, Message, Operation
from chalicelib.registry.specs import LlmSchema

FINISH_REASONS = {"eos_token": "stop", "stop_sequence": "stop", "stop": "stop", "eos": "stop",
                  "length": "length", "content_filter": "content_filter",
                  "tool_calls": "tool_calls"}
ERROR_FINISH = "error"  # LMI's finish reason of a generation that failed after its 200


def finish_reason(value: Any) -> str | None:
    """A container's finish reason as OpenAI's (an unknown one is ``stop``)."""
    if value is None:
        return None
    return FINISH_REASONS.get(str(value), "stop")


@dataclasses.dataclass(frozen=True)
class Completion:
    """A whole answer, read (``document``: an ``openai`` container's own, passed back)."""

    text: str
    finish_reason: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    document: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Piece:
    """One line of a stream, read: text, the finish reason, token counts when the container
    gives them, an error that ends it, or (``openai``) the container's own chunk."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    chunk: Mapping[str, Any] | None = None
    tokens: int = 0
    """How many generated tokens the line carries (counted when the container gives none)."""


class ContainerSchema(Protocol):
    """One container schema (model.json's ``llm.schema``)."""

    def body(self, request: CompletionRequest) -> bytes:
        """What the container is sent for ``request`` (streamed or not, as it asks)."""
        ...

    def answer(self, body: bytes, request: CompletionRequest) -> Completion:
        """The container's whole answer, read.

        Raises:
            InvalidEndpointResponseError: it is not this schema's answer.
        """
        ...

    def piece(self, line: Mapping[str, Any], request: CompletionRequest) -> Piece:
        """One line of the container's stream, read."""
        ...


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidEndpointResponseError("The model's answer is not JSON.") from None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bad_answer(what: str) -> InvalidEndpointResponseError:
    return InvalidEndpointResponseError(f"The model's answer is not {what}.")


class Generate:
    """LMI's and TGI's text generation (see the module)."""

    def body(self, request: CompletionRequest) -> bytes:
        sampling = request.sampling
        parameters: dict[str, Any] = {"max_new_tokens": sampling.max_tokens,
                                      "do_sample": not sampling.greedy, "details": True}
        if not sampling.greedy:
            parameters["temperature"] = sampling.temperature
            if sampling.top_p is not None and sampling.top_p < 1:
                parameters["top_p"] = sampling.top_p
        if sampling.stop:
            parameters["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            parameters["seed"] = sampling.seed
        document: dict[str, Any] = {"inputs": request.prompt, "parameters": parameters}
        if request.stream:
            document["stream"] = True
        return json.dumps(document).encode()

    def answer(self, body: bytes, request: CompletionRequest) -> Completion:
        document = _json(body)
        if isinstance(document, list) and len(document) == 1:  # TGI's
            document = document[0]
        if not isinstance(document, dict) or not isinstance(document.get("generated_text"),
                                                            str):
            raise _bad_answer('a generation ({"generated_text", "details"})')
        details = document.get("details")
        details = details if isinstance(details, dict) else {}
        return Completion(document["generated_text"],
                          finish_reason(details.get("finish_reason")) or "stop",
                          _prompt_tokens(details), _count(details.get("generated_tokens")))

    def piece(self, line: Mapping[str, Any], request: CompletionRequest) -> Piece:
        if line.get("error") is not None:  # TGI's error event
            return Piece(error=str(line["error"])[:512])
        details = line.get("details")
        details = details if isinstance(details, dict) else {}
        token = line.get("token")
        token = token if isinstance(token, dict) else {}
        reason = details.get("finish_reason") or token.get("finish_reason")
        if token.get("id") == -1 or reason == ERROR_FINISH:
            return Piece(error=str(line.get("generated_text") or details.get("error")
                                   or "the generation failed")[:512])
        special = bool(token.get("special") or token.get("special_token"))
        text = token.get("text")
        return Piece(text=text if isinstance(text, str) and not special else "",
                     finish_reason=finish_reason(reason), prompt_tokens=_prompt_tokens(details),
                     completion_tokens=_count(details.get("generated_tokens")),
                     tokens=1 if token else 0)


def _prompt_tokens(details: Mapping[str, Any]) -> int | None:
    """LMI's ``prompt_tokens``, else the length of TGI's ``prefill`` (when it was asked)."""
    counted = _count(details.get("prompt_tokens"))
    prefill = details.get("prefill")
    if counted is None and isinstance(prefill, list) and prefill:
        return len(prefill)
    return counted


class ChatCompletions:
    """OpenAI's chat completion objects, as LMI's chat schema and OpenAI containers answer."""

    def answer(self, body: bytes, request: CompletionRequest) -> Completion:
        document = _json(body)
        choice = _first_choice(document)
        if choice is None:
            raise _bad_answer("a chat.completion")
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if request.operation == Operation.TEXT:
            content = choice.get("text")
        usage = document.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return Completion(content if isinstance(content, str) else "",
                          finish_reason(choice.get("finish_reason")) or "stop",
                          _count(usage.get("prompt_tokens")),
                          _count(usage.get("completion_tokens")), document)

    def piece(self, line: Mapping[str, Any], request: CompletionRequest) -> Piece:
        error = line.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            return Piece(error=str(message)[:512])
        usage = line.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        choice = _first_choice(line) or {}
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        text = text if isinstance(text, str) else ""
        return Piece(text=text, finish_reason=finish_reason(choice.get("finish_reason")),
                     prompt_tokens=_count(usage.get("prompt_tokens")),
                     completion_tokens=_count(usage.get("completion_tokens")),
                     tokens=1 if text else 0, chunk=line)


def _first_choice(document: Any) -> dict[str, Any] | None:
    choices = document.get("choices") if isinstance(document, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


class LmiChat(ChatCompletions):
    """LMI with a chat template: chat requests in its chat schema, text ones as
    :class:`Generate`."""

    generate = Generate()

    def body(self, request: CompletionRequest) -> bytes:
        if request.operation == Operation.TEXT:
            return self.generate.body(request)
        sampling = request.sampling
        document: dict[str, Any] = {
            "messages": [_lmi_message(message) for message in request.messages],
            "max_tokens": sampling.max_tokens,
            "temperature": 0.0 if sampling.greedy else sampling.temperature}
        optional = {"top_p": None if sampling.greedy else sampling.top_p, "seed": sampling.seed,
                    "stop": list(sampling.stop) or None}
        document.update({key: value for key, value in optional.items() if value is not None})
        if request.stream:  # its usage chunk: the container's counts, not ours
            document.update(stream=True, stream_options={"include_usage": True})
        return json.dumps(document).encode()

    def answer(self, body: bytes, request: CompletionRequest) -> Completion:
        if request.operation == Operation.TEXT:
            return self.generate.answer(body, request)
        return super().answer(body, request)

    def piece(self, line: Mapping[str, Any], request: CompletionRequest) -> Piece:
        if request.operation == Operation.TEXT:
            return self.generate.piece(line, request)
        return dataclasses.replace(super().piece(line, request), chunk=None)


def _lmi_message(message: Message) -> dict[str, str]:
    """A message as LMI's chat schema takes it: OpenAI's ``developer`` role is its
    ``system`` (the instructions, by their newer name)."""
    document = message.to_dict()
    if message.role == "developer":
        document["role"] = "system"
    return document


class PassThrough(ChatCompletions):
    """A container that speaks OpenAI's API: the client's body without ``model`` (the
    container serves one), its answers and chunks passed back as they are. What the client
    left out of ``max_tokens`` and ``temperature`` is model.json's defaults (the request's
    sampling, which the cache and the limits read, is what the container is asked); a body
    not streamed has no ``stream`` or ``stream_options`` (a stream and a whole answer of one
    request share their cache entry)."""

    def body(self, request: CompletionRequest) -> bytes:
        dropped = {"model"} if request.stream else {"model", "stream", "stream_options"}
        document = {key: value for key, value in request.document.items()
                    if key not in dropped}
        sampling = request.sampling
        if document.get("max_tokens") is None and \
                document.get("max_completion_tokens") is None:
            document["max_tokens"] = sampling.max_tokens
        if document.get("temperature") is None:
            document["temperature"] = sampling.temperature
        return json.dumps(document).encode()


SCHEMAS: dict[LlmSchema, ContainerSchema] = {
    LlmSchema.LMI: Generate(), LlmSchema.TGI: Generate(), LlmSchema.LMI_CHAT: LmiChat(),
    LlmSchema.OPENAI: PassThrough()}
