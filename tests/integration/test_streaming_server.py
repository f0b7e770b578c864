"""The streaming server of ``make run`` (:mod:`sagegate.local.chalice_local`) on 127.0.0.1, in
this process, in front of a small Chalice app whose completion route streams bodies made here
(``serve_streaming`` replaced by one handing out :class:`Body` objects): what the server does
with slow, hostile and HTTP/1.0 clients, too many streams at once, and the order in which it
ends an answer and closes its body. The model's own streams are
``test_streaming_local.py``'s."""
from __future__ import annotations

import functools
import json
import queue
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from chalice import Chalice, CORSConfig
from chalice.config import Config

from chalicelib.http import completions
from chalicelib.llm.streams import DONE
from sagegate.local import chalice_local
from sagegate.local.chalice_local import (
    MAX_STREAMS_ENV,
    SOCKET_TIMEOUT,
    BackloggedServer,
    NoDelayRequestHandler,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY = "k" * 40
LIMIT = 4096
ORIGIN = "https://app.example"
STREAM = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
EVENTS = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', DONE]
SSE = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


@dataclass
class Body:
    """A stream's body as ``serve_streaming`` gives it: its events, then (``closes_at_end``, as
    ``LoggedBody`` does today) its own close when iterated past its end; ``close`` is the
    bookkeeping, and notes whether the client had the whole answer by then."""

    events: list[bytes] = field(default_factory=lambda: list(EVENTS))
    closes_at_end: bool = False
    endless: bool = False
    fail_after: int | None = None
    hold: threading.Event | None = None
    """Set: the last event waits for it."""
    closes: int = 0
    client_has_all: threading.Event = field(default_factory=threading.Event)
    had_all_at_close: bool | None = None
    closed: threading.Event = field(default_factory=threading.Event)
    given: int = 0

    def __iter__(self) -> Body:
        return self

    def __next__(self) -> bytes:
        if self.fail_after is not None and self.given == self.fail_after:
            raise RuntimeError("a defect in the body")
        if self.endless:
            self.given += 1
            return b"data: " + b"x" * 4000 + b"\n\n"
        if self.given == len(self.events):
            if self.closes_at_end:
                self.close()
            raise StopIteration
        if self.hold is not None and self.given == len(self.events) - 1:
            assert self.hold.wait(30)
        self.given += 1
        return self.events[self.given - 1]

    def close(self) -> None:
        self.closes += 1
        if self.closes == 1:
            self.had_all_at_close = self.client_has_all.wait(3)
            self.closed.set()


def small_app() -> Chalice:
    app = Chalice("streams")

    @app.route("/v1/chat/completions", methods=["POST"], api_key_required=True,
               cors=CORSConfig(allow_origin=ORIGIN))
    def chat() -> dict[str, Any]:
        return {"whole": True}

    @app.route("/open", methods=["GET"])
    def open_route() -> dict[str, Any]:
        return {"open": True}

    return app


class Server:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bodies: queue.Queue[Body | Exception] = queue.Queue()
        services = SimpleNamespace(settings=SimpleNamespace(max_body_bytes=LIMIT), llm=None,
                                   handler_ended=lambda context: None)
        monkeypatch.setitem(sys.modules, "app", SimpleNamespace(exchanges=None,
                                                                services=services))
        monkeypatch.setattr(completions, "serve_streaming", self._serve)
        handler = functools.partial(NoDelayRequestHandler, app_object=small_app(),
                                    config=Config(), api_key=KEY)
        self.server = BackloggedServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _serve(self, llm: Any, exchanges: Any, request: Any) -> tuple[int, dict[str, str], Body]:
        body = self.bodies.get(timeout=10)
        if isinstance(body, Exception):
            raise body
        return 200, dict(SSE), body

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setattr(NoDelayRequestHandler, "timeout", 2.0)
    monkeypatch.setenv(MAX_STREAMS_ENV, "2")
    running = Server(monkeypatch)
    try:
        yield running
    finally:
        running.stop()


class Client:
    """A raw HTTP client: the request as given, the answer's head read, its body on demand."""

    def __init__(self, server: Server, *, body: bytes = STREAM, version: str = "HTTP/1.1",
                 length: str | None = None, extra: tuple[str, ...] = (),
                 send_body: bool = True, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(30)
        self.sock.connect(("127.0.0.1", server.port))
        self.reader = self.sock.makefile("rb")
        head = [f"POST /v1/chat/completions {version}", "Host: 127.0.0.1",
                "Content-Type: application/json", f"x-api-key: {KEY}",
                f"Content-Length: {len(body) if length is None else length}", *extra]
        self.sock.sendall("\r\n".join(head).encode("latin-1") + b"\r\n\r\n"
                          + (body if send_body else b""))

    def head(self) -> tuple[int, dict[str, str]]:
        status = int(self.reader.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := self.reader.readline().decode("latin-1").strip()):
            name, value = line.split(":", 1)
            headers[name.lower()] = value.strip()
        return status, headers

    def chunks(self) -> Iterator[bytes]:
        while (size := int(self.reader.readline().strip(), 16)):
            data = self.reader.read(size)
            assert self.reader.read(2) == b"\r\n"
            yield data
        assert self.reader.read(2) == b"\r\n"

    def json(self, headers: dict[str, str]) -> Any:
        return json.loads(self.reader.read(int(headers["content-length"])))

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def test_the_socket_timeout_is_set() -> None:
    assert NoDelayRequestHandler.timeout == SOCKET_TIMEOUT == 60.0


def test_a_client_trickling_its_body_is_let_go(server: Server) -> None:
    client = Client(server, body=STREAM[:10], length=str(len(STREAM)))
    try:
        assert client.sock.recv(1) == b""  # the server closed it after its timeout
    finally:
        client.close()


def test_a_client_that_stops_reading_is_let_go_and_its_stream_closed(server: Server) -> None:
    body = Body(endless=True)
    server.bodies.put(body)
    client = Client(server, rcvbuf=4096)
    try:
        assert client.head()[0] == 200
        assert body.closed.wait(60)  # the write blocked, timed out: the client taken as gone
        assert body.closes == 1
    finally:
        client.close()


def test_keep_alive_still_serves_other_routes(server: Server) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    reader = sock.makefile("rb")
    try:
        for _ in range(2):
            sock.sendall(b"GET /open HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert reader.readline().split()[1] == b"200"
            length = 0
            while (line := reader.readline().strip()):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            assert json.loads(reader.read(length)) == {"open": True}
        assert sock.recv(1) == b""  # an idle connection closed after the timeout
    finally:
        reader.close()
        sock.close()


def test_streams_past_the_limit_get_openais_429(server: Server) -> None:
    release = threading.Event()
    held = [Body(hold=release), Body(hold=release)]
    for body in held:
        server.bodies.put(body)
    streams = [Client(server) for _ in held]
    try:
        for stream in streams:
            assert stream.head()[0] == 200
            assert next(stream.chunks()) == EVENTS[0]  # both streams running
        refused = Client(server)
        status, headers = refused.head()
        assert status == 429
        assert headers["retry-after"] == "1"
        assert headers["access-control-allow-origin"] == ORIGIN
        error = refused.json(headers)["error"]
        assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
        refused.close()
        release.set()
        for stream, body in zip(streams, held, strict=True):
            assert list(stream.chunks()) == EVENTS[1:]
            body.client_has_all.set()
    finally:
        release.set()
        for stream in streams:
            stream.close()
    for body in held:
        assert body.closed.wait(10)
    server.bodies.put(Body())
    deadline = time.monotonic() + 10  # (a stream's slot is freed just after its body closed)
    while True:
        again = Client(server)
        status, headers = again.head()
        if status != 429 or time.monotonic() > deadline:
            break
        again.close()
        time.sleep(0.05)
    try:
        assert status == 200
        assert list(again.chunks()) == EVENTS
    finally:
        again.close()


def test_expect_100_over_the_limit_gets_its_413_before_any_100(server: Server) -> None:
    client = Client(server, length=str(LIMIT + 1), extra=("Expect: 100-continue",),
                    send_body=False)
    try:
        status, headers = client.head()
        assert status == 413
        assert client.json(headers)["error"]["code"] == "request_too_large"
        assert headers["connection"] == "close"
    finally:
        client.close()


def test_expect_100_within_the_limit_continues(server: Server) -> None:
    server.bodies.put(Body())
    client = Client(server, extra=("Expect: 100-continue",), send_body=False)
    try:
        assert client.head()[0] == 100
        client.sock.sendall(STREAM)
        assert client.head()[0] == 200
        assert list(client.chunks()) == EVENTS
    finally:
        client.close()


def test_an_http_1_0_client_gets_the_raw_events_and_the_connection_closed(
        server: Server) -> None:
    body = Body()
    server.bodies.put(body)
    client = Client(server, version="HTTP/1.0")
    try:
        status, headers = client.head()
        assert status == 200 and "transfer-encoding" not in headers
        assert headers["connection"] == "close"
        assert client.reader.read() == b"".join(EVENTS)  # until the server closed it
        body.client_has_all.set()
    finally:
        client.close()
    assert body.closed.wait(10)
    assert body.had_all_at_close and body.closes == 1


@pytest.mark.parametrize("length", ["\u00b2", "\u00b9", "1_0", "+5"])
def test_a_length_that_is_not_ascii_digits_gets_400(server: Server, length: str) -> None:
    client = Client(server, length=length, send_body=False)
    try:
        status, headers = client.head()
        assert status == 400
        assert client.json(headers)["error"]["code"] == "invalid_value"
    finally:
        client.close()


@pytest.mark.parametrize(("request_line", "error"), [
    ("GET /open HTTP/1.1", {"Code": "BadRequest",
                            "Message": "Content-Length is not a number of bytes."}),
    ("GET /v1/models HTTP/1.1", {"error": {
        "message": "Content-Length is not a number of bytes.", "type": "invalid_request_error",
        "param": None, "code": "invalid_value"}})])
def test_a_length_that_is_not_ascii_digits_gets_400_on_chalices_routes(
        server: Server, request_line: str, error: dict[str, Any]) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(f"{request_line}\r\nHost: 127.0.0.1\r\nContent-Length: \u00b2\r\n\r\n"
                     .encode("latin-1"))
        head, _, body = sock.makefile("rb").read().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body) == error


@pytest.mark.parametrize("closes_at_end", [False, True])
def test_the_answer_ends_before_its_body_is_closed_once(server: Server,
                                                       closes_at_end: bool) -> None:
    body = Body(closes_at_end=closes_at_end)
    server.bodies.put(body)
    client = Client(server)
    try:
        assert client.head()[0] == 200
        assert list(client.chunks()) == EVENTS
        body.client_has_all.set()
        assert body.closed.wait(10)
    finally:
        client.close()
    assert body.had_all_at_close is True
    deadline = time.monotonic() + 10  # (the handler's last steps run after the client's read)
    while body.given < len(EVENTS) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert body.closes == 1


def test_a_client_gone_mid_stream_closes_the_body_once(server: Server) -> None:
    body = Body(endless=True)
    server.bodies.put(body)
    client = Client(server)
    assert client.head()[0] == 200
    next(client.chunks())
    client.close()
    assert body.closed.wait(30)
    assert body.closes == 1


def test_a_body_that_fails_ends_the_stream_with_an_error_event(server: Server) -> None:
    body = Body(fail_after=1)
    server.bodies.put(body)
    client = Client(server)
    try:
        assert client.head()[0] == 200
        first, error = list(client.chunks())
        assert first == EVENTS[0]
        assert json.loads(error.removeprefix(b"data: "))["error"]["type"] == "server_error"
        body.client_has_all.set()
    finally:
        client.close()
    assert body.closed.wait(10) and body.closes == 1


def test_a_failure_before_the_answer_is_openais_500(server: Server) -> None:
    server.bodies.put(RuntimeError("a defect"))
    client = Client(server)
    try:
        status, headers = client.head()
        assert status == 500
        assert client.json(headers) == {"error": {
            "message": "Internal server error.", "type": "server_error", "param": None,
            "code": "internal_error"}}
    finally:
        client.close()


def test_the_stream_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_STREAMS_ENV, "3")
    assert chalice_local.max_streams() == 3
    monkeypatch.delenv(MAX_STREAMS_ENV)
    assert chalice_local.max_streams() == chalice_local.MAX_STREAMS
    for wrong in ("0", "-1", "many", "\u00b2"):
        monkeypatch.setenv(MAX_STREAMS_ENV, wrong)
        with pytest.raises(SystemExit, match=MAX_STREAMS_ENV):
            chalice_local.max_streams()
