"""HTTP front of the emulator: SageMaker runtime routes and the container contract.

``POST /endpoints/{EndpointName}/invocations``  InvokeEndpoint (rest-json, SigV4 not checked)
``POST /endpoints/{EndpointName}/invocations-response-stream``  InvokeEndpointWithResponse-
                                               Stream (chunked, AWS event stream framing)
``POST /endpoints/{EndpointName}/async-invocations``  InvokeEndpointAsync (202, queued)
``GET /emulator/generations``                  the language models' generation counts
``POST /invocations``                          the default endpoint's container, raw answers
``GET /ping``                                  container health check
"""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import cast
from urllib.parse import unquote, urlsplit

from emulator import errors, eventstream, faults
from emulator.asyncinvoke import AsyncInference, AsyncRequest
from emulator.container import ContainerReply
from emulator.runtime import InvokeRequest, Runtime, StreamResult

LOG = logging.getLogger("emulator")
ENDPOINT_PATH = re.compile(r"/endpoints/([^/]+)/invocations")
ASYNC_PATH = re.compile(r"/endpoints/([^/]+)/async-invocations")
STREAM_PATH = re.compile(r"/endpoints/([^/]+)/invocations-response-stream")
EVENT_STREAM = "application/vnd.amazon.eventstream"
DRAIN_LIMIT = 64 * 1024 * 1024
"""Oversized bodies up to this are read and dropped so the client sees the 400, not a reset."""
CHUNK = 256 * 1024
IDLE_TIMEOUT_S = 120.0
CLIENT_GONE = (ConnectionError, TimeoutError)
"""What a socket raises when the client went away or stalled: logged in one line, not a
traceback (BrokenPipeError and ConnectionResetError are ConnectionErrors)."""


class UnreadableBody(Exception):
    """The request body cannot be read (bad framing, or too large to drain)."""


@dataclass
class Answer:
    """A complete HTTP answer plus a note for the request log."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    note: str = ""
    stream: StreamResult | None = None
    """Set for a response stream: its events are sent as they are made, chunked."""


class InFlight:
    """Counts requests being answered, so that shutdown can let them finish."""

    def __init__(self) -> None:
        self._count = 0
        self._idle = threading.Condition()

    def __enter__(self) -> None:
        with self._idle:
            self._count += 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._idle:
            self._count -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Waits until no request is being answered; returns False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout)


def _host(client_address: object) -> str:
    if isinstance(client_address, tuple) and client_address:
        return str(client_address[0])
    return str(client_address)


class EmulatorServer(ThreadingHTTPServer):
    """A threaded HTTP/1.1 server; one daemon thread per connection."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    """The listen backlog: socketserver's default of 5 resets bursts of new connections."""

    def __init__(
        self, address: tuple[str, int], runtime: Runtime,
        asynchronous: AsyncInference | None = None,
    ) -> None:
        """Binds and listens on ``address``; ``serve_forever()`` then answers.

        Args:
            address: ``(host, port)``.
            runtime: the real-time runtime.
            asynchronous: the queues of the asynchronous endpoints (None: there are none).
        """
        self.runtime = runtime
        self.asynchronous = asynchronous
        self.in_flight = InFlight()
        super().__init__(address, Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        """Logs a connection's failure: one line when the client went away, else the
        traceback (in the log only; the client never sees it)."""
        error = sys.exc_info()[1]
        if isinstance(error, CLIENT_GONE):
            LOG.info("%s connection closed by the client (%s)", _host(client_address),
                     type(error).__name__)  # fmt: skip
            return
        LOG.exception("connection from %s failed", _host(client_address))

    @property
    def url(self) -> str:
        """The base URL clients use."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


def _too_large_message() -> str:
    constraint = f"Member must have length less than or equal to {errors.MAX_BODY_BYTES}"
    return errors.validation_error([errors.violation("body", None, constraint)]).message


def _error_answer(error: errors.EmulatorError) -> Answer:
    status, headers, body = errors.render(error)
    return Answer(status, body, headers, note=error.CODE)


def _reply_answer(reply: ContainerReply, attributes: str | None) -> Answer:
    headers = {"Content-Type": reply.content_type}
    if attributes is not None:
        headers["X-Amzn-SageMaker-Custom-Attributes"] = attributes
    return Answer(reply.status, reply.body, headers)


class Handler(BaseHTTPRequestHandler):
    """Answers one connection's requests (keep-alive, TCP_NODELAY)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT_S
    server_version = "sagegate-emulator"
    sys_version = ""

    def handle_one_request(self) -> None:
        """Waits for the next request's first byte, then reads and answers it. A keep-alive
        connection left idle past :data:`IDLE_TIMEOUT_S` is closed without a log line (the
        client did nothing wrong); a request that stalls once begun is still logged."""
        try:
            waiting = self.rfile.peek(1)  # type: ignore[attr-defined]  # a BufferedReader
        except TimeoutError:
            self.close_connection = True
            return
        if not waiting:  # the client closed it
            self.close_connection = True
            return
        super().handle_one_request()

    def do_GET(self) -> None:
        """Answers a GET."""
        self._serve()

    def do_POST(self) -> None:
        """Answers a POST."""
        self._serve()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Does nothing: :meth:`_serve` logs one line per request itself."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answers http.server's own refusals (bad request line, too many or too long headers)
        with the rest-json error envelope instead of an HTML page, then closes."""
        self.close_connection = True
        self.request_version = self.protocol_version  # never answer as HTTP/0.9 (bare body)
        error: errors.EmulatorError = errors.ValidationError(message or explain or "bad request")
        if code >= 500:
            error = errors.InternalFailure(message or "An internal failure occurred.")
        _, headers, body = errors.render(error)
        self.log_error("code %d, message %s", code, message)
        self.send_response(code, message)
        for name, value in {**headers, "Content-Length": str(len(body)),
                            "Connection": "close"}.items():  # fmt: skip
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Sends http.server's own messages (malformed requests ...) to the log."""
        LOG.info("%s %s", self.address_string(), format % args)

    @property
    def emulator(self) -> EmulatorServer:
        """The server, with its runtime."""
        return cast(EmulatorServer, self.server)

    def _serve(self) -> None:
        started = time.perf_counter()
        request_id = str(uuid.uuid4())
        inference_id = self.headers.get("X-Amzn-SageMaker-Inference-Id", "-")
        try:
            with self.emulator.in_flight:
                answer = self._answer(request_id)
                self._send(answer, request_id)
        except CLIENT_GONE as error:
            self._log_outcome(f"client gone ({type(error).__name__})", request_id, inference_id)
            self.close_connection = True
            return
        except faults.ResetConnection:
            self._log_outcome("connection reset (emulator fault injection)", request_id,
                              inference_id)  # fmt: skip
            self._reset()
            return
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        outcome = f"{answer.status} {len(answer.body)}B {elapsed_ms:.1f}ms {answer.note}"
        self._log_outcome(outcome, request_id, inference_id)

    def _log_outcome(self, outcome: str, request_id: str, inference_id: str) -> None:
        LOG.info('%s "%s %s" %s rid=%s iid=%s', self.address_string(), self.command, self.path,
                 outcome, request_id, inference_id)  # fmt: skip

    def _reset(self) -> None:
        """Closes the connection with a TCP RST (SO_LINGER 0) and no answer."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def _answer(self, request_id: str) -> Answer:
        try:
            body, length = self._read_body()
        except UnreadableBody as error:
            self.close_connection = True
            return _error_answer(errors.ValidationError(str(error)))
        try:
            return self._route()(body, length)
        except errors.EmulatorError as error:
            return _error_answer(error)
        except faults.ResetConnection:
            raise
        except MemoryError:  # a request the limits let through: refuse it, keep serving
            LOG.error("request %s: out of memory", request_id)
            return _error_answer(errors.InternalFailure("An internal failure occurred."))
        except Exception:  # the client gets a bare 500; the traceback stays in the log
            LOG.exception("request %s failed", request_id)
            return _error_answer(errors.InternalFailure("An internal failure occurred."))

    def _route(self) -> Callable[[bytes, int], Answer]:
        path = urlsplit(self.path).path
        routes: dict[tuple[str, str], Callable[[bytes, int], Answer]] = {
            ("GET", "/ping"): self._ping,
            ("POST", "/invocations"): self._container,
            ("GET", "/emulator/generations"): self._generations,
        }
        route = routes.get((self.command, path))
        if route is not None:
            return route
        match = ENDPOINT_PATH.fullmatch(path)
        if match is not None and self.command == "POST":
            return lambda body, length: self._invoke(unquote(match.group(1)), body, length)
        streamed = STREAM_PATH.fullmatch(path)
        if streamed is not None and self.command == "POST":
            return lambda body, length: self._invoke_stream(unquote(streamed.group(1)), body,
                                                            length)  # fmt: skip
        queued = ASYNC_PATH.fullmatch(path)
        if queued is not None and self.command == "POST":
            return lambda body, length: self._invoke_async(unquote(queued.group(1)), body, length)
        return self._unknown

    def _ping(self, body: bytes, length: int) -> Answer:
        return Answer(200, b"", {"Content-Type": "text/plain"})

    def _generations(self, body: bytes, length: int) -> Answer:
        document = json.dumps(self.emulator.runtime.generations()).encode()
        return Answer(200, document, {"Content-Type": "application/json"})

    def _unknown(self, body: bytes, length: int) -> Answer:
        message = f"No operation for {self.command} {urlsplit(self.path).path}"
        return _error_answer(errors.UnknownOperationException(message))

    def _container(self, body: bytes, length: int) -> Answer:
        attributes = self.headers.get("X-Amzn-SageMaker-Custom-Attributes")
        if length > errors.MAX_BODY_BYTES:
            message = f"payload of {length} bytes is over {errors.MAX_BODY_BYTES}".encode()
            return Answer(413, message, {"Content-Type": "text/plain; charset=utf-8"})
        reply = self.emulator.runtime.invoke_container(
            body, self.headers.get("Content-Type"), self.headers.get("Accept"), attributes
        )
        return _reply_answer(reply, attributes)

    def _request(self, endpoint: str, body: bytes, length: int, *,
                 stream: bool = False) -> InvokeRequest:
        """The call as the runtime takes it, from InvokeEndpoint's headers (the streaming call
        names its Accept ``X-Amzn-SageMaker-Accept`` and has no TargetModel)."""
        headers = self.headers
        return InvokeRequest(
            endpoint_name=endpoint,
            body=body,
            body_length=length,
            content_type=headers.get("Content-Type"),
            accept=headers.get("X-Amzn-SageMaker-Accept" if stream else "Accept"),
            custom_attributes=headers.get("X-Amzn-SageMaker-Custom-Attributes"),
            target_variant=headers.get("X-Amzn-SageMaker-Target-Variant"),
            target_model=None if stream else headers.get("X-Amzn-SageMaker-Target-Model"),
            inference_id=headers.get("X-Amzn-SageMaker-Inference-Id"),
            inference_component=headers.get("X-Amzn-SageMaker-Inference-Component"),
        )

    def _invoke(self, endpoint: str, body: bytes, length: int) -> Answer:
        result = self.emulator.runtime.invoke(self._request(endpoint, body, length))
        answer = _reply_answer(result.reply, result.custom_attributes)
        answer.headers["x-Amzn-Invoked-Production-Variant"] = result.variant
        answer.note = f"variant={result.variant}"
        return answer

    def _invoke_stream(self, endpoint: str, body: bytes, length: int) -> Answer:
        result = self.emulator.runtime.invoke_stream(
            self._request(endpoint, body, length, stream=True))
        answer_headers = {"Content-Type": EVENT_STREAM,
                          "X-Amzn-SageMaker-Content-Type": result.content_type,
                          "x-Amzn-Invoked-Production-Variant": result.variant}  # fmt: skip
        if result.custom_attributes is not None:
            answer_headers["X-Amzn-SageMaker-Custom-Attributes"] = result.custom_attributes
        return Answer(200, b"", answer_headers, note=f"variant={result.variant} stream",
                      stream=result)  # fmt: skip

    def _invoke_async(self, endpoint: str, body: bytes, length: int) -> Answer:
        headers = self.headers
        request = AsyncRequest(
            endpoint_name=endpoint,
            input_location=headers.get("X-Amzn-SageMaker-InputLocation"),
            body=body if length > 0 else None,
            body_length=length,
            content_type=headers.get("X-Amzn-SageMaker-Content-Type"),
            accept=headers.get("X-Amzn-SageMaker-Accept"),
            custom_attributes=headers.get("X-Amzn-SageMaker-Custom-Attributes"),
            inference_id=headers.get("X-Amzn-SageMaker-Inference-Id"),
            invocation_timeout=headers.get("X-Amzn-SageMaker-InvocationTimeoutSeconds"),
            request_ttl=headers.get("X-Amzn-SageMaker-RequestTTLSeconds"),
            output_extension=headers.get("X-Amzn-SageMaker-S3OutputPathExtension"),
            filename=headers.get("X-Amzn-SageMaker-Filename"),
        )
        service = self.emulator.asynchronous
        if service is None:
            self.emulator.runtime.endpoint(endpoint)  # an unknown endpoint: "not found"
            raise errors.ValidationError(
                f"Endpoint {endpoint} is not an asynchronous inference endpoint; invoke it "
                "with InvokeEndpoint."
            )
        accepted = service.submit(request)
        answer_headers = {"Content-Type": "application/json",
                          "X-Amzn-SageMaker-OutputLocation": accepted.output_location}
        if accepted.failure_location is not None:
            answer_headers["X-Amzn-SageMaker-FailureLocation"] = accepted.failure_location
        document = json.dumps({"InferenceId": accepted.inference_id}).encode()
        return Answer(202, document, answer_headers, note=f"queued {accepted.inference_id}")

    def _read_body(self) -> tuple[bytes, int]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length", "0").strip() or "0"
        if not raw.isdigit():
            raise UnreadableBody(f"invalid Content-Length {raw!r}")
        length = int(raw)
        if length > DRAIN_LIMIT:
            raise UnreadableBody(_too_large_message())
        if length > errors.MAX_BODY_BYTES:
            self._drain(length)
            return b"", length
        body = self.rfile.read(length)
        if len(body) != length:
            raise UnreadableBody("the request body ended early")
        return body, length

    def _drain(self, length: int) -> None:
        remaining = length
        while remaining > 0:
            chunk = self.rfile.read(min(CHUNK, remaining))
            if not chunk:
                raise UnreadableBody("the request body ended early")
            remaining -= len(chunk)

    def _read_chunked(self) -> tuple[bytes, int]:
        parts: list[bytes] = []
        total = 0
        while (size := self._chunk_size()) > 0:
            total += size
            if total > DRAIN_LIMIT:
                raise UnreadableBody(_too_large_message())
            if total <= errors.MAX_BODY_BYTES:
                parts.append(self._read_exactly(size))
            else:
                parts.clear()  # over the limit: drain the rest without keeping it
                self._drain(size)
            self.rfile.readline(1024)
        for _ in range(100):  # trailer fields, ignored; as many as headers may be
            if not self.rfile.readline(65537).strip():
                break
        return (b"".join(parts) if total <= errors.MAX_BODY_BYTES else b""), total

    def _read_exactly(self, size: int) -> bytes:
        data = self.rfile.read(size)
        if len(data) != size:
            raise UnreadableBody("the request body ended early")
        return data

    def _chunk_size(self) -> int:
        line = self.rfile.readline(1024).split(b";", 1)[0].strip()
        try:
            return int(line, 16)
        except ValueError as error:
            raise UnreadableBody("invalid chunked framing") from error

    def _send(self, answer: Answer, request_id: str) -> None:
        if answer.stream is not None:
            self._send_stream(answer, answer.stream, request_id)
            return
        self.send_response(answer.status)
        headers = {**answer.headers, "x-amzn-RequestId": request_id}
        headers["Content-Length"] = str(len(answer.body))
        if self.close_connection:
            headers["Connection"] = "close"
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(answer.body)

    def _send_stream(self, answer: Answer, stream: StreamResult, request_id: str) -> None:
        """Sends each event as one HTTP chunk as soon as it is made. A caller that goes away
        ends it at the next write (the container's answer is closed: the model stops); a
        failure once the 200 is sent can only be an event: InternalStreamFailure."""
        chunked = self.request_version != "HTTP/1.0"  # else the body ends with the connection
        try:
            self.send_response(200)
            headers = {**answer.headers, "x-amzn-RequestId": request_id}
            headers.update({"Transfer-Encoding": "chunked"} if chunked else {"Connection": "close"})
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            events = 0
            for event in self._events(stream, request_id):
                self.wfile.write(b"%X\r\n%s\r\n" % (len(event), event) if chunked else event)
                events += 1
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = self.close_connection or not chunked
            answer.note += f" events={events}"
        finally:
            stream.close()

    def _events(self, stream: StreamResult, request_id: str) -> Iterator[bytes]:
        try:
            yield from stream.events
        except CLIENT_GONE:
            raise
        except Exception:  # the 200 is sent: the caller learns it from an exception event
            LOG.exception("request %s failed while streaming", request_id)
            yield eventstream.exception_event(
                eventstream.INTERNAL_STREAM_FAILURE,
                {"Message": "The stream processing failed; try your request again."})
