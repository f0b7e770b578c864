"""A dataset's statistics in Model Monitor's ``statistics.json`` schema, built from rows.

Rows are buffered a chunk at a time, then each feature's values go to its
:class:`~chalicelib.monitor.features.FeatureStats` in bulk: memory is the chunk plus a few
sketches per feature, whatever the number of rows. Statistics merge and round-trip through
:meth:`~DatasetStatistics.to_state`, so hours computed apart make a day.
"""
from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.monitor import sketches
from chalicelib.monitor.features import (
    MAX_VALUE_CHARS,
    STRING,
    UNKNOWN,
    FeatureStats,
    Moments,
    bounded_text,
)
from chalicelib.monitor.sketches import (
    DeequKll,
    NumberDistinct,
    frequent_strings_sketch,
    hll_sketch,
)

CHUNK_ROWS = 4096
CHUNK_TEXT_CHARS = 32 * 1024 * 1024
"""The characters of long strings (past :data:`LONG_TEXT`) a chunk may buffer before it is added,
short of :data:`CHUNK_ROWS` rows."""
LONG_TEXT = 64
STATE_VERSION = 3
"""3: a numeric feature's distinct counter (2: Deequ's numeric sketch; 1: a DataSketches KLL)."""


MAX_FEATURES = 1000
"""The most distinct features kept (the monitor's column limit)."""


class FeatureLimitError(ValueError):
    """Rows whose keys differ from row to row add up to more features than the limit."""


class DatasetStatistics:
    """The statistics of every feature seen, in first-seen order.

    Args:
        max_features: past it :class:`FeatureLimitError`: each feature holds sketches, so keys
            that change from row to row (a preprocessor keying rows by an id) would otherwise
            grow without bound.
    """

    def __init__(self, chunk_rows: int = CHUNK_ROWS,
                 max_features: int = MAX_FEATURES) -> None:
        self.max_features = max_features
        self.item_count = 0
        self.features: dict[str, FeatureStats] = {}
        self._chunk_rows = chunk_rows
        self._buffer: dict[str, list[Any]] = {}
        self._buffered = 0
        self._text_chars = 0

    def add(self, row: Mapping[str, Any]) -> None:
        """Add one row (an absent feature counts as missing). A string longer than
        :data:`~chalicelib.monitor.features.MAX_VALUE_CHARS` is bounded first, so the chunk never
        holds a record's long strings."""
        buffer = self._buffer
        for name, value in row.items():
            values = buffer.get(name)
            if values is None:
                values = buffer[name] = []
                if name not in self.features:  # a preprocessor may key its row by int
                    self._make_room()
                    self.features[name] = FeatureStats(str(name))
            if type(value) is str and len(value) > LONG_TEXT:  # the hot path's only cost
                value = self._long(value)
            values.append(value)
        self._buffered += 1
        if self._buffered >= self._chunk_rows or self._text_chars > CHUNK_TEXT_CHARS:
            self.flush()

    def _long(self, value: str) -> str | None:
        bounded = bounded_text(value) if len(value) > MAX_VALUE_CHARS else value
        self._text_chars += len(bounded or "")
        return bounded

    def add_all(self, rows: Iterable[Mapping[str, Any]]) -> DatasetStatistics:
        for row in rows:
            self.add(row)
        self.flush()
        return self

    def _make_room(self) -> None:
        if len(self.features) >= self.max_features:
            raise FeatureLimitError(
                f"the rows have more than {self.max_features:,} distinct features "
                f"(each row's keys are features): a preprocessor should return the "
                f"same features for every record")

    def flush(self) -> None:
        for name, values in self._buffer.items():
            self.features[name].add(values)
        self.item_count += self._buffered
        self._buffer, self._buffered, self._text_chars = {}, 0, 0

    def merge(self, other: DatasetStatistics) -> None:
        """Fold another window's statistics into these (both flushed first).

        Merged in the rows' order, the features keep their first-seen order (``other``'s new ones
        after these), as one pass over both would have met them. Counts, minimum and maximum are
        exact; moments merge by Chan et al.'s formulas; sketches by their own merges.

        Raises:
            FeatureLimitError: together more than :attr:`max_features` features.
        """
        self.flush()
        other.flush()
        self.item_count += other.item_count
        for name, feature in other.features.items():
            mine = self.features.get(name)
            if mine is None:
                self._make_room()
                self.features[name] = mine = FeatureStats(name)
            mine.merge(feature)

    def to_json(self) -> dict[str, Any]:
        self.flush()
        return {"version": 0, "dataset": {"item_count": self.item_count},
                "features": [feature_json(f, self.item_count) for f in self.features.values()]}

    def to_state(self) -> dict[str, Any]:
        """Everything needed to merge these statistics later (sketches serialized)."""
        self.flush()
        return {"version": STATE_VERSION, "item_count": self.item_count,
                "features": [_feature_state(f) for f in self.features.values()]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any],
                   max_features: int = MAX_FEATURES) -> DatasetStatistics:
        """The statistics :meth:`to_state` saved, with the limit merges keep to."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown monitor state version {state.get('version')!r}")
        stats = cls(max_features=max_features)
        stats.item_count = int(state["item_count"])
        for saved in state["features"]:
            feature = _feature_from_state(saved)
            stats.features[feature.name] = feature
        return stats


def feature_json(feature: FeatureStats, item_count: int) -> dict[str, Any]:
    common = {"num_present": feature.present, "num_missing": item_count - feature.present}
    kind = feature.inferred_type
    entry: dict[str, Any] = {"name": feature.name, "inferred_type": kind}
    if sum(1 for count in (feature.integral, feature.fractional, feature.strings) if count) > 1:
        # a custom statistic (the schema's provision for them): how many values had each type
        # (the data type check of a baseline Integral or Fractional feature needs it)
        entry["sagegate_type_counts"] = {"Integral": feature.integral,
                                         "Fractional": feature.fractional,
                                         "String": feature.strings}
    if kind == STRING:
        entry["string_statistics"] = {
            "common": common, "distinct_count": feature.distinct_count(),
            "distribution": {"categorical": {"buckets": feature.categorical_buckets()}}}
    elif kind == UNKNOWN:
        entry["string_statistics"] = {"common": common, "distinct_count": 0}
    else:
        entry["numerical_statistics"] = _numerical(feature, common, item_count)
    return entry


def _numerical(feature: FeatureStats, common: dict[str, int],
               item_count: int) -> dict[str, Any]:
    moments = feature.moments
    sketch = sketches.sketch_json(feature.kll)
    cdf = sketches.WeightedCdf(sketch["data"])
    # completeness and approximate_num_distinct_values: what the analyzer writes since (a
    # 2026 run), Deequ's Completeness and ApproxCountDistinct of the column
    return {"common": common, "mean": _finite(moments.mean), "sum": _finite(moments.sum),
            "std_dev": _finite(moments.std_dev), "min": moments.min, "max": moments.max,
            "completeness": feature.present / item_count if item_count else 0.0,
            "approximate_num_distinct_values": feature.distinct_number_count(),
            "distribution": {"kll": {
                "buckets": sketches.buckets(cdf, moments.min, moments.max),
                "sketch": sketch}}}


def _finite(value: float) -> float | None:
    """A moment as ``statistics.json`` holds it: null past the doubles' range (a sum near
    1.8e308, squares past 1e154), as strict JSON has no infinity."""
    return value if math.isfinite(value) else None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _feature_state(feature: FeatureStats) -> dict[str, Any]:
    m = feature.moments
    return {"name": feature.name, "present": feature.present, "integral": feature.integral,
            "fractional": feature.fractional, "strings": feature.strings,
            # no numbers: min and max are infinities, which JSON has not (null)
            "moments": [m.count, _finite(m.sum), _finite(m.mean), _finite(m.m2),
                        *((m.min, m.max) if m.count else (None, None))],
            "kll": feature.kll.to_state(),
            "frequent": _b64(feature.frequent.serialize()),
            "distinct": _b64(feature.distinct.serialize_compact()),
            "distinct_numbers": feature.distinct_numbers.to_state()}


def _feature_from_state(saved: Mapping[str, Any]) -> FeatureStats:
    feature = FeatureStats(str(saved["name"]))
    feature.present, feature.integral = int(saved["present"]), int(saved["integral"])
    feature.fractional, feature.strings = int(saved["fractional"]), int(saved["strings"])
    moments = Moments()
    count, total, mean, m2, low, high = saved["moments"]
    # a moment that passed the doubles' range is null in the state; NaN keeps it unknown
    moments.sum, moments.mean, moments.m2 = (math.nan if v is None else float(v)
                                             for v in (total, mean, m2))
    moments.count = int(count)
    if moments.count:  # else the empty moments' infinities (null in the state)
        moments.min, moments.max = float(low), float(high)
    feature.moments = moments
    feature.kll = DeequKll.from_state(saved["kll"])
    feature.frequent = frequent_strings_sketch.deserialize(base64.b64decode(saved["frequent"]))
    feature.distinct = hll_sketch.deserialize(base64.b64decode(saved["distinct"]))
    feature.distinct_numbers = NumberDistinct.from_state(saved["distinct_numbers"])
    return feature
