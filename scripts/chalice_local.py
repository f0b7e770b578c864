"""``chalice local`` with TCP_NODELAY on every accepted connection.

Chalice's local server writes the headers and the body of a response in separate ``send``
calls. With Nagle's algorithm on, the second small write waits for the client's delayed ACK,
so a keep-alive client (boto3, browsers) waits about 40 ms per request. This runs the real
``chalice`` command line, with its local server built from a handler that disables Nagle.

Usage (same arguments as ``chalice``)::

    python scripts/chalice_local.py local --stage local --port 8000 --no-autoreload
"""
from __future__ import annotations

import socket
import sys
from typing import Any

from chalice import local
from chalice.cli import main as chalice_main


class NoDelayRequestHandler(local.ChaliceRequestHandler):
    """Chalice's request handler with Nagle's algorithm off for its connection."""

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def create_local_server(app_obj: Any, config: Any, host: str, port: int) -> local.LocalDevServer:
    """Drop-in for :func:`chalice.local.create_local_server` using the no-delay handler."""
    return local.LocalDevServer(app_obj, config, host, port, handler_cls=NoDelayRequestHandler)


def main(argv: list[str] | None = None) -> int:
    """Run the chalice CLI with the patched local server factory."""
    # chalice.cli's factory looks this function up on the module at call time.
    local.create_local_server = create_local_server
    sys.argv = ["chalice", *(sys.argv[1:] if argv is None else argv)]
    return int(chalice_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
