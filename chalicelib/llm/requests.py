"""``POST /v1/chat/completions`` and ``POST /v1/completions`` bodies read and checked, once,
into a :class:`CompletionRequest`.

Every refusal is a 400 (404 for an unknown model) in OpenAI's shape, naming the field in
``param``; the model's limits are :mod:`chalicelib.registry.llmlimits`' (the model route's
too). A feature sagegate cannot give (``n`` > 1, tools, logprobs, a JSON response format,
penalties...) is refused by name, never ignored: a client asking for it would otherwise get
an answer without it and not know. An ``openai`` container speaks the API itself, so what it
may support goes through to it instead. A field OpenAI's API does not have is refused as
OpenAI refuses it.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.llm.errors import OpenAIError, invalid
from chalicelib.registry import llmlimits
from chalicelib.registry.llmlimits import LimitExceeded
from chalicelib.registry.specs import LlmSchema, LlmSpec, ModelSpec, greedy

TYPE, VALUE = "invalid_type", "invalid_value"
UNSUPPORTED = "unsupported_parameter"
ROLES = frozenset({"system", "developer", "user", "assistant"})
MESSAGE_KEYS = frozenset({"role", "content", "name"})
MAX_STOP = 4  # OpenAI's own limit on stop sequences


class Operation(enum.StrEnum):
    """Which OpenAI route: the object its answer is."""

    CHAT = "chat.completion"
    TEXT = "text_completion"


# Every field each route knows that sagegate reads itself.
_COMMON = frozenset({"model", "max_tokens", "temperature", "top_p", "stop", "seed", "stream",
                     "stream_options", "n", "user"})
_READ = {Operation.CHAT: _COMMON | {"messages", "max_completion_tokens"},
         Operation.TEXT: _COMMON | {"prompt"}}


def _absent(value: Any) -> bool:
    return value is None


def _is(*neutral: Any) -> Callable[[Any], bool]:
    return lambda value: value is None or any(value == item and type(value) is type(item)
                                              for item in neutral)


# OpenAI's fields for what sagegate does not do, each with the values that ask for nothing.
_FEATURES: dict[Operation, dict[str, Callable[[Any], bool]]] = {
    Operation.CHAT: {
        "tools": _absent, "tool_choice": _is("none"), "functions": _absent,
        "function_call": _is("none"), "parallel_tool_calls": _is(True, False),
        "logprobs": _is(False), "top_logprobs": _absent,
        "response_format": lambda value: value is None or value == {"type": "text"},
        "logit_bias": _is({}), "presence_penalty": _is(0, 0.0),
        "frequency_penalty": _is(0, 0.0), "audio": _absent,
        "modalities": lambda value: value is None or value == ["text"],
        "prediction": _absent, "store": _is(False), "metadata": _absent,
        "service_tier": _is("auto", "default"), "reasoning_effort": _absent,
        "web_search_options": _absent},
    Operation.TEXT: {
        "logprobs": _absent, "echo": _is(False), "best_of": _is(1), "suffix": _absent,
        "logit_bias": _is({}), "presence_penalty": _is(0, 0.0),
        "frequency_penalty": _is(0, 0.0)},
}


@dataclasses.dataclass(frozen=True)
class Message:
    """One chat message, its content as text (text parts joined)."""

    role: str
    content: str
    name: str | None = None

    def to_dict(self) -> dict[str, str]:
        """As OpenAI's (and LMI's) chat bodies carry it."""
        message = {"role": self.role, "content": self.content}
        if self.name is not None:
            message["name"] = self.name
        return message


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How to generate: the request's values, else the model's defaults."""

    max_tokens: int
    temperature: float
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """Greedy decoding (:func:`chalicelib.registry.specs.greedy`): sent as such to the
        container, and the only answers the prediction cache may replay."""
        return greedy(self.temperature, self.top_p)


@dataclasses.dataclass(frozen=True)
class CompletionRequest:
    """One request of an OpenAI route, read and checked.

    Attributes:
        messages: a chat request's (empty for a text completion).
        prompt: a text completion's (empty for a chat request).
        document: the body as the client sent it (passed to an ``openai`` container).
    """

    operation: Operation
    model: ModelSpec
    llm: LlmSpec
    sampling: Sampling
    messages: tuple[Message, ...] = ()
    prompt: str = ""
    stream: bool = False
    include_usage: bool = False
    user: str | None = None
    document: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def prompt_bytes(self) -> int:
        """The prompt's size, UTF-8 (a chat's: each message's role, name and text, and its
        framing: :func:`chalicelib.registry.llmlimits.message_bytes`)."""
        if self.operation == Operation.TEXT:
            return llmlimits.size(self.prompt)
        return sum(llmlimits.message_bytes(message.role, message.content, message.name)
                   for message in self.messages)


def read_request(body: bytes, operation: Operation,
                 models: Mapping[str, ModelSpec]) -> CompletionRequest:
    """Read one body of ``operation``'s route, for one of ``models`` (the llm models).

    Raises:
        OpenAIError: the body is not a request sagegate can serve (its ``param`` names the
            field).
    """
    try:
        return _read(body, operation, models)
    except LimitExceeded as error:
        raise invalid(error.message, error.param, error.code) from None


def _read(body: bytes, operation: Operation,
          models: Mapping[str, ModelSpec]) -> CompletionRequest:
    document = _document(body)
    model = _model(document, models, operation)
    assert model.llm is not None  # every llm model has its block (registry.llmblock)
    spec = model.llm
    if spec.schema != LlmSchema.OPENAI:
        _refuse_features(document, operation)
    stream = _flag(document, "stream")
    request = CompletionRequest(
        operation=operation, model=model, llm=spec, sampling=_sampling(document, spec),
        messages=_messages(document) if operation == Operation.CHAT else (),
        prompt=_prompt(document) if operation == Operation.TEXT else "",
        stream=stream, include_usage=_include_usage(document, stream),
        user=_text(document, "user"), document=document)
    _check_n(document)
    llmlimits.check_prompt_bytes(request.prompt_bytes,
                                 "messages" if operation == Operation.CHAT else "prompt",
                                 model.name, spec)
    return request


def _document(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise invalid("We could not parse the JSON body of your request: send a JSON "
                      "object.", None, "invalid_json") from None
    if not isinstance(document, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    return document


def _model(document: Mapping[str, Any], models: Mapping[str, ModelSpec],
           operation: Operation) -> ModelSpec:
    name = document.get("model")
    if name is None:
        raise invalid("You must provide a model parameter.", "model",
                      "missing_required_parameter")
    if not isinstance(name, str):
        raise invalid("Invalid type for 'model': expected a string.", "model", TYPE)
    model = models.get(name)
    if model is None or model.llm is None:
        shown = name if len(name) <= 64 else name[:64] + "..."
        raise OpenAIError(404, f"The model {shown!r} does not exist; the models are: "
                          f"{', '.join(sorted(models)) or 'none'}.", param="model",
                          code="model_not_found")
    if operation == Operation.CHAT and model.llm.schema in (LlmSchema.LMI, LlmSchema.TGI):
        raise invalid(f"Model {name!r} is not a chat model (its container's schema, "
                      f"{model.llm.schema}, takes a prompt): use /v1/completions.", "model",
                      "model_not_supported")
    unknown = sorted(set(document) - _READ[operation] - set(_FEATURES[operation]))
    if unknown and model.llm.schema != LlmSchema.OPENAI:
        raise invalid(f"Unrecognized request argument supplied: {unknown[0][:64]}",
                      unknown[0][:64], "unknown_parameter")
    return model


def _refuse_features(document: Mapping[str, Any], operation: Operation) -> None:
    for field, neutral in _FEATURES[operation].items():
        if field in document and not neutral(document[field]):
            raise invalid(f"{field!r} is not supported: sagegate's language models do not "
                          f"give it (send no {field!r}).", field, UNSUPPORTED)


def _check_n(document: Mapping[str, Any]) -> None:
    n = _whole(document, "n", 1)
    if n != 1:
        raise invalid("'n' is not supported above 1: sagegate's language models give one "
                      "choice (send several requests).", "n", UNSUPPORTED)


def _sampling(document: Mapping[str, Any], spec: LlmSpec) -> Sampling:
    field = "max_completion_tokens" if document.get("max_completion_tokens") is not None \
        else "max_tokens"
    max_tokens = _whole(document, field, spec.max_tokens)
    llmlimits.check_max_tokens(max_tokens, field, spec)
    return Sampling(max_tokens=max_tokens,
                    temperature=_number(document, "temperature", spec.temperature, 0.0, 2.0),
                    top_p=_optional_number(document, "top_p", 0.0, 1.0),
                    stop=_stop(document.get("stop")),
                    seed=_optional_whole(document, "seed"))


def _whole(document: Mapping[str, Any], field: str, default: int) -> int:
    value = _optional_whole(document, field)
    if value is None:
        return default
    if value < 1:
        raise invalid(f"Invalid value for {field!r}: it must be at least 1.", field, VALUE)
    return value


def _optional_whole(document: Mapping[str, Any], field: str) -> int | None:
    value = document.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"Invalid type for {field!r}: expected an integer, but got "
                      f"{_json_type(value)}.", field, TYPE)
    return value


def _number(document: Mapping[str, Any], field: str, default: float, low: float,
            high: float) -> float:
    value = _optional_number(document, field, low, high)
    return default if value is None else value


def _optional_number(document: Mapping[str, Any], field: str, low: float,
                     high: float) -> float | None:
    value = document.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(f"Invalid type for {field!r}: expected a number, but got "
                      f"{_json_type(value)}.", field, TYPE)
    if not low <= value <= high:
        raise invalid(f"Invalid value for {field!r}: it must be from {low:g} to {high:g}.",
                      field, VALUE)
    return float(value)


def _flag(document: Mapping[str, Any], field: str) -> bool:
    value = document.get(field)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"Invalid type for {field!r}: expected a boolean, but got "
                      f"{_json_type(value)}.", field, TYPE)
    return value


def _text(document: Mapping[str, Any], field: str) -> str | None:
    value = document.get(field)
    if value is not None and not isinstance(value, str):
        raise invalid(f"Invalid type for {field!r}: expected a string, but got "
                      f"{_json_type(value)}.", field, TYPE)
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
        raise invalid("Invalid type for 'stop': expected a string or an array of strings.",
                      "stop", TYPE)
    if len(stops) > MAX_STOP or not all(stops):
        raise invalid(f"Invalid value for 'stop': at most {MAX_STOP} sequences, none empty.",
                      "stop", VALUE)
    return tuple(stops)


def _include_usage(document: Mapping[str, Any], stream: bool) -> bool:
    options = document.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise invalid("Invalid type for 'stream_options': expected an object.",
                      "stream_options", TYPE)
    if not stream:
        raise invalid("The 'stream_options' parameter is only allowed when 'stream' is "
                      "enabled.", "stream_options", VALUE)
    unknown = sorted(set(options) - {"include_usage"})
    if unknown:
        raise invalid(f"Unrecognized stream option: {unknown[0][:64]}",
                      f"stream_options.{unknown[0][:64]}", "unknown_parameter")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise invalid("Invalid type for 'stream_options.include_usage': expected a boolean.",
                      "stream_options.include_usage", TYPE)
    return bool(include)


def _messages(document: Mapping[str, Any]) -> tuple[Message, ...]:
    messages = document.get("messages")
    if messages is None:
        raise invalid("Missing required parameter: 'messages'.", "messages",
                      "missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise invalid("Invalid value for 'messages': expected a non-empty array of "
                      "messages.", "messages", TYPE if not isinstance(messages, list)
                      else VALUE)
    llmlimits.check_message_count(len(messages))
    return tuple(_message(message, f"messages[{index}]")
                 for index, message in enumerate(messages))


def _message(message: Any, where: str) -> Message:
    if not isinstance(message, dict):
        raise invalid(f"Invalid type for {where!r}: expected an object.", where, TYPE)
    role = message.get("role")
    if role in ("tool", "function") or "tool_calls" in message or "function_call" in message:
        raise invalid(f"{where}: tool and function calls are not supported.",
                      f"{where}.role", UNSUPPORTED)
    if role not in ROLES:
        raise invalid(f"Invalid value for '{where}.role': one of "
                      f"{', '.join(sorted(ROLES))}.", f"{where}.role", VALUE)
    unknown = sorted(set(message) - MESSAGE_KEYS)
    if unknown:
        raise invalid(f"Unrecognized message field: {unknown[0][:64]}",
                      f"{where}.{unknown[0][:64]}", "unknown_parameter")
    name = _text(message, "name")
    return Message(role, _content(message.get("content"), f"{where}.content"), name)


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"Invalid type for {where!r}: expected a string or an array of text "
                      "parts.", where, TYPE)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            raise invalid(f"{where}[{index}]: only text parts are supported, not "
                          f"{str(kind)[:32]!r}.", f"{where}[{index}].type", UNSUPPORTED)
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"Invalid type for '{where}[{index}].text': expected a string.",
                          f"{where}[{index}].text", TYPE)
        texts.append(text)
    return "".join(texts)


def _prompt(document: Mapping[str, Any]) -> str:
    prompt = document.get("prompt")
    if prompt is None:
        raise invalid("Missing required parameter: 'prompt'.", "prompt",
                      "missing_required_parameter")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(item, str) for item in prompt):
        raise invalid("A batch of prompts is not supported: send one prompt a request.",
                      "prompt", UNSUPPORTED)
    if not isinstance(prompt, str):
        raise invalid("Invalid type for 'prompt': expected a string (token ids are not "
                      "supported).", "prompt", TYPE)
    return prompt


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", str: "a string", int: "an integer", float: "a number",
             list: "an array", dict: "an object"}
    return names.get(type(value), "null" if value is None else "another type")
