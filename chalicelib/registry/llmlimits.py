"""A language model's limits (model.json's ``llm.limits``, :class:`~.specs.LlmSpec`), checked
one way for both of its doors: OpenAI's routes (``chalicelib.llm.requests``, which word a
refusal in OpenAI's shape) and the model route (``chalicelib.kinds.llm``, sagegate's
``{"Code", "Message"}``). Each refusal names the field (``param``) and OpenAI's code for it.

A prompt's size is its UTF-8 bytes; a chat prompt's, each message's role, name and text plus
``MESSAGE_FRAMING_BYTES`` (what a chat template wraps a message in), so that a long ``name``
or a great many empty messages count as what the container is sent. A chat holds at most
``MAX_MESSAGES`` messages.
"""
from __future__ import annotations

import json
from typing import Any

from chalicelib.registry.specs import LlmSpec

MAX_MESSAGES = 1024
"""The most messages a chat request may hold: sagegate's own bound (a container renders each
through its chat template; the emulator's container keeps the same), refused in OpenAI's words
for an array over its length."""
MESSAGE_FRAMING_BYTES = 24
"""What a chat template adds around one message: ChatML's ``<|im_start|>``, the role's line
end, ``<|im_end|>`` and a newline are 25 bytes; OpenAI counts 3 to 4 tokens a message."""
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
INVALID_VALUE = "invalid_value"
ARRAY_TOO_LONG = "array_above_max_length"


class LimitExceeded(ValueError):
    """A request over one of the model's limits: ``param`` the field, ``code`` OpenAI's."""

    def __init__(self, message: str, param: str, code: str) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def check_max_tokens(value: float, param: str, spec: LlmSpec) -> None:
    """The token limit ``param`` (``max_tokens``, LMI's ``parameters.max_new_tokens``...) is
    within the model's ceiling.

    Raises:
        LimitExceeded: over the ceiling.
    """
    if value > spec.max_tokens_ceiling:
        shown = int(value) if float(value).is_integer() else value
        raise LimitExceeded(f"{param!r} is {shown}; this model gives at most "
                            f"{spec.max_tokens_ceiling} tokens.", param, INVALID_VALUE)


def check_message_count(count: int, param: str = "messages") -> None:
    """A chat's number of messages, at most ``MAX_MESSAGES``.

    Raises:
        LimitExceeded: more.
    """
    if count > MAX_MESSAGES:
        raise LimitExceeded(f"Invalid {param!r}: array too long. Expected an array with "
                            f"maximum length {MAX_MESSAGES}, but got an array with length "
                            f"{count} instead.", param, ARRAY_TOO_LONG)


def message_bytes(role: Any, content: Any, name: Any = None) -> int:
    """One chat message's share of its prompt (see the module): a value that is not text
    (content parts, say) counts as its JSON."""
    return MESSAGE_FRAMING_BYTES + size(role) + size(content) + (0 if name is None
                                                                  else size(name))


def size(value: Any) -> int:
    """UTF-8 bytes of a text, else of ``value``'s JSON."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    try:
        return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        return 0


def check_prompt_bytes(prompt_bytes: int, param: str, model: str, spec: LlmSpec) -> None:
    """A prompt's size, at most the model's ``max_prompt_bytes``.

    Raises:
        LimitExceeded: larger (OpenAI's ``context_length_exceeded``).
    """
    if prompt_bytes > spec.max_prompt_bytes:
        raise LimitExceeded(f"The prompt is {prompt_bytes} bytes; model {model!r} takes at "
                            f"most {spec.max_prompt_bytes}.", param, CONTEXT_LENGTH_EXCEEDED)
