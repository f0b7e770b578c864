"""S3's browser-form POST uploads, read and checked as S3 does, for the local S3 front.

:func:`read_form` reads a ``multipart/form-data`` body part by part: each part before the file is
a field (names compared without case; a field given twice is refused rather than one value
silently winning); the first part named ``file`` is the content; fields after it are ignored (as
S3 does), and a second ``file`` is refused (one file per request). :func:`check_policy` checks
the fields against the POST policy as S3 does (not the signature). :meth:`Form.forwarded` is the
body moto then stores: those fields and that file, nothing else, so moto can store only what was
checked.

Every refusal is an :class:`S3Error` with S3's own status, code and message, as S3's XML error
document.
"""
from __future__ import annotations

import base64
import dataclasses
import io
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from xml.sax.saxutils import escape

EXEMPT_FIELDS = frozenset({"policy", "x-amz-signature", "signature", "awsaccesskeyid", "file"})
"""The fields S3 needs no policy condition for (SigV4's and SigV2's), besides
:data:`IGNORED_PREFIX`'s."""
IGNORED_PREFIX = "x-ignore-"
MAX_PRE_DATA_BYTES = 20_480
"""S3's ``MaxPostPreDataLengthBytes``: the bytes of a form before the file."""
FILE_FIELD = "file"
_CRLF = b"\r\n"


class S3Error(Exception):
    """S3's refusal of a request: its status, code and message (and extra XML members)."""

    def __init__(self, status: int, code: str, message: str,
                 extra: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = dict(extra or {})

    def xml(self) -> bytes:
        members = "".join(f"<{name}>{escape(str(value))}</{name}>"
                          for name, value in self.extra.items())
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{self.code}</Code>'
                f"<Message>{escape(self.message)}</Message>{members}</Error>").encode()


def malformed() -> S3Error:
    return S3Error(400, "MalformedPOSTRequest",
                   "The body of your POST request is not well-formed multipart/form-data.")


def invalid_argument(message: str, name: str, value: object = None) -> S3Error:
    """S3's ``InvalidArgument`` naming the form field at fault."""
    extra: dict[str, object] = {"ArgumentName": name}
    if value is not None:
        extra["ArgumentValue"] = value
    return S3Error(400, "InvalidArgument", message, extra)


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of a multipart body; its data is a slice of the body, never copied."""

    name: str
    filename: str | None
    content_type: str | None
    start: int
    end: int


@dataclasses.dataclass(frozen=True)
class Form:
    """A form upload as S3 reads it: the fields before the file, in order, and the file."""

    body: bytes
    boundary: bytes
    fields: tuple[tuple[str, str], ...]
    file: Part

    @property
    def size(self) -> int:
        return self.file.end - self.file.start

    def field(self, name: str) -> str | None:
        """A field's value (its name compared without case), or None."""
        return next((value for given, value in self.fields if given.lower() == name.lower()),
                    None)

    def forwarded(self) -> tuple[io.BufferedReader, int]:
        """The body to hand on (a reader and its length): the fields, names lower-cased (moto
        reads ``key`` by its exact name), the file, the closing delimiter."""
        delimiter = b"--" + self.boundary
        head = io.BytesIO()
        for name, value in self.fields:
            head.write(delimiter + _CRLF + _disposition(name.lower()) + _CRLF + _CRLF
                       + value.encode() + _CRLF)
        head.write(delimiter + _CRLF + _disposition(FILE_FIELD, self.file.filename or "")
                   + _CRLF)
        if self.file.content_type:
            head.write(f"Content-Type: {self.file.content_type}".encode() + _CRLF)
        head.write(_CRLF)
        chunks = (head.getvalue(), memoryview(self.body)[self.file.start:self.file.end],
                  _CRLF + delimiter + b"--" + _CRLF)
        return io.BufferedReader(_Chain(chunks)), sum(len(chunk) for chunk in chunks)


def _disposition(name: str, filename: str | None = None) -> bytes:
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    line = f'Content-Disposition: form-data; name="{quoted}"'
    if filename is not None:
        line += '; filename="' + filename.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return line.encode()


class _Chain(io.RawIOBase):
    """A readable stream over byte chunks, in order, copying nothing ahead."""

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        self._chunks = [memoryview(chunk) for chunk in chunks]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while self._chunks and not len(self._chunks[0]):
            self._chunks.pop(0)
        if not self._chunks:
            return 0
        size = min(len(buffer), len(self._chunks[0]))
        buffer[:size] = self._chunks[0][:size]
        self._chunks[0] = self._chunks[0][size:]
        return size


def read_form(body: bytes, content_type: str) -> Form:
    """Read a form upload as S3 does (see the module).

    Raises:
        S3Error: ``MalformedPOSTRequest``, ``InvalidArgument`` (a field given twice, no file or a
            second one, no ``key``), ``MaxPostPreDataLengthExceeded`` (over 20 KB before the
            file).
    """
    from werkzeug.http import parse_options_header

    boundary = parse_options_header(content_type)[1].get("boundary", "")
    if not boundary or len(boundary) > 70:
        raise malformed()
    fields: list[tuple[str, str]] = []
    for part in _parts(body, boundary.encode("latin-1")):
        if part.name.lower() == FILE_FIELD:
            if part.start > MAX_PRE_DATA_BYTES:
                raise S3Error(400, "MaxPostPreDataLengthExceeded", "Your POST request fields "
                              "preceding the upload file were too large.",
                              {"MaxPostPreDataLengthBytes": MAX_PRE_DATA_BYTES})
            form = Form(body, boundary.encode("latin-1"), tuple(fields), part)
            _after_file(body, boundary.encode("latin-1"), part.end)
            if form.field("key") is None:
                raise invalid_argument("Bucket POST must contain a field named 'key'.  If it "
                                       "is specified, please check the order of the fields.",
                                       "key", "")
            return form
        _add_field(fields, part, body)
    raise invalid_argument("POST requires exactly one file upload per request.", FILE_FIELD, 0)


def _add_field(fields: list[tuple[str, str]], part: Part, body: bytes) -> None:
    if any(name.lower() == part.name.lower() for name, _ in fields):
        raise invalid_argument(f"The form field {part.name[:128]!r} is given more than once "
                               "(field names are compared without case).", part.name[:128])
    try:
        value = body[part.start:part.end].decode()
    except UnicodeDecodeError:
        raise malformed() from None
    fields.append((part.name, value))


def _after_file(body: bytes, boundary: bytes, end: int) -> None:
    files = 1
    try:
        for part in _parts(body, boundary, end):
            files += part.name.lower() == FILE_FIELD
    except S3Error:
        pass  # what follows the file is not read as fields: its shape does not matter
    if files > 1:
        raise invalid_argument("POST requires exactly one file upload per request.",
                               FILE_FIELD, files)


def _parts(body: bytes, boundary: bytes, start: int = 0) -> Iterable[Part]:
    """The parts of a multipart body from the first delimiter at or after ``start``.

    Raises:
        S3Error: ``MalformedPOSTRequest``.
    """
    delimiter = b"--" + boundary
    position = _first_delimiter(body, delimiter, start)
    while True:
        position += len(delimiter)
        if body.startswith(b"--", position):
            return  # the closing delimiter (the epilogue is ignored)
        headers_at = body.find(_CRLF, position)
        if headers_at < 0 or body[position:headers_at].strip(b" \t"):
            raise malformed()
        headers_end = body.find(_CRLF + _CRLF, headers_at)
        data_end = body.find(_CRLF + delimiter, headers_end + 4) if headers_end >= 0 else -1
        if data_end < 0:
            raise malformed()
        yield _part(body[headers_at + 2:headers_end], headers_end + 4, data_end)
        position = data_end + 2


def _first_delimiter(body: bytes, delimiter: bytes, start: int) -> int:
    if start == 0 and body.startswith(delimiter):
        return 0
    found = body.find(_CRLF + delimiter, start)
    if found < 0:
        raise malformed()
    return found + 2


def _part(headers: bytes, start: int, end: int) -> Part:
    from werkzeug.http import parse_options_header

    values: dict[str, str] = {}
    for line in headers.decode("latin-1").split("\r\n") if headers else []:
        name, colon, value = line.partition(":")
        if not colon:
            raise malformed()
        values[name.strip().lower()] = value.strip()
    kind, params = parse_options_header(values.get("content-disposition", ""))
    if kind.lower() != "form-data" or not params.get("name"):
        raise malformed()
    return Part(params["name"], params.get("filename"), values.get("content-type"), start, end)


def _denied(what: str) -> S3Error:
    return S3Error(403, "AccessDenied", f"Invalid according to Policy: {what}")


def check_policy(fields: Mapping[str, str], bucket: str, size: int,
                 now: datetime | None = None) -> None:
    """Check a POST upload against its policy as S3 does (not the signature).

    Args:
        fields: names compared case-insensitively, ``policy`` among them.
        now: the time to check the expiration against (default: now).

    Raises:
        S3Error: S3's refusal (a form without a policy is anonymous: S3 takes it only into a
            public bucket, and the local stack's are private).
    """
    lowered = {name.lower(): value for name, value in fields.items()}
    raw = lowered.get("policy")
    if raw is None:
        raise S3Error(403, "AccessDenied", "Access Denied")
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
        check_size(size, low, high)
        return
    name = str(first).lstrip("$").lower()
    actual = values.get(name, "")
    ok = actual == second if operator == "eq" else (
        operator == "starts-with" and actual.startswith(str(second)))
    if not ok:
        raise _denied(f'Policy Condition failed: ["{operator}", "{first}", "{second}"]')


def check_size(size: int, low: int, high: int) -> None:
    """A file's size within ``low``..``high`` bytes.

    Raises:
        S3Error: ``EntityTooLarge`` / ``EntityTooSmall``.
    """
    if size > high:
        raise S3Error(400, "EntityTooLarge",
                      "Your proposed upload exceeds the maximum allowed size",
                      {"ProposedSize": size, "MaxSizeAllowed": high})
    if size < low:
        raise S3Error(400, "EntityTooSmall",
                      "Your proposed upload is smaller than the minimum allowed size",
                      {"ProposedSize": size, "MinSizeAllowed": low})
