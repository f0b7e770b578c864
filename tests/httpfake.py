"""A tiny HTTP server on 127.0.0.1 for the client's unit tests: each request (method, path,
headers, body, peer) goes to a function, whose (status, headers, body) is the answer; keep-alive
as HTTP/1.1 servers do; a chunked body is refused with 411, as S3 refuses one."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict[str, str], bytes]
Route = Callable[[dict[str, Any]], Answer]


@contextlib.contextmanager
def serve(route: Route) -> Iterator[str]:
    """Serve ``route`` until the block ends; yields the server's URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def _serve(self) -> None:
            answer: Answer
            if self.headers.get("Transfer-Encoding"):
                answer = 411, {}, b"a body needs its Content-Length here"
                self.close_connection = True
            else:
                length = int(self.headers.get("Content-Length") or 0)
                answer = route({
                    "method": self.command, "path": self.path, "headers": dict(self.headers),
                    "body": self.rfile.read(length) if length else b"",
                    "peer": self.client_address})
            status, headers, payload = answer
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
