"""AWS event stream framing (``application/vnd.amazon.eventstream``), as InvokeEndpointWith-
ResponseStream answers: the encoder botocore's ``EventStreamBuffer`` reads.

A message is a prelude (total length and headers length, both big-endian u32, then the CRC32
of those 8 bytes), the headers, the payload, and the CRC32 of everything before it. A header is
its name's length (u8), its name, its type (u8; 7 is a string) and, for a string, the value's
length (u16) and the value.
"""

from __future__ import annotations

import json
import struct
from binascii import crc32

STRING = 7
"""The header value type of a UTF-8 string."""
PRELUDE = struct.Struct(">II")
CRC = struct.Struct(">I")
MAX_HEADERS_BYTES = 128 * 1024
"""botocore refuses a message whose headers take more (``_MAX_HEADERS_LENGTH``)."""
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
"""botocore refuses a message whose payload takes more (``_MAX_PAYLOAD_LENGTH``)."""
PAYLOAD_PART = "PayloadPart"
MODEL_STREAM_ERROR = "ModelStreamError"
INTERNAL_STREAM_FAILURE = "InternalStreamFailure"
STREAM_BROKEN = "StreamBroken"
TIME_EXCEEDED = "ModelInvocationTimeExceeded"
"""ModelStreamError's two ``ErrorCode`` values."""


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    if len(raw_name) > 255 or len(raw_value) > 65535:
        raise ValueError(f"event stream header {name[:40]!r} too long")
    return (bytes([len(raw_name)]) + raw_name + bytes([STRING])
            + struct.pack(">H", len(raw_value)) + raw_value)  # fmt: skip


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event stream message.

    Args:
        headers: string headers, in order (``:event-type`` ...).
        payload: the message's bytes.

    Raises:
        ValueError: a header, the headers or the payload are over what a reader accepts.
    """
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    if len(encoded) > MAX_HEADERS_BYTES or len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError("event stream message too large")
    total = PRELUDE.size + CRC.size + len(encoded) + len(payload) + CRC.size
    prelude = PRELUDE.pack(total, len(encoded))
    prelude_crc = crc32(prelude)
    body = prelude + CRC.pack(prelude_crc) + encoded + payload
    return body + CRC.pack(crc32(body) & 0xFFFFFFFF)


def payload_part(data: bytes) -> bytes:
    """A ``PayloadPart`` event carrying ``data`` (the container's bytes, as they came)."""
    headers = {":event-type": PAYLOAD_PART, ":content-type": "application/octet-stream",
               ":message-type": "event"}  # fmt: skip
    return encode_message(headers, data)


def exception_event(exception_type: str, document: dict[str, str]) -> bytes:
    """An exception event: botocore raises it as an ``EventStreamError`` whose code is
    ``exception_type``, ending the stream."""
    headers = {":exception-type": exception_type, ":content-type": "application/json",
               ":message-type": "exception"}  # fmt: skip
    return encode_message(headers, json.dumps(document).encode())


def model_stream_error(message: str, error_code: str = STREAM_BROKEN) -> bytes:
    """A ``ModelStreamError`` event (``ErrorCode`` StreamBroken or
    ModelInvocationTimeExceeded)."""
    return exception_event(MODEL_STREAM_ERROR, {"Message": message, "ErrorCode": error_code})
