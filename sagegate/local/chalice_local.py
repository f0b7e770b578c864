"""``chalice local`` with TCP_NODELAY on every accepted connection, and the fixes a local run
needs.

Chalice's local server writes a response's headers and body in separate ``send`` calls; with
Nagle's algorithm on, the second small write waits for the client's delayed ACK, so a keep-alive
client (boto3, browsers) waits about 40 ms per request. This runs the real ``chalice`` command
line with a handler that disables Nagle, and:

* a listen backlog of 128 instead of socketserver's 5 (bursts of new connections were reset), and
  one log line instead of a traceback when a client goes away early;
* with ``SAGEGATE_INSTANCE``, every answer carries it in ``X-Sagegate-Instance``, so
  :mod:`sagegate.local.processes` knows it talks to its own child;
* the job functions' S3 and SNS events, which ``chalice local`` does not deliver, pumped in this
  process (:mod:`sagegate.local.events`, sharing the in-memory job store);
* the run's own variables set after the stage's
  (:data:`~sagegate.local.processes.OVERRIDES_ENV`): chalice local applies the stage's over the
  process's environment, so a stage's AWS settings would win over moto and the emulator;
* SIGTERM stops it as Ctrl-C does, through the interpreter's exit, so the capture writer's last
  records are stored (``atexit``);
* API keys, which ``chalice local`` does not check: a route with ``api_key_required`` answers 403
  ``{"message":"Forbidden"}`` unless ``x-api-key`` is ``SAGEGATE_LOCAL_API_KEY`` (random,
  printed, when unset), checked where API Gateway does: after the route matched and CORS
  preflights were answered (:mod:`sagegate.local.auth`). An accepted key's identity goes in the
  event's ``requestContext.identity.apiKeyId`` as API Gateway puts it: not the key, a stable
  id made from it (:func:`key_id`);
* streams delivered as they are made, which ``chalice local`` cannot do (it answers a view's
  whole body): a ``POST /v1/chat/completions`` or ``/v1/completions`` whose JSON body asks
  ``"stream": true`` is answered by :func:`chalicelib.http.completions.serve_streaming`, each
  ``data:`` event written as one HTTP/1.1 chunk when the model makes it, after the same key
  check and with the CORS headers Chalice would add (to an HTTP/1.0 client: the events as they
  come, the connection closed at the end); a client that goes away closes the answer, and with
  it the endpoint's stream. The body of those two routes is read within the app's
  ``MAX_BODY_BYTES``: a longer one is refused unread, with its 413 before any ``100 Continue``
  when the client sends ``Expect: 100-continue``; a ``Content-Length`` that is not ASCII digits
  gets a 400. At most :data:`MAX_STREAMS_ENV` streams (default :data:`MAX_STREAMS`) run at once:
  past them a stream request gets OpenAI's 429 with ``Retry-After``. Every other request is
  Chalice's;
* a socket timeout (:data:`SOCKET_TIMEOUT`) on every connection: a client that sends its body
  too slowly, or stops reading an answer, is let go (its stream closed), and an idle keep-alive
  connection is closed after that long.

By hand (``chalice``'s arguments, from the project's directory)::

    python -m sagegate.local.chalice_local local --stage local --port 8000 --no-autoreload
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterable, Mapping, MutableMapping
from http.server import BaseHTTPRequestHandler
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import chalice.cli as chalice_cli
from chalice import local
from chalice.app import Chalice
from chalice.cli import main as chalice_main
from chalice.cli.factory import CLIFactory
from chalice.config import Config

from sagegate.local.auth import (
    API_KEY_ENV,
    API_KEY_HEADER,
    FORBIDDEN_BODY,
    FORBIDDEN_HEADERS,
    configured_key,
    new_api_key,
)
from sagegate.local.events import start_pump
from sagegate.local.processes import INSTANCE_ENV, INSTANCE_HEADER, OVERRIDES_ENV

if TYPE_CHECKING:
    from chalicelib.llm.errors import OpenAIError

BACKLOG = 128
LOG = logging.getLogger("chalice_local")
STREAMING_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})
"""The routes whose ``stream: true`` requests this server answers event by event."""
KEY_ID_PREFIX = "local-"
SOCKET_TIMEOUT = 60.0
"""Seconds a connection may wait for its client on one read or write."""
MAX_STREAMS_ENV = "SAGEGATE_LOCAL_MAX_STREAMS"
MAX_STREAMS = 16
"""Streams served at once, by default (each holds a thread while its model generates)."""
RETRY_AFTER = "1"


def key_id(api_key: str) -> str:
    """The key's identity in logs and metrics (API Gateway's ``apiKeyId`` locally): a stable
    prefix of its SHA-256, never the key itself."""
    return KEY_ID_PREFIX + hashlib.sha256(api_key.encode()).hexdigest()[:12]


class ApiKeyAuthorizer(local.LocalGatewayAuthorizer):
    """Chalice's local authorizer, plus API Gateway's API key check."""

    def __init__(self, app_object: Chalice, api_key: str) -> None:
        super().__init__(app_object)
        self._api_key = api_key.encode()
        self._key_id = key_id(api_key) if api_key else ""

    def authorize(self, raw_path: str, lambda_event: Any,
                  lambda_context: local.LambdaContext) -> local.LocalAuthPair:
        route = self._route_for_event(lambda_event)
        if route is not None and route.api_key_required:
            given = str((lambda_event.get("headers") or {}).get(API_KEY_HEADER, "")).encode()
            # constant time, as a key check should be; an empty local key matches nothing
            if not self._api_key or not hmac.compare_digest(given, self._api_key):
                raise local.ForbiddenError(
                    {"x-amzn-RequestId": lambda_context.aws_request_id, **FORBIDDEN_HEADERS},
                    FORBIDDEN_BODY)
            lambda_event["requestContext"].setdefault("identity", {})["apiKeyId"] = self._key_id
        return super().authorize(raw_path, lambda_event, lambda_context)


class ApiKeyGateway(local.LocalGateway):

    def __init__(self, app_object: Chalice, config: Config, api_key: str) -> None:
        super().__init__(app_object, config)
        self.app = app_object
        self._authorizer = ApiKeyAuthorizer(app_object, api_key)

    def authorized(self, method: str, path: str, headers: dict[str, str],
                   body: bytes | None) -> tuple[dict[str, Any], local.LambdaContext]:
        """The request as the view would get it (its event and context), checked as
        :meth:`handle_request` checks it before calling the app.

        Raises:
            LocalGatewayException: no such route, or the key is missing or wrong (403).
        """
        context = self._generate_lambda_context()
        event = self._generate_lambda_event(method, path, headers, body)
        return self._authorizer.authorize(path, event, context)

    def cors_headers(self, resource_path: str, method: str) -> dict[str, str]:
        """The CORS headers Chalice adds to the route's answers (none where CORS is off)."""
        entry = self.app.routes.get(resource_path, {}).get(method)
        cors = getattr(entry, "cors", None)
        return dict(cors.get_access_control_headers()) if cors else {}


class NoDelayRequestHandler(local.ChaliceRequestHandler):
    """Chalice's request handler with Nagle's algorithm off and the API key check in its gateway."""

    instance = os.environ.get(INSTANCE_ENV, "")
    timeout = SOCKET_TIMEOUT
    server: BackloggedServer

    def __init__(self, request: Any, client_address: Any, server: Any,
                 app_object: Chalice, config: Config, api_key: str = "") -> None:
        # as ChaliceRequestHandler.__init__, with the gateway that checks API keys
        self.local_gateway = ApiKeyGateway(app_object, config, api_key)
        BaseHTTPRequestHandler.__init__(self, request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def end_headers(self) -> None:
        if self.instance:
            self.send_header(INSTANCE_HEADER, self.instance)
        super().end_headers()

    _read: tuple[dict[str, str], bytes | None] | None = None

    def _parse_payload(self) -> tuple[dict[str, str], bytes | None]:
        read, self._read = self._read, None
        return read if read is not None else super()._parse_payload()

    def _exchange(self) -> StreamingExchange | None:
        """The request as a streaming route's, when it is one (a POST to one of
        :data:`STREAMING_ROUTES` with sagegate's app loaded)."""
        if self.command != "POST" or self.path.split("?", 1)[0] not in STREAMING_ROUTES:
            return None
        app_module = sys.modules.get("app")
        if app_module is None or not hasattr(app_module, "exchanges"):
            return None
        return StreamingExchange(self, cast(ApiKeyGateway, self.local_gateway), app_module)

    def do_POST(self) -> None:
        exchange = self._exchange()
        if exchange is None:
            self._generic_handle()
            return
        exchange.serve()

    def parse_request(self) -> bool:
        """The request line and headers read; a ``Content-Length`` that is not ASCII digits is
        answered 400 here for every route but the streaming ones (which answer it themselves),
        where ``chalice local`` would fail on it and answer nothing."""
        if not super().parse_request():
            return False
        if _content_length(dict(self.headers)) is not None or self._exchange() is not None:
            return True
        self.close_connection = True
        message = "Content-Length is not a number of bytes."
        document: dict[str, Any] = {"Code": "BadRequest", "Message": message}
        if self.path.startswith("/v1/"):
            from chalicelib.llm.errors import OpenAIError

            document = OpenAIError(400, message, code="invalid_value").document()
        self.send_whole(400, {"Content-Type": "application/json", "Connection": "close"},
                        json.dumps(document).encode())
        return False

    def handle_expect_100(self) -> bool:
        """``100 Continue`` only for a body the streaming routes will read: a longer one (or a
        length that is not one) is refused here, so the client gets its 413 (400) unsent."""
        exchange = self._exchange()
        if exchange is not None and not exchange.within():
            exchange.refuse_unread()
            return False
        return super().handle_expect_100()

    def send_whole(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        """An answer with its length (an error of the streaming routes)."""
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class StreamingExchange:
    """A completion route's request on the streaming server: read within the app's body limit,
    handed to Chalice unless its JSON asks ``stream: true``, else checked as the gateway checks
    it and answered by ``serve_streaming`` chunk by chunk."""

    def __init__(self, handler: NoDelayRequestHandler, gateway: ApiKeyGateway,
                 app_module: ModuleType) -> None:
        self.handler, self.gateway, self.app = handler, gateway, app_module

    @property
    def limit(self) -> int:
        """The app's ``MAX_BODY_BYTES``."""
        return int(self.app.services.settings.max_body_bytes)

    def length(self) -> int | None:
        """The body's declared length (None: not a length)."""
        return _content_length(dict(self.handler.headers))

    def within(self) -> bool:
        """Whether the body is one this route reads."""
        length = self.length()
        return length is not None and length <= self.limit

    def serve(self) -> None:
        handler = self.handler
        if "Transfer-Encoding" in handler.headers:  # a chunked request body is never read
            handler.close_connection = True
        if not self.within():
            self.refuse_unread()
            return
        headers, length = dict(handler.headers), self.length()
        body = handler.rfile.read(length) if length else None
        if not _asks_stream(body):
            handler._read = (headers, body)
            handler._generic_handle()
            return
        try:
            event, context = self.gateway.authorized(handler.command, handler.path, headers,
                                                     body)
        except local.LocalGatewayException as error:
            handler._send_error_response(error)
            return
        streams = handler.server.streams
        if not streams.acquire(blocking=False):
            self._busy()
            return
        try:
            self._stream(event, context)
        finally:
            streams.release()

    def refuse_unread(self) -> None:
        """A body this route does not read, refused and the connection closed: the gateway's
        403 first, as API Gateway checks the key first, else OpenAI's 413 (400: no length)."""
        from chalicelib.http.completions import too_large
        from chalicelib.llm.errors import OpenAIError

        handler = self.handler
        handler.close_connection = True
        try:
            self.gateway.authorized(handler.command, handler.path, dict(handler.headers), None)
        except local.LocalGatewayException as refused:
            handler._send_error_response(refused)
            return
        length = self.length()
        error = OpenAIError(400, "Content-Length is not a number of bytes.",
                            code="invalid_value") if length is None else too_large(length,
                                                                                   self.limit)
        self._send_error(error, {"Connection": "close"})

    def _busy(self) -> None:
        from chalicelib.llm.errors import OpenAIError

        limit = self.handler.server.max_streams
        self._send_error(OpenAIError(
            429, f"This server streams at most {limit} answers at once; try again shortly.",
            code="rate_limit_exceeded", kind="requests",
            headers={"Retry-After": RETRY_AFTER}), self._cors())

    def _send_error(self, error: OpenAIError, headers: Mapping[str, str]) -> None:
        """An ``OpenAIError`` as its JSON document."""
        self.handler.send_whole(error.status, {"Content-Type": "application/json", **headers,
                                               **error.headers},
                                json.dumps(error.document()).encode())

    def _cors(self) -> dict[str, str]:
        return self.gateway.cors_headers(self.handler.path.split("?", 1)[0],
                                         self.handler.command)

    def _stream(self, event: dict[str, Any], context: local.LambdaContext) -> None:
        from chalice.app import Request

        from chalicelib.http.completions import internal_error, serve_streaming

        app, handler = self.app, self.handler
        request = Request(event, context)
        try:
            status, headers, body = serve_streaming(lambda: app.services.llm, app.exchanges,
                                                    request)
        except Exception:  # a defect: answered as Chalice answers a view's, a 500
            LOG.exception("the streaming route failed")
            self._send_error(internal_error("internal_error"), self._cors())
            return
        try:
            headers = {**{k: v for k, v in self._cors().items() if k not in headers}, **headers}
            if not headers.get("Content-Type", "").startswith("text/event-stream"):
                handler.send_whole(status, headers, b"".join(body))
            else:
                _send_events(handler, status, headers, body)
        except (ConnectionError, TimeoutError) as error:
            handler.close_connection = True
            LOG.info("%s went away mid-stream (%s): its stream closed",
                     handler.client_address[0], type(error).__name__)
        finally:
            body.close()
            app.services.handler_ended(context)


class BodyWriter:
    """An answer's body written as it is made: each piece one HTTP/1.1 chunk, or, to an
    HTTP/1.0 client (which knows no chunks), the bytes as they are, the body ending with the
    connection (``Connection: close``)."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self.handler = handler
        self.chunked = handler.request_version != "HTTP/1.0"

    def headers(self) -> dict[str, str]:
        """The header that says how the body ends."""
        return {"Transfer-Encoding": "chunked"} if self.chunked else {"Connection": "close"}

    def write(self, piece: bytes) -> None:
        """One piece, sent now."""
        if piece:
            self.handler.wfile.write(b"%X\r\n%s\r\n" % (len(piece), piece) if self.chunked
                                     else piece)

    def end(self) -> None:
        """The body's end: the last chunk, or (HTTP/1.0) the connection's sending side shut."""
        if self.chunked:
            self.handler.wfile.write(b"0\r\n\r\n")
            return
        self.handler.close_connection = True
        self.handler.wfile.flush()
        self.handler.connection.shutdown(socket.SHUT_WR)


def _send_events(handler: NoDelayRequestHandler, status: int, headers: Mapping[str, str],
                 events: Iterable[bytes]) -> None:
    """Each event written (one ``send``, Nagle off) as soon as it is made, and the body ended
    once ``[DONE]`` (or an error event) is written, before anything more is asked of
    ``events`` (whose close, the caller's, does the request's bookkeeping): see
    :func:`chalicelib.http.completions.deliver`, which the streaming Lambda function shares."""
    from chalicelib.http.completions import deliver

    writer = BodyWriter(handler)
    handler.send_response(status)
    for name, value in {**headers, **writer.headers()}.items():
        handler.send_header(name, value)
    handler.end_headers()
    deliver(events, writer.write)
    writer.end()


def _content_length(headers: Mapping[str, str]) -> int | None:
    """The body's declared length (0 when none is declared; None: not a length, ASCII digits
    only: ``"²".isdigit()`` is true, and ``int`` takes ``"١٢"``)."""
    text = next((value for name, value in headers.items()
                 if name.lower() == "content-length"), "0").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _asks_stream(body: bytes | None) -> bool:
    """Whether the body is a JSON object with ``"stream": true`` (anything else, a bad body
    too, is Chalice's to answer)."""
    try:
        document = json.loads(body or b"")
    except (ValueError, RecursionError):
        return False
    return isinstance(document, dict) and document.get("stream") is True


class BackloggedServer(local.ThreadedHTTPServer):
    """Chalice's threaded server with a real listen backlog and quiet client disconnects."""

    request_queue_size = BACKLOG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_streams = max_streams()
        self.streams = threading.BoundedSemaphore(self.max_streams)
        """One per stream running (:data:`MAX_STREAMS_ENV`)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line when the client went away; the traceback (log only) for anything else."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            LOG.info("%s closed the connection early (%s)", client_address[0],
                     type(error).__name__)
            return
        super().handle_error(request, client_address)


def max_streams(environ: Mapping[str, str] = os.environ) -> int:
    """How many streams may run at once: :data:`MAX_STREAMS_ENV`, else :data:`MAX_STREAMS`.

    Raises:
        SystemExit: the variable is not a positive whole number.
    """
    text = environ.get(MAX_STREAMS_ENV, "").strip() or str(MAX_STREAMS)
    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise SystemExit(f"chalice local: {MAX_STREAMS_ENV} must be a positive whole number, "
                         f"not {text!r}")
    return int(text)


def requires_api_key(app_obj: Chalice) -> bool:
    return any(entry.api_key_required for methods in app_obj.routes.values()
               for entry in methods.values())


def local_key(app_obj: Chalice, environ: Any = os.environ) -> str:
    """The configured key, else a new one (said on stderr)."""
    if not requires_api_key(app_obj):
        return ""
    key = configured_key(environ)
    if not key:
        key = new_api_key()
        print(f"chalice local: API key for this run ({API_KEY_ENV} unset): {key}",
              file=sys.stderr, flush=True)
    return key


class PumpedDevServer(local.LocalDevServer):
    """Chalice's local server with the event pump running while it serves (when ``sagegate run``
    named the queues)."""

    def serve_forever(self) -> None:
        pump = start_pump(sys.modules.get("app"), os.environ)
        try:
            super().serve_forever()
        finally:
            if pump is not None:
                pump.stop()


def create_local_server(app_obj: Chalice, config: Config, host: str,
                        port: int) -> local.LocalDevServer:
    handler = functools.partial(NoDelayRequestHandler, api_key=local_key(app_obj))
    return PumpedDevServer(app_obj, config, host, port,
                           handler_cls=cast(Any, handler), server_cls=BackloggedServer)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


class LocalCLIFactory(CLIFactory):
    """Chalice's CLI factory, loading the app with the stage's variables, then the run's
    overrides (:data:`OVERRIDES_ENV`)."""

    def load_chalice_app(self, environment_variables: MutableMapping[str, str] | None = None,
                         validate_feature_flags: bool | None = True) -> Chalice:
        merged = {**(environment_variables or {}), **local_overrides(os.environ)}
        return super().load_chalice_app(merged, validate_feature_flags)


def local_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables :data:`OVERRIDES_ENV` gives.

    Raises:
        SystemExit: not a JSON object of strings (the parent is not sagegate's).
    """
    raw = environ.get(OVERRIDES_ENV, "")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
            isinstance(item, str) for pair in value.items() for item in pair):
        raise SystemExit(f"chalice local: {OVERRIDES_ENV} must be a JSON object of strings")
    return value


def main(argv: list[str] | None = None) -> int:
    # chalice.cli's factory looks this function up on the module at call time.
    local.create_local_server = create_local_server
    chalice_cli.CLIFactory = LocalCLIFactory  # type: ignore[misc]  # the group builds it
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.argv = ["chalice", *(sys.argv[1:] if argv is None else argv)]
    return int(chalice_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
