"""Training datasets for ``sagegate monitor baseline``: CSV (a header detected or named) and
JSON Lines (objects, or capture records), read line by line, each line checked: UTF-8, a
bounded length, a bounded CSV field, at most ``max_columns`` columns."""
from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path
from typing import IO, Any

from chalicelib.monitor.records import MAX_COLUMNS, ColumnLimitError, RecordReader, flatten_json
from sagegate.monitor.files import SourceError, open_regular

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_SNIFF_BYTES = 64 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line of a dataset file: a training row is kilobytes; a longer "line" is a
binary file or a file that is not one row a line, and reading it whole would cost its size."""


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
