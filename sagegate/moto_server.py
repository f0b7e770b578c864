"""moto's server for the local stack, with S3's POST policy checked.

``python -m sagegate.moto_server --host 127.0.0.1 --port 8070`` serves moto's WSGI application
(S3, SNS, SQS and the rest of moto's services, as ``moto_server`` does) on werkzeug's threaded
server, prints one line once it listens and stops on SIGTERM or SIGINT.
:func:`sagegate.local_aws.start_moto` starts it as ``make run``'s child.

moto stores a browser-form POST upload without reading its policy. S3 refuses a file outside
the policy's ``content-length-range`` (400 ``EntityTooLarge`` / ``EntityTooSmall``), fields that
fail an exact-match or ``starts-with`` condition, and an expired policy (403 ``AccessDenied``):
:class:`PostPolicyCheck` makes those checks before moto sees the upload, so a local upload over
a model's cap is refused as S3 refuses it. The signature is not checked (moto takes any key).
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
from types import FrameType
from typing import Any
from xml.sax.saxutils import escape

READY_PREFIX = "moto: serving on "
INSTANCE_ENV = "SAGEGATE_INSTANCE"
INSTANCE_HEADER = "X-Sagegate-Instance"
MAX_FORM_BYTES = 1024 ** 3 + 1024 * 1024
"""The largest POST upload read (S3's form uploads go up to 5 GB; sagegate's caps to 1 GiB)."""

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
        PolicyError: S3's refusal (an upload without a policy passes: S3 then needs a public
            bucket, which moto does not check either).
    """
    lowered = {name.lower(): value for name, value in fields.items()}
    raw = lowered.get("policy")
    if raw is None:
        return
    try:
        policy = json.loads(base64.b64decode(raw, validate=True))
        expiration = datetime.fromisoformat(str(policy["expiration"]).replace("Z", "+00:00"))
        conditions = list(policy.get("conditions", []))
    except (ValueError, KeyError, TypeError):
        raise _denied("Policy could not be parsed.") from None
    if (now or datetime.now(UTC)) > expiration:
        raise _denied("Policy expired.")
    values = {**lowered, "bucket": bucket}
    for condition in conditions:
        _check_condition(condition, values, size)


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
        _check_size(size, int(first), int(second))
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
    """WSGI middleware: checks S3 form uploads (``POST /<bucket>``, multipart) against their
    policy before the wrapped application stores them; adds the instance header."""

    def __init__(self, app: WsgiApp, instance: str = "") -> None:
        self.app = app
        self.instance = instance

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            if self.instance:
                headers = [*headers, (INSTANCE_HEADER, self.instance)]
            return start_response(status, headers, *rest)

        if _is_form_upload(environ):
            try:
                self._check(environ)
            except PolicyError as error:
                body = error.xml()
                headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
                if environ.get("HTTP_ORIGIN"):  # as moto's own answers: a page may read it
                    headers.append(("Access-Control-Allow-Origin", "*"))
                start(f"{error.status} {_REASONS.get(error.status, 'Error')}", headers)
                return [body]
        return self.app(environ, start)

    def _check(self, environ: Environ) -> None:
        from werkzeug.formparser import parse_form_data

        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_FORM_BYTES:
            raise PolicyError(400, "EntityTooLarge",
                              "Your proposed upload exceeds the maximum allowed size",
                              {"ProposedSize": length, "MaxSizeAllowed": MAX_FORM_BYTES})
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)  # moto reads it again
        copy = {**environ, "wsgi.input": io.BytesIO(body)}
        _, form, files = parse_form_data(copy, max_form_memory_size=MAX_FORM_BYTES)
        upload = files.get("file")
        size = 0 if upload is None else upload.stream.seek(0, io.SEEK_END)
        bucket = environ.get("PATH_INFO", "/").strip("/").split("/")[0]
        check_policy(form.to_dict(), bucket, size)


_REASONS = {400: "Bad Request", 403: "Forbidden"}


def _is_form_upload(environ: Mapping[str, Any]) -> bool:
    path = str(environ.get("PATH_INFO", "/")).strip("/")
    return (environ.get("REQUEST_METHOD") == "POST" and bool(path) and "/" not in path
            and str(environ.get("CONTENT_TYPE", "")).startswith("multipart/form-data")
            and "delete" not in str(environ.get("QUERY_STRING", "")))


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
