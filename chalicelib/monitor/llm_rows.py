"""A language model's capture record as one row of useful columns, without a preprocessor.

A record is a language model's when its output is one of the shapes LLM containers and
OpenAI's API answer (a ``chat.completion`` or ``text_completion`` with ``choices``; LMI's or
TGI's ``{"generated_text", "details"}``, TGI's as a list of one), or when sagegate marked it
(``eventMetadata.sagegateLlm``, written by its OpenAI routes: a failed stream's record has no
output). Flattening such a record key by key would give one column per message and per
choice, none of them what is monitored; this row is (:data:`COLUMNS`):

- ``prompt_tokens``, ``completion_tokens``: sagegate's figures, else the answer's ``usage``
  (LMI's ``details.prompt_tokens`` / ``generated_tokens``);
- ``latency_ms``: the exchange's (``sagegateLatencyMs``); ``time_to_first_token_ms`` a
  stream's, a whole answer's being its latency (its first token comes with its last);
  ``tokens_per_second``;
- ``finish_reason``: ``stop``, ``length``, ... (``error`` for a failed stream, the record's
  ``partial``, ``client_disconnected``, for an answer its client left);
- ``prompt_chars``, ``completion_chars``: the prompt's (the messages' text) and the answer's
  length in characters.

A figure the record does not hold is left out of the row (a missing value).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

LLM_KEY = "sagegateLlm"  # chalicelib.capture.records' (the monitor imports no other room)
LATENCY_KEY = "sagegateLatencyMs"
ERROR_KEY = "sagegateError"
COLUMNS = ("prompt_tokens", "completion_tokens", "latency_ms", "time_to_first_token_ms",
           "tokens_per_second", "finish_reason", "prompt_chars", "completion_chars")
MAX_BYTES = 1 << 20
"""An output past this size is not read as an answer (no LLM answer is that large here)."""
_MARKS = ('"choices"', '"generated_text"')
_COMPLETIONS = ("chat.completion", "text_completion")


def llm_row(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record's row (module docstring), or None when it is not a language model's."""
    capture = record.get("captureData")
    metadata = record.get("eventMetadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    figures = metadata.get(LLM_KEY)
    figures = figures if isinstance(figures, dict) else None
    answer = _answer(capture.get("endpointOutput") if isinstance(capture, dict) else None)
    if answer is None and figures is None:
        return None
    request = _json_side(capture.get("endpointInput") if isinstance(capture, dict) else None)
    text, reason, usage = _read_answer(answer)
    figures = figures or {}
    row: dict[str, Any] = {
        "prompt_tokens": _number(figures.get("promptTokens"), usage.get("prompt_tokens")),
        "completion_tokens": _number(figures.get("completionTokens"),
                                     usage.get("completion_tokens")),
        "latency_ms": _number(metadata.get(LATENCY_KEY)),
        "tokens_per_second": _number(figures.get("tokensPerSecond")),
        "finish_reason": _finish(figures, metadata, reason),
        "prompt_chars": _prompt_chars(request),
        "completion_chars": None if answer is None else len(text)}
    row["time_to_first_token_ms"] = _number(figures.get("timeToFirstTokenMs")) \
        if figures.get("streamed") else row["latency_ms"]
    return {name: row[name] for name in COLUMNS if row[name] is not None}


def _answer(side: Any) -> Any:
    """The output's document when it is an LLM answer's shape, else None."""
    if not isinstance(side, dict) or side.get("encoding") != "JSON":
        return None
    data = side.get("data")
    if not isinstance(data, str) or len(data) > MAX_BYTES or not any(
            mark in data for mark in _MARKS):
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if isinstance(document, list) and len(document) == 1:  # TGI's
        document = document[0]
    if not isinstance(document, dict):
        return None
    if isinstance(document.get("generated_text"), str):
        return document
    choices = document.get("choices")
    if document.get("object") in _COMPLETIONS and isinstance(choices, list):
        return document
    return None


def _json_side(side: Any) -> Any:
    if not isinstance(side, dict) or side.get("encoding") != "JSON":
        return None
    data = side.get("data")
    if not isinstance(data, str) or len(data) > MAX_BYTES:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _read_answer(answer: Any) -> tuple[str, str | None, Mapping[str, Any]]:
    """The answer's text, finish reason and usage (OpenAI's names)."""
    if not isinstance(answer, dict):
        return "", None, {}
    if "generated_text" in answer:
        details = answer.get("details")
        details = details if isinstance(details, dict) else {}
        return answer["generated_text"], _text(details.get("finish_reason")), {
            "prompt_tokens": details.get("prompt_tokens"),
            "completion_tokens": details.get("generated_tokens")}
    usage = answer.get("usage")
    choices = answer["choices"]
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return text if isinstance(text, str) else "", _text(choice.get("finish_reason")), \
        usage if isinstance(usage, dict) else {}


def _finish(figures: Mapping[str, Any], metadata: Mapping[str, Any],
            reason: str | None) -> str | None:
    if metadata.get(ERROR_KEY) is not None:
        return "error"
    return _text(figures.get("partial")) or reason or _text(figures.get("finishReason"))


def _prompt_chars(request: Any) -> int | None:
    """The prompt's characters: a chat's messages' text, else ``prompt`` or ``inputs``."""
    if not isinstance(request, dict):
        return None
    messages = request.get("messages")
    if isinstance(messages, list):
        return sum(len(_content(message.get("content"))) for message in messages
                   if isinstance(message, dict))
    for key in ("prompt", "inputs"):
        if isinstance(request.get(key), str):
            return len(request[key])
    return None


def _content(content: Any) -> str:
    """A message's text (a string, or a list of ``{"type": "text", "text"}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _number(*values: Any) -> int | float | None:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
