"""Turn an HTTP request body into image bytes and options, whatever shape the client sent.

Accepted bodies:

* ``application/json``: ``{"image": "<base64>", "k": 5}``, the 2018 field names
  ``{"data": ..., "topk": ...}``, or a data URL (``data:image/jpeg;base64,...``) as the image.
* raw binary (``image/jpeg``, ``image/png``, ``image/webp``, ``application/x-image``,
  ``application/octet-stream``) with options in the query string (``?k=3``).
"""
from __future__ import annotations

import binascii
import dataclasses
import heapq
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import pybase64

from chalicelib.config import SAGEMAKER_NAME
from chalicelib.errors import (
    InvalidBase64Error,
    InvalidJSONError,
    InvalidParameterError,
    MissingImageError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)

JSON_TYPE = "application/json"
BINARY_TYPES = (
    "image/jpeg", "image/png", "image/webp", "application/x-image", "application/octet-stream",
)
ACCEPTED_TYPES = (JSON_TYPE, *BINARY_TYPES)
# Common misspellings of a media type, read as the type meant.
MEDIA_TYPE_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}
# What app.py registers as binary with Chalice and API Gateway: the request types, their
# misspellings, and "image/*", so that /resize can answer an image to `Accept: image/*` (Chalice
# sends a binary body only when the Accept header names one of these, or */*).
BINARY_MEDIA_TYPES = (*BINARY_TYPES, *MEDIA_TYPE_ALIASES, "image/*")
FIELD = "field"
QUERY = "query parameter"
INT = "whole number"
TEXT = "string"
_MAX_ECHOED = 64  # characters of a client's name or type repeated in a message
_MAX_INT_DIGITS = 64  # longer JSON integers are out of every range: no 4300-digit conversion

_DATA_URL_RE = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,",
                          re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_B64_ALPHABET = re.compile(r"^[A-Za-z0-9+/]*={0,2}\Z")
_URLSAFE = str.maketrans("-_", "+/")
_INT_TEXT = re.compile(r"^[0-9]{1,9}\Z")
_PRINTABLE = re.compile(r"^[\x20-\x7e]*\Z")
MAX_CUSTOM_ATTRIBUTES = 1024


@dataclasses.dataclass(frozen=True)
class ImageRequest:
    """What a client asked for: the image and the options that came with it.

    Attributes:
        image: the encoded image bytes, as uploaded.
        options: the remaining fields (JSON fields or query parameters), unvalidated.
    """

    image: bytes
    options: Mapping[str, Any]
    source: str = FIELD
    """Where the options came from: JSON fields (:data:`FIELD`) or the query (:data:`QUERY`)."""


def media_type(content_type: str | None) -> str:
    """Return the bare, lower-cased media type of a Content-Type header (JSON if absent).

    Known misspellings (``image/jpg``) come back as the type meant.
    """
    if not content_type:
        return JSON_TYPE
    kind = content_type.split(";", 1)[0].strip().lower()
    return MEDIA_TYPE_ALIASES.get(kind, kind)


def echo(text: str) -> str:
    """A client's name or type, shortened to be repeated safely in a message."""
    return repr(text if len(text) <= _MAX_ECHOED else text[:_MAX_ECHOED] + "...")


def parse_body(
    body: bytes,
    content_type: str | None,
    query: Mapping[str, str] | None,
    *,
    max_body_bytes: int,
) -> ImageRequest:
    """Split a request body into image bytes and options.

    Args:
        body: the raw HTTP body.
        content_type: the request's Content-Type header.
        query: the query-string parameters (options for binary bodies).
        max_body_bytes: largest body accepted.

    Returns:
        The image bytes and the options.

    Raises:
        PayloadTooLargeError: the body is over ``max_body_bytes``.
        UnsupportedMediaTypeError: the content type is not one sagegate reads.
        InvalidJSONError, MissingImageError, InvalidBase64Error: the body is malformed.
    """
    kind = media_type(content_type)
    if len(body) > max_body_bytes:
        raise PayloadTooLargeError(_too_large(len(body), max_body_bytes, kind == JSON_TYPE))
    if kind == JSON_TYPE:
        return _parse_json(body, assumed=not content_type)
    if kind in BINARY_TYPES:
        if not body:
            raise MissingImageError("The request body is empty: send the image bytes.")
        return ImageRequest(image=body, options=dict(query or {}), source=QUERY)
    raise UnsupportedMediaTypeError(
        f"Unsupported Content-Type {echo(kind)}; use one of: {', '.join(ACCEPTED_TYPES)}."
    )


def _too_large(size: int, limit: int, base64_body: bool) -> str:
    advice = ("Send a smaller image (resize it on the client), or send it as binary to avoid "
              "base64's 4/3 growth." if base64_body else
              "Send a smaller image: resize or recompress it on the client.")
    return f"Request body is {size} bytes; the limit is {limit}. {advice}"


def _parse_json_int(text: str) -> float:
    # an integer this long is out of every range sagegate checks; say so there, with the range
    if len(text) > _MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def load_json(body: bytes, *, assumed: bool = False) -> Any:
    """Parse a JSON body. Every way the parser can fail is the client's ``InvalidJSON``.

    Args:
        body: the raw body (UTF-8, -16 or -32, as JSON allows).
        assumed: no Content-Type was sent and JSON was assumed (the message says so).

    Raises:
        InvalidJSONError: malformed, not UTF, nested too deep for the parser, or anything else.
    """
    try:  # json: for megabytes of base64 text, faster than orjson here
        return json.loads(body, parse_int=_parse_json_int)
    except Exception:  # ValueError, RecursionError (deep nesting), MemoryError: all the client's
        hint = (" No Content-Type header was sent, so JSON was assumed: for a raw image send "
                "Content-Type: image/jpeg, image/png, image/webp or application/octet-stream."
                if assumed else "")
        raise InvalidJSONError("The request body is not valid JSON." + hint) from None


def _parse_json(body: bytes, *, assumed: bool = False) -> ImageRequest:
    document = load_json(body, assumed=assumed)
    if not isinstance(document, dict):
        raise InvalidJSONError("The request body must be a JSON object.")
    fields = dict(document)
    encoded = pop_alias(fields, "image", "data")
    if encoded is None:
        raise MissingImageError('Missing "image": send {"image": "<base64>"}.')
    if not isinstance(encoded, str):
        raise InvalidBase64Error('"image" must be a base64 string or a data URL.')
    return ImageRequest(image=decode_base64(encoded), options=fields)


def pop_alias(fields: dict[str, Any], name: str, legacy: str) -> Any:
    """Remove and return ``name`` or its older spelling ``legacy`` (not both) from ``fields``.

    Raises:
        InvalidParameterError: both were sent.
    """
    if name in fields and legacy in fields:
        raise InvalidParameterError(f'Send "{name}" or "{legacy}", not both.')
    return fields.pop(name, fields.pop(legacy, None))


def check_fields(options: Mapping[str, Any], kinds: Mapping[str, str], source: str) -> None:
    """Refuse unknown options and options of the wrong JSON type, on every route alike.

    Values are checked further (ranges, names) by the ``parse_*`` functions; this makes sure
    they are of a type those can handle at all (``"format": []`` is not hashable).

    Args:
        options: the options of a request.
        kinds: every known option and its kind, :data:`INT` or :data:`TEXT`.
        source: :data:`FIELD` (JSON) or :data:`QUERY`, for the message.

    Raises:
        InvalidParameterError: an unknown name or a value of the wrong type.
    """
    unknown = heapq.nsmallest(5, (name for name in options if name not in kinds))
    if unknown:  # (the first few, in order, however many a hostile body holds)
        known = sorted(kinds) if source == QUERY else ["image", *sorted(kinds)]
        shown = ", ".join(echo(name) for name in unknown)
        raise InvalidParameterError(
            f"Unknown {source}(s) {shown}; known: {', '.join(known)}.")
    for name, kind in kinds.items():
        value = options.get(name)
        if value is not None and not _is_kind(value, kind):
            raise InvalidParameterError(f'"{name}" must be a {kind}, not {_json_type(value)}.')


def _is_kind(value: Any, kind: str) -> bool:
    if isinstance(value, str):
        return True  # query parameters are all text; their content is checked later
    if kind == INT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", dict: "an object", list: "an array", int: "a number",
             float: "a number"}
    return names.get(type(value), "a " + type(value).__name__)


def decode_base64(text: str) -> bytes:
    """Decode standard or URL-safe base64, tolerating whitespace and a data-URL prefix.

    Args:
        text: the encoded image, optionally ``data:<mime>;base64,<payload>``.

    Returns:
        The decoded bytes (never empty).

    Raises:
        InvalidBase64Error: anything that is not base64 in either alphabet.
        MissingImageError: the payload is empty.
    """
    match = _DATA_URL_RE.match(text)
    payload = text[match.end():] if match else text
    try:  # the common case, clean standard base64: one SIMD pass (40x binascii), no copies
        decoded = pybase64.b64decode(payload, validate=True)
    except ValueError:  # binascii.Error, or non-ASCII text
        decoded = b""
    if decoded:
        return decoded
    payload = _WHITESPACE.sub("", payload).translate(_URLSAFE)
    if not payload:
        raise MissingImageError('"image" is empty.')
    payload += "=" * (-len(payload) % 4)
    if not _B64_ALPHABET.match(payload) or len(payload) % 4:
        raise InvalidBase64Error('"image" is not valid base64.')
    try:
        return binascii.a2b_base64(payload, strict_mode=True)
    except binascii.Error:
        raise InvalidBase64Error('"image" is not valid base64.') from None


def parse_k(value: Any, default: int, name: str = "k") -> int:
    """Validate the number of classes to return.

    Args:
        value: a JSON value or query-string text; None means "use the default".
        default: the configured default.
        name: the name the client used (``k``, or the 2018 ``topk``), for the message.

    Returns:
        k >= 1. A k above the number of classes is allowed: all classes are returned.

    Raises:
        InvalidParameterError: not a whole number >= 1 (0, -1, 2.5, "abc", true).
    """
    if value is None:
        return default
    return parse_positive_int(name, value, maximum=1_000_000)


def parse_positive_int(name: str, value: Any, *, maximum: int) -> int:
    """Validate a whole number in ``1..maximum`` given as a JSON int or as decimal text.

    Raises:
        InvalidParameterError: anything else, booleans and floats included.
    """
    if isinstance(value, str) and _INT_TEXT.match(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidParameterError(f'"{name}" must be a whole number from 1 to {maximum}.')
    return value


def parse_variant(value: Any) -> str | None:
    """Validate a production variant name (SageMaker's naming rule), or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not SAGEMAKER_NAME.fullmatch(value):
        raise InvalidParameterError('"variant" must be a SageMaker production variant name.')
    return value


def parse_custom_attributes(value: Any) -> str | None:
    """Validate SageMaker CustomAttributes: printable ASCII, at most 1024 characters."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_CUSTOM_ATTRIBUTES or not _PRINTABLE.match(
        value
    ):
        raise InvalidParameterError(
            f'"custom_attributes" must be printable ASCII of at most {MAX_CUSTOM_ATTRIBUTES} '
            "characters."
        )
    return value
