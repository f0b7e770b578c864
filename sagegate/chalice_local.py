"""``chalice local`` with TCP_NODELAY on every accepted connection.

Chalice's local server writes the headers and the body of a response in separate ``send``
calls. With Nagle's algorithm on, the second small write waits for the client's delayed ACK,
so a keep-alive client (boto3, browsers) waits about 40 ms per request. This runs the real
``chalice`` command line, with its local server built from a handler that disables Nagle.

Two more fixes to the server: a listen backlog of 128 instead of socketserver's 5 (bursts of
new connections were reset), and one log line instead of a traceback when a client goes away
before its answer is written. With ``SAGEGATE_INSTANCE`` set, every answer carries it in
``X-Sagegate-Instance``, so :mod:`sagegate.localstack` knows it is talking to its own child.

:func:`sagegate.localstack.start_chalice_local` starts it; by hand (same arguments as
``chalice``, from the Chalice project's directory)::

    python -m sagegate.chalice_local local --stage local --port 8000 --no-autoreload
"""
from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Any

from chalice import local
from chalice.cli import main as chalice_main

from sagegate.localstack import INSTANCE_ENV, INSTANCE_HEADER

BACKLOG = 128
LOG = logging.getLogger("chalice_local")


class NoDelayRequestHandler(local.ChaliceRequestHandler):
    """Chalice's request handler with Nagle's algorithm off for its connection."""

    instance = os.environ.get(INSTANCE_ENV, "")

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def end_headers(self) -> None:
        """Adds the instance marker (when set) to every answer."""
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


def create_local_server(app_obj: Any, config: Any, host: str, port: int) -> local.LocalDevServer:
    """Drop-in for :func:`chalice.local.create_local_server` using the no-delay handler."""
    return local.LocalDevServer(app_obj, config, host, port, handler_cls=NoDelayRequestHandler,
                                server_cls=BackloggedServer)


def main(argv: list[str] | None = None) -> int:
    """Run the chalice CLI with the patched local server factory."""
    # chalice.cli's factory looks this function up on the module at call time.
    local.create_local_server = create_local_server
    sys.argv = ["chalice", *(sys.argv[1:] if argv is None else argv)]
    return int(chalice_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
