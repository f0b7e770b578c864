"""The verdict between two models' traffic (``sagegate monitor compare``): A, the primary
(champion), against B, the challenger or the primary's shadow.

Each side's records are read as the check reads them (:class:`RecordReader`: the window, the
cache hits, a record preprocessor, the same flattened columns), except that B keeps shadow
records (``invocationSource`` ``ShadowExperiment``, which the analysis skips). Beside its rows,
each record kept is seen by a :class:`Side` (the reader's ``observe``), which reads the
experiment's keys of ``eventMetadata``: ``sagegateArm`` (the arm or shadow's name),
``sagegateLatencyMs`` (the endpoint exchange's milliseconds) and ``sagegateError`` (a failed
shadow call's ``{"Code", "Message"}``; such a record has no output, and its rows are held back
from the distributions). Then:

- per column both sides have: the distance between the sides' distributions, the drift
  check's own (:func:`chalicelib.monitor.checks.distance`: the L-infinity distance of the KLL
  sketches' cumulative distributions for numbers, of the categories' frequencies for strings),
  and, for numbers, the two-sample Kolmogorov-Smirnov critical distance the ``Robust`` method
  also requires. Output columns (those the record's ``endpointOutput`` flattens to) are the
  ones ``max_distance`` gates; with a preprocessor, whose rows do not say which are outputs,
  every column is;
- agreement (:class:`Pairing`): B's records paired with A's by ``inferenceId`` (a shadow's
  record carries its primary's); a pair agrees when the two outputs' top-1 answers are equal
  (:func:`top1`: the argmax of each probability vector of a JSON list or TF Serving
  ``predictions``, else the first output column, per instance);
- latency percentiles (p50, p90, p99 of ``sagegateLatencyMs`` of the records with an
  output) and error rates (error records among the side's records, where the records can say
  it: a side of shadow records, or one holding error records; a primary's failures are not
  captured, so its rate is otherwise n/a);
- the verdict: each threshold given, checked; one a figure cannot be computed for (no pairs,
  no latency, a rate the records do not give) fails, so a gate never passes on nothing.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import functools
import io
import json
import math
from array import array
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from chalicelib.monitor import checks, sketches
from chalicelib.monitor.flattening import FlattenError, Naming, TooWide, flatten_record
from chalicelib.monitor.records import MAX_COLUMNS, SHADOW_SOURCE, Tally

KIND, VERSION = "sagegate-monitor-compare", 1
ARM_KEY, LATENCY_KEY, ERROR_KEY = "sagegateArm", "sagegateLatencyMs", "sagegateError"
PAIR_KEY = "inferenceId"
PERCENTILES = (50, 90, 99)
METHODS = ("Robust", "Simple")
TOP_DISAGREEMENTS = 10
"""The most frequent disagreements (A's answer, B's answer) listed."""
TOP_CODES = 20
"""The most frequent error codes listed per side."""
PRINTED_COLUMNS = 20
"""Past this many columns (an image classifier's 1000 probabilities), the printed lines and
the report's charts are of the columns :func:`ranked` first; compare.json has every one."""
ARGMAX, FIRST_COLUMN, MIXED = "argmax", "first_column", "mixed"
PRIMARY_ERRORS_NOTE = ("n/a: no failure in its records (a primary arm's failures are not "
                       "captured; a shadow's are)")
Window = tuple[datetime.datetime, datetime.datetime]


@dataclasses.dataclass(frozen=True)
class Top1:
    """A record's top-1 answer: one label per instance, and how it was read."""

    method: str
    """``argmax`` (of each probability vector) or ``first_column`` (each instance's first
    output value)."""
    labels: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class _Failed:
    """A failed call's record (``sagegateError``): its pair is counted, not compared."""


FAILED = _Failed()
Entry = Top1 | _Failed | None
"""What a record brings to its pair: its answer, its failure, or nothing to compare."""


def top1(output: Any) -> Top1 | None:
    """The top-1 answer of a record's ``endpointOutput``, or None (no output, a binary one,
    or one with no value).

    JSON: a list of numbers is one probability vector, a list of such lists (or a TF Serving
    ``{"predictions": [...]}`` of them) one per instance: each gives its argmax (the first
    index of the largest value). Any other JSON gives its first value (in the flattened
    column order) per instance of ``predictions``, or for the whole document. CSV: each
    line's first value. Values are compared as the monitor reads them: a number as a number
    (``1`` equals ``1.0``), anything else as its text.
    """
    return _top1(_parse(output))


@dataclasses.dataclass(frozen=True)
class _Output:
    """An ``endpointOutput`` with text data: its encoding, its data and, JSON, the document
    (``_UNREADABLE`` when it is not JSON)."""

    encoding: str
    data: str
    document: Any = None


_UNREADABLE = object()


def _parse(output: Any) -> _Output | None:
    """The output, its JSON read once (for its answer and its columns)."""
    if not isinstance(output, dict) or not isinstance(output.get("data"), str):
        return None
    encoding = str(output.get("encoding", "")).upper()
    data: str = output["data"]
    if encoding != "JSON":
        return _Output(encoding, data)
    try:
        return _Output(encoding, data, json.loads(data))
    except (ValueError, RecursionError):
        return _Output(encoding, data, _UNREADABLE)


def _top1(output: _Output | None) -> Top1 | None:
    if output is None:
        return None
    if output.encoding == "CSV":
        labels = tuple(_value(line[0]) for line in csv.reader(io.StringIO(output.data))
                       if line)
        return Top1(FIRST_COLUMN, labels) if labels else None
    if output.encoding != "JSON" or output.document is _UNREADABLE:
        return None
    document = output.document
    batch = document.get("predictions") if isinstance(document, dict) else None
    instances = batch if isinstance(batch, list) else [document]
    if isinstance(document, list) and not _vector(document):
        instances = document if document and all(_vector(item) for item in document) \
            else [document]
    if instances and all(_vector(item) for item in instances):
        return Top1(ARGMAX, tuple(_argmax(item) for item in instances))
    firsts = [_first_leaf(item) for item in instances]
    if not firsts or any(label is _NONE for label in firsts):
        return None
    return Top1(FIRST_COLUMN, tuple(_value(label) for label in firsts))


def _argmax(vector: list[float]) -> int:
    """The first index of the largest value (numpy's ``argmax``, without an array)."""
    return max(range(len(vector)), key=vector.__getitem__)


def _output_names(output: _Output) -> tuple[str, ...] | None:
    """The columns :func:`flatten_record` makes of the most common outputs, named without
    flattening them: one CSV line (``_c0``, ...), a JSON list of scalars or a TF Serving
    ``{"predictions": [...]}`` alone whose instances are all lists of scalars, or all scalars
    (``prediction0``, ...); None for any other output (it is flattened)."""
    if output.encoding == "CSV":
        data = output.data.rstrip("\r\n")
        if "\n" in data or '"' in data:
            return None
        return tuple(f"_c{i}" for i in range(data.count(",") + 1))
    document = output.document
    if isinstance(document, dict) and len(document) == 1 \
            and isinstance(document.get("predictions"), list):
        instances = document["predictions"]
        if not instances:
            return ()
        if all(type(item) in _SCALARS for item in instances):
            return ("prediction0",)
        if not all(isinstance(item, list) and all(type(v) in _SCALARS for v in item)
                   for item in instances):
            return None
        width = max(len(item) for item in instances)
        return _predictions(width)
    if isinstance(document, list) and all(type(v) in _SCALARS for v in document):
        return _predictions(len(document))
    return None


@functools.lru_cache(maxsize=64)
def _predictions(width: int) -> tuple[str, ...]:
    return tuple(f"prediction{i}" for i in range(width))


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _vector(item: Any) -> bool:
    """A probability vector: a non-empty list of finite numbers (booleans are not)."""
    return isinstance(item, list) and bool(item) and all(
        type(value) in (int, float) and math.isfinite(value) for value in item)


_NONE = object()


def _first_leaf(value: Any) -> Any:
    """The first scalar of a JSON value in the flattened columns' order (``_NONE``: none)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        else:
            return item
    return _NONE


def _value(value: Any) -> Any:
    """A value as the monitor reads it: a number (from JSON or text) as a float, anything
    else as its text (``true``, ``null`` as JSON writes them)."""
    if type(value) in (int, float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return json.dumps(value)


class Pairing:
    """B's records paired with A's by ``inferenceId``: B is read first (each id's entry kept:
    about a hundred bytes a record), then each A record takes its partner out."""

    def __init__(self) -> None:
        self._waiting: dict[str, Entry] = {}
        self.pairs = 0
        self.compared = 0
        self.agreed = 0
        self.with_error = 0
        """Pairs where either side's call failed."""
        self.not_comparable = 0
        """Pairs where either side has no answer to compare (no output, a binary one)."""
        self.unpaired_a = 0
        self.duplicate_ids_b = 0
        self.by: Counter[str] = Counter()
        self.disagreements: Counter[tuple[tuple[Any, ...], tuple[Any, ...]]] = Counter()

    def add_b(self, key: str | None, entry: Entry) -> None:
        """A B record (its id, or None without one)."""
        if key is None:
            return
        if key in self._waiting:
            self.duplicate_ids_b += 1
            return
        self._waiting[key] = entry

    def match_a(self, key: str | None, entry: Entry) -> None:
        """An A record: paired with B's record of its id, if one is waiting."""
        if key is None or key not in self._waiting:
            self.unpaired_a += 1
            return
        other = self._waiting.pop(key)
        self.pairs += 1
        if entry is FAILED or other is FAILED:
            self.with_error += 1
        elif not isinstance(entry, Top1) or not isinstance(other, Top1):
            self.not_comparable += 1
        else:
            self.compared += 1
            self.by[entry.method if entry.method == other.method else MIXED] += 1
            if entry.labels == other.labels:
                self.agreed += 1
            else:
                self.disagreements[(entry.labels, other.labels)] += 1

    @property
    def unpaired_b(self) -> int:
        """B's records whose id no A record had (after A is read)."""
        return len(self._waiting)

    def document(self) -> dict[str, Any]:
        """The agreement's figures (``agreement`` None when no pair could be compared)."""
        agreement = self.agreed / self.compared if self.compared else None
        note = "" if agreement is not None else (
            "n/a: no record of B has an A record's inferenceId (two independent arms, not "
            "a primary and its shadow)" if not self.pairs else
            "n/a: no pair has an answer on both sides")
        return {"key": f"eventMetadata.{PAIR_KEY}", "pairs": self.pairs,
                "compared": self.compared, "agreed": self.agreed, "agreement": agreement,
                "note": note, "by": {m: self.by[m] for m in (ARGMAX, FIRST_COLUMN, MIXED)},
                "with_error": self.with_error, "not_comparable": self.not_comparable,
                "unpaired_a": self.unpaired_a, "unpaired_b": self.unpaired_b,
                "duplicate_ids_b": self.duplicate_ids_b,
                "disagreements": [{"a": _shown(a), "b": _shown(b), "count": count}
                                  for (a, b), count
                                  in self.disagreements.most_common(TOP_DISAGREEMENTS)]}


def _shown(labels: tuple[Any, ...]) -> Any:
    """An answer as the document shows it: the label of one instance, a list of several."""
    shown = [int(x) if isinstance(x, float) and x.is_integer() else x for x in labels]
    return shown[0] if len(shown) == 1 else shown


class Side:
    """What one side's records say beyond their rows; called by the reader with each record
    it keeps (:data:`chalicelib.monitor.records.Observe`).

    Args:
        name: ``a`` (its records take their partners out of ``pairing``) or ``b`` (they wait
            in it; read first).
        pairing: the two sides' pairing.
        output_columns: find which flattened columns are the output's (not with a
            preprocessor, whose rows are its own).
        max_columns: the widest row accepted (an output past it names no columns).
    """

    def __init__(self, name: str, pairing: Pairing, output_columns: bool = True,
                 max_columns: int = MAX_COLUMNS) -> None:
        self.name = name
        self._pairing = pairing
        self._columns = output_columns
        self._naming_limit = max_columns
        self.records = 0
        self.shadow = 0
        self.errors = 0
        self.codes: Counter[str] = Counter()
        self.arms: Counter[str] = Counter()
        self.latencies = array("d")
        self.outputs: dict[str, None] = {}
        """The output's column names seen, in first-seen order."""
        self._shapes: set[tuple[str, ...]] = set()

    def __call__(self, record: dict[str, Any]) -> bool:
        found = record.get("eventMetadata")
        metadata: dict[str, Any] = found if isinstance(found, dict) else {}
        self.records += 1
        if metadata.get("invocationSource") == SHADOW_SOURCE:
            self.shadow += 1
        arm = metadata.get(ARM_KEY)
        if isinstance(arm, str):
            self.arms[arm] += 1
        key = metadata.get(PAIR_KEY)
        key = key if isinstance(key, str) and key else None
        capture = record.get("captureData")
        output = capture.get("endpointOutput") if isinstance(capture, dict) else None
        error = metadata.get(ERROR_KEY)
        if error is not None:
            self.errors += 1
            code = error.get("Code") if isinstance(error, dict) else None
            self.codes[str(code) if code is not None else "(no code)"] += 1
            self._pair(key, FAILED)
            return False
        latency = metadata.get(LATENCY_KEY)
        if isinstance(latency, int | float) and not isinstance(latency, bool) \
                and math.isfinite(latency) and latency >= 0:
            self.latencies.append(float(latency))
        parsed = _parse(output)
        if self._columns and parsed is not None:
            self._output_columns(output, parsed)
        self._pair(key, _top1(parsed))
        return True

    def _pair(self, key: str | None, entry: Entry) -> None:
        if self.name == "b":
            self._pairing.add_b(key, entry)
        else:
            self._pairing.match_a(key, entry)

    def _output_columns(self, output: Any, parsed: _Output) -> None:
        """Add the names the output flattens to (as :func:`flatten_record` names them: the
        common shapes named here, exactly as it would, the others flattened)."""
        names = _output_names(parsed)
        if names is not None:
            if names not in self._shapes:
                self._shapes.add(names)
                self.outputs.update(dict.fromkeys(names))
            return
        try:
            for row in flatten_record({"captureData": {"endpointOutput": output}},
                                      Naming(max_columns=self._naming_limit)):
                self.outputs.update(dict.fromkeys(row))
        except (FlattenError, TooWide, RecursionError):
            return  # the reader counts or refuses the record itself

    def latency(self) -> dict[str, Any]:
        """``count`` and the percentiles (numpy's linear interpolation) and ``max``, in ms."""
        if not self.latencies:
            return {"count": 0, **{f"p{p}": None for p in PERCENTILES}, "max": None}
        values = np.frombuffer(self.latencies, dtype=np.float64)
        found = np.percentile(values, PERCENTILES)
        return {"count": int(values.size),
                **{f"p{p}": float(v) for p, v in zip(PERCENTILES, found, strict=True)},
                "max": float(values.max())}

    def error_rate(self) -> dict[str, Any]:
        """The side's errors: their rate where its records can say it (all shadow records,
        whose failures are captured, or error records among them), else None and why."""
        known = self.errors > 0 or (self.records > 0 and self.shadow == self.records)
        return {"count": self.errors, "records": self.records,
                "rate": self.errors / self.records if known and self.records else None,
                "note": "" if known else PRIMARY_ERRORS_NOTE,
                "codes": dict(self.codes.most_common(TOP_CODES))}


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """What the challenger (B) must stay within; None: not checked."""

    max_distance: float | None = None
    """Each gated column's distance at most this (``Robust``: and within the KS test's
    critical distance, as the drift check's default method)."""
    min_agreement: float | None = None
    max_error_rate: float | None = None
    """B's error rate at most this."""
    max_latency_ratio: float | None = None
    """B's p50, p90 and p99 latency each at most this times A's."""
    comparison_method: str = "Robust"

    def document(self) -> dict[str, Any]:
        """The thresholds as compare.json has them."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SideRead:
    """One side as read: its source, what its records said, its statistics and tally."""

    source: str
    side: Side
    statistics: dict[str, Any]
    """Its ``statistics.json`` document."""
    tally: Tally


def compare(a: SideRead, b: SideRead, pairing: Pairing, thresholds: Thresholds,
            window: Window | None, preprocessed: bool = False) -> dict[str, Any]:
    """The comparison's document (compare.json): each side, the columns' distances, the
    agreement, the latency ratios, the thresholds and the verdict with its reasons."""
    columns, only_a, only_b, gated = _columns(a, b, thresholds, preprocessed)
    latency = {side.side.name: side.side.latency() for side in (a, b)}
    ratios = {f"p{p}": _ratio(latency["b"][f"p{p}"], latency["a"][f"p{p}"])
              for p in PERCENTILES}
    document: dict[str, Any] = {
        "kind": KIND, "version": VERSION,
        "window": {"start": _iso(window[0]), "end": _iso(window[1])} if window else None,
        "a": _side(a, "champion", latency["a"]), "b": _side(b, "challenger", latency["b"]),
        "columns_gated": gated, "columns": columns, "only_a": only_a, "only_b": only_b,
        "agreement": pairing.document(), "latency_ratio": ratios,
        "thresholds": thresholds.document()}
    found = _verdict(document, thresholds)
    reasons = [reason for _key, reason in found]
    document["verdict"] = {
        "worse": bool(reasons), "exit_status": 3 if reasons else 0,
        "checked": [key for key in _THRESHOLDS if getattr(thresholds, key) is not None],
        "failed": list(dict.fromkeys(key for key, _reason in found)), "reasons": reasons}
    return document


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ratio(challenger: float | None, champion: float | None) -> float | None:
    if challenger is None or champion is None or champion <= 0:
        return None
    return challenger / champion


def _side(read: SideRead, role: str, latency: dict[str, Any]) -> dict[str, Any]:
    side = read.side
    return {"source": read.source, "role": role, "records": side.records,
            "rows": int(read.statistics.get("dataset", {}).get("item_count", 0)),
            "shadow_records": side.shadow, "arms": dict(side.arms.most_common()),
            "latency_ms": latency, "errors": side.error_rate(),
            "tally": dataclasses.asdict(read.tally)}


def _columns(a: SideRead, b: SideRead, thresholds: Thresholds, preprocessed: bool
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], str]:
    features_a = {str(f["name"]): f for f in a.statistics.get("features", [])}
    features_b = {str(f["name"]): f for f in b.statistics.get("features", [])}
    outputs = {} if preprocessed else {**a.side.outputs, **b.side.outputs}
    gated = "output" if outputs else "all"
    columns = []
    for name, feature in features_a.items():
        if name in features_b:
            is_output = None if preprocessed else name in outputs
            columns.append(column(name, feature, features_b[name], is_output,
                                  gated == "all" or bool(is_output), thresholds))
    columns.sort(key=lambda c: not c["output"])  # the outputs first, each side's order kept

    def alone(features: Mapping[str, Any], other: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"name": name, "output": None if preprocessed else name in outputs}
                for name in features if name not in other]

    return columns, alone(features_a, features_b), alone(features_b, features_a), gated


def column(name: str, feature_a: Mapping[str, Any], feature_b: Mapping[str, Any],
           output: bool | None, gated: bool, thresholds: Thresholds) -> dict[str, Any]:
    """One column's comparison: its counts each side, the distance (the drift check's), the
    KS critical distance (numbers), and whether it is beyond ``max_distance`` (None when not
    gated or no threshold is given)."""
    found = checks.distance(feature_a, feature_b)
    method = "LInfinity" if found is not None and found.kind == "categorical" \
        else thresholds.comparison_method
    critical = sketches.ks_critical(*found.sizes) \
        if found is not None and found.kind == "numeric" else None
    beyond = None
    if gated and thresholds.max_distance is not None and found is not None:
        limit = thresholds.max_distance
        if method == "Robust" and critical is not None:
            limit = max(limit, critical)
        beyond = found.value > limit
    return {"name": name, "output": output, "kind": found.kind if found else None,
            "distance": found.value if found else None, "method": method if found else None,
            "critical": critical if critical is not None and math.isfinite(critical) else None,
            "gated": gated, "beyond": beyond,
            "note": "" if found else _why_not(feature_a, feature_b),
            "a": _counts(feature_a), "b": _counts(feature_b)}


def _why_not(feature_a: Mapping[str, Any], feature_b: Mapping[str, Any]) -> str:
    kinds = (feature_a.get("inferred_type"), feature_b.get("inferred_type"))
    if "Unknown" in kinds:
        return "n/a: no values on a side"
    return f"n/a: {kinds[0]} in A, {kinds[1]} in B"


def _counts(feature: Mapping[str, Any]) -> dict[str, Any]:
    common = checks.common_statistics(feature)
    return {"inferred_type": feature.get("inferred_type"),
            "present": int(common.get("num_present", 0)),
            "missing": int(common.get("num_missing", 0))}


_THRESHOLDS = ("max_distance", "min_agreement", "max_error_rate", "max_latency_ratio")


def _verdict(document: Mapping[str, Any], thresholds: Thresholds) -> list[tuple[str, str]]:
    """The reasons B is worse, one a line, each with the threshold it fails."""
    reasons: list[tuple[str, str]] = []
    if thresholds.max_distance is not None:
        reasons.extend(("max_distance", reason)
                       for reason in _distance_reasons(document, thresholds.max_distance))
    if thresholds.min_agreement is not None:
        agreement = document["agreement"]
        if agreement["agreement"] is None:
            reasons.append(("min_agreement", f"agreement {agreement['note']}: "
                            f"--min-agreement {percent(thresholds.min_agreement)} cannot be "
                            f"checked"))
        elif agreement["agreement"] < thresholds.min_agreement:
            reasons.append(("min_agreement", f"agreement {percent(agreement['agreement'])} "
                            f"({agreement['agreed']} of {agreement['compared']} pairs) is "
                            f"below --min-agreement {percent(thresholds.min_agreement)}"))
    if thresholds.max_error_rate is not None:
        errors = document["b"]["errors"]
        if errors["rate"] is None:
            reasons.append(("max_error_rate", f"B's error rate is {errors['note']}: "
                            f"--max-error-rate {percent(thresholds.max_error_rate)} cannot "
                            f"be checked"))
        elif errors["rate"] > thresholds.max_error_rate:
            reasons.append(("max_error_rate", f"B's error rate {percent(errors['rate'])} "
                            f"({errors['count']} of {errors['records']} records) is above "
                            f"--max-error-rate {percent(thresholds.max_error_rate)}"))
    if thresholds.max_latency_ratio is not None:
        reasons.extend(("max_latency_ratio", reason)
                       for reason in _latency_reasons(document, thresholds.max_latency_ratio))
    return reasons


def _distance_reasons(document: Mapping[str, Any], limit: float) -> list[str]:
    reasons = []
    for item in document["columns"]:
        if not item["gated"]:
            continue
        if item["distance"] is None:
            reasons.append(f"{item['name']}: distance {item['note']}: --max-distance "
                           f"cannot be checked")
        elif item["beyond"]:
            robust = item["method"] == "Robust" and item["critical"] is not None \
                and item["critical"] > limit
            beyond = f"the KS critical distance {short(item['critical'])}" if robust \
                else f"--max-distance {short(limit)}"
            reasons.append(f"{item['name']}: distance {short(item['distance'])} "
                           f"({item['method']}) is above {beyond}")
    if document["columns_gated"] == "output":
        for side, other in (("only_a", "B"), ("only_b", "A")):
            for item in document[side]:
                if item["output"]:
                    reasons.append(f"{item['name']}: an output column {other} does not have: "
                                   f"--max-distance cannot be checked")
    return reasons


def _latency_reasons(document: Mapping[str, Any], limit: float) -> list[str]:
    reasons = []
    for p in PERCENTILES:
        ratio = document["latency_ratio"][f"p{p}"]
        a, b = document["a"]["latency_ms"][f"p{p}"], document["b"]["latency_ms"][f"p{p}"]
        if ratio is None:
            reasons.append(f"latency p{p}: n/a (A {_ms(a)}, B {_ms(b)}: a side without "
                           f"{LATENCY_KEY}): --max-latency-ratio cannot be checked")
        elif ratio > limit:
            reasons.append(f"latency p{p}: B's {_ms(b)} is {short(ratio)} times A's {_ms(a)}, "
                           f"above --max-latency-ratio {short(limit)}")
    return reasons


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{short(value)} ms"


def short(value: float) -> str:
    """A figure in four significant digits, for the printed lines."""
    return f"{value:.4g}"


def percent(fraction: float) -> str:
    """A share as a percentage, to two decimals (compare.json keeps the exact figure)."""
    return f"{fraction * 100:.2f}%"


def lines(document: Mapping[str, Any]) -> list[str]:
    """What the command prints: the figures, then the verdict and each reason, one a line."""
    out = []
    for name in ("a", "b"):
        side = document[name]
        shadow = f", {side['shadow_records']} shadow" if side["shadow_records"] else ""
        arms = ", ".join(f"{arm} {count}" for arm, count in side["arms"].items())
        out.append(f"{name.upper()} ({side['role']}) {side['source']}: {side['records']} "
                   f"record(s){shadow}, {side['rows']} row(s)"
                   f"{f'; arms: {arms}' if arms else ''}")
    out.append(_agreement_line(document["agreement"]))
    columns = document["columns"]
    shown = columns if len(columns) <= PRINTED_COLUMNS else ranked(columns)[:PRINTED_COLUMNS]
    for item in shown:
        what = {True: " (output)", False: "", None: ""}[item["output"]]
        if item["distance"] is None:
            figure = item["note"]
        else:
            critical = f", KS critical {short(item['critical'])}" \
                if item["critical"] is not None else ""
            figure = f"{short(item['distance'])} ({item['method']}{critical})"
        flag = " BEYOND" if item["beyond"] else ""
        out.append(f"distance {item['name']}{what}: {figure}{flag}")
    if len(shown) < len(columns):
        out.append(f"... and {len(columns) - len(shown)} more column(s), of smaller distances "
                   f"(the {len(shown)} above: beyond the threshold first, then the largest; "
                   f"compare.json has every one)")
    for key in ("only_a", "only_b"):
        if document[key]:
            names = ", ".join(item["name"] for item in document[key])
            out.append(f"columns of {key[-1].upper()} only: {names}")
    out.append(_latency_line(document))
    out.append("error rate: " + ", ".join(
        f"{name.upper()} {_rate(document[name]['errors'])}" for name in ("a", "b")))
    verdict = document["verdict"]
    if not verdict["checked"]:
        out.append("verdict: no threshold given (exit 0)")
    elif verdict["worse"]:
        out.append(f"verdict: B is worse than A by {len(verdict['reasons'])} reason(s) "
                   f"(exit 3)")
        out.extend(f"worse: {reason}" for reason in verdict["reasons"])
    else:
        out.append(f"verdict: B is within every threshold given "
                   f"({', '.join(verdict['checked'])}; exit 0)")
    return out


def ranked(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The columns in the order to show them when there are many: beyond the threshold first,
    then the gated ones, then by distance, largest first (none last)."""
    return sorted(columns, key=lambda c: (not c["beyond"], not c["gated"],
                                          c["distance"] is None, -(c["distance"] or 0.0)))


def _agreement_line(agreement: Mapping[str, Any]) -> str:
    unpaired = f"unpaired: {agreement['unpaired_a']} of A, {agreement['unpaired_b']} of B"
    pairs = f"{agreement['pairs']} pair(s) by {agreement['key']}"
    extra = "".join(f", {agreement[k]} {label}" for k, label in
                    (("with_error", "with a failed call"),
                     ("not_comparable", "without an answer to compare")) if agreement[k])
    if agreement["agreement"] is None:
        return f"agreement: {agreement['note']} ({pairs}{extra}; {unpaired})"
    by = " and ".join(f"{count} by {method.replace('_', ' ')}"
                      for method, count in agreement["by"].items() if count)
    return (f"agreement: {percent(agreement['agreement'])} ({agreement['agreed']} of "
            f"{agreement['compared']} compared pair(s) agree, {by}; {pairs}{extra}; "
            f"{unpaired})")


def _latency_line(document: Mapping[str, Any]) -> str:
    def figures(values: Mapping[str, Any]) -> str:
        return "/".join("n/a" if values[f"p{p}"] is None else short(values[f"p{p}"])
                        for p in PERCENTILES)

    names = "/".join(f"p{p}" for p in PERCENTILES)
    return (f"latency {names} ms: A {figures(document['a']['latency_ms'])}, B "
            f"{figures(document['b']['latency_ms'])} (B/A {figures(document['latency_ratio'])})")


def _rate(errors: Mapping[str, Any]) -> str:
    if errors["rate"] is None:
        return f"{errors['note']}"
    return f"{percent(errors['rate'])} ({errors['count']} of {errors['records']})"
