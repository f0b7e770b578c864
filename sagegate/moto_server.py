"""moto's server for the local stack, with S3's POST policy checked.

``python -m sagegate.moto_server --host 127.0.0.1 --port 8070`` serves moto's WSGI application
(S3, SNS, SQS and the rest of moto's services, as ``moto_server`` does) on werkzeug's threaded
server, prints one line once it listens and stops on SIGTERM or SIGINT.
:func:`sagegate.local_aws.start_moto` starts it as ``make run``'s child.

moto stores a browser-form POST upload without reading its policy. S3 refuses a file outside
the policy's ``content-length-range`` (400 ``EntityTooLarge`` / ``EntityTooSmall``), and with
403 ``AccessDenied``: a form without a policy (anonymous, to a private bucket), fields that fail
an exact-match or ``starts-with`` condition, fields no condition names ("Extra input fields"),
and an expired policy; a bucket POST that is not ``multipart/form-data`` is 412
``PreconditionFailed``. :class:`PostPolicyCheck` makes those checks before moto sees the upload,
at a path-style URL (``POST /<bucket>``) or a virtual-hosted one (``POST /`` to
``<bucket>.localhost``, read as moto reads it), so a local upload over a model's cap is refused
as S3 refuses it. The signature is not checked (moto takes any key).
With ``SAGEGATE_INSTANCE`` set, every answer carries it in ``X-Sagegate-Instance``, so the
parent knows it is talking to its own child.
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from types import FrameType, SimpleNamespace
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

READY_PREFIX = "moto: serving on "
INSTANCE_ENV = "SAGEGATE_INSTANCE"
INSTANCE_HEADER = "X-Sagegate-Instance"
MAX_FORM_BYTES = 1024 ** 3 + 1024 * 1024
"""The largest POST upload read (S3's form uploads go up to 5 GB; sagegate's caps to 1 GiB)."""
EXEMPT_FIELDS = frozenset({"policy", "x-amz-signature", "signature", "awsaccesskeyid", "file"})
"""The form fields S3 needs no policy condition for (SigV4's and SigV2's), besides those whose
names start with :data:`IGNORED_PREFIX`."""
IGNORED_PREFIX = "x-ignore-"

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class PolicyError(Exception):
    """The upload breaks its policy: S3's status, code and message (and extra XML members)."""

    def __init__(self, status: int, code: str, message: str,
                 extra: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = dict(extra or {})

    def xml(self) -> bytes:
        """S3's error document."""
        members = "".join(f"<{name}>{escape(str(value))}</{name}>"
                          for name, value in self.extra.items())
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{self.code}</Code>'
                f"<Message>{escape(self.message)}</Message>{members}</Error>").encode()


def _denied(what: str) -> PolicyError:
    return PolicyError(403, "AccessDenied", f"Invalid according to Policy: {what}")


def check_policy(fields: Mapping[str, str], bucket: str, size: int,
                 now: datetime | None = None) -> None:
    """Checks a POST upload against its policy as S3 does (not the signature).

    Args:
        fields: the form's fields (names compared case-insensitively), ``policy`` among them.
        bucket: the bucket posted to.
        size: the file's size in bytes.
        now: the time to check the expiration against (default: now).

    Raises:
        PolicyError: S3's refusal (a form without a policy is anonymous: S3 takes it only into
            a public bucket, and the local stack's buckets are private).
    """
    lowered = {name.lower(): value for name, value in fields.items()}
    raw = lowered.get("policy")
    if raw is None:
        raise PolicyError(403, "AccessDenied", "Access Denied")
    try:
        policy = json.loads(base64.b64decode(raw, validate=True))
        expiration = datetime.fromisoformat(str(policy["expiration"]).replace("Z", "+00:00"))
        conditions = list(policy.get("conditions", []))
        if expiration.tzinfo is None:
            raise ValueError("no time zone")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _denied("Policy could not be parsed.") from None
    if (now or datetime.now(UTC)) > expiration:
        raise _denied("Policy expired.")
    values = {**lowered, "bucket": bucket}
    for condition in conditions:
        _check_condition(condition, values, size)
    named = EXEMPT_FIELDS.union(*(_fields_of(condition) for condition in conditions))
    extra = [name for name in fields
             if name.lower() not in named and not name.lower().startswith(IGNORED_PREFIX)]
    if extra:
        raise _denied("Extra input fields: " + ", ".join(extra))


def _fields_of(condition: object) -> set[str]:
    """The fields a condition (one already checked) names, lower-cased."""
    if isinstance(condition, dict):
        return {str(name).lower() for name in condition}
    if isinstance(condition, list) and condition[0] != "content-length-range":
        return {str(condition[1]).lstrip("$").lower()}
    return set()


def _check_condition(condition: object, values: Mapping[str, str], size: int) -> None:
    if isinstance(condition, dict):
        for name, expected in condition.items():
            if values.get(str(name).lower()) != expected:
                raise _denied(f'Policy Condition failed: ["eq", "${name}", "{expected}"]')
        return
    if not isinstance(condition, list) or len(condition) != 3:
        raise _denied("Policy could not be parsed.")
    operator, first, second = condition
    if operator == "content-length-range":
        try:
            low, high = int(first), int(second)
        except (TypeError, ValueError):
            raise _denied(f'Policy Condition failed: ["{operator}", "{first}", "{second}"]'
                          ) from None
        _check_size(size, low, high)
        return
    name = str(first).lstrip("$").lower()
    actual = values.get(name, "")
    ok = actual == second if operator == "eq" else (
        operator == "starts-with" and actual.startswith(str(second)))
    if not ok:
        raise _denied(f'Policy Condition failed: ["{operator}", "{first}", "{second}"]')


def _check_size(size: int, low: int, high: int) -> None:
    if size > high:
        raise PolicyError(400, "EntityTooLarge",
                          "Your proposed upload exceeds the maximum allowed size",
                          {"ProposedSize": size, "MaxSizeAllowed": high})
    if size < low:
        raise PolicyError(400, "EntityTooSmall",
                          "Your proposed upload is smaller than the minimum allowed size",
                          {"ProposedSize": size, "MinSizeAllowed": low})


class PostPolicyCheck:
    """WSGI middleware: checks S3 form uploads (a bucket's ``POST``, path-style or
    virtual-hosted) against their policy before the wrapped application stores them; adds the
    instance header."""

    def __init__(self, app: WsgiApp, instance: str = "") -> None:
        self.app = app
        self.instance = instance

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            if self.instance:
                headers = [*headers, (INSTANCE_HEADER, self.instance)]
            return start_response(status, headers, *rest)

        bucket = posted_bucket(environ)
        if bucket is not None:
            try:
                self._check(environ, bucket)
            except PolicyError as error:
                body = error.xml()
                headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
                if environ.get("HTTP_ORIGIN"):  # as moto's own answers: a page may read it
                    headers.append(("Access-Control-Allow-Origin", "*"))
                start(f"{error.status} {_REASONS.get(error.status, 'Error')}", headers)
                return [body]
        return self.app(environ, start)

    def _check(self, environ: Environ, bucket: str) -> None:
        from werkzeug.formparser import parse_form_data

        kind = str(environ.get("CONTENT_TYPE", "")).lower()
        if not kind.startswith("multipart/form-data"):
            if kind.startswith("application/x-www-form-urlencoded") and \
                    not environ.get("HTTP_AUTHORIZATION"):  # a form moto would store
                raise PolicyError(412, "PreconditionFailed", "At least one of the "
                                  "pre-conditions you specified did not hold", {
                                      "Condition": "Bucket POST must be of the enclosure-type "
                                                   "multipart/form-data"})
            return  # a signed API call (moto answers it), or no form moto reads
        if not str(environ.get("CONTENT_LENGTH") or "").isdigit():
            raise PolicyError(411, "MissingContentLength",
                              "You must provide the Content-Length HTTP header.")
        length = int(environ["CONTENT_LENGTH"])
        if length > MAX_FORM_BYTES:
            raise PolicyError(400, "EntityTooLarge",
                              "Your proposed upload exceeds the maximum allowed size",
                              {"ProposedSize": length, "MaxSizeAllowed": MAX_FORM_BYTES})
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)  # moto reads it again
        copy = {**environ, "wsgi.input": io.BytesIO(body)}
        _, form, files = parse_form_data(copy, max_form_memory_size=MAX_FORM_BYTES)
        upload = files.get("file")
        if upload is not None:
            size = upload.stream.seek(0, io.SEEK_END)
        else:  # a file sent as a plain field (no filename): moto stores that too
            size = len(form.get("file", "").encode())
        check_policy(form.to_dict(), bucket, size)


_REASONS = {400: "Bad Request", 403: "Forbidden", 411: "Length Required",
            412: "Precondition Failed"}


def posted_bucket(environ: Mapping[str, Any]) -> str | None:
    """The bucket a request posts an object to, its URL read as moto reads it: the Host's
    first label for a virtual-hosted URL (``POST /`` to ``<bucket>.localhost:<port>`` or
    ``<bucket>.s3.amazonaws.com``), else the path's one segment (``POST /<bucket>``). None
    for every other request: not a POST, a key's POST, ``?delete``, a POST to ``/`` with no
    bucket in its Host (SNS, SQS ...)."""
    if environ.get("REQUEST_METHOD") != "POST" or "delete" in parse_qs(
            str(environ.get("QUERY_STRING", "")), keep_blank_values=True):
        return None
    from moto.s3.responses import S3Response
    from moto.s3.utils import bucket_name_from_url

    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
    path = str(environ.get("PATH_INFO", "/")).strip("/")
    url = f"http://{host}/{path}"
    if S3Response.subdomain_based_buckets(SimpleNamespace(headers={"host": host}, url=url)):
        return None if path else bucket_name_from_url(url)
    return path if path and "/" not in path else None


def build_app(instance: str = "") -> WsgiApp:
    """moto's server application (every service), behind :class:`PostPolicyCheck`."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    return PostPolicyCheck(DomainDispatcherApplication(create_backend_app), instance)


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
    parser = argparse.ArgumentParser(prog="python -m sagegate.moto_server",
                                     description="moto's server (S3, SNS, SQS ...) with S3's "
                                                 "POST policy checked, for the local stack.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args(argv)
    from werkzeug.serving import make_server

    try:
        server = make_server(args.host, args.port, build_app(os.environ.get(INSTANCE_ENV, "")),
                             threaded=True, request_handler=_quiet_handler())
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
