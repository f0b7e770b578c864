"""A container's stream read line by line, and OpenAI's stream written.

:func:`lines` joins the stream's parts and splits them on newlines: one JSON line may come in
two ``PayloadPart`` events (real containers do this), and TGI and LMI's SSE formatter prefix
their lines with ``data:``. :class:`Chunks` makes OpenAI's ``chat.completion.chunk`` (or
``text_completion``) objects: the first with the role, content deltas, the last with the
finish reason, and, when asked, one with the usage and no choices; :func:`sse` frames one as a
``data:`` line; :data:`DONE` ends the stream.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import Any

from chalicelib.core.errors import InvalidEndpointResponseError
from chalicelib.llm.requests import Operation

DONE = b"data: [DONE]\n\n"
MAX_LINE_BYTES = 1024 * 1024
"""The longest line a container's stream may send (a token's, or the last with the whole text
and its details): a longer one is refused, never buffered on."""
_SSE_FIELDS = (b"event:", b"id:", b"retry:")


def lines(parts: Iterable[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Each non-empty line of the stream whose parts are ``parts``, without its newline or
    its ``data:`` prefix (SSE's other fields, comments and ``[DONE]`` left out).

    Raises:
        InvalidEndpointResponseError: a line over ``max_line_bytes`` (the container's stream
            is not lines of tokens; it is never held whole).
    """
    pending = bytearray()
    for part in parts:
        scanned = len(pending)  # the bytes before this part hold no newline
        pending += part
        start = 0
        while (end := pending.find(b"\n", max(start, scanned))) >= 0:
            _check_length(end - start, max_line_bytes)
            line = _payload(bytes(pending[start:end]))
            start = end + 1
            if line:
                yield line
        del pending[:start]
        _check_length(len(pending), max_line_bytes)
    line = _payload(bytes(pending))
    if line:
        yield line


def _check_length(size: int, limit: int) -> None:
    if size > limit:
        raise InvalidEndpointResponseError(
            f"A line of the model's stream is over {limit} bytes.")


def _payload(line: bytes) -> bytes:
    line = line.strip()
    if line.startswith(b"data:"):
        line = line[5:].strip()
        return b"" if line == b"[DONE]" else line
    if line.startswith(b":") or line.startswith(_SSE_FIELDS):
        return b""
    return line


def sse(document: Any) -> bytes:
    """One ``data:`` event."""
    return b"data: " + json.dumps(document, separators=(",", ":")).encode() + b"\n\n"


@dataclasses.dataclass(frozen=True)
class Chunks:
    """The chunks of one streamed answer (``include_usage``: every chunk has ``usage``, null
    but the last one's, as OpenAI's)."""

    operation: Operation
    completion_id: str
    created: int
    model: str
    include_usage: bool = False

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk" if self.operation == Operation.CHAT
            else "text_completion",
            "created": self.created, "model": self.model, "system_fingerprint": None,
            "choices": choices}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _choice(self, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if self.operation == Operation.TEXT:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def first(self) -> dict[str, Any]:
        """The chunk that opens the answer: the assistant's role, no text yet."""
        return self._chunk([self._choice("", None, role=True)])

    def delta(self, text: str) -> dict[str, Any]:
        """Some text of the answer."""
        return self._chunk([self._choice(text, None)])

    def finish(self, reason: str) -> dict[str, Any]:
        """The last chunk of the choice: why it ended."""
        return self._chunk([self._choice(None, reason)])

    def usage(self, usage: dict[str, int]) -> dict[str, Any]:
        """The usage chunk (``stream_options.include_usage``): no choices."""
        return {**self._chunk([]), "usage": usage}

    def passed(self, chunk: Any) -> dict[str, Any]:
        """An ``openai`` container's own chunk, under this answer's id and model name."""
        return {**chunk, "id": self.completion_id, "model": self.model}
