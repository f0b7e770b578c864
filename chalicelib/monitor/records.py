"""Capture records (JSON Lines) to rows of features, as the analyzer reads them.

For each line: records of shadow invocations (``eventMetadata.invocationSource`` is
``ShadowExperiment``) are skipped; cache hits (``eventMetadata.sagegateCacheHit`` true) are
kept unless excluded; then either the user's record preprocessor makes the row (a falsy result
such as ``[]`` drops the record), or the record is flattened:

- CSV sides (``encoding`` ``CSV``): the values of the output, then of the input, named
  ``_c0``, ``_c1``, ... (the names Spark gives CSV columns without a header, which the analyzer
  uses; output first, as the analyzer puts it, so a training CSV with its label first lines up).
  A body of several lines is several rows when both sides have as many lines.
- JSON sides: an object's keys, nested keys joined with ``.`` and array elements by index
  (``{"a": {"b": [1, 2]}}`` gives ``a.b.0``, ``a.b.1``); a top-level array or scalar is named
  ``prediction0``, ``prediction1``, ... on the output side and ``feature0``, ... on the input
  side (the flattened shape the analyzer's documentation asks preprocessors to return).
- Base64 sides (images, binary bodies) give no columns: such endpoints need a preprocessor.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

SHADOW_SOURCE = "ShadowExperiment"
CACHE_HIT_KEY = "sagegateCacheHit"
"""``eventMetadata`` key the front end sets (true) on the record of a cached answer."""
_SIDES = (("endpointOutput", "prediction"), ("endpointInput", "feature"))

Preprocess = Callable[[dict[str, Any], str], "dict[str, Any] | None"]
"""A record preprocessor: (raw record, ``file:line``) -> row, or None to drop the record."""


class RecordError(ValueError):
    """A line is not a capture record; the message names the file and line."""


@dataclasses.dataclass
class Tally:
    """What happened to the records read."""

    records: int = 0
    rows: int = 0
    shadow: int = 0
    cache_hits_excluded: int = 0
    dropped: int = 0
    """Records the preprocessor dropped (returned a falsy value)."""
    empty: int = 0
    """Records without a preprocessor that had nothing to flatten (binary bodies)."""


class RecordReader:
    """Rows from capture lines.

    Args:
        preprocess: the user's record preprocessor, or None to flatten.
        include_cache_hits: keep records of answers served from the cache.
    """

    def __init__(self, preprocess: Preprocess | None = None,
                 include_cache_hits: bool = True) -> None:
        self._preprocess = preprocess
        self._cache_hits = include_cache_hits
        self.tally = Tally()

    def rows(self, name: str, lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
        """The rows of one file's lines (``name`` is how errors name the file)."""
        tally, preprocess, loads = self.tally, self._preprocess, json.loads
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = loads(line)
            except ValueError:
                raise RecordError(f"{name}:{number}: not a JSON capture record") from None
            if not isinstance(record, dict):
                raise RecordError(f"{name}:{number}: not a JSON capture record")
            tally.records += 1
            metadata = record.get("eventMetadata")
            if isinstance(metadata, dict) and self._skip(metadata):
                continue
            if preprocess is not None:
                row = preprocess(record, f"{name}:{number}")
                if row:
                    tally.rows += 1
                    yield row
                else:
                    tally.dropped += 1
                continue
            produced = flatten_record(record)
            if not produced:
                tally.empty += 1
            tally.rows += len(produced)
            yield from produced

    def _skip(self, metadata: dict[str, Any]) -> bool:
        if metadata.get("invocationSource") == SHADOW_SOURCE:
            self.tally.shadow += 1
            return True
        if not self._cache_hits and metadata.get(CACHE_HIT_KEY) is True:
            self.tally.cache_hits_excluded += 1
            return True
        return False


def flatten_record(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows the analyzer makes of a record without a preprocessor (module docstring)."""
    capture = record.get("captureData")
    if not isinstance(capture, dict):
        return []
    csv_parts: list[list[list[str]]] = []
    row: dict[str, Any] = {}
    for key, prefix in _SIDES:
        side = capture.get(key)
        if not isinstance(side, dict) or not isinstance(side.get("data"), str):
            continue
        encoding = str(side.get("encoding", "")).upper()
        if encoding == "CSV":
            csv_parts.append(csv_lines(side["data"]))
        elif encoding == "JSON":
            try:
                document = json.loads(side["data"])
            except ValueError:
                continue
            flatten_json(document, prefix, row)
    if not csv_parts:
        return [row] if row else []
    return [{**row, **csv_row} for csv_row in _csv_rows(csv_parts)]


def csv_lines(data: str) -> list[list[str]]:
    """The rows of a CSV body."""
    if "\n" not in data and '"' not in data:
        return [data.split(",")]
    return [line for line in csv.reader(io.StringIO(data)) if line]


def _csv_rows(parts: list[list[list[str]]]) -> list[dict[str, str]]:
    lengths = {len(lines) for lines in parts}
    count = lengths.pop() if len(lengths) == 1 else 1
    rows = []
    for index in range(count):
        values = [v for lines in parts for v in (lines[index] if index < len(lines) else [])]
        rows.append({f"_c{i}": value for i, value in enumerate(values)})
    return rows


def flatten_json(document: Any, prefix: str, into: dict[str, Any]) -> dict[str, Any]:
    """A JSON document's scalars keyed by their path (module docstring); returns ``into``."""
    if isinstance(document, dict):
        for key, value in document.items():
            _flatten(value, str(key), into)
    elif isinstance(document, list):
        for index, value in enumerate(document):
            _flatten(value, f"{prefix}{index}", into)
    else:
        into[f"{prefix}0"] = document
    return into


def _flatten(value: Any, path: str, into: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{path}.{key}", into)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _flatten(item, f"{path}.{index}", into)
    else:
        into[path] = value

