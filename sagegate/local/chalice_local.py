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
  preflights were answered (:mod:`sagegate.local.auth`).

By hand (``chalice``'s arguments, from the project's directory)::

    python -m sagegate.local.chalice_local local --stage local --port 8000 --no-autoreload
"""
from __future__ import annotations

import functools
import hmac
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Mapping, MutableMapping
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

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

BACKLOG = 128
LOG = logging.getLogger("chalice_local")


class ApiKeyAuthorizer(local.LocalGatewayAuthorizer):
    """Chalice's local authorizer, plus API Gateway's API key check."""

    def __init__(self, app_object: Chalice, api_key: str) -> None:
        super().__init__(app_object)
        self._api_key = api_key.encode()

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
        return super().authorize(raw_path, lambda_event, lambda_context)


class ApiKeyGateway(local.LocalGateway):

    def __init__(self, app_object: Chalice, config: Config, api_key: str) -> None:
        super().__init__(app_object, config)
        self._authorizer = ApiKeyAuthorizer(app_object, api_key)


class NoDelayRequestHandler(local.ChaliceRequestHandler):
    """Chalice's request handler with Nagle's algorithm off and the API key check in its gateway."""

    instance = os.environ.get(INSTANCE_ENV, "")

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


class BackloggedServer(local.ThreadedHTTPServer):
    """Chalice's threaded server with a real listen backlog and quiet client disconnects."""

    request_queue_size = BACKLOG

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line when the client went away; the traceback (log only) for anything else."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            LOG.info("%s closed the connection early (%s)", client_address[0],
                     type(error).__name__)
            return
        super().handle_error(request, client_address)


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
