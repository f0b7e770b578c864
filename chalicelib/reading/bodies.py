"""Read an HTTP request body into the uploaded bytes and the fields sent with them.

This is the body's *shape* only: which fields are known and what values they may take is
:mod:`chalicelib.reading.options`' business. Accepted bodies:

* ``application/json``: ``{"image": "<base64>", "k": 5}``, the 2018 field names
  ``{"data": ..., "topk": ...}``, or a data URL (``data:image/jpeg;base64,...``) as the image.
* raw binary (``image/jpeg``, ``image/png``, ``image/webp``, ``application/x-image``,
  ``application/octet-stream``) with options in the query string (``?k=3``).

The query string's options apply to JSON bodies too; :func:`chalicelib.reading.options.read_options`
joins them with the fields.
"""
from __future__ import annotations

import binascii
import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any

import pybase64

from chalicelib.core.errors import (
    InvalidBase64Error,
    InvalidJSONError,
    InvalidParameterError,
    MissingImageError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import REQUEST_TYPES, UPLOAD_TYPES, MediaType, bare

_MAX_ECHOED = 64  # characters of a client's name or type repeated in a message

_DATA_URL_RE = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,",
                          re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_B64_ALPHABET = re.compile(r"^[A-Za-z0-9+/]*={0,2}\Z")
_URLSAFE = str.maketrans("-_", "+/")


class Source(enum.StrEnum):
    """Where a request's options came from (the name messages use for them)."""

    FIELD = "field"
    """A JSON body's fields."""
    QUERY = "query parameter"
    """The query string (a raw upload's only options; a JSON body's besides its fields)."""


@dataclasses.dataclass(frozen=True)
class Upload:
    """A request body read: the uploaded bytes (decoded from base64 when sent as JSON) and the
    other JSON fields, or the query parameters, unvalidated."""

    data: bytes
    fields: Mapping[str, Any]
    source: Source = Source.FIELD


def echo(text: str) -> str:
    """A client's name or type, shortened to be repeated safely in a message."""
    return repr(text if len(text) <= _MAX_ECHOED else text[:_MAX_ECHOED] + "...")


def read_upload(
    body: bytes,
    content_type: str | None,
    query: Mapping[str, str] | None,
    *,
    max_body_bytes: int,
    field: str = "image",
    legacy_field: str = "data",
) -> Upload:
    """Split a request body into the uploaded bytes and the options sent with them.

    Args:
        field: the JSON field holding the base64 upload.
        legacy_field: the 2018 clients' name for it (one or the other, not both).

    Raises:
        PayloadTooLargeError: the body is over ``max_body_bytes``.
        UnsupportedMediaTypeError: the content type is not one sagegate reads.
        InvalidJSONError, MissingImageError, InvalidBase64Error: the body is malformed.
    """
    kind = bare(content_type)
    if len(body) > max_body_bytes:
        raise PayloadTooLargeError(_too_large(len(body), max_body_bytes, kind == MediaType.JSON))
    if kind == MediaType.JSON:
        return _read_json(body, field, legacy_field, assumed=not content_type)
    if kind in UPLOAD_TYPES:
        if not body:
            raise MissingImageError("The request body is empty: send the image bytes.")
        return Upload(body, dict(query or {}), Source.QUERY)
    raise UnsupportedMediaTypeError(
        f"Unsupported Content-Type {echo(kind)}; use one of: {', '.join(REQUEST_TYPES)}."
    )


_AS_A_JOB = ("Or run it as a job, which takes far larger inputs: POST /uploads, post the file "
             'to the URL it gives, then POST /models/{name}/jobs with {"upload_id": ...} '
             "(sagegate predict --async does all three).")


def _too_large(size: int, limit: int, base64_body: bool) -> str:
    advice = ("Send a smaller image (resize it on the client), or send it as binary to avoid "
              "base64's 4/3 growth." if base64_body else
              "Send a smaller image: resize or recompress it on the client.")
    return f"Request body is {size} bytes; the limit is {limit}. {advice} {_AS_A_JOB}"


def _read_json(body: bytes, field: str, legacy_field: str, *, assumed: bool) -> Upload:
    document = load_json(body, assumed=assumed)
    if not isinstance(document, dict):
        raise InvalidJSONError("The request body must be a JSON object.")
    fields = dict(document)
    if field in fields and legacy_field in fields:
        raise InvalidParameterError(f'Send "{field}" or "{legacy_field}", not both.')
    encoded = fields.pop(field, fields.pop(legacy_field, None))
    if encoded is None:
        raise MissingImageError(f'Missing "{field}": send {{"{field}": "<base64>"}}.')
    if not isinstance(encoded, str):
        raise InvalidBase64Error(f'"{field}" must be a base64 string or a data URL.')
    return Upload(decode_base64(encoded, field), fields)


def decode_base64(text: str, field: str = "image") -> bytes:
    """Decode standard or URL-safe base64, tolerating whitespace and a data-URL prefix
    (``data:<mime>;base64,<payload>``); never empty.

    Raises:
        InvalidBase64Error: anything that is not base64 in either alphabet.
        MissingImageError: the payload is empty.
    """
    match = _DATA_URL_RE.match(text)
    payload = text[match.end():] if match else text
    try:  # the common case, clean standard base64: one SIMD pass, no copies
        decoded = pybase64.b64decode(payload, validate=True)
    except ValueError:  # binascii.Error, or non-ASCII text
        decoded = b""
    if decoded:
        return decoded
    payload = _WHITESPACE.sub("", payload).translate(_URLSAFE)
    if not payload:
        raise MissingImageError(f'"{field}" is empty.')
    payload += "=" * (-len(payload) % 4)  # now a multiple of 4 long: only the alphabet to check
    if not _B64_ALPHABET.match(payload):
        raise InvalidBase64Error(f'"{field}" is not valid base64.')
    try:
        return binascii.a2b_base64(payload, strict_mode=True)
    except binascii.Error:
        raise InvalidBase64Error(f'"{field}" is not valid base64.') from None
