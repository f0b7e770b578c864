"""Capture objects as the sinks write them: their names, which of them a window reads, their
lines (plain, or GZIP as a Firehose stream delivers them).

Two kinds of capture object sit in ``<endpoint>/<variant>/yyyy/mm/dd/hh/``:

* ``*.jsonl``, written by sagegate's directory and S3 sinks (and Model Monitor's data
  capture): the folder's hour is the hour of each record's ``inferenceTime``, so a window
  reads the folders of its own hours only;
* ``*.jsonl.gz``, delivered by a Kinesis Data Firehose stream: many records an object. The
  ``dev`` stage's stream files each record by the hour of its own ``inferenceTime``
  (:mod:`sagegate.deploy.capture_template`'s dynamic partitioning), as the sinks do. But a
  stream of the user's own named by ``MONITOR_CAPTURES`` may file by ``!{timestamp:...}``,
  the *arrival* hour (UTC) of the object's oldest record, and so did the objects a stream
  delivered before it filed by ``inferenceTime``: then a record of the window can sit in the
  folder of the hour before the window (an object opened in its last minute, still filling
  when the window began) or of the hour after it (a record that reached the stream after the
  window's end). The monitor cannot tell the two layouts apart from the names, so it reads
  both.

So a window's listing spans its hours and one more on each side (:func:`listing_span`), and
:func:`wanted` keeps, of what is listed, the ``.jsonl`` objects of the window's own hours and
the ``.jsonl.gz`` objects of all of them, except those of the hour before that were last
modified before the window began (delivered before it: none of their records is in it).
Records are then chosen by their ``inferenceTime`` (:class:`~chalicelib.monitor.records.
RecordReader`), so a record is counted in one window only, whatever folder it is in; an object
of the hour after is read again by the next hour's run, for that hour's records.

A ``.jsonl.gz`` object is decompressed as it is read (:func:`gzip_lines`), never held whole,
with a bound on what it may decompress to (:data:`MAX_DECOMPRESSED_BYTES`: a gzip bomb is
refused, not expanded) and on a line's length (:data:`MAX_LINE_BYTES`); a plain ``.jsonl``
object is read in chunks with the same bound on a line (:func:`plain_lines`). An object that is not
GZIP, is damaged or truncated, or passes a bound raises :class:`CaptureObjectError` where it
stops: the reader counts it as a bad object (:func:`chalicelib.monitor.partial.
analyse_objects`), keeps the records it read before the damage, and goes on.
"""
from __future__ import annotations

import datetime
import gzip
import re
import zlib
from collections.abc import Iterator
from typing import Any, Protocol, cast

from chalicelib.monitor import windows

PLAIN_SUFFIX = ".jsonl"
GZIP_SUFFIX = ".jsonl.gz"
SUFFIXES = (PLAIN_SUFFIX, GZIP_SUFFIX)
MAX_DECOMPRESSED_BYTES = 1024 * 1024 * 1024
"""The most a ``.jsonl.gz`` object may decompress to. A Firehose object holds at most its
buffer (64 MiB here, 128 MiB at most) before compression; past this it is refused."""
MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest line of a capture object, ``.jsonl`` or ``.jsonl.gz``. Firehose takes records
of 1,000 KiB at most; a job's batch record measured 12.7 MB (written by the S3 sink,
uncompressed)."""
READ_BYTES = 256 * 1024
"""A plain ``.jsonl`` object is read this much at a time (:func:`plain_lines`); below
:data:`MAX_LINE_BYTES`, so a line within one read needs no check."""
CLOCK_SLACK = datetime.timedelta(minutes=1)
"""How much earlier than the window's start an object of the hour before may have been last
modified and still be read: room for the clocks of Lambda (``inferenceTime``), Firehose and
S3 to differ."""
_HOUR_IN_KEY = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(\d{2})/[^/]+\Z")


class CaptureObjectError(ValueError):
    """A capture object cannot be read on (not GZIP, damaged, truncated, over a bound); the
    message names it and says why."""


class Readable(Protocol):
    """What :func:`gzip_lines` reads from: a binary file, an S3 object's body."""

    def read(self, size: int, /) -> bytes:
        """Up to ``size`` bytes."""


def is_capture(name: str) -> bool:
    """Whether an object or file name is a capture object's (``.jsonl``, ``.jsonl.gz``)."""
    return name.endswith(SUFFIXES)


def is_gzip(name: str) -> bool:
    """Whether a capture object is GZIP (a Firehose stream's ``.jsonl.gz``)."""
    return name.endswith(GZIP_SUFFIX)


def listing_span(start: datetime.datetime,
                 end: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime]:
    """The span whose hour folders a window ``[start, end)`` lists: an hour more on each side
    (a Firehose object's folder is the arrival hour of its oldest record), within the
    calendar."""
    try:
        first = windows.floor_hour(start) - windows.HOUR
    except OverflowError:  # the calendar's first hour has no hour before
        first = windows.floor_hour(start)
    try:
        last = end + windows.HOUR
    except OverflowError:
        last = end
    return first, last


def wanted(name: str, hour: datetime.datetime, start: datetime.datetime,
           end: datetime.datetime, modified: datetime.datetime | None = None) -> bool:
    """Whether the window ``[start, end)`` reads a capture object listed in the folder of
    ``hour`` (module docstring).

    Args:
        name: the object's name or key (its suffix says its kind).
        hour: its folder's hour.
        start: the window's start.
        end: the window's end (excluded).
        modified: when it was last written (S3's ``LastModified``, a file's modification
            time); None: unknown, read it.
    """
    first = windows.floor_hour(start)
    if name.endswith(GZIP_SUFFIX):
        if hour < first:  # the hour before: only objects still open when the window began
            return hour + windows.HOUR == first and (
                modified is None or modified >= start - CLOCK_SLACK)
        return hour < end + windows.HOUR
    return name.endswith(PLAIN_SUFFIX) and first <= hour < end


def key_hour(key: str) -> datetime.datetime | None:
    """The hour of the ``yyyy/mm/dd/hh`` folder a key or path is directly in; None when it is
    not in one."""
    match = _HOUR_IN_KEY.search(key)
    if match is None:
        return None
    year, month, day, hour = (int(part) for part in match.groups())
    try:
        return datetime.datetime(year, month, day, hour, tzinfo=datetime.UTC)
    except ValueError:  # month 13, hour 24: not a date's folder
        return None


def gzip_lines(raw: Readable, name: str) -> Iterator[bytes]:
    """The lines of a GZIP capture object, decompressed as they are read (several GZIP members
    one after the other are one stream, as ``gzip`` reads them).

    Args:
        raw: the compressed bytes, read in chunks (a file, an S3 object's body).
        name: how messages name the object.

    Raises:
        CaptureObjectError: not GZIP, damaged, truncated, more than
            :data:`MAX_DECOMPRESSED_BYTES` decompressed, or a line longer than
            :data:`MAX_LINE_BYTES` (raised where the reading stops: the lines before it were
            given).
    """
    # GzipFile only reads its file object (typeshed also asks for seek, used to rewind)
    stream = gzip.GzipFile(fileobj=cast(Any, raw), mode="rb")
    total = 0
    try:
        while True:
            try:
                line = stream.readline(MAX_LINE_BYTES + 1)
            except (gzip.BadGzipFile, EOFError, zlib.error) as error:
                raise CaptureObjectError(f"{name}: {_reason(error)}") from None
            if not line:
                return
            total += len(line)
            if total > MAX_DECOMPRESSED_BYTES:
                raise CaptureObjectError(f"{name}: decompresses to more than "
                                         f"{MAX_DECOMPRESSED_BYTES // (1024 * 1024):,} MiB")
            _check_line(len(line), name)
            yield line
    finally:
        stream.close()


def plain_lines(raw: Readable, name: str) -> Iterator[bytes]:
    """The lines of a plain ``.jsonl`` capture object (without their newline), read
    :data:`READ_BYTES` at a time, so a line is held whole only up to :data:`MAX_LINE_BYTES`.

    Args:
        raw: the object's bytes (a file, an S3 object's body).
        name: how messages name the object.

    Raises:
        CaptureObjectError: a line longer than :data:`MAX_LINE_BYTES` (raised where it
            starts: the lines before it were given).
    """
    pending: list[bytes] = []  # the pieces of a line not ended yet
    size = 0
    while chunk := raw.read(READ_BYTES):
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            pending.append(chunk)
            size += len(chunk)
            _check_line(size, name)
            continue
        if pending:  # a line within one read is shorter than a read: only this one can be long
            lines[0] = b"".join((*pending, lines[0]))
            _check_line(len(lines[0]), name)
        last = lines.pop()
        pending, size = ([last], len(last)) if last else ([], 0)
        yield from lines
    if pending:
        yield b"".join(pending)


def _check_line(size: int, name: str) -> None:
    if size > MAX_LINE_BYTES:
        raise CaptureObjectError(f"{name}: a line longer than "
                                 f"{MAX_LINE_BYTES // (1024 * 1024)} MiB")


def _reason(error: Exception) -> str:
    if isinstance(error, EOFError):
        return "not a whole GZIP file (it ends before the end of its compressed stream)"
    if isinstance(error, zlib.error):
        return f"damaged GZIP data ({error})"
    return f"not a readable GZIP file ({error})"
