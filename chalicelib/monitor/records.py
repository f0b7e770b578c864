"""Capture records (JSON Lines) to rows of features, as the analyzer reads them.

A line that is not a JSON object (or nested past what can be read) is skipped and counted, never
the run's end; records outside the window (``[start, end)`` of ``inferenceTime``) are skipped and
counted; shadow records (``ShadowExperiment``) are skipped unless the reader keeps them
(``sagegate monitor compare``); cache hits (``sagegateCacheHit``) are kept unless excluded; then
the user's preprocessor makes the row (a falsy result drops the record), or the record is
flattened (:mod:`chalicelib.monitor.flattening`): one row per instance, the output's columns
first.

A row wider than ``max_columns`` (1,000 by default) is refused (:class:`ColumnLimitError`):
per-feature statistics of thousands of columns are not data quality monitoring, and a record of a
million keys would otherwise cost gigabytes.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from chalicelib.monitor.flattening import (
    FlattenError,
    Naming,
    TooWide,
    flatten_record,
    simple_csv_row,
)

SHADOW_SOURCE = "ShadowExperiment"
CACHE_HIT_KEY = "sagegateCacheHit"
"""``eventMetadata`` key the front end sets (true) on the record of a cached answer."""
MAX_COLUMNS = 1000

Preprocess = Callable[[dict[str, Any], str], "dict[str, Any] | None"]
"""A record preprocessor: (raw record, ``file:line``) -> row, or None to drop the record."""
Observe = Callable[[dict[str, Any]], bool]
"""Sees each record a reader keeps before its rows are made; False holds its rows back
(``compare``: a failed call's record)."""
Window = tuple[datetime.datetime, datetime.datetime]


class RecordError(ValueError):
    """A record cannot be read into rows; the message names the file and line."""


class ColumnLimitError(RecordError):
    """A record makes a row wider than the limit."""


@dataclasses.dataclass
class Tally:

    records: int = 0
    rows: int = 0
    shadow: int = 0
    cache_hits_excluded: int = 0
    dropped: int = 0
    """Records the preprocessor dropped (a falsy result)."""
    empty: int = 0
    """Records without a preprocessor that had nothing to flatten (binary bodies)."""
    outside_window: int = 0
    untimed: int = 0
    """Records without a readable ``inferenceTime`` while a window was asked for."""
    bad_lines: int = 0
    first_bad: str = ""
    """``FILE:LINE: reason`` of the first bad line."""
    bad_objects: int = 0
    """Capture objects given up part-way or whole
    (:class:`~chalicelib.monitor.capture_format.CaptureObjectError`); the records read before the
    damage count as usual."""
    first_bad_object: str = ""
    """``OBJECT: reason`` of the first of them."""

    def bad(self, where: str, reason: str) -> None:
        self.bad_lines += 1
        if not self.first_bad:
            self.first_bad = f"{where}: {reason}"

    def bad_object(self, message: str) -> None:
        self.bad_objects += 1
        if not self.first_bad_object:
            self.first_bad_object = message

    def merge(self, later: Tally) -> None:
        """Add the tally of the records read after these: one reader's tally over both, in order."""
        for field in dataclasses.fields(self):
            if field.name not in _FIRST:
                setattr(self, field.name, getattr(self, field.name) + getattr(later, field.name))
        self.first_bad = self.first_bad or later.first_bad
        self.first_bad_object = self.first_bad_object or later.first_bad_object


_FIRST = ("first_bad", "first_bad_object")


class RecordReader:
    """Rows from capture lines.

    Args:
        preprocess: the user's record preprocessor, or None to flatten.
        window: only records whose ``inferenceTime`` is in ``[start, end)``.
        csv_names: the baseline's feature names: a headerless CSV capture's columns take them by
            position (output first), as the analyzer reads CSV with the baseline's schema;
            columns past them are ``_cN``.
        include_shadow: keep shadow records too (compared with their primary's); the analysis
            skips them.
        observe: :data:`Observe`.
    """

    def __init__(self, preprocess: Preprocess | None = None,
                 include_cache_hits: bool = True, window: Window | None = None,
                 csv_names: Sequence[str] | None = None,
                 max_columns: int = MAX_COLUMNS, include_shadow: bool = False,
                 observe: Observe | None = None) -> None:
        self._preprocess = preprocess
        self._shadow = include_shadow
        self._observe = observe
        self._cache_hits = include_cache_hits
        self._window = window
        self._naming = Naming(csv_names, max_columns)
        self._max_columns = max_columns
        self._times = _TimeCache()
        self.tally = Tally()

    def rows(self, name: str, lines: Iterable[str | bytes],
             first_line: int = 1) -> Iterator[dict[str, Any]]:
        """The rows of one file's lines; the first line given is ``first_line`` (a part of a file
        starts in its middle).

        Raises:
            ColumnLimitError: a record makes a row wider than ``max_columns``.
        """
        tally, naming, preprocess, observe = (self.tally, self._naming, self._preprocess,
                                              self._observe)
        for number, line in enumerate(lines, first_line):
            if not line.strip():
                continue
            record = self._record(line, name, number)
            if record is None:
                continue
            tally.records += 1
            metadata = record.get("eventMetadata")
            if type(metadata) is dict and self._skip(metadata):
                continue
            if self._window is not None and not self._in_window(metadata):
                continue
            if observe is not None and not observe(record):
                continue
            if preprocess is not None:
                yield from self._preprocessed(record, f"{name}:{number}")
                continue
            try:
                row = simple_csv_row(record, naming)
            except TooWide as error:
                raise ColumnLimitError(f"{name}:{number}: {error}") from None
            if row is not None:
                tally.rows += 1
                yield row
            else:
                yield from self._flattened(record, f"{name}:{number}")

    def _record(self, line: str | bytes, name: str, number: int) -> dict[str, Any] | None:
        try:
            record = json.loads(line)
        except RecursionError:
            self.tally.bad(f"{name}:{number}", "nested too deep to read")
            return None
        except ValueError:
            self.tally.bad(f"{name}:{number}", "not JSON")
            return None
        if type(record) is not dict:
            self.tally.bad(f"{name}:{number}", "not a JSON capture record (an object)")
            return None
        return record

    def _preprocessed(self, record: dict[str, Any], where: str) -> Iterator[dict[str, Any]]:
        assert self._preprocess is not None
        row = self._preprocess(record, where)
        if not row:
            self.tally.dropped += 1
            return
        if len(row) > self._max_columns:
            raise ColumnLimitError(
                f"{where}: the preprocessor's row has {len(row):,} columns, over the limit of "
                f"{self._max_columns:,} (--max-columns): return the features to monitor")
        self.tally.rows += 1
        yield row

    def _flattened(self, record: dict[str, Any], where: str) -> Iterator[dict[str, Any]]:
        produced = 0
        try:
            for row in flatten_record(record, self._naming):
                produced += 1
                yield row
        except TooWide as error:
            raise ColumnLimitError(f"{where}: {error}") from None
        except (FlattenError, RecursionError) as error:
            reason = "nested too deep to read" if isinstance(error, RecursionError) \
                else str(error)
            self.tally.bad(where, reason)
            return
        if not produced:
            self.tally.empty += 1
        self.tally.rows += produced

    def _skip(self, metadata: dict[str, Any]) -> bool:
        if not self._shadow and metadata.get("invocationSource") == SHADOW_SOURCE:
            self.tally.shadow += 1
            return True
        if not self._cache_hits and metadata.get(CACHE_HIT_KEY) is True:
            self.tally.cache_hits_excluded += 1
            return True
        return False

    def _in_window(self, metadata: Any) -> bool:
        assert self._window is not None
        text = metadata.get("inferenceTime") if isinstance(metadata, dict) else None
        moment = self._times.parse(text)
        if moment is None:
            self.tally.untimed += 1
            return False
        start, end = self._window
        if start <= moment < end:
            return True
        self.tally.outside_window += 1
        return False


class _TimeCache:
    """``inferenceTime`` strings to UTC datetimes; consecutive records often share a second."""

    def __init__(self) -> None:
        self._text: str | None = None
        self._moment: datetime.datetime | None = None

    def parse(self, text: Any) -> datetime.datetime | None:
        if text == self._text:
            return self._moment
        moment = None
        if isinstance(text, str) and len(text) <= 64:
            try:
                moment = datetime.datetime.fromisoformat(text)
            except ValueError:
                moment = None
            if moment is not None:
                moment = moment.replace(tzinfo=datetime.UTC) if moment.tzinfo is None \
                    else moment.astimezone(datetime.UTC)
        self._text, self._moment = text, moment
        return moment
