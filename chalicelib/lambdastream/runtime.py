"""Lambda's Runtime API, spoken by our own loop so a handler can stream its response.

The managed Python runtime calls a handler and posts what it returns, whole; it has no
streaming handler. The streaming function starts through ``AWS_LAMBDA_EXEC_WRAPPER``
(:file:`bootstrap`), which execs this module in place of the managed loop: it imports the
handler ``_HANDLER`` names (``module.function``), then forever takes the next invocation,
calls ``handler(event, context, stream)`` and sends what the handler writes to ``stream`` as
Lambda's streamed response (``Lambda-Runtime-Function-Response-Mode: streaming``), each write
one HTTP/1.1 chunk sent at once. A failure before the first byte is posted to
``/invocation/{id}/error``; after it, the response ends with the error trailers
(``Lambda-Runtime-Function-Error-Type``, ``Lambda-Runtime-Function-Error-Body``: base64 of
``{"errorMessage", "errorType"}``), never a traceback in the body (it goes to the log).

Standard library only (and chalicelib's environment reader): the loop runs before anything of
the function is imported.
"""
from __future__ import annotations

import base64
import dataclasses
import http.client
import importlib
import json
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, cast

from chalicelib.core import environment

API_VERSION = "2018-06-01"
RUNTIME_API_ENV = "AWS_LAMBDA_RUNTIME_API"
HANDLER_ENV = "_HANDLER"
TRACE_ENV = "_X_AMZN_TRACE_ID"
RESPONSE_MODE = "Lambda-Runtime-Function-Response-Mode"
ERROR_TYPE = "Lambda-Runtime-Function-Error-Type"
ERROR_BODY = "Lambda-Runtime-Function-Error-Body"
STREAMING_TYPE = "application/vnd.awslambda.http-integration-response"
ERROR_TYPE_MAX = 256

Handler = Callable[[Any, "Context", "ResponseStream"], None]


class StreamFinished(ConnectionError):
    """A write after the response was ended (by the function's deadline): the client can take
    no more, as when it went away."""


@dataclasses.dataclass(frozen=True)
class Invocation:
    """One ``/invocation/next`` answer."""

    request_id: str
    deadline_ms: int
    """Epoch milliseconds (``Lambda-Runtime-Deadline-Ms``)."""
    function_arn: str
    trace_id: str | None
    event: Any


class Context:
    """What the managed runtime's context object offers a handler."""

    def __init__(self, invocation: Invocation, env: Mapping[str, str]) -> None:
        name = env.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.aws_request_id = invocation.request_id
        self.invoked_function_arn = invocation.function_arn
        self.function_name = name
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "0") or 0)
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME", f"/aws/lambda/{name}")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = self.client_context = None
        self._deadline_ms = invocation.deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before Lambda ends the invocation."""
        return max(0, self._deadline_ms - int(time.time() * 1000))


def error_document(error_type: str, message: str) -> bytes:
    """The body Lambda reads a function error from."""
    return json.dumps({"errorMessage": message, "errorType": error_type}).encode()


class RuntimeApi:
    """The Runtime API at ``address`` (``host:port``): one kept-alive connection for the
    invocations, one more per streamed response."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._connection = http.client.HTTPConnection(address)

    def _post(self, path: str, body: bytes, headers: Mapping[str, str]) -> None:
        self._connection.request("POST", f"/{API_VERSION}/runtime/{path}", body,
                                 {"Content-Type": "application/json", **headers})
        self._connection.getresponse().read()

    def next(self) -> Invocation:
        """The next invocation (waits as long as Lambda makes it wait)."""
        self._connection.request("GET", f"/{API_VERSION}/runtime/invocation/next")
        answer = self._connection.getresponse()
        body = answer.read()
        headers = answer.headers
        return Invocation(
            request_id=headers.get("Lambda-Runtime-Aws-Request-Id", ""),
            deadline_ms=int(headers.get("Lambda-Runtime-Deadline-Ms", "0") or 0),
            function_arn=headers.get("Lambda-Runtime-Invoked-Function-Arn", ""),
            trace_id=headers.get("Lambda-Runtime-Trace-Id"), event=json.loads(body or b"null"))

    def error(self, request_id: str, error_type: str, message: str) -> None:
        """The invocation failed before its response began."""
        self._post(f"invocation/{request_id}/error", error_document(error_type, message),
                   {ERROR_TYPE: error_type[:ERROR_TYPE_MAX]})

    def init_error(self, error_type: str, message: str) -> None:
        """The function could not start."""
        self._post("init/error", error_document(error_type, message),
                   {ERROR_TYPE: error_type[:ERROR_TYPE_MAX]})

    def open_response(self, request_id: str) -> http.client.HTTPConnection:
        """A streamed response's request sent up to its body (chunked, trailers announced),
        on its own connection with Nagle off, so each chunk leaves when written."""
        connection = http.client.HTTPConnection(self.address)
        connection.connect()
        assert connection.sock is not None
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.putrequest("POST", f"/{API_VERSION}/runtime/invocation/{request_id}/response",
                              skip_accept_encoding=True)
        for name, value in ((RESPONSE_MODE, "streaming"), ("Transfer-Encoding", "chunked"),
                            ("Content-Type", STREAMING_TYPE),
                            ("Trailer", f"{ERROR_TYPE}, {ERROR_BODY}")):
            connection.putheader(name, value)
        connection.endheaders()
        return connection


class ResponseStream:
    """One invocation's streamed response: opened by its first write, ended once (by
    :meth:`end`, :meth:`fail`, or the loop after the handler returns). Its methods may be
    called from another thread (the handler's deadline) than the handler's: each is atomic."""

    def __init__(self, api: RuntimeApi, request_id: str) -> None:
        self._api, self._request_id = api, request_id
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.finished = False

    @property
    def started(self) -> bool:
        """Whether a byte of the response was sent."""
        return self._connection is not None

    def write(self, data: bytes) -> None:
        """``data`` sent now, as one chunk.

        Raises:
            StreamFinished: the response was already ended.
        """
        with self._lock:
            if self.finished:
                raise StreamFinished("the response was already ended")
            if data:
                self._send(b"%X\r\n%s\r\n" % (len(data), data))

    def end(self) -> None:
        """The response's end: the client has it all (no-op once ended)."""
        self._finish(b"0\r\n\r\n")

    def fail(self, error_type: str, message: str) -> None:
        """End the invocation as a function error: the error trailers after what was sent, or,
        when nothing was, the invocation's error (no-op once ended)."""
        with self._lock:
            if self.finished:
                return
            if not self.started:
                self.finished = True
                self._api.error(self._request_id, error_type, message)
                return
        encoded = base64.b64encode(error_document(error_type, message)).decode()
        self._finish(b"0\r\n%s: %s\r\n%s: %s\r\n\r\n" % (
            ERROR_TYPE.encode(), error_type[:ERROR_TYPE_MAX].encode("ascii", "replace"),
            ERROR_BODY.encode(), encoded.encode()))

    def _send(self, data: bytes) -> None:
        if self._connection is None:
            self._connection = self._api.open_response(self._request_id)
        self._connection.send(data)

    def _finish(self, terminator: bytes) -> None:
        """Send ``terminator`` and read Lambda's answer; the connection closed in every case
        (a terminator that cannot be sent too: Lambda has closed it)."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
            try:
                self._send(terminator)
            except BaseException:
                if self._connection is not None:
                    self._connection.close()
                raise
            connection = cast(http.client.HTTPConnection, self._connection)
        try:
            connection.getresponse().read()
        finally:
            connection.close()


def load_handler(name: str) -> Handler:
    """The function ``module.function`` names.

    Raises:
        HandlerError: the name is malformed, the module does not import or lacks the function.
    """
    module_name, _, function_name = name.rpartition(".")
    if not module_name or not function_name:
        raise HandlerError("Runtime.MalformedHandlerName", f"Bad handler {name!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise HandlerError("Runtime.ImportModuleError",
                           f"Unable to import module {module_name!r}: {error}") from error
    handler = getattr(module, function_name, None)
    if not callable(handler):
        raise HandlerError("Runtime.HandlerNotFound",
                           f"Handler {function_name!r} missing on module {module_name!r}")
    return cast(Handler, handler)


class HandlerError(Exception):
    """The handler could not be loaded (``error_type``: the managed runtime's name for it)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type, self.message = error_type, message


def serve(api: RuntimeApi, handler: Handler, invocation: Invocation,
          env: MutableMapping[str, str]) -> None:
    """One invocation: the handler called with its stream, the stream ended after it returns;
    a failure is the function's error (its traceback logged)."""
    if invocation.trace_id:
        env[TRACE_ENV] = invocation.trace_id
    else:
        env.pop(TRACE_ENV, None)
    stream = ResponseStream(api, invocation.request_id)
    try:
        try:
            handler(invocation.event, Context(invocation, env), stream)
        except Exception as error:
            traceback.print_exc(file=sys.stderr)
            stream.fail(type(error).__name__, str(error) or type(error).__name__)
            return
        stream.end()
    except OSError as lost:  # the response's connection is gone: Lambda has ended it
        print(f"the response could not be ended ({type(lost).__name__}: {lost})",
              file=sys.stderr)


def main() -> int:
    """Load the handler, then serve invocations until Lambda stops the process (a handler
    that cannot be loaded: the init error posted, exit status 1)."""
    env = cast(MutableMapping[str, str], environment.variables())
    api = RuntimeApi(env[RUNTIME_API_ENV])
    try:
        handler = load_handler(env.get(HANDLER_ENV, ""))
    except HandlerError as error:
        traceback.print_exc(file=sys.stderr)
        api.init_error(error.error_type, error.message)
        return 1
    while True:
        serve(api, handler, api.next(), env)


if __name__ == "__main__":
    sys.exit(main())
