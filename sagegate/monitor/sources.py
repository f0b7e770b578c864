"""Where ``sagegate monitor`` reads: training datasets, and capture files of a window from a
local folder or an ``s3://`` prefix (streamed, one file at a time).

Only regular files are read: a FIFO, a device, a socket or a directory named like a dataset or
a capture file is refused with one line naming it (checked before it is opened, and opened so
that one swapped in since cannot block: a FIFO would wait for a writer for ever). A folder or
prefix above the endpoints' folders is refused too: it would mix every endpoint's captures, or
find none of a window's hour folders and report an empty window.
"""
from __future__ import annotations

import csv
import datetime
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import IO, Any

from chalicelib.monitor import windows
from chalicelib.monitor.records import MAX_COLUMNS, ColumnLimitError, RecordReader, flatten_json

S3_SCHEME = "s3://"
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_YEAR = re.compile(r"^\d{4}\Z")
_SNIFF_BYTES = 64 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line of a dataset file: a training row is kilobytes; a longer "line" is a
binary file or a file that is not one row a line, and reading it whole would cost its size."""
MAX_BASELINE_BYTES = 512 * 1024 * 1024
"""The largest baseline document read (a thousand features' sketches are a few megabytes)."""
_PROBE = 50
"""At most this many folders are listed at each level to tell an endpoint's folder from the
folder above the endpoints (S3 lists cost a call each)."""
Files = Iterator[tuple[str, Iterable[str | bytes]]]
"""(name for messages, the file's lines) for each capture file, in order."""
Children = Callable[[str], list[str]]
"""The names of the folders directly under a path relative to the source ("" is its own)."""


class SourceError(ValueError):
    """A dataset or capture source cannot be read; the message says which and why."""


class MissingFile(SourceError):
    """A file to read does not exist."""


def is_capture_source(source: str) -> bool:
    """Whether a dataset argument is a capture folder or prefix (not a dataset file)."""
    return source.startswith(S3_SCHEME) or Path(source).is_dir()


def open_regular(path: str | Path) -> IO[bytes]:
    """``path`` opened for reading in binary, if it is a regular file (a symbolic link to one
    is one).

    Raises:
        SourceError: it does not exist, cannot be opened, or is a FIFO, a device, a socket or a
            directory (one line naming it).
    """
    try:
        kind = _file_kind(os.stat(path).st_mode)
        if kind:  # refused before it is opened: opening a FIFO may block
            raise SourceError(f"{path}: {kind}, not a regular file")
        # O_NONBLOCK: a FIFO swapped in after the check opens at once (then is refused below)
        # instead of waiting for a writer; on a regular file the flag changes nothing
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise MissingFile(f"{path}: no such file") from None
    except OSError as error:
        raise SourceError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        kind = _file_kind(os.fstat(descriptor).st_mode)
        if kind:
            raise SourceError(f"{path}: {kind}, not a regular file")
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is ("" for a regular file)."""
    if stat.S_ISREG(mode):
        return ""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


def create_regular(path: str | Path) -> IO[bytes]:
    """``path`` created, or truncated if it is a regular file, for writing in binary.

    Raises:
        SourceError: it is a FIFO, a device, a socket or a directory: writing to a FIFO
            would wait for a reader for ever (opened without blocking, it is refused at once).
    """
    try:
        kind = _file_kind(os.stat(path).st_mode)
    except FileNotFoundError:
        kind = ""
    except OSError as error:
        raise SourceError(f"{path}: cannot be written ({error.strerror})") from None
    if kind:
        raise SourceError(f"{path}: {kind}, not a regular file")
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as error:
        raise SourceError(f"{path}: cannot be written ({error.strerror})") from None
    try:
        kind = _file_kind(os.fstat(descriptor).st_mode)
        if kind:
            raise SourceError(f"{path}: {kind}, not a regular file")
        os.ftruncate(descriptor, 0)  # only now: truncating is for regular files
        return os.fdopen(descriptor, "wb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: str | Path, limit: int = MAX_BASELINE_BYTES) -> bytes:
    """The content of a regular file of at most ``limit`` bytes.

    Raises:
        SourceError: as :func:`open_regular`, or the file is larger.
    """
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{path}: larger than {limit // (1024 * 1024)} MiB")
    return data


def dataset_rows(path: str, header: bool | None, reader: RecordReader | None = None,
                 max_columns: int = MAX_COLUMNS) -> Iterator[dict[str, Any]]:
    """The rows of a CSV (header detected when ``header`` is None) or JSON Lines file: one
    object a line, or capture records (a file whose first record is one is read by
    ``reader``, as capture files are).

    Args:
        path: the file.
        header: whether a CSV's first line is a header (None: detected).
        reader: reads a file of capture records (its tally counts them; default: one of
            its own).
        max_columns: the widest row accepted.

    Raises:
        SourceError: the file is not a regular file, not UTF-8 text, or not of its format;
            one line naming the file and line (raised as the rows are read).
        ColumnLimitError: a row is wider than ``max_columns``.
    """
    handle = open_regular(path)  # now: a FIFO or a missing file is refused before any row
    if Path(path).suffix.lower() in JSON_SUFFIXES:
        return _json_lines(handle, path, reader or RecordReader(max_columns=max_columns),
                           max_columns)
    return _csv_rows(handle, path, header, max_columns)


def _text_lines(handle: IO[bytes], name: str) -> Iterator[str]:
    """The file's lines as text, each checked: UTF-8 (a byte-order mark on the first line
    dropped), at most :data:`MAX_LINE_BYTES`."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            raise SourceError(f"{name}:{number}: a line longer than "
                              f"{MAX_LINE_BYTES // (1024 * 1024)} MiB: not a dataset's row "
                              f"(a binary file?)")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise SourceError(f"{name}:{number}: not UTF-8 text (byte {error.start + 1} of "
                              f"the line): a binary file, or another encoding?") from None
        yield text.removeprefix("\ufeff") if number == 1 else text


def _json_lines(handle: IO[bytes], name: str, reader: RecordReader,
                max_columns: int) -> Iterator[dict[str, Any]]:
    """The file's first object decides: capture records (read as capture files are: a bad
    line is skipped and counted) or rows (a bad line is the file's error)."""
    with handle:
        lines = _text_lines(handle, name)
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            document = _json_line(line, f"{name}:{number}")
            if isinstance(document, dict) and "captureData" in document:
                # capture records: the whole file is read as capture files are
                yield from reader.rows(name, chain([""] * (number - 1), [line], lines))
                return
            yield _row(document, f"{name}:{number}", max_columns)
            yield from _plain_json_lines(lines, name, number, max_columns)
            return


def _plain_json_lines(lines: Iterator[str], name: str, after: int,
                      max_columns: int) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, after + 1):
        if line.strip():
            where = f"{name}:{number}"
            yield _row(_json_line(line, where), where, max_columns)


def _json_line(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except RecursionError:
        raise SourceError(f"{where}: JSON nested too deep to read") from None
    except ValueError:
        raise SourceError(f"{where}: not JSON") from None


def _row(document: Any, where: str, max_columns: int) -> dict[str, Any]:
    try:
        row = flatten_json(document, "feature", {})
    except RecursionError:
        raise SourceError(f"{where}: JSON nested too deep to read") from None
    _check_width(len(row), where, max_columns)
    return row


def _check_width(count: int, where: str, max_columns: int) -> None:
    if count > max_columns:
        raise ColumnLimitError(f"{where}: {count:,} columns, over the limit of "
                               f"{max_columns:,} (--max-columns)")


def _csv_rows(handle: IO[bytes], name: str, header: bool | None,
              max_columns: int) -> Iterator[dict[str, Any]]:
    with handle:
        lines = _text_lines(handle, name)
        sample = _sample(lines)
        if header is None:
            header = _has_header("".join(sample)[:_SNIFF_BYTES])
        reader = csv.reader(chain(sample, lines))

        def where() -> str:
            return f"{name}:{reader.line_num}"

        try:
            yield from _csv_records(reader, where, header, max_columns)
        except csv.Error as error:
            raise SourceError(f"{where()}: {_csv_problem(error)}") from None


def _sample(lines: Iterator[str]) -> list[str]:
    """The first lines, up to :data:`_SNIFF_BYTES` of them, for the header's detection."""
    sample: list[str] = []
    size = 0
    for line in lines:
        sample.append(line)
        size += len(line)
        if size >= _SNIFF_BYTES:
            break
    return sample


def _csv_records(reader: Iterator[list[str]], where: Callable[[], str], header: bool,
                 max_columns: int) -> Iterator[dict[str, Any]]:
    """The CSV's rows (``where()`` names the line the reader is at)."""
    first = next(reader, None)
    if first is None:
        return
    _check_width(len(first), where(), max_columns)
    names = first if header else [f"_c{i}" for i in range(len(first))]
    rows = reader if header else chain([first], reader)
    for values in rows:
        if values:
            if len(values) > len(names):
                _check_width(len(values), where(), max_columns)
                names = names + [f"_c{i}" for i in range(len(names), len(values))]
            yield dict(zip(names, values, strict=False))


def _csv_problem(error: csv.Error) -> str:
    """A CSV reader's error as the user can act on it. A field past the reader's limit
    (131,072 characters) is a mistake in a training dataset (a binary file, or a quote left
    open, which runs the field on to the end of the file): refused, not read with a larger
    limit."""
    if "field limit" in str(error):
        return (f"a field longer than {csv.field_size_limit():,} characters: not a training "
                f"dataset's value (a quote left open, or not a CSV file?)")
    return f"not CSV ({error})"


def _has_header(sample: str) -> bool:
    try:
        return csv.Sniffer().has_header(sample)
    except csv.Error:
        return False


# An S3 window of up to this many hours lists each hour's prefix (one call an hour, the
# fewest for the hourly check); a longer one walks the year/month/day/hour prefixes instead.
PROBE_HOURS = 24


def capture_files(source: str, start: datetime.datetime | None = None,
                  end: datetime.datetime | None = None, command: str = "check") -> Files:
    """The capture files under an endpoint's folder or prefix (``<variant>/yyyy/mm/dd/hh``),
    only those of the hours of ``[start, end)`` when a window is given: the hour folders are
    found by walking those that exist (:func:`chalicelib.monitor.windows.hour_folders`), so a
    window of years costs what its folders hold.

    Raises:
        SourceError: the source does not exist, is above the endpoints' folders
            (:func:`variant_folders`; ``command`` is the one its message suggests), or holds
            a ``*.jsonl`` that is not a regular file (raised as the files are read).
    """
    if source.startswith(S3_SCHEME):
        return _s3_files(source, start, end, command)
    return _local_files(Path(source), start, end, command)


def variant_folders(children: Children, source: str, command: str = "check") -> list[str]:
    """A capture source's variant folders, relative to it (``[""]`` when it is a variant's own
    folder): a variant's folder holds year folders (``yyyy``), an endpoint's its variants'.

    Raises:
        SourceError: ``source`` is the folder above the endpoints' (year folders three levels
            down: ``<endpoint>/<variant>/yyyy``): its window would mix every endpoint's
            captures, or, read as one endpoint, find none of them (an empty window, not a
            check). The message names a few of the endpoints and the command to run instead.
    """
    top = sorted(children(""))
    if _has_year(top):
        return [""]
    probed = top[:_PROBE]
    if any(_has_year(children(name)) for name in probed):
        return top
    endpoints: list[str] = []
    for name in probed:
        if any(_has_year(children(f"{name}/{variant}")) for variant in children(name)[:_PROBE]):
            endpoints.append(name)
            if len(endpoints) > _SHOWN_ENDPOINTS:
                break
    if endpoints:
        raise SourceError(_above_endpoints(source, endpoints, command))
    return top


_SHOWN_ENDPOINTS = 3


def _has_year(names: Iterable[str]) -> bool:
    return any(_YEAR.match(name) for name in names)


def _above_endpoints(source: str, endpoints: list[str], command: str) -> str:
    shown = ", ".join(endpoints[:_SHOWN_ENDPOINTS])
    if len(endpoints) > _SHOWN_ENDPOINTS:
        shown += ", ..."
    example = f"{source.rstrip('/')}/{endpoints[0]}"
    advice = "check each endpoint's folder on its own" if command == "check" \
        else "give one endpoint's folder"
    return (f"{source}: a folder above the endpoints' capture folders ({shown}): {advice}, "
            f"e.g. sagegate monitor {command} {example} ...")


def _local_files(root: Path, start: datetime.datetime | None,
                 end: datetime.datetime | None, command: str) -> Files:
    if not root.is_dir():
        raise SourceError(f"{root}: no such folder")
    variants = variant_folders(_subfolders(root), str(root), command)
    if start is None or end is None:
        paths = sorted(root.rglob("*.jsonl"))
    else:
        paths = [path for variant in variants
                 for folder in windows.hour_folders(_subfolders(root / variant), start, end)
                 for path in sorted((root / variant / folder).glob("*.jsonl"))]
    for path in paths:
        with open_regular(path) as lines:  # a FIFO or a folder named *.jsonl: one line
            yield str(path), lines


def _subfolders(variant: Path) -> Children:
    def children(path: str) -> list[str]:
        try:
            return [entry.name for entry in (variant / path).iterdir() if entry.is_dir()]
        except OSError:
            return []

    return children


def _s3_files(source: str, start: datetime.datetime | None,
              end: datetime.datetime | None, command: str) -> Files:
    from botocore.exceptions import BotoCoreError, ClientError  # deferred: s3:// sources only

    try:
        yield from _s3_objects(source, start, end, command)
    except (BotoCoreError, ClientError) as error:  # one line, not a traceback
        raise SourceError(f"{source}: {error}") from None


def _s3_objects(source: str, start: datetime.datetime | None,
                end: datetime.datetime | None, command: str) -> Files:
    import boto3  # deferred: boto3 costs to import, paid only for an s3:// source

    bucket, _, prefix = source[len(S3_SCHEME):].partition("/")
    prefix = prefix.strip("/")
    folder = f"{prefix}/" if prefix else ""
    s3 = boto3.client("s3")
    children = _s3_folders(s3, bucket, folder)
    variants = variant_folders(children, source, command)
    if start is None or end is None:
        prefixes = [folder]
    else:
        prefixes = [f"{folder}{_join(variant, hour)}/" for variant in variants
                    for hour in _s3_hour_folders(children, variant, start, end)]
    for key_prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                  Prefix=key_prefix):
            for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
                if item["Key"].endswith(".jsonl"):
                    body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                    yield f"{S3_SCHEME}{bucket}/{item['Key']}", body.iter_lines()


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def _s3_folders(s3: Any, bucket: str, folder: str) -> Children:
    """The folders under ``folder`` by relative path, each listed once (the layout's check and
    the window's walk ask for the same ones)."""
    listed: dict[str, list[str]] = {}

    def children(path: str) -> list[str]:
        if path not in listed:
            under = f"{folder}{path}/" if path else folder
            listed[path] = [p[len(under):].rstrip("/") for p in _s3_children(s3, bucket, under)]
        return listed[path]

    return children


def _s3_hour_folders(children: Children, variant: str, start: datetime.datetime,
                     end: datetime.datetime) -> Iterable[str]:
    if end - start <= PROBE_HOURS * windows.HOUR:
        return [windows.hour_folder(hour) for hour in windows.hours(start, end)]
    return windows.hour_folders(lambda path: children(_join(variant, path)), start, end)


def _s3_children(s3: Any, bucket: str, folder: str) -> list[str]:
    children: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder,
                                                              Delimiter="/"):
        children.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
    return sorted(children)


def capture_rows(reader: RecordReader, files: Files) -> Iterator[dict[str, Any]]:
    """Every row of every file, in order, one file open at a time."""
    for name, lines in files:
        yield from reader.rows(name, lines)
