"""A window analysed in parts: the state of one part of its capture objects, and the merge.

A window's capture objects can be analysed in contiguous groups, apart (``--workers N``'s
processes; a distributed run's children), each into a :class:`PartialAnalysis`. Merged in the
objects' order (:func:`merge_in_order`), the parts give one reader's statistics:

- exactly: the item count, each feature's present, missing and type counts, minimum and maximum,
  the categorical counts (while the frequent-items sketch is exact: up to 768 distinct values),
  the tally (its first bad line the first part's), and the features' first-seen order;
- to the last bits of rounding: sum, mean and standard deviation, by Chan et al.'s parallel
  formulas (one pass merges its chunks by the same formulas, at other boundaries);
- within the sketches' error: the KLL sketch (Deequ's merge; its levels differ from one pass's,
  as a Spark job's partitions do) and the distinct count (HyperLogLog's union).

One limit of one pass shifts with the parts: a feature's numbers read before its first string are
left out of its categorical counts (docs/MONITOR.md, Limits), and a part that has not seen its
strings yet leaves its own numbers out too.

A part's state is JSON (:meth:`PartialAnalysis.to_bytes`), sketches as base64; no pickled object,
so any process or function reads another's.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.monitor.capture_format import CaptureObjectError
from chalicelib.monitor.records import RecordReader, Tally
from chalicelib.monitor.statistics import MAX_FEATURES, DatasetStatistics

STATE_KIND = "sagegate-monitor-partial"
STATE_VERSION = 2
"""2: the tally counts bad objects (a ``.jsonl.gz`` that is not GZIP, damaged, truncated)."""
Objects = Iterable[tuple[str, Iterable[str | bytes]]]
"""(name for messages, the object's lines) of each capture object, in order."""


@dataclasses.dataclass
class PartialAnalysis:

    statistics: DatasetStatistics
    tally: Tally = dataclasses.field(default_factory=Tally)
    objects: int = 0

    def merge(self, later: PartialAnalysis) -> None:
        """Fold in the part that follows this one in the objects' order.

        Raises:
            FeatureLimitError: together they have more than ``max_features`` features.
        """
        self.statistics.merge(later.statistics)
        self.tally.merge(later.tally)
        self.objects += later.objects

    def to_state(self) -> dict[str, Any]:
        return {"kind": STATE_KIND, "version": STATE_VERSION, "objects": self.objects,
                "tally": dataclasses.asdict(self.tally),
                "statistics": self.statistics.to_state()}

    @classmethod
    def from_state(cls, state: Mapping[str, Any],
                   max_features: int = MAX_FEATURES) -> PartialAnalysis:
        """The part :meth:`to_state` saved.

        Raises:
            ValueError: not such a state, or of another version.
        """
        if state.get("kind") != STATE_KIND or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a monitor part's state of version {STATE_VERSION} (kind "
                             f"{state.get('kind')!r}, version {state.get('version')!r})")
        saved = state["tally"]
        names = {field.name for field in dataclasses.fields(Tally)}
        if not isinstance(saved, Mapping) or set(saved) != names:
            raise ValueError(f"a part's tally has the fields {sorted(names)}")
        tally = Tally(first_bad=str(saved["first_bad"]),
                      first_bad_object=str(saved["first_bad_object"]))
        for name in names - {"first_bad", "first_bad_object"}:
            setattr(tally, name, int(saved[name]))
        return cls(DatasetStatistics.from_state(state["statistics"], max_features), tally,
                   int(state["objects"]))

    def to_bytes(self) -> bytes:
        """The state as strict UTF-8 JSON (no NaN or infinity), which any reader takes."""
        return json.dumps(self.to_state(), separators=(",", ":"),
                          allow_nan=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, max_features: int = MAX_FEATURES) -> PartialAnalysis:
        """The part :meth:`to_bytes` wrote.

        Raises:
            ValueError: not JSON, or not such a state.
        """
        return cls.from_state(json.loads(data), max_features)


def analyse_objects(reader: RecordReader, objects: Objects,
                    max_features: int = MAX_FEATURES) -> PartialAnalysis:
    """The part made of ``objects``, read in order by a ``reader`` of its own (its tally is the
    part's). An object that stops with :class:`CaptureObjectError` is counted a bad object, its
    rows read before the damage kept, and the next is read.

    Raises:
        RecordError: as the reader raises (a row too wide); whatever opening an object raises.
        FeatureLimitError: more than ``max_features`` distinct features.
    """
    statistics = DatasetStatistics(max_features=max_features)
    add = statistics.add
    count = 0
    for name, lines in objects:
        count += 1
        try:
            for row in reader.rows(name, lines):
                add(row)
        except CaptureObjectError as error:
            reader.tally.bad_object(str(error))
    statistics.flush()
    return PartialAnalysis(statistics, copy.copy(reader.tally), count)


def analyse_rows(rows: Iterable[Mapping[str, Any]], tally: Tally | None = None,
                 max_features: int = MAX_FEATURES) -> PartialAnalysis:
    """The part made of ``rows`` (a part of a dataset file; ``tally``: its reader's, read once
    the rows are).

    Raises:
        FeatureLimitError: more than ``max_features`` distinct features.
    """
    statistics = DatasetStatistics(max_features=max_features).add_all(rows)
    return PartialAnalysis(statistics, copy.copy(tally) if tally is not None else Tally())


def merge_in_order(parts: Iterable[PartialAnalysis],
                   max_features: int = MAX_FEATURES) -> PartialAnalysis:
    """The parts merged in the objects' order; one part is returned as it is.

    Raises:
        FeatureLimitError: together they have more than ``max_features`` features.
    """
    merged: PartialAnalysis | None = None
    for part in parts:
        if merged is None:
            merged = part
            merged.statistics.max_features = max_features
        else:
            merged.merge(part)
    if merged is None:
        return PartialAnalysis(DatasetStatistics(max_features=max_features))
    return merged
