"""Training datasets for ``sagegate monitor baseline``: CSV (a header detected or named) and JSON
Lines (objects, or capture records), read line by line, each checked: UTF-8, a bounded length, a
bounded CSV field, at most ``max_columns`` columns.

A file can be cut into parts (:func:`dataset_parts`) other processes read (``--workers``): at
lines' starts (a CSV with quotes, where a field may hold a line break, at records' ends, found by
reading it), each part knowing the columns and line numbers the whole file's reading gives it, so
its rows and messages are the single pass's.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import IO, Any

from chalicelib.monitor.flattening import flatten_json
from chalicelib.monitor.records import MAX_COLUMNS, ColumnLimitError, RecordReader
from sagegate.monitor.files import SourceError, open_regular

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_SNIFF_BYTES = 64 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line of a dataset file: a training row is kilobytes; a longer "line" is a binary
file or not one row a line, and reading it whole would cost its size."""


def dataset_rows(path: str, header: bool | None, reader: RecordReader | None = None,
                 max_columns: int = MAX_COLUMNS) -> Iterator[dict[str, Any]]:
    """The rows of a CSV (header detected when ``header`` is None) or JSON Lines file: one object
    a line, or capture records (read by ``reader`` as capture files are, when the first record is
    one).

    Raises:
        SourceError: not a regular file, not UTF-8, or not of its format; one line naming the
            file and line (raised as the rows are read).
        ColumnLimitError: a row is wider than ``max_columns``.
    """
    handle = open_regular(path)  # now: a FIFO or a missing file is refused before any row
    if Path(path).suffix.lower() in JSON_SUFFIXES:
        return _json_lines(handle, path, reader or RecordReader(max_columns=max_columns),
                           max_columns)
    return _csv_rows(handle, path, header, max_columns)


def _text_lines(handle: IO[bytes], name: str, first_line: int = 1,
                size: int | None = None) -> Iterator[str]:
    """The file's lines as text, each checked (UTF-8, a first line's BOM dropped, at most
    :data:`MAX_LINE_BYTES`), from ``handle``'s position (line ``first_line``), up to ``size``
    bytes."""
    number = first_line - 1
    left = -1 if size is None else size
    while left:
        line = handle.readline(MAX_LINE_BYTES + 1 if left < 0 else min(MAX_LINE_BYTES + 1,
                                                                      left))
        if not line:
            return
        left -= len(line) if left > 0 else 0
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
    """The first object decides: capture records (a bad line skipped and counted) or rows (a bad
    line is the file's error)."""
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


def _csv_rows(handle: IO[bytes], name: str, header: bool | None, max_columns: int,
              lines: Iterator[str] | None = None, names: Sequence[str] | None = None,
              first_line: int = 1) -> Iterator[dict[str, Any]]:
    """The rows of a CSV file or of a part from line ``first_line`` (after the first part, with
    the first record's ``names``)."""
    with handle:
        lines = _text_lines(handle, name) if lines is None else lines
        sample = _sample(lines) if names is None else []
        if header is None:
            header = _has_header("".join(sample)[:_SNIFF_BYTES])
        reader = csv.reader(chain(sample, lines))

        def where() -> str:
            return f"{name}:{reader.line_num + first_line - 1}"

        try:
            if names is None:
                yield from _csv_records(reader, where, header, max_columns)
            else:
                yield from _named_rows(reader, list(names), where, max_columns)
        except csv.Error as error:
            raise SourceError(f"{where()}: {_csv_problem(error)}") from None


def _sample(lines: Iterator[str]) -> list[str]:
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
    first = next(reader, None)
    if first is None:
        return
    _check_width(len(first), where(), max_columns)
    names = _first_names(first, header)
    yield from _named_rows(reader if header else chain([first], reader), names, where,
                           max_columns)


def _first_names(first: list[str], header: bool) -> list[str]:
    return first if header else [f"_c{i}" for i in range(len(first))]


def _named_rows(rows: Iterator[list[str]], names: list[str], where: Callable[[], str],
                max_columns: int) -> Iterator[dict[str, Any]]:
    """Records as rows by column name; a wider record adds ``_cN`` columns (by position: the same
    names whichever records came before)."""
    for values in rows:
        if values:
            if len(values) > len(names):
                _check_width(len(values), where(), max_columns)
                names = names + [f"_c{i}" for i in range(len(names), len(values))]
            yield dict(zip(names, values, strict=False))


def _csv_problem(error: csv.Error) -> str:
    """A CSV reader's error as the user can act on it. A field past the reader's limit (131,072
    characters) is a mistake in a training dataset (a binary file, or a quote left open that runs
    to the end): refused, not read with a larger limit."""
    if "field limit" in str(error):
        return (f"a field longer than {csv.field_size_limit():,} characters: not a training "
                f"dataset's value (a quote left open, or not a CSV file?)")
    return f"not CSV ({error})"


def _has_header(sample: str) -> bool:
    try:
        return csv.Sniffer().has_header(sample)
    except csv.Error:
        return False


CSV, JSON_ROWS, CAPTURES = "csv", "json", "captures"
"""A part's format: CSV rows, JSON objects (one a line) or capture records."""
_SCAN_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class DatasetPart:
    """A part of a dataset file from byte ``start`` (a line's start, line ``first_line``) to
    ``end``, read by :func:`part_rows`."""

    path: str
    start: int
    end: int
    first_line: int
    format: str
    """The whole file's, decided by its first lines."""
    header: bool = False
    names: tuple[str, ...] | None = None
    """A CSV part after the first: the columns the first record gives."""
    max_columns: int = MAX_COLUMNS


def dataset_parts(path: str, header: bool | None, parts: int,
                  max_columns: int = MAX_COLUMNS) -> list[DatasetPart]:
    """The file cut into at most ``parts`` parts of about equal bytes at lines' starts (a CSV
    holding a quote at records' ends, found by reading it once). Empty (one pass, which reports
    why) when the first lines cannot be read or the file is not worth cutting.

    Raises:
        SourceError: the file is not a regular file.
    """
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if parts < 2 or not size:
            return []
        try:
            probed = _probe(handle, path, header)
        except (SourceError, csv.Error, RecursionError):
            return []
        if probed is None:
            return []
        kind, header, names, first_end = probed
        targets = [max(size * k // parts, first_end) for k in range(1, parts)]
        if kind == CSV and _holds(handle, b'"'):
            cuts = _record_ends(handle, path, targets)
        else:
            cuts = [_line_start(handle, target) for target in targets]
        if cuts is None:
            return []
        bounds = sorted({0, size, *(cut for cut in cuts if first_end <= cut < size)})
        lines = _line_numbers(handle, bounds[:-1])
    if len(bounds) < 3:  # one part: nothing to share
        return []
    return [DatasetPart(path, start, end, line, kind, bool(header),
                        tuple(names) if index and kind == CSV else None, max_columns)
            for index, (start, end, line) in enumerate(zip(bounds, bounds[1:], lines,
                                                           strict=False))]


def part_rows(part: DatasetPart, reader: RecordReader | None = None) -> Iterator[dict[str, Any]]:
    """The rows :func:`dataset_rows` gives for a part's lines, named and numbered as the whole
    file's reading does.

    Raises:
        SourceError, ColumnLimitError: as :func:`dataset_rows`.
    """
    handle = open_regular(part.path)
    try:
        handle.seek(part.start)
    except BaseException:
        handle.close()
        raise
    lines = _text_lines(handle, part.path, part.first_line, part.end - part.start)
    if part.format == CSV:
        return _csv_rows(handle, part.path, part.header, part.max_columns, lines, part.names,
                         part.first_line)
    return _json_part(handle, part, lines, reader or RecordReader(max_columns=part.max_columns))


def _json_part(handle: IO[bytes], part: DatasetPart, lines: Iterator[str],
               reader: RecordReader) -> Iterator[dict[str, Any]]:
    with handle:
        if part.format == CAPTURES:
            yield from reader.rows(part.path, lines, part.first_line)
        else:
            yield from _plain_json_lines(lines, part.path, part.first_line - 1,
                                         part.max_columns)


def _probe(handle: IO[bytes], name: str,
           header: bool | None) -> tuple[str, bool, list[str], int] | None:
    """The file's format, a CSV's header, the first record's columns and where it ends; None
    without a record."""
    lines = _text_lines(handle, name)
    if Path(name).suffix.lower() in JSON_SUFFIXES:
        for line in lines:
            if line.strip():
                document = _json_line(line, name)
                captures = isinstance(document, dict) and "captureData" in document
                return (CAPTURES if captures else JSON_ROWS), False, [], 0
        return None
    sample = _sample(lines)
    if header is None:
        header = _has_header("".join(sample)[:_SNIFF_BYTES])
    handle.seek(0)
    first = next(csv.reader(_text_lines(handle, name)), None)
    if first is None:
        return None
    return CSV, header, _first_names(first, header), handle.tell()


def _holds(handle: IO[bytes], byte: bytes) -> bool:
    handle.seek(0)
    while chunk := handle.read(_SCAN_BYTES):
        if byte in chunk:
            return True
    return False


def _line_start(handle: IO[bytes], offset: int) -> int:
    if offset <= 0:
        return 0
    handle.seek(offset - 1)
    position = offset - 1
    while chunk := handle.read(_SCAN_BYTES):
        found = chunk.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(chunk)
    return position


def _record_ends(handle: IO[bytes], name: str, targets: list[int]) -> list[int] | None:
    """For each target, the end of the first CSV record ending at or after it, read as the single
    pass reads (None if it cannot be: the single pass reports why)."""
    handle.seek(0)
    cuts: list[int] = []
    pending = iter(targets)
    target = next(pending, None)
    try:
        for _values in csv.reader(_text_lines(handle, name)):
            position = handle.tell()  # the reader asks for no line past its record's
            while target is not None and position >= target:
                cuts.append(position)
                target = next(pending, None)
            if target is None:
                break
    except (SourceError, csv.Error):
        return None
    return cuts


def _line_numbers(handle: IO[bytes], offsets: list[int]) -> list[int]:
    numbers: list[int] = []
    handle.seek(0)
    position, count = 0, 1
    for offset in offsets:
        while position < offset:
            chunk = handle.read(min(_SCAN_BYTES, offset - position))
            if not chunk:
                break
            count += chunk.count(b"\n")
            position += len(chunk)
        numbers.append(count)
    return numbers
