"""moto's server for the local stack, behind a front that answers as S3 where moto would not.

``python -m sagegate.local.moto_server --host 127.0.0.1 --port 8070`` serves moto's WSGI
application (every service, as ``moto_server`` does) on werkzeug's threaded server, prints one
line once it listens and stops on SIGTERM or SIGINT.

:class:`PostPolicyCheck` sits in front of moto's S3 (where moto's dispatcher sends a request,
whatever its headers say, so every request moto's S3 gets passes it) and takes the POSTs moto
gets wrong:

* a bucket's form upload (path-style ``POST /<bucket>`` or virtual-hosted ``POST /``): moto
  stores it without reading its policy, and reads its fields its own way. The front reads the
  form as S3 does, checks its policy (:mod:`sagegate.local.s3_forms`) and hands moto exactly what
  it checked. A bucket POST not ``multipart/form-data`` is 412 ``PreconditionFailed``;
* ``POST ?delete`` must carry its XML document: else 400 ``MalformedXML``, not moto's 500;
* ``POST`` on an object without a subresource S3 takes there is 405 ``MethodNotAllowed``.

The front does not decide by the ``Authorization`` header: moto's dispatcher reads it its own way
(any case, a scope it cannot split sent to S3), and a front that read it otherwise let a form
through unchecked. Signatures are not checked (moto takes any key).

:class:`ProvisionGate`: with ``SAGEGATE_PROVISION_KEY``, every request answers 503 until the
parent, sending the key in ``X-Sagegate-Provision``, has provisioned the jobs' resources and
opened the gate: nothing can write to the bucket before its notification is configured (a ticket
written in between would start no job). With ``SAGEGATE_INSTANCE``, every answer carries it in
``X-Sagegate-Instance``, so the parent knows it talks to its own child.
"""
from __future__ import annotations

import argparse
import hmac
import io
import os
import signal
import sys
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType, SimpleNamespace
from typing import Any, cast
from urllib.parse import parse_qs

from sagegate.local.s3_forms import S3Error, check_policy, read_form

READY_PREFIX = "moto: serving on "
INSTANCE_ENV = "SAGEGATE_INSTANCE"
INSTANCE_HEADER = "X-Sagegate-Instance"
PROVISION_KEY_ENV = "SAGEGATE_PROVISION_KEY"
PROVISION_HEADER = "X-Sagegate-Provision"
OPEN_PATH = "/_sagegate/open"
MAX_FORM_BYTES = 1024 ** 3 + 1024 * 1024
"""The largest POST upload read (S3's form uploads go to 5 GB; sagegate's caps at 1 GiB)."""
MAX_DELETE_BYTES = 2 * 1024 * 1024
"""The largest DeleteObjects document read (1,000 keys of 1,024 bytes, and their markup)."""
S3_BACKEND = "s3"
DYNAMODB_BACKEND = "dynamodb"
OBJECT_POSTS = frozenset({"uploads", "uploadid", "restore", "select"})
"""The subresources S3 takes a POST on an object for."""

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]

_REASONS = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
            411: "Length Required", 412: "Precondition Failed", 503: "Service Unavailable"}


def _answer(error: S3Error, environ: Mapping[str, Any], start: StartResponse) -> list[bytes]:
    body = error.xml()
    headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    if environ.get("HTTP_ORIGIN"):  # as moto's own answers: a page may read it
        headers.append(("Access-Control-Allow-Origin", "*"))
    start(f"{error.status} {_REASONS.get(error.status, 'Error')}", headers)
    return [body]


def _with_instance(start_response: StartResponse, instance: str) -> StartResponse:
    def start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
        if instance:
            headers = [*headers, (INSTANCE_HEADER, instance)]
        return start_response(status, headers, *rest)

    return start


class PostPolicyCheck:
    """WSGI middleware in front of moto's S3: every POST S3 answers otherwise than moto is
    checked first."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        target = s3_target(environ) if environ.get("REQUEST_METHOD") == "POST" else None
        if target is not None:
            try:
                self._check(environ, *target)
            except S3Error as error:
                return _answer(error, environ, start_response)
        return self.app(environ, start_response)

    def _check(self, environ: Environ, bucket: str, key: str) -> None:
        query = {name.lower() for name in parse_qs(str(environ.get("QUERY_STRING", "")),
                                                   keep_blank_values=True)}
        if key:
            if not query & OBJECT_POSTS:
                raise S3Error(405, "MethodNotAllowed", "The specified method is not allowed "
                              "against this resource.", {"Method": "POST",
                                                         "ResourceType": "OBJECT"})
            return
        if "delete" in query:
            _check_delete(environ)
            return
        _check_form(environ, bucket)


def _body(environ: Environ, limit: int) -> bytes:
    """The request's body, read once and put back for the wrapped application.

    Raises:
        S3Error: no Content-Length (411), or one over ``limit`` (400 ``EntityTooLarge``).
    """
    if not str(environ.get("CONTENT_LENGTH") or "").isdigit():
        raise S3Error(411, "MissingContentLength",
                      "You must provide the Content-Length HTTP header.")
    length = int(environ["CONTENT_LENGTH"])
    if length > limit:
        raise S3Error(400, "EntityTooLarge",
                      "Your proposed upload exceeds the maximum allowed size",
                      {"ProposedSize": length, "MaxSizeAllowed": limit})
    body: bytes = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)  # moto reads it again
    return body


def _check_delete(environ: Environ) -> None:
    """DeleteObjects: its body must be S3's ``Delete`` document, whatever type the request
    declares (moto reads a body declared as a form as one, and fails).

    Raises:
        S3Error: 400 ``MalformedXML`` (or the body's length errors).
    """
    body = _body(environ, MAX_DELETE_BYTES)
    environ["CONTENT_TYPE"] = "application/xml"
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        root = None
    if root is None or _local(root.tag) != "Delete" or not any(
            _local(item.tag) == "Object" and any(_local(part.tag) == "Key" for part in item)
            for item in root):
        raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed or did "
                      "not validate against our published schema")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _check_form(environ: Environ, bucket: str) -> None:
    """A bucket's form upload: read as S3 reads it, checked against its policy, handed on as
    exactly the fields and file checked.

    Raises:
        S3Error: S3's refusal.
    """
    kind = str(environ.get("CONTENT_TYPE", ""))
    if not kind.lower().startswith("multipart/form-data"):
        raise S3Error(412, "PreconditionFailed", "At least one of the pre-conditions you "
                      "specified did not hold", {"Condition": "Bucket POST must be of the "
                                                              "enclosure-type multipart/form-data"})
    form = read_form(_body(environ, MAX_FORM_BYTES), kind)
    check_policy(dict(form.fields), bucket, form.size)
    environ["wsgi.input"], length = form.forwarded()
    environ["CONTENT_LENGTH"] = str(length)


def s3_target(environ: Mapping[str, Any]) -> tuple[str, str] | None:
    """The bucket and key of an S3 request, its URL read as moto reads it: the Host's first label
    for a virtual-hosted URL and the path as key, else the path's first segment and the rest.
    None when no bucket is named."""
    from moto.s3.responses import S3Response

    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
    path = str(environ.get("PATH_INFO", "/")).lstrip("/")
    url = f"http://{host}/{path}"
    if S3Response.subdomain_based_buckets(SimpleNamespace(headers={"host": host}, url=url)):
        return host.split(".", 1)[0], path
    bucket, _, key = path.partition("/")
    return (bucket, key) if bucket else None


class OneAtATime:
    """WSGI middleware: one request at a time. DynamoDB applies each item's update atomically
    (a conditional ``ADD``: the token budgets' counters); moto's backend reads, checks and
    writes an item in steps, so two threads could both pass a condition and one update be
    lost."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        with self._lock:
            answer = self.app(environ, start_response)
            try:
                return list(answer)
            finally:  # WSGI: the app's iterable closed once read (the server sees a list)
                close = getattr(answer, "close", None)
                if callable(close):
                    close()


def fronting(create_backend: Callable[[str], WsgiApp]) -> Callable[[str], WsgiApp]:
    """moto's backend factory with its S3 behind :class:`PostPolicyCheck` (the check is where
    the dispatcher sends a request, not where its headers point) and its DynamoDB behind
    :class:`OneAtATime`."""

    def create(service: str) -> WsgiApp:
        app = create_backend(service)
        if service == S3_BACKEND:
            return PostPolicyCheck(app)
        return OneAtATime(app) if service == DYNAMODB_BACKEND else app

    return create


class ProvisionGate:
    """WSGI middleware: with a key, every request but the key's answers 503 until the key's
    ``POST`` to :data:`OPEN_PATH` opens the gate; every answer carries the instance header, if
    any."""

    def __init__(self, app: WsgiApp, key: str = "", instance: str = "") -> None:
        self.app = app
        self.key = key.encode()
        self.instance = instance
        self._open = threading.Event()
        if not key:
            self._open.set()

    @property
    def open(self) -> bool:
        return self._open.is_set()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        start = _with_instance(start_response, self.instance)
        if self._open.is_set():
            return self.app(environ, start)
        given = str(environ.get("HTTP_" + PROVISION_HEADER.upper().replace("-", "_"), ""))
        if not hmac.compare_digest(given.encode(), self.key):
            return _answer(S3Error(503, "ServiceUnavailable", "moto's server is being "
                                   "provisioned; try again shortly."), environ, start)
        if environ.get("PATH_INFO") == OPEN_PATH and environ.get("REQUEST_METHOD") == "POST":
            self._open.set()
            start("204 No Content", [("Content-Length", "0")])
            return [b""]
        return self.app(environ, start)


def build_app(instance: str = "", provision_key: str = "",
              create_backend: Callable[[str], WsgiApp] | None = None) -> WsgiApp:
    """moto's server application, its S3 behind :class:`PostPolicyCheck` and its DynamoDB
    behind :class:`OneAtATime`, behind
    :class:`ProvisionGate` (open without ``provision_key``)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    factory = fronting(create_backend or cast(Callable[[str], WsgiApp], create_backend_app))
    dispatcher = DomainDispatcherApplication(cast(Any, factory))
    return ProvisionGate(dispatcher, provision_key, instance)


def _quiet_handler() -> type[Any]:
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class QuietHandler(MotoRequestHandler):
        """No line per request: the event pump long-polls all the time."""

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            if str(code).startswith("5"):
                super().log_request(code, size)

    return QuietHandler


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean stop, 2 when the port cannot be bound."""
    parser = argparse.ArgumentParser(prog="python -m sagegate.local.moto_server",
                                     description="moto's server (S3, SNS, SQS, DynamoDB ...) "
                                                 "with S3's POST policy checked, for the local "
                                                 "stack.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args(argv)
    from werkzeug.serving import make_server

    try:
        app = build_app(os.environ.get(INSTANCE_ENV, ""), os.environ.get(PROVISION_KEY_ENV, ""))
        server = make_server(args.host, args.port, app, threaded=True,
                             request_handler=_quiet_handler())
    except OSError as error:
        print(f"moto: cannot start: {error}", file=sys.stderr, flush=True)
        return 2

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"{READY_PREFIX}http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
