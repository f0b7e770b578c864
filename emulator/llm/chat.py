"""The chat template: messages to the prompt text the model was trained on.

The template is the model file's own (``tokenizer.chat_template``, ChatML for SmolLM2),
rendered as HF's ``apply_chat_template`` renders it: a sandboxed Jinja environment with
``trim_blocks`` and ``lstrip_blocks``, ``raise_exception`` and ``tojson`` available, and
``add_generation_prompt`` to open the assistant's turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from emulator.llm.errors import GenerationRefused, ModelFileError

ROLES = ("system", "user", "assistant")


def _raise_exception(message: str) -> NoReturn:
    raise GenerationRefused(f"the chat template refused the messages: {message}", "messages")


class ChatTemplate:
    """A model's chat template, compiled once."""

    def __init__(self, source: str, bos_token: str, eos_token: str) -> None:
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise_exception
        environment.filters["tojson"] = lambda value, indent=None: json.dumps(
            value, ensure_ascii=False, indent=indent)
        try:
            self._template = environment.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ModelFileError(f"the model's chat template does not compile: {e}") from e
        self._tokens = {"bos_token": bos_token, "eos_token": eos_token}

    def render(self, messages: Sequence[Mapping[str, Any]],
               add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` (each ``{"role", "content"}``, both strings).

        Raises:
            GenerationRefused: no messages, a message that is not a role and a text, or one
                the template refuses.
        """
        checked = [_message(i, m) for i, m in enumerate(_sequence(messages))]
        if not checked:
            raise GenerationRefused("messages is empty: send at least one message",
                                    "messages")
        return self._template.render(messages=checked,
                                     add_generation_prompt=add_generation_prompt,
                                     **self._tokens)


def _sequence(messages: object) -> Sequence[object]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise GenerationRefused("messages must be a list of {role, content} objects",
                                "messages")
    return messages


def _message(index: int, message: object) -> dict[str, str]:
    if not isinstance(message, Mapping):
        raise GenerationRefused(f"messages[{index}] is not an object", "messages")
    role, content = message.get("role"), message.get("content")
    if role not in ROLES:
        raise GenerationRefused(
            f"messages[{index}].role must be one of {', '.join(ROLES)}, got {role!r}",
            "messages")
    if not isinstance(content, str):
        raise GenerationRefused(f"messages[{index}].content must be a string", "messages")
    return {"role": role, "content": content}
