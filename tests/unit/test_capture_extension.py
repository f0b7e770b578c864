"""The capture extension's promises, each against a fake Extensions API on 127.0.0.1: the flush
leaves the deadline margin, waits for the handler to end, a registration without an
identifier is refused, the in-handler flush (no extension) leaves the margin too, and
SnapStart, as :mod:`chalicelib.core.lifecycle` detects it, registers nothing."""
from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from chalicelib.capture import extension as extension_module
from chalicelib.capture.extension import (
    DEADLINE_MARGIN_SECONDS,
    RUNTIME_API,
    AfterHandlers,
    CaptureExtension,
)
from chalicelib.core import lifecycle
from chalicelib.core.pending import Pending

NOW = 1_800_000_000.0  # the extension's clock, in epoch seconds
STOP = {"stop": True}  # what makes the fake API end the extension's loop (an error answer)


class FakeExtensionsApi:
    """Lambda's side: answers the registration (with an identifier, or without one when
    ``identifier`` is empty) and hands out the events the test queues, one per next call."""

    def __init__(self, identifier: str = "ext-1") -> None:
        self.registrations: list[dict[str, Any]] = []
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                api.registrations.append(json.loads(body))
                self.send_response(200)
                if identifier:
                    self.send_header("Lambda-Extension-Identifier", identifier)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_GET(self) -> None:
                event = api.events.get(timeout=30)
                body = json.dumps(event).encode()
                self.send_response(500 if event is STOP else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def invoke(self, seconds_left: float) -> None:
        self.events.put({"eventType": "INVOKE", "requestId": "req-1",
                         "deadlineMs": int((NOW + seconds_left) * 1000)})

    def close(self) -> None:
        self.events.put(STOP)  # an extension still asking for events stops
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[FakeExtensionsApi]:
    fake = FakeExtensionsApi()
    yield fake
    fake.close()


class Flushes:
    """A flush that notes its timeout and how many handlers had ended when it was called."""

    def __init__(self, finished: Pending) -> None:
        self.finished = finished
        self.calls: list[tuple[float | None, int]] = []
        self.called = threading.Event()

    def __call__(self, timeout: float | None) -> bool:
        self.calls.append((timeout, self.finished.settled))
        self.called.set()
        return True


class WatchedFinished(Pending):
    """The handlers' count, saying when the extension starts waiting on it."""

    def __init__(self, progress: threading.Event) -> None:
        super().__init__()
        self.progress = progress
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        self.progress.set()
        return super().wait(timeout)


def running(api: FakeExtensionsApi, flush: Flushes, finished: Pending) -> CaptureExtension:
    extension = CaptureExtension(api.address, flush, finished, clock=lambda: NOW)
    extension.register()
    extension.start()
    return extension


def test_the_flush_leaves_the_deadline_margin_of_the_invocations_time(
        api: FakeExtensionsApi) -> None:
    finished = Pending()
    flush = Flushes(finished)
    extension = running(api, flush, finished)
    extension.handler_ended()  # the handler is done: only the flush's timeout is left to see
    api.invoke(seconds_left=10.0)
    assert flush.called.wait(10)
    assert DEADLINE_MARGIN_SECONDS == 0.5  # the next call must still be made after the flush
    assert flush.calls == [(pytest.approx(9.5), 1)]
    flush.called.clear()
    extension.handler_ended()
    api.invoke(seconds_left=0.2)  # less than the margin: no time at all, never a negative one
    assert flush.called.wait(10)
    assert flush.calls[-1] == (0.0, 2)


def test_the_flush_waits_for_the_handler_to_end(api: FakeExtensionsApi) -> None:
    progress = threading.Event()  # the extension either waits for the handler or flushes
    finished = WatchedFinished(progress)
    flush = Flushes(finished)
    flush.called = progress
    extension = running(api, flush, finished)
    api.invoke(seconds_left=60.0)
    try:
        assert progress.wait(10)
        assert finished.waiting.is_set() and flush.calls == []  # waiting, nothing flushed yet
    finally:
        extension.handler_ended()  # the handler returned: the response is on its way
    for _ in range(100):
        if flush.calls:
            break
        threading.Event().wait(0.1)
    assert flush.calls and flush.calls[0][1] == 1  # flushed after the handler's end only


def test_a_registration_answered_without_an_identifier_is_refused() -> None:
    api = FakeExtensionsApi(identifier="")
    try:
        extension = CaptureExtension(api.address, Flushes(Pending()))
        with pytest.raises(ValueError, match="registration"):
            extension.register()
        # start() logs it and runs without the extension: the handler flushes instead
        assert extension_module.start(Flushes(Pending()), {RUNTIME_API: api.address}) is None
        assert len(api.registrations) == 2
    finally:
        api.close()


def test_without_the_extension_the_handlers_flush_leaves_the_margin_too() -> None:
    timeouts: list[float | None] = []

    def flush(timeout: float | None) -> bool:
        timeouts.append(timeout)
        return True

    on_lambda = AfterHandlers(flush, None, on_lambda=True)
    on_lambda.handler_ended(remaining_seconds=3.0)
    on_lambda.handler_ended(remaining_seconds=0.2)
    on_lambda.handler_ended(remaining_seconds=None)
    assert timeouts == [pytest.approx(3.0 - DEADLINE_MARGIN_SECONDS), 0.0, None]
    assert DEADLINE_MARGIN_SECONDS > 0  # what is left of the invocation's 3 s, less a margin
    AfterHandlers(flush, None, on_lambda=False).handler_ended(remaining_seconds=3.0)
    assert len(timeouts) == 3  # chalice local: the writer's thread stores them, no flush


@pytest.mark.parametrize(("init_type", "registers"), [
    ("snap-start", False),  # the value Lambda sets under SnapStart
    ("on-demand", True),
    ("provisioned-concurrency", True),
])
def test_snapstart_registers_no_extension(api: FakeExtensionsApi, init_type: str,
                                          registers: bool) -> None:
    environ = {RUNTIME_API: api.address, "AWS_LAMBDA_INITIALIZATION_TYPE": init_type}
    started = extension_module.start(Flushes(Pending()), environ)
    assert (started is not None) == registers
    assert len(api.registrations) == int(registers)


def test_snapstart_is_what_lifecycle_detects(api: FakeExtensionsApi,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """One detection of SnapStart, lifecycle's: the extension asks it, with the environment
    it was given."""
    asked: list[dict[str, str]] = []

    def snap_start(environ: dict[str, str] | None = None) -> bool:
        asked.append(dict(environ or {}))
        return True

    monkeypatch.setattr(lifecycle, "snap_start", snap_start)
    environ = {RUNTIME_API: api.address}
    assert extension_module.start(Flushes(Pending()), environ) is None
    assert asked == [environ] and api.registrations == []
    assert lifecycle.SNAP_START == "snap-start"
