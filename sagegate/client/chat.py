"""``sagegate chat MODEL PROMPT``: ask an llm model through sagegate's OpenAI route
(``POST /v1/chat/completions``), its answer written to stdout as its tokens come.

The standard library's ``http.client`` reads the stream (``text/event-stream``: one
``chat.completion.chunk`` a ``data:`` line, ``data: [DONE]`` last), so the command needs no
OpenAI package. Where and with which key it asks is read as the library reads it
(:mod:`sagegate.client.settings`: ``--url``, ``--api-key``, ``--timeout``, else
``SAGEGATE_URL``, ``SAGEGATE_API_KEY``, ``SAGEGATE_TIMEOUT``). A refusal or a failure, before or
during the stream, is one line on stderr and exit status 1.
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import sys
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import IO, Any

from sagegate.client.settings import (
    API_KEY_ENV,
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    URL_ENV,
    ClientSettings,
    seconds_argument,
)

ROUTE = "/v1/chat/completions"
MAX_LINE_BYTES = 1 << 20
"""The longest ``data:`` line read (one chunk is a few hundred bytes)."""
MAX_ERROR_BYTES = 64 * 1024
"""The most of an error answer read."""


class ChatError(Exception):
    """The request failed: the server's refusal (``status`` > 0) or no answer (0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


def request_body(model: str, prompt: str, *, system: str | None = None,
                 max_tokens: int | None = None, temperature: float | None = None,
                 stream: bool = True) -> dict[str, Any]:
    """The chat request: the system message (if any), then the prompt as the user's."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}]
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    return body


def _refusal(status: int, raw: bytes) -> ChatError:
    """An error answer read: OpenAI's ``error`` object, API Gateway's ``message`` (a 403 without
    the key), sagegate's ``Code``/``Message``, else its first bytes."""
    try:
        document = json.loads(raw)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        error = document["error"]
        return ChatError(status, str(error.get("code") or error.get("type") or f"HTTP{status}"),
                         str(error.get("message", "")))
    if isinstance(document, dict) and ("Message" in document or "message" in document):
        return ChatError(status, str(document.get("Code") or f"HTTP{status}"),
                         str(document.get("Message", document.get("message"))))
    return ChatError(status, f"HTTP{status}", raw[:300].decode(errors="replace").strip())


class ChatClient:
    """One chat request to sagegate at ``settings.url``."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        parts = urllib.parse.urlsplit(settings.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{settings.url!r}: the API's URL must be http:// or https://")
        self._parts = parts

    def _connection(self) -> http.client.HTTPConnection:
        parts, timeout = self._parts, self.settings.timeout
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout)
        return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)

    def _send(self, body: dict[str, Any]) -> tuple[http.client.HTTPConnection,
                                                   http.client.HTTPResponse]:
        headers = {"Content-Type": "application/json",
                   "Accept": "text/event-stream" if body["stream"] else "application/json"}
        if self.settings.api_key:
            headers["x-api-key"] = self.settings.api_key
        connection = self._connection()
        try:
            connection.request("POST", self._parts.path.rstrip("/") + ROUTE,
                               json.dumps(body).encode(), headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise ChatError(0, "ConnectionError",
                            f"{self.settings.url}: {error or type(error).__name__}") from None
        if response.status != 200:
            raw = response.read(MAX_ERROR_BYTES)
            connection.close()
            raise _refusal(response.status, raw)
        return connection, response

    def complete(self, body: dict[str, Any]) -> str:
        """The whole answer's text (``stream`` false).

        Raises:
            ChatError: refused, failed, or no connection.
        """
        connection, response = self._send({**body, "stream": False})
        try:
            document = json.loads(response.read())
            return str(document["choices"][0]["message"]["content"] or "")
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError,
                TypeError) as error:
            raise ChatError(0, "InvalidResponse",
                            f"the answer is not a chat completion ({error})") from None
        finally:
            connection.close()

    def stream(self, body: dict[str, Any]) -> Iterator[str]:
        """The answer's pieces of text as they come (``stream`` true).

        Raises:
            ChatError: refused, failed (before or during the stream), or no connection.
        """
        connection, response = self._send({**body, "stream": True})
        try:
            for document in _events(response):
                if isinstance(document.get("error"), dict):
                    raise _refusal(0, json.dumps(document).encode())
                for choice in document.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        yield str(text)
        except (OSError, http.client.HTTPException) as error:
            raise ChatError(0, "StreamBroken",
                            f"the stream broke off ({error or type(error).__name__})") from None
        finally:
            connection.close()


def _events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """Each ``data:`` event's JSON object, until ``[DONE]``.

    Raises:
        ChatError: a line too long or not JSON, or the stream ended without ``[DONE]``.
    """
    while True:
        line = response.readline(MAX_LINE_BYTES)
        if not line:
            raise ChatError(0, "StreamBroken", "the stream ended before its [DONE]")
        if not line.endswith(b"\n") and len(line) >= MAX_LINE_BYTES:
            raise ChatError(0, "InvalidResponse", "a line of the stream is too long")
        if not line.startswith(b"data:"):
            continue  # blank lines between events, comments
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            document = json.loads(data)
        except ValueError:
            raise ChatError(0, "InvalidResponse", "an event of the stream is not JSON") from None
        if isinstance(document, dict):
            yield document


def _tokens(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 1000000")
    return int(text)


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError("must be a number from 0 to 2")
    return value


def parser(prog: str) -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog=prog, description="Ask a language model (an llm model of GET /v1/models) "
        "through sagegate's OpenAI route, POST /v1/chat/completions; the answer is written "
        "to stdout as its tokens come (--no-stream: once it is whole).",
        epilog="Exit codes: 0 answered, 1 refused or failed (one line on stderr: the status, "
        "OpenAI's error code and its message), 2 a usage error.")
    found.add_argument("model", metavar="MODEL", help="the model (e.g. smollm2)")
    found.add_argument("prompt", metavar="PROMPT", help="the user's message")
    found.add_argument("--system", metavar="TEXT", help="a system message before it")
    found.add_argument("--max-tokens", type=_tokens, metavar="N",
                       help="the most tokens to generate (default: the model's)")
    found.add_argument("--temperature", type=_temperature, metavar="T",
                       help="0 (greedy) to 2 (default: the model's)")
    found.add_argument("--no-stream", dest="stream", action="store_false",
                       help="ask for the whole answer at once")
    found.add_argument("--url", help=f"the API (default ${URL_ENV}, else "
                       "http://127.0.0.1:8000: make run)")
    found.add_argument("--api-key", help=f"sent as x-api-key (default ${API_KEY_ENV})")
    found.add_argument("--timeout", type=seconds_argument, metavar="SECONDS",
                       help=f"to connect, and between two pieces of the answer (default "
                       f"${TIMEOUT_ENV}, else {DEFAULT_TIMEOUT_S:g})")
    return found


def run(client: ChatClient, body: dict[str, Any], out: IO[str]) -> None:
    """Write the answer to ``out``, each piece flushed as it comes, then a newline.

    Raises:
        ChatError: refused or failed.
    """
    if not body["stream"]:
        out.write(client.complete(body))
    else:
        written = False
        try:
            for piece in client.stream(body):
                out.write(piece)
                out.flush()
                written = True
        except ChatError:
            if written:  # the error's line on a line of its own
                out.write("\n")
            raise
    out.write("\n")
    out.flush()


def main(argv: Sequence[str] | None = None, prog: str = "sagegate chat") -> int:
    """``sagegate chat``; returns its exit status."""
    arguments = parser(prog)
    args = arguments.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        client = ChatClient(ClientSettings.resolve(args.url, args.api_key, args.timeout))
    except ValueError as error:
        arguments.error(str(error))
    body = request_body(args.model, args.prompt, system=args.system,
                        max_tokens=args.max_tokens, temperature=args.temperature,
                        stream=args.stream)
    try:
        run(client, body, sys.stdout)
    except ChatError as error:
        sys.stdout.flush()
        print(f"{prog}: {error}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
