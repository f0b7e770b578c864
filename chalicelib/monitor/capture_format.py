"""Capture objects as the sinks write them: their names, which a window reads, their lines
(plain, or GZIP as Firehose delivers them).

Two kinds sit in ``<endpoint>/<variant>/yyyy/mm/dd/hh/``:

* ``*.jsonl`` (sagegate's directory and S3 sinks, Model Monitor's data capture): the folder's
  hour is each record's ``inferenceTime`` hour, so a window reads its own hours' folders only;
* ``*.jsonl.gz``, delivered by Kinesis Data Firehose, many records an object. The ``dev`` stage's
  stream files by ``inferenceTime`` too (dynamic partitioning), but a user's stream named by
  ``MONITOR_CAPTURES`` may file by ``!{timestamp:...}``, the *arrival* hour of the object's
  oldest record (as older deliveries did): then a record of the window can sit in the hour before
  (an object still filling when the window began) or after (a record that reached the stream
  after the window's end). The names cannot tell the layouts apart, so the monitor reads both.

So a listing spans the window's hours and one more on each side (:func:`listing_span`), and
:func:`wanted` keeps the ``.jsonl`` objects of the window's own hours and the ``.jsonl.gz`` of
all of them, except those of the hour before last modified before the window began. Records are
then chosen by ``inferenceTime`` (:class:`~chalicelib.monitor.records.RecordReader`), so each
counts in one window only; an object of the hour after is read again by the next hour's run.

A ``.jsonl.gz`` is decompressed as read (:func:`gzip_lines`), never held whole, bounded in what
it may decompress to (:data:`MAX_DECOMPRESSED_BYTES`: a gzip bomb is refused) and in line length
(:data:`MAX_LINE_BYTES`); a plain ``.jsonl`` is read in chunks with the same line bound
(:func:`plain_lines`). An object that is not GZIP, damaged, truncated or over a bound raises
:class:`CaptureObjectError` where it stops: the reader counts a bad object, keeps the records
read before, and goes on.
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
"""The most a ``.jsonl.gz`` may decompress to: a Firehose object holds at most its buffer (64 MiB
here, 128 MiB at most) before compression."""
MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest capture line. Firehose takes records of 1,000 KiB at most; a job's batch record
measured 12.7 MB (written by the S3 sink, uncompressed)."""
READ_BYTES = 256 * 1024
"""A plain ``.jsonl`` is read this much at a time; below :data:`MAX_LINE_BYTES`, so a line within
one read needs no check."""
CLOCK_SLACK = datetime.timedelta(minutes=1)
"""How much before the window's start an object of the hour before may have been last modified
and still be read: Lambda's, Firehose's and S3's clocks may differ."""
_HOUR_IN_KEY = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(\d{2})/[^/]+\Z")


class CaptureObjectError(ValueError):
    """A capture object cannot be read on; the message names it and says why."""


class Readable(Protocol):

    def read(self, size: int, /) -> bytes:
        """Up to ``size`` bytes."""


def is_capture(name: str) -> bool:
    """Whether an object or file name is a capture object's (``.jsonl``, ``.jsonl.gz``)."""
    return name.endswith(SUFFIXES)


def is_gzip(name: str) -> bool:
    return name.endswith(GZIP_SUFFIX)


def listing_span(start: datetime.datetime,
                 end: datetime.datetime) -> tuple[datetime.datetime, datetime.datetime]:
    """The span whose hour folders a window ``[start, end)`` lists: an hour more on each side,
    within the calendar."""
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
    ``hour`` (module docstring); ``modified`` None (unknown) reads it."""
    first = windows.floor_hour(start)
    if name.endswith(GZIP_SUFFIX):
        if hour < first:  # the hour before: only objects still open when the window began
            return hour + windows.HOUR == first and (
                modified is None or modified >= start - CLOCK_SLACK)
        return hour < end + windows.HOUR
    return name.endswith(PLAIN_SUFFIX) and first <= hour < end


def key_hour(key: str) -> datetime.datetime | None:
    """The hour of the ``yyyy/mm/dd/hh`` folder a key is directly in, or None."""
    match = _HOUR_IN_KEY.search(key)
    if match is None:
        return None
    year, month, day, hour = (int(part) for part in match.groups())
    try:
        return datetime.datetime(year, month, day, hour, tzinfo=datetime.UTC)
    except ValueError:  # month 13, hour 24: not a date's folder
        return None


def gzip_lines(raw: Readable, name: str) -> Iterator[bytes]:
    """The lines of a GZIP capture object, decompressed as read (several GZIP members are one
    stream, as ``gzip`` reads them).

    Raises:
        CaptureObjectError: not GZIP, damaged, truncated, over :data:`MAX_DECOMPRESSED_BYTES`
            decompressed, or a line over :data:`MAX_LINE_BYTES` (raised where the reading stops:
            the lines before were given).
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
    """The lines of a plain ``.jsonl`` object without their newline, read :data:`READ_BYTES` at a
    time.

    Raises:
        CaptureObjectError: a line over :data:`MAX_LINE_BYTES` (raised where it starts).
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
