"""The loopback forwarder behind ``context.rest_uri``: a ``handler`` posts there, as in the
container, and the post becomes a call of the model's endpoint in this process."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from chalicelib.calls import Invoke
from chalicelib.core.errors import (
    SagegateError,
)
from chalicelib.core.media import MediaType
from chalicelib.inference.userfiles.failures import check_batch
from chalicelib.registry.specs import ModelSpec

logger = logging.getLogger("sagegate.handlers")

MAX_FORWARD_BYTES = 10 * 1024 * 1024
"""The largest body a ``handler`` may post to ``context.rest_uri``."""
FORWARD_SOCKET_TIMEOUT = 30.0
"""Seconds the forwarder waits on a silent connection (the endpoint call has its own budget)."""


@dataclasses.dataclass
class ForwardSession:
    """One request's registration with the forwarder: its URL's token, its endpoint call, and
    what happened (how many posts; the endpoint's error, re-raised for the client)."""

    token: str
    invoke: Invoke
    model: ModelSpec
    rest_uri: str = ""
    forwarded: int = 0
    error: BaseException | None = None


_PATH = re.compile(r"/(?P<token>[\w-]{16,64})/v1/models/(?P<name>[^/:?]+)"
                   r"(?:/versions/\d+)?:predict")


class _Forwarder:
    """TF Serving's REST predict URL on 127.0.0.1, for ``handler(data, context)`` files.

    Started on first use (one ``ThreadingHTTPServer`` on a free port, a daemon thread). Each
    request registers a session whose ``rest_uri`` is
    ``http://127.0.0.1:<port>/<token>/v1/models/<name>:predict``: the random token ties a post
    to its request's endpoint call (endpoint, variant, time budget) and keeps other local
    processes out. A post calls the endpoint with the model's content type and accept and
    answers its body (200), or an endpoint error's status with TF Serving's
    ``{"error": message}`` (the error is also kept for the client's answer).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[str, ForwardSession] = {}

    def port(self) -> int:
        """The forwarder's port, starting it if needed."""
        with self._lock:
            if self._server is None or self._thread is None or not self._thread.is_alive():
                server = ThreadingHTTPServer(("127.0.0.1", 0), _ForwardRequest)
                server.daemon_threads = True
                thread = threading.Thread(target=server.serve_forever, name="sagegate-forwarder",
                                          daemon=True)
                thread.start()
                self._server, self._thread = server, thread
            return int(self._server.server_address[1])

    @contextlib.contextmanager
    def session(self, invoke: Invoke, model: ModelSpec) -> Iterator[ForwardSession]:
        """A registration for one request, removed when the request ends."""
        port = self.port()
        session = ForwardSession(secrets.token_urlsafe(24), invoke, model)
        session.rest_uri = f"http://127.0.0.1:{port}/{session.token}/v1/models/{model.name}:predict"
        with self._lock:
            self._sessions[session.token] = session
        try:
            yield session
        finally:
            with self._lock:
                self._sessions.pop(session.token, None)

    def find(self, token: str) -> ForwardSession | None:
        with self._lock:
            return self._sessions.get(token)

    def close(self) -> None:
        """Stop the server (tests); the next request starts another."""
        with self._lock:
            server, self._server, self._thread = self._server, None, None
        if server is not None:
            server.shutdown()
            server.server_close()


FORWARDER = _Forwarder()


class _ForwardRequest(BaseHTTPRequestHandler):
    """One post to ``context.rest_uri``."""

    server_version = "sagegate-forwarder"
    timeout = FORWARD_SOCKET_TIMEOUT

    def do_POST(self) -> None:
        match = _PATH.fullmatch(self.path.split("?", 1)[0])
        session = FORWARDER.find(match["token"]) if match else None
        if match is None or session is None or match["name"] != session.model.name:
            name = match["name"] if match else "?"
            self._error(404, f"Servable not found for request: Latest({name[:64]})")
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            self._error(411, "Content-Length is required")
            return
        if int(length) > MAX_FORWARD_BYTES:
            self.close_connection = True
            self._error(413, f"The body is larger than {MAX_FORWARD_BYTES} bytes")
            return
        body = self.rfile.read(int(length))
        session.forwarded += 1
        model = session.model
        try:
            check_batch(body, model.content_type, "handler")
            result = session.invoke(body, model.content_type, model.accept)
        except SagegateError as error:
            session.error = error
            self._error(error.STATUS_CODE, error.message)
            return
        except Exception as error:  # sagegate's own failure: kept, re-raised for the client
            logger.exception("the forwarder's endpoint call failed")
            session.error = error
            self._error(500, "sagegate failed to call the endpoint")
            return
        self._send(200, result.body, result.content_type)

    def _error(self, status: int, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode(), MediaType.JSON)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("forwarder: " + format, *args)
