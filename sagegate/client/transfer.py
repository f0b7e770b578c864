"""The wire of large inputs, for :mod:`sagegate.client`: what fits the synchronous route, the
presigned S3 POST's form streamed from disk, S3's error documents, and how a job is polled.

An upload is sent as S3's POST Object takes it: ``multipart/form-data``, the policy's fields
first and the file last (S3 ignores fields after the file), with a Content-Length (S3 refuses a
chunked POST), the file read in chunks as it goes, so a 1 GB file costs a chunk of memory, not a
gigabyte.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from chalicelib.core.media import MediaType
from sagegate.client.shrinking import OCTET_STREAM, content_type_of

LAMBDA_REQUEST_BYTES = 6 * 1024 * 1024
"""Lambda's synchronous request limit: the whole event, the body in it base64-encoded."""
EVENT_HEADROOM_BYTES = 16 * 1024
"""What the event holds besides the body (headers, request context), kept free."""
SYNC_LIMIT_BYTES = (LAMBDA_REQUEST_BYTES - EVENT_HEADROOM_BYTES) * 3 // 4
"""The largest body sent to the synchronous route (4,706,304 bytes): the client sends bytes raw,
and API Gateway base64-encodes a binary body into Lambda's event, a third larger. Anything larger
goes through an upload and a job."""
CHUNK_BYTES = 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
HEAD_BYTES = 64

POLL_FIRST_S = 0.25
"""The first wait between two reads of a job; each next one twice as long ..."""
POLL_MAX_S = 5.0
"""... up to this, unless the server's ``Retry-After`` asks for longer."""

# The media types a data file's extension names (the tensor and handler pipelines' types).
DATA_TYPES = {".json": str(MediaType.JSON), ".jsonl": str(MediaType.JSONLINES),
              ".ndjson": str(MediaType.JSONLINES), ".csv": str(MediaType.CSV),
              ".npy": "application/x-npy"}
NPY_MAGIC = b"\x93NUMPY"
_FIELD_NAME = re.compile(r"^[\x21-\x7e]{1,256}\Z")

UploadProgress = Callable[[int, int], None]
"""Told the bytes of the file sent so far and the file's size, as the upload goes."""
WaitProgress = Callable[[Mapping[str, Any], float], None]
"""Told the job as last read and the seconds waited, after each read."""


Source = str | os.PathLike[str] | bytes | bytearray | memoryview


@dataclasses.dataclass(frozen=True)
class Upload:
    """What is sent for a file.

    Attributes:
        data: the request body (empty when ``path`` is set).
        original_bytes: the size of the file itself.
        path: the file, not read, when the body is the whole file on disk: one too large for the
            synchronous route, streamed to S3 as it is read.
    """

    data: bytes
    content_type: str
    original_bytes: int
    path: Path | None = None

    @property
    def size(self) -> int:
        return self.original_bytes if self.path is not None else len(self.data)

    @property
    def shrunk(self) -> bool:
        return self.path is None and len(self.data) != self.original_bytes

    def body(self) -> bytes:
        """The body's bytes (a file on disk is read now)."""
        return self.path.read_bytes() if self.path is not None else self.data

    def source(self) -> bytes | Path:
        return self.path if self.path is not None else self.data


def read_input(path_or_bytes: Source) -> bytes:
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        return bytes(path_or_bytes)
    return Path(path_or_bytes).read_bytes()


def media_type_of(head: bytes, name: str | None = None) -> str:
    """What a file is by its first bytes (an image's signature), else by its extension or its
    data (:func:`data_type_of`), else ``application/octet-stream``."""
    kind = content_type_of(head)
    if kind != OCTET_STREAM:
        return kind
    return data_type_of(head, name) or OCTET_STREAM


def as_is(path_or_bytes: Source, content_type: str | None = None) -> Upload:
    """The upload of a file as it is; a file on disk larger than the synchronous route takes is
    streamed when sent, not read.

    Raises:
        OSError: the file cannot be read.
    """
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        data = bytes(path_or_bytes)
        return Upload(data, content_type or media_type_of(data[:HEAD_BYTES]), len(data))
    path = Path(path_or_bytes)
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        head = file.read(HEAD_BYTES)
        kind = content_type or media_type_of(head, path.name)
        if size > SYNC_LIMIT_BYTES:
            return Upload(b"", kind, size, path)
        data = head + file.read()
    return Upload(data, kind, len(data))


def data_type_of(head: bytes, name: str | None = None) -> str | None:
    """A data file's media type by its extension, else by its first bytes (``.npy``, or JSON
    starting with ``{`` or ``[``); None when neither tells."""
    if name:
        by_name = DATA_TYPES.get(Path(name).suffix.lower())
        if by_name:
            return by_name
    if head.startswith(NPY_MAGIC):
        return DATA_TYPES[".npy"]
    if head.lstrip()[:1] in (b"{", b"["):
        return str(MediaType.JSON)
    return None


@dataclasses.dataclass(frozen=True)
class Form:
    """A presigned POST's multipart body around a file: ``head`` (the fields, the file part's
    headers), the file, ``tail``."""

    head: bytes
    tail: bytes
    boundary: str

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def length(self, file_bytes: int) -> int:
        return len(self.head) + file_bytes + len(self.tail)


def form(fields: Mapping[str, str], content_type: str, boundary: str | None = None) -> Form:
    """Every field, then the file (named ``file``, as S3 requires, and last).

    Raises:
        ValueError: a field name or value S3 would not have made (quotes, line breaks).
    """
    boundary = boundary or uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        if not _FIELD_NAME.match(name) or '"' in name or "\r" in value or "\n" in value:
            raise ValueError(f"the upload's form field {name[:40]!r} cannot be sent")
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"'
                     f"\r\n\r\n{value}\r\n")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                 f'filename="upload"\r\nContent-Type: {content_type}\r\n\r\n')
    return Form("".join(parts).encode(), f"\r\n--{boundary}--\r\n".encode(), boundary)


def file_chunks(source: bytes | Path) -> Iterator[bytes]:
    """A file's bytes in :data:`CHUNK_BYTES` chunks: from memory one chunk copied at a time, or
    read from disk as sent."""
    if isinstance(source, Path):
        with open(source, "rb") as file:
            while chunk := file.read(CHUNK_BYTES):
                yield chunk
        return
    view = memoryview(source)
    for start in range(0, len(view), CHUNK_BYTES):
        yield bytes(view[start:start + CHUNK_BYTES])


def size_of(source: bytes | Path) -> int:
    return os.stat(source).st_size if isinstance(source, Path) else len(source)


def streamed(form: Form, chunks: Iterable[bytes], file_bytes: int,
             progress: UploadProgress | None = None) -> Iterator[bytes]:
    """The request body, piece by piece, telling ``progress`` the file's bytes sent.

    Raises:
        OSError: the file changed size while read (the Content-Length would lie).
    """
    sent = 0
    if progress:
        progress(0, file_bytes)
    yield form.head
    for chunk in chunks:
        sent += len(chunk)
        if sent > file_bytes:
            raise OSError(f"the file grew past {file_bytes} bytes while it was sent")
        yield chunk
        if progress:
            progress(sent, file_bytes)
    if sent != file_bytes:
        raise OSError(f"the file shrank to {sent} of {file_bytes} bytes while it was sent")
    yield form.tail


def policy_max_bytes(fields: Mapping[str, str]) -> int | None:
    """The largest file a presigned POST's policy takes (its ``content-length-range``), or None
    when it does not say or cannot be read (S3 then judges)."""
    try:
        policy = json.loads(base64.b64decode(fields.get("policy", ""), validate=True))
        conditions = policy["conditions"]
    except (ValueError, KeyError, TypeError):
        return None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, list) and len(condition) == 3 \
                and condition[0] == "content-length-range" and isinstance(condition[2], int):
            return condition[2]
    return None


def s3_error(body: bytes) -> tuple[str, str] | None:
    """S3's ``<Error>`` document as (code, message), with the limit it names for
    ``EntityTooLarge`` / ``EntityTooSmall``; None for anything else (a document with a DOCTYPE is
    not parsed: S3 sends none)."""
    text = body[:MAX_ERROR_BYTES]
    if b"<!DOCTYPE" in text.upper() or b"<!ENTITY" in text.upper():
        return None
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return None
    code = (root.findtext("Code") or "").strip()
    if root.tag != "Error" or not code:
        return None
    message = (root.findtext("Message") or "").strip()
    for element, says in (("MaxSizeAllowed", "at most"), ("MinSizeAllowed", "at least")):
        limit = (root.findtext(element) or "").strip()
        if limit.isdigit():
            message += f" (this upload takes {says} {int(limit):,} bytes)"
    return code, message


def next_poll(delay: float, retry_after: float | None, remaining: float) -> float:
    """How long before reading a job again: ``delay``, or longer when the server's
    ``Retry-After`` says so, never past the time left."""
    wait = max(delay, retry_after or 0.0)
    return max(0.0, min(wait, remaining))


def backoff(delay: float) -> float:
    return min(delay * 2, POLL_MAX_S)
