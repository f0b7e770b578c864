"""A capture record's columns, as the analyzer reads a record without a preprocessor.

- CSV sides: the output's values, then the input's, by position, named as the baseline's features
  when there is one (the analyzer reads headerless CSV with the baseline's schema, so Model
  Monitor's own names, "Churn", "Account Length", key the statistics and metrics), else ``_c0``,
  ``_c1``, ... (Spark's). A batch body is one row per line.
- JSON sides: a TF Serving batch (``instances`` in, ``predictions`` out) is one row per instance,
  aligned with its prediction, read one instance at a time from a large body
  (:mod:`chalicelib.monitor.json_scan`) so memory does not grow with the batch. A list instance
  gives ``feature0``, ... (``prediction0``, ... on the output side), an object its keys. The
  document's other keys, nested keys joined with ``.`` and array elements by index (``a.b.0``),
  are columns of every row; a top-level array or scalar is ``feature0``, ...
- Base64 sides (images, binary bodies) give no columns: such endpoints need a preprocessor.
- A language model's exchange (an OpenAI or LMI answer, or sagegate's ``sagegateLlm`` mark) is
  one row of its token counts, timing, finish reason and lengths
  (:mod:`chalicelib.monitor.llm_rows`), not its messages key by key.

A row may have at most ``max_columns`` columns (:class:`TooWide`, with the count the record would
have made).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

from chalicelib.monitor.json_scan import array_items, members, value_at
from chalicelib.monitor.llm_rows import llm_row

_SIDES = (("endpointOutput", "prediction", "predictions"),
          ("endpointInput", "feature", "instances"))
STREAM_BYTES = 1 << 20
"""A JSON body past this size is read one instance at a time instead of parsed whole."""


class FlattenError(ValueError):
    """A side of the record says it is JSON and is not."""


class TooWide(Exception):
    """A record flattens to more columns than the monitor accepts."""


class Naming:
    """How a record's columns are named (``csv_names``: the baseline's features, for positional
    CSV values) and how many one row may have."""

    def __init__(self, csv_names: Sequence[str] | None = None, max_columns: int = 1000) -> None:
        self._names = [str(name) for name in csv_names or ()]
        self.max_columns = max_columns

    def csv(self, values: list[Any]) -> dict[str, Any]:
        names = self._names
        if len(values) > len(names):
            if len(values) > self.max_columns:
                raise TooWide(_too_wide(len(values), self.max_columns))
            names.extend(f"_c{i}" for i in range(len(names), len(values)))
        return dict(zip(names, values, strict=False))

    def check(self, row: dict[str, Any], extra: int = 0) -> None:
        """Refuse a row past the limit (``extra`` columns still to come)."""
        if len(row) + extra > self.max_columns:
            raise TooWide(_too_wide(len(row) + extra, self.max_columns))


def _too_wide(count: int, limit: int) -> str:
    return (f"the record flattens to {count:,} columns, over the limit of {limit:,} "
            f"(--max-columns): give a --preprocess-handler that returns the features to monitor")


@dataclasses.dataclass
class _Side:
    """One side's part of every row: shared columns and, for a batch, one part per row."""

    shared: dict[str, Any]
    count: int = 1
    csv: str | None = None
    width: int = 0
    items: Any = None
    """A batch's instances: a list, or a callable giving them lazily."""
    prefix: str = ""

    def parts(self) -> Iterator[Any]:
        if self.csv is not None:
            return _csv_lines(self.csv)
        if self.items is None:
            return iter(())
        return iter(self.items) if isinstance(self.items, list) else self.items()


def simple_csv_row(record: dict[str, Any], naming: Naming) -> dict[str, Any] | None:
    """The row of one CSV line each way (what most tabular endpoints capture), else None:
    :func:`flatten_record`'s fast path, same result.

    Raises:
        TooWide: wider than ``naming.max_columns``.
    """
    capture = record.get("captureData")
    if type(capture) is not dict:
        return None
    sent, received = capture.get("endpointInput"), capture.get("endpointOutput")
    if type(sent) is not dict or type(received) is not dict \
            or sent.get("encoding") != "CSV" or received.get("encoding") != "CSV":
        return None
    inputs, outputs = sent.get("data"), received.get("data")
    if type(inputs) is not str or type(outputs) is not str \
            or "\n" in inputs or "\n" in outputs or '"' in inputs or '"' in outputs \
            or "\r" in inputs or "\r" in outputs:
        return None
    return naming.csv(outputs.split(",") + inputs.split(","))


def flatten_record(record: dict[str, Any],
                   naming: Naming | None = None) -> Iterator[dict[str, Any]]:
    """The rows the analyzer makes of a record without a preprocessor (module docstring).

    Raises:
        FlattenError: a JSON side is not JSON.
        TooWide: a row would be wider than ``naming.max_columns``.
        RecursionError: a JSON side nested too deep.
    """
    naming = naming or Naming()
    capture = record.get("captureData")
    if not isinstance(capture, dict):
        return
    row = llm_row(record)
    if row is not None:  # a language model's exchange: its own columns, not its messages
        yield row
        return
    try:
        sides = []
        for key, prefix, batch_key in _SIDES:
            side = _side(capture.get(key), key, prefix, batch_key, naming)
            if side is not None:
                sides.append(side)
        yield from _rows(sides, naming)
    except TooWide:
        # say how wide the record's first row is, both sides counted (the failure path only)
        raise TooWide(_too_wide(_record_width(capture), naming.max_columns)) from None


def _record_width(capture: dict[str, Any]) -> int:
    width = 0
    for key, _prefix, batch_key in _SIDES:
        side = capture.get(key)
        if not isinstance(side, dict) or not isinstance(side.get("data"), str):
            continue
        encoding, data = str(side.get("encoding", "")).upper(), side["data"]
        if encoding == "CSV":
            width += len(next(_csv_lines(data), []))
        elif encoding == "JSON":
            width += _json_width(data, batch_key)
    return width


def _json_width(data: str, batch_key: str) -> int:
    if len(data) > STREAM_BYTES and f'"{batch_key}"' in data:
        width = 0
        for key, start, count in members(data):
            if key == batch_key and count:
                width += _leaves(next(array_items(data, start)))
            elif key != batch_key:
                width += _leaves(value_at(data, start))
        return width
    document = json.loads(data)
    if isinstance(document, dict) and isinstance(document.get(batch_key), list):
        batch = document.pop(batch_key)
        return _leaves(document) + (_leaves(batch[0]) if batch else 0)
    return _leaves(document)


def _rows(sides: list[_Side], naming: Naming) -> Iterator[dict[str, Any]]:
    parts = [side.parts() for side in sides]
    for index in range(max((side.count for side in sides), default=0)):
        row: dict[str, Any] = {}
        values: list[Any] = []
        for side, source in zip(sides, parts, strict=True):
            part = next(source, None) if index < side.count else None
            if side.csv is not None:
                values.extend(part if part is not None else [None] * side.width)
                continue
            row.update(side.shared)
            if part is not None:
                _flatten_part(part, side.prefix, row, naming)
        if values:
            naming.check(row, len(values))
            row.update(naming.csv(values))
        if row:
            yield row


def _flatten_part(part: Any, prefix: str, row: dict[str, Any], naming: Naming) -> None:
    before = len(row)
    try:
        if isinstance(part, dict):
            for key, value in part.items():
                _flatten(value, str(key), row, naming.max_columns)
        elif isinstance(part, list):
            for index, value in enumerate(part):
                _flatten(value, f"{prefix}{index}", row, naming.max_columns)
        else:
            row[f"{prefix}0"] = part
    except _Overflow:
        raise TooWide(_too_wide(before + _leaves(part), naming.max_columns)) \
            from None


def _flatten_value(value: Any, path: str, into: dict[str, Any], naming: Naming) -> None:
    before = len(into)
    try:
        _flatten(value, path, into, naming.max_columns)
    except _Overflow:
        raise TooWide(_too_wide(before + _leaves(value), naming.max_columns)) \
            from None


def _side(side: Any, key: str, prefix: str, batch_key: str, naming: Naming) -> _Side | None:
    if not isinstance(side, dict) or not isinstance(side.get("data"), str):
        return None
    encoding = str(side.get("encoding", "")).upper()
    data: str = side["data"]
    if encoding == "CSV":
        return _csv_side(data)
    if encoding != "JSON":
        return None
    try:
        if len(data) > STREAM_BYTES and f'"{batch_key}"' in data:
            return _streamed_json_side(data, prefix, batch_key, naming)
        return _json_side(json.loads(data), prefix, batch_key, naming)
    except ValueError:
        raise FlattenError(f"{key}'s data is not JSON") from None


def _csv_side(data: str) -> _Side:
    if "\n" not in data.rstrip("\r\n") and '"' not in data:
        values = data.rstrip("\r\n").split(",")
        return _Side({}, 1, data, len(values))
    count, width = 0, 0
    for line in _csv_lines(data):
        width = width or len(line)
        count += 1
    return _Side({}, count, data, width)


def _csv_lines(data: str) -> Iterator[list[str]]:
    if "\n" not in data.rstrip("\r\n") and '"' not in data:
        return iter([data.rstrip("\r\n").split(",")])
    return (line for line in csv.reader(io.StringIO(data)) if line)


def _json_side(document: Any, prefix: str, batch_key: str, naming: Naming) -> _Side:
    if isinstance(document, dict) and isinstance(document.get(batch_key), list):
        shared: dict[str, Any] = {}
        _flatten_part({k: v for k, v in document.items() if k != batch_key}, prefix, shared,
                      naming)
        batch = document[batch_key]
        return _Side(shared, len(batch), items=batch, prefix=prefix)
    row: dict[str, Any] = {}
    _flatten_part(document, prefix, row, naming)
    return _Side(row)


def _streamed_json_side(data: str, prefix: str, batch_key: str, naming: Naming) -> _Side:
    """A large body's batch read in place: its members scanned once for the shared columns and
    the batch's extent, then its instances decoded one at a time."""
    shared: dict[str, Any] = {}
    batch: tuple[int, int] | None = None
    for key, start, count in members(data):
        if key == batch_key and count is not None and batch is None:
            batch = (start, count)
        else:
            _flatten_value(value_at(data, start), key, shared, naming)
    if batch is None:
        return _Side(shared)
    start, count = batch
    return _Side(shared, count, items=lambda: array_items(data, start), prefix=prefix)


def flatten_json(document: Any, prefix: str, into: dict[str, Any]) -> dict[str, Any]:
    """A JSON document's scalars keyed by their path; returns ``into``."""
    _flatten_part(document, prefix, into, Naming(max_columns=1 << 62))
    return into


class _Overflow(Exception):
    """Past the column limit (turned into a TooWide with the full count)."""


def _flatten(value: Any, path: str, into: dict[str, Any], limit: int) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{path}.{key}", into, limit)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _flatten(item, f"{path}.{index}", into, limit)
    else:
        into[path] = value
        if len(into) > limit:
            raise _Overflow


def _leaves(value: Any) -> int:
    """How many scalars a JSON value holds (without recursion: it may be deep)."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            count += 1
    return count
