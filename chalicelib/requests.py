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
import json
import re
from collections.abc import Mapping
from typing import Any

import pybase64

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

_DATA_URL_RE = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,",
                          re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_B64_ALPHABET = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_URLSAFE = str.maketrans("-_", "+/")
_INT_TEXT = re.compile(r"^[0-9]{1,9}$")
_PRINTABLE = re.compile(r"^[\x20-\x7e]*$")
_VARIANT_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
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


def media_type(content_type: str | None) -> str:
    """Return the bare, lower-cased media type of a Content-Type header (JSON if absent)."""
    if not content_type:
        return JSON_TYPE
    return content_type.split(";", 1)[0].strip().lower()


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
    if len(body) > max_body_bytes:
        raise PayloadTooLargeError(
            f"Request body is {len(body)} bytes; the limit is {max_body_bytes}. Send a smaller "
            "image (resize it on the client), or send it as binary to avoid base64's 4/3 growth."
        )
    kind = media_type(content_type)
    if kind == JSON_TYPE:
        return _parse_json(body)
    if kind in BINARY_TYPES:
        if not body:
            raise MissingImageError("The request body is empty: send the image bytes.")
        return ImageRequest(image=body, options=dict(query or {}))
    raise UnsupportedMediaTypeError(
        f"Unsupported Content-Type {kind!r}; use one of: {', '.join(ACCEPTED_TYPES)}."
    )


def _parse_json(body: bytes) -> ImageRequest:
    try:
        document = json.loads(body)  # for megabytes of base64 text, faster than orjson here
    except (ValueError, UnicodeDecodeError):
        raise InvalidJSONError("The request body is not valid JSON.") from None
    if not isinstance(document, dict):
        raise InvalidJSONError("The request body must be a JSON object.")
    fields = dict(document)
    encoded = _pop_alias(fields, "image", "data")
    if encoded is None:
        raise MissingImageError('Missing "image": send {"image": "<base64>"}.')
    if not isinstance(encoded, str):
        raise InvalidBase64Error('"image" must be a base64 string or a data URL.')
    k = _pop_alias(fields, "k", "topk")
    if k is not None:
        fields["k"] = k
    return ImageRequest(image=decode_base64(encoded), options=fields)


def _pop_alias(fields: dict[str, Any], name: str, legacy: str) -> Any:
    if name in fields and legacy in fields:
        raise InvalidParameterError(f'Send "{name}" or "{legacy}", not both.')
    return fields.pop(name, fields.pop(legacy, None))


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


def parse_k(value: Any, default: int) -> int:
    """Validate the number of classes to return.

    Args:
        value: a JSON value or query-string text; None means "use the default".
        default: the configured default.

    Returns:
        k >= 1. A k above the number of classes is allowed: all classes are returned.

    Raises:
        InvalidParameterError: not a whole number >= 1 (0, -1, 2.5, "abc", true).
    """
    if value is None:
        return default
    return parse_positive_int("k", value, maximum=1_000_000)


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
    if not isinstance(value, str) or not _VARIANT_RE.match(value):
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
