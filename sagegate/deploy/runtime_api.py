"""The packaged streaming function, run offline as Lambda and API Gateway run it.

For the deploy tests and the benchmarks, three pieces on 127.0.0.1:

* :class:`RuntimeApi`: Lambda's Runtime API in streaming mode. It hands out queued events at
  ``/invocation/next`` with Lambda's headers and reads a streamed ``/response`` chunk by chunk:
  the prelude (JSON up to eight NUL bytes, within 16 KB), each chunk as it arrives, the
  trailers; ``/error`` and ``/init/error`` too. Each :class:`Invocation` records what arrived,
  in order, with a sequence number shared with the front (so a test can tell what the function
  had sent when the client read a chunk, without a clock).
* :class:`Front`: API Gateway REST's stand-in. A client's request becomes the proxy event
  (resource path, ``headers`` and ``multiValueHeaders``, ``requestContext`` with
  ``identity.apiKeyId`` when a key is sent, base64 for a body that is not text), queued for the
  function; the client gets the prelude's status and headers, then the body chunks as the
  function writes them (HTTP/1.1 chunked), and, when the trailers report an error, a
  connection ended abruptly (no last chunk), as API Gateway ends it. A failure before the
  first byte is API Gateway's 502.
* :func:`start_function`: the function process, from the packaged tree
  (:class:`~sagegate.deploy.sandbox.LambdaTree`) through the packaged ``bootstrap`` wrapper with
  the template's environment (:func:`function_env`), its interpreter one that cannot import
  this checkout (``-S``: no site-packages; the path is the task, the layer, the runtime's
  packages).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
import json
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, ClassVar

from sagegate.deploy import sandbox
from sagegate.deploy.sandbox import LambdaTree

API = "/2018-06-01/runtime"
PRELUDE_END = b"\0" * 8
MAX_PRELUDE_BYTES = 16 * 1024
ERROR_TYPE = "lambda-runtime-function-error-type"
ERROR_BODY = "lambda-runtime-function-error-body"
STREAM_FUNCTION = "StreamingHandler"
"""The streaming function's resource in the packaged template."""
HANDLER = "chalicelib.lambdastream.handler.handle"
WRAPPER = "/var/task/chalicelib/lambdastream/bootstrap"
FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:{name}"
FIRST_BYTE_SECONDS = 60.0
"""How long the front waits for the function's first byte (then API Gateway's 504)."""
REGIONAL_IDLE_TIMEOUT_SECONDS = 300.0
"""How long a regional API's stream may be silent before API Gateway cuts it (5 minutes)."""
_SEQUENCE = itertools.count()


def sequence() -> int:
    """The next number of the order the Runtime API and the front saw things in."""
    return next(_SEQUENCE)


@dataclasses.dataclass(frozen=True)
class Part:
    """One thing the function sent: ``kind`` is ``prelude`` (``value`` its JSON), ``chunk``
    (bytes of the body), ``end`` (the trailers, a dict), ``error`` (an ``/error`` post:
    ``{"type", "body"}``); ``seen`` its place in :func:`sequence`."""

    kind: str
    value: Any
    seen: int


class Invocation:
    """One event handed to the function, and what its response brought, as it came."""

    def __init__(self, event: Mapping[str, Any], deadline_seconds: float) -> None:
        self.request_id = str(uuid.uuid4())
        self.event = event
        self.deadline_ms = int((time.time() + deadline_seconds) * 1000)
        self.parts: queue.Queue[Part] = queue.Queue()
        self.record: list[Part] = []
        self.relayed: list[int] = []
        """Where, in :func:`sequence`, the front wrote each body chunk to its client."""
        self.finished = threading.Event()

    def add(self, kind: str, value: Any) -> None:
        part = Part(kind, value, sequence())
        self.record.append(part)
        self.parts.put(part)
        if kind in ("end", "error"):
            self.finished.set()

    def trailers(self) -> dict[str, str]:
        """The response's trailers (empty until it ended)."""
        return next((part.value for part in self.record if part.kind == "end"), {})

    def function_error(self) -> dict[str, Any] | None:
        """The function error the trailers report (their type and decoded body), if any."""
        trailers = self.trailers()
        if ERROR_TYPE not in trailers:
            return None
        body = json.loads(base64.b64decode(trailers.get(ERROR_BODY, "")) or b"{}")
        return {"type": trailers[ERROR_TYPE], "body": body}


class LocalServer(ThreadingHTTPServer):
    """A threaded server on 127.0.0.1 (a free port) serving in a thread of its own, quiet when
    a client goes away."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class RuntimeApi:
    """Lambda's Runtime API on 127.0.0.1, in streaming mode (see the module)."""

    def __init__(self) -> None:
        self.pending: queue.Queue[Invocation] = queue.Queue()
        self.invocations: dict[str, Invocation] = {}
        self.init_errors: list[dict[str, Any]] = []
        self.server = LocalServer(type("Handler", (_RuntimeHandler,), {"api": self}))

    @property
    def address(self) -> str:
        """``host:port``, as ``AWS_LAMBDA_RUNTIME_API`` gives it."""
        return f"127.0.0.1:{self.server.server_address[1]}"

    def invoke(self, event: Mapping[str, Any], deadline_seconds: float = 300.0) -> Invocation:
        """Queue ``event`` for the function (its deadline that far away)."""
        invocation = Invocation(event, deadline_seconds)
        self.invocations[invocation.request_id] = invocation
        if self.init_errors:  # the function could not start: each invocation fails with it
            invocation.add("error", self.init_errors[-1])
        else:
            self.pending.put(invocation)
        return invocation

    def close(self) -> None:
        self.server.close()


class _RuntimeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: ClassVar[RuntimeApi]

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, body: bytes = b"", headers: Mapping[str, str] = {}) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path != f"{API}/invocation/next":
            self._answer(404)
            return
        invocation = self.api.pending.get()
        self._answer(200, json.dumps(invocation.event).encode(), {
            "Content-Type": "application/json",
            "Lambda-Runtime-Aws-Request-Id": invocation.request_id,
            "Lambda-Runtime-Deadline-Ms": str(invocation.deadline_ms),
            "Lambda-Runtime-Invoked-Function-Arn": FUNCTION_ARN.format(name="stream"),
            "Lambda-Runtime-Trace-Id": f"Root=1-{invocation.request_id[:8]};Sampled=0"})

    def do_POST(self) -> None:
        if self.path == f"{API}/init/error":
            error = {"type": self.headers.get(ERROR_TYPE),
                     "body": json.loads(self._whole() or b"{}")}
            self.api.init_errors.append(error)
            self._answer(202)
            while not self.api.pending.empty():  # each waiting invocation fails with it
                self.api.pending.get().add("error", error)
            return
        parts = self.path.removeprefix(f"{API}/invocation/").split("/")
        invocation = self.api.invocations.get(parts[0]) if len(parts) == 2 else None
        if invocation is None or parts[1] not in ("response", "error"):
            self._answer(404)
            return
        if parts[1] == "error":
            invocation.add("error", {"type": self.headers.get(ERROR_TYPE),
                                     "body": json.loads(self._whole() or b"{}")})
        elif self.headers.get("Lambda-Runtime-Function-Response-Mode") != "streaming" or \
                self.headers.get("Transfer-Encoding") != "chunked":
            self._answer(400, b"a streamed response only")
            return
        else:
            self._read_stream(invocation)
        self._answer(202)

    def _whole(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _read_stream(self, invocation: Invocation) -> None:
        """The chunks as they come: the prelude's bytes until the NULs, then the body's; a
        function gone mid-response (its connection closed) ends it as Lambda does, with
        ``Runtime.ExitError``."""
        try:
            self._read_chunks(invocation)
        except EOFError:
            invocation.add("end", {ERROR_TYPE: "Runtime.ExitError"})
            raise ConnectionAbortedError("the function went away mid-response") from None

    def _read_chunks(self, invocation: Invocation) -> None:
        head: bytes | None = b""
        for data in self._chunks():
            if head is not None:
                head += data
                if PRELUDE_END not in head:
                    if len(head) > MAX_PRELUDE_BYTES:
                        raise ValueError("no prelude within 16 KB")
                    continue
                prelude, _, data = head.partition(PRELUDE_END)
                invocation.add("prelude", json.loads(prelude))
                head = None
            if data:
                invocation.add("chunk", data)
        invocation.add("end", self._trailers())

    def _chunks(self) -> Iterator[bytes]:
        while (size := int(self._line().split(b";")[0].strip(), 16)):
            data = self.rfile.read(size)
            if len(data) < size or self.rfile.read(2) != b"\r\n":
                raise EOFError
            yield data

    def _line(self) -> bytes:
        line = self.rfile.readline()
        if not line.endswith(b"\n"):
            raise EOFError
        return line

    def _trailers(self) -> dict[str, str]:
        trailers = {}
        while (line := self._line().strip()):
            name, _, value = line.decode().partition(":")
            trailers[name.strip().lower()] = value.strip()
        return trailers


def key_id(api_key: str) -> str:
    """The key's id in the event (as API Gateway's, never the key)."""
    return "key-" + hashlib.sha256(api_key.encode()).hexdigest()[:10]


def proxy_event(method: str, target: str, headers: list[tuple[str, str]],
                body: bytes) -> dict[str, Any]:
    """A request as API Gateway REST's proxy event (version 1.0) for the resource it matched
    (the path itself: the streamed routes have no path parameters)."""
    path, _, query = target.partition("?")
    pairs = [pair.partition("=")[::2] for pair in query.split("&") if pair]
    multi_headers: dict[str, list[str]] = {}
    for name, value in headers:
        multi_headers.setdefault(name, []).append(value)
    multi_query: dict[str, list[str]] = {}
    for name, value in pairs:
        multi_query.setdefault(name, []).append(value)
    identity: dict[str, Any] = {"sourceIp": "127.0.0.1", "userAgent": None}
    key = next((value for name, value in headers if name.lower() == "x-api-key"), None)
    if key:
        identity.update(apiKey=key, apiKeyId=key_id(key))
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    return {
        "resource": path, "path": path, "httpMethod": method,
        "headers": {name: values[-1] for name, values in multi_headers.items()},
        "multiValueHeaders": multi_headers,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": method, "path": f"/api{path}",
                           "stage": "api", "requestId": str(uuid.uuid4()),
                           "identity": identity},
        "body": text or None, "isBase64Encoded": encoded}


class Front:
    """API Gateway REST's stand-in before the function (see the module); ``api_key``: the
    key the routes require (403 without it), or None."""

    def __init__(self, runtime: RuntimeApi, api_key: str | None = None,
                 deadline_seconds: float = 300.0) -> None:
        self.runtime, self.api_key = runtime, api_key
        self.deadline_seconds = deadline_seconds
        self.served: list[Invocation] = []
        self.server = LocalServer(type("Handler", (_FrontHandler,), {"front": self}))

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.close()


class _FrontHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    front: ClassVar[Front]

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _whole(self, status: int, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        for name, value in (("Content-Type", "application/json"),
                            ("Content-Length", str(len(body)))):
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        front = self.front
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if front.api_key is not None and self.headers.get("x-api-key") != front.api_key:
            self._whole(403, {"message": "Forbidden"})
            return
        invocation = front.runtime.invoke(
            proxy_event(self.command, self.path, list(self.headers.items()), body),
            front.deadline_seconds)
        front.served.append(invocation)
        self._relay(invocation)

    do_GET = do_POST

    def _relay(self, invocation: Invocation) -> None:
        try:
            first = invocation.parts.get(timeout=FIRST_BYTE_SECONDS)
        except queue.Empty:
            self._whole(504, {"message": "Endpoint request timed out"})
            return
        if first.kind != "prelude":
            self._whole(502, {"message": "Internal server error"})
            return
        self.send_response(int(first.value.get("statusCode", 200)))
        headers = {name: [str(value)] for name, value in
                   (first.value.get("headers") or {}).items()}
        headers.update(first.value.get("multiValueHeaders") or {})
        for name, values in headers.items():
            for value in values:
                self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            try:
                part = invocation.parts.get(timeout=REGIONAL_IDLE_TIMEOUT_SECONDS)
            except queue.Empty:  # silent too long: cut, as API Gateway cuts an idle stream
                self._cut()
                return
            if part.kind != "chunk":
                break
            self.wfile.write(b"%X\r\n%s\r\n" % (len(part.value), part.value))
            invocation.relayed.append(sequence())
        if ERROR_TYPE in part.value:  # cut short, as API Gateway ends a failed stream
            self._cut()
            return
        self.wfile.write(b"0\r\n\r\n")

    def _cut(self) -> None:
        """The client's connection ended without the body's last chunk."""
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


def function_env(template: Mapping[str, Any], runtime: RuntimeApi, tree: LambdaTree,
                 endpoint_url: str, stage: str) -> dict[str, str]:
    """The streaming function's environment: the packaged template's ``StreamingHandler``
    (its variables and handler), else the API function's variables with the wrapper and the
    handler the streaming function is given; Lambda's own variables; the tree's paths."""
    resources = template["Resources"]
    function = resources.get(STREAM_FUNCTION) or resources["APIHandler"]
    properties = function["Properties"]
    variables = {name: value for name, value in
                 properties.get("Environment", {}).get("Variables", {}).items()
                 if isinstance(value, str)}
    variables.setdefault("AWS_LAMBDA_EXEC_WRAPPER", WRAPPER)
    handler = properties["Handler"] if STREAM_FUNCTION in resources else HANDLER
    env = sandbox.lambda_env(variables, f"sagegate-{stage}-stream",
                             str(properties.get("Runtime", "python3.13")), endpoint_url)
    return {**env, "_HANDLER": handler, "AWS_LAMBDA_RUNTIME_API": runtime.address,
            "LAMBDA_TASK_ROOT": str(tree.task)}


def interpreter(tree: LambdaTree, directory: Path, python: str = sys.executable) -> Path:
    """The ``$1`` Lambda gives the wrapper: here a script running ``python -S -B`` (no
    site-packages, so nothing of this checkout's environment) with the layer and the runtime's
    packages after whatever path the wrapper set."""
    script = directory / "python3"
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="$PYTHONPATH:{tree.layer / "python"}:{tree.runtime}"\n'
        "export PYTHONPATH\n"
        f'exec "{python}" -S -B "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return script


def keep_modes(archive: Path, target: Path) -> None:
    """Give the files extracted from ``archive`` into ``target`` the Unix modes the zip
    records, as Lambda does (``zipfile`` extracts without them): the wrapper's executable bit."""
    with zipfile.ZipFile(archive) as zipped:
        for entry in zipped.infolist():
            mode = (entry.external_attr >> 16) & 0o777
            if mode and not entry.is_dir():
                (target / entry.filename).chmod(mode)


def start_function(tree: LambdaTree, env: Mapping[str, str], directory: Path,
                   log: IO[bytes]) -> subprocess.Popen[bytes]:
    """The function process: its wrapper (``AWS_LAMBDA_EXEC_WRAPPER``, read in the tree, its
    mode the zip's: :func:`keep_modes`) run as Lambda runs it, the interpreter first, the
    managed runtime's own arguments after."""
    wrapper = tree.task / Path(env["AWS_LAMBDA_EXEC_WRAPPER"]).relative_to("/var/task")
    return subprocess.Popen(
        [str(wrapper), str(interpreter(tree, directory)), "/var/runtime/bootstrap.py"],
        env=dict(env), cwd=tree.task, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Stop the function process by its pid (Lambda's shutdown: SIGTERM, then SIGKILL)."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)
