"""The two capture sets of ``sagegate monitor compare`` read side by side: what each side's
records say beyond their rows (:class:`Side`: the arms, the latencies, the failed calls, the
output's columns) and B's records paired with A's by ``inferenceId`` (:class:`Pairing`: the
agreement of their top-1 answers).
"""
from __future__ import annotations

import dataclasses
import math
from array import array
from collections import Counter
from typing import Any

import numpy as np

from chalicelib.monitor.compare_answers import (
    ARGMAX,
    FIRST_COLUMN,
    UNDEFINED,
    Output,
    Top1,
    output_names,
    parse_output,
    top1_of,
)
from chalicelib.monitor.flattening import FlattenError, Naming, TooWide, flatten_record
from chalicelib.monitor.records import MAX_COLUMNS, SHADOW_SOURCE, Tally

ARM_KEY, LATENCY_KEY, ERROR_KEY = "sagegateArm", "sagegateLatencyMs", "sagegateError"
PAIR_KEY = "inferenceId"
PERCENTILES = (50, 90, 99)
MAX_WAITING = 2_000_000
"""B's records kept for pairing, at most (each an id and its answer's index: about 150 bytes, 300
MB at the cap). Past it B's records are counted (``beyond_cap_b``), their A partners unpaired."""
MAX_KEY_CHARS = 128
"""An ``inferenceId`` longer than this is kept as its BLAKE2b digest (ids are compared, never
shown)."""
TOP_DISAGREEMENTS = 10
TOP_CODES = 20
MIXED = "mixed"
PRIMARY_ERRORS_NOTE = ("n/a: no failure in its records (a primary arm's failures are not "
                       "captured; a shadow's are)")


@dataclasses.dataclass(frozen=True)
class _Failed:
    """A failed call's record (``sagegateError``): its pair is counted, not compared."""

    def __reduce__(self) -> str:
        return "FAILED"  # one object, also back from a worker process (``is FAILED``)


FAILED = _Failed()
Entry = Top1 | _Failed | None
"""What a record brings to its pair: its answer, its failure, or nothing to compare."""


class Pairing:
    """B's records paired with A's by ``inferenceId``: B is read first (each id's entry kept),
    then each A record takes its partner out."""

    def __init__(self) -> None:
        self._waiting: dict[str, int] = {}
        self._answers: dict[Entry, int] = {}
        self._entries: list[Entry] = []
        """B's distinct answers, each kept once (a classifier's: a few)."""
        self.beyond_cap_b = 0
        self.undefined = 0
        """Pairs where either side's top-1 is undefined (a NaN in its answer)."""
        self.pairs = 0
        self.compared = 0
        self.agreed = 0
        self.with_error = 0
        self.not_comparable = 0
        """Pairs where either side has no answer to compare (no output, a binary one)."""
        self.unpaired_a = 0
        self.duplicate_ids_b = 0
        self.by: Counter[str] = Counter()
        self.disagreements: Counter[tuple[tuple[Any, ...], tuple[Any, ...]]] = Counter()

    def add_b(self, key: str | None, entry: Entry) -> None:
        if key is None:
            return
        key = _bounded_key(key)
        if key in self._waiting:
            self.duplicate_ids_b += 1
            return
        if len(self._waiting) >= MAX_WAITING:
            self.beyond_cap_b += 1
            return
        code = self._answers.get(entry)
        if code is None:
            code = self._answers[entry] = len(self._entries)
            self._entries.append(entry)
        self._waiting[key] = code

    def match_a(self, key: str | None, entry: Entry) -> None:
        if key is not None:
            key = _bounded_key(key)
        if key is None or key not in self._waiting:
            self.unpaired_a += 1
            return
        other = self._entries[self._waiting.pop(key)]
        self.pairs += 1
        if entry is FAILED or other is FAILED:
            self.with_error += 1
        elif entry == UNDEFINED or other == UNDEFINED:
            self.undefined += 1
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
        """B's records whose id no A record had, and those not kept."""
        return len(self._waiting) + self.beyond_cap_b

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
                "undefined": self.undefined, "beyond_cap_b": self.beyond_cap_b,
                "unpaired_a": self.unpaired_a, "unpaired_b": self.unpaired_b,
                "duplicate_ids_b": self.duplicate_ids_b,
                "disagreements": [{"a": _shown(a), "b": _shown(b), "count": count}
                                  for (a, b), count
                                  in self.disagreements.most_common(TOP_DISAGREEMENTS)]}


def _bounded_key(key: str) -> str:
    if len(key) <= MAX_KEY_CHARS:
        return key
    import hashlib  # deferred: only a run that meets a long id pays OpenSSL's memory

    return "blake2b:" + hashlib.blake2b(key.encode("utf-8", "surrogatepass"),
                                        digest_size=16).hexdigest()


def _shown(labels: tuple[Any, ...]) -> Any:
    """An answer as the document shows it: the label of one instance, a list of several."""
    shown = [int(x) if isinstance(x, float) and x.is_integer() else x for x in labels]
    return shown[0] if len(shown) == 1 else shown



class Side:
    """What one side's records say beyond their rows; the reader calls it with each record it
    keeps (:data:`chalicelib.monitor.records.Observe`).

    Args:
        name: ``a`` (its records take their partners out of ``pairing``) or ``b`` (read first;
            they wait in it).
        output_columns: find which flattened columns are the output's (not with a preprocessor,
            whose rows are its own).
        max_columns: an output past it names no columns.
        arm: keep only this arm's or shadow's records (``sagegateArm``): several models' traffic
            may share an endpoint's folder (None: every record).
    """

    def __init__(self, name: str, pairing: Pairing, output_columns: bool = True,
                 max_columns: int = MAX_COLUMNS, arm: str | None = None) -> None:
        self.name = name
        self._pairing = pairing
        self._columns = output_columns
        self._naming_limit = max_columns
        self.arm = arm
        self.other_arms = 0
        """Records left out by ``arm``."""
        self.records = 0
        self.shadow = 0
        self.errors = 0
        self.codes: Counter[str] = Counter()
        self.arms: Counter[str] = Counter()
        self.latencies = array("d")
        self.outputs: dict[str, None] = {}
        self._shapes: set[tuple[str, ...]] = set()

    def __call__(self, record: dict[str, Any]) -> bool:
        found = record.get("eventMetadata")
        metadata: dict[str, Any] = found if isinstance(found, dict) else {}
        arm = metadata.get(ARM_KEY)
        if self.arm is not None and arm != self.arm:
            self.other_arms += 1
            return False
        self.records += 1
        if metadata.get("invocationSource") == SHADOW_SOURCE:
            self.shadow += 1
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
        parsed = parse_output(output)
        if self._columns and parsed is not None:
            self._output_columns(output, parsed)
        self._pair(key, top1_of(parsed))
        return True

    @property
    def pairing(self) -> Pairing:
        """The pairing this side's records go to (a copy, when the side was read in a worker
        process)."""
        return self._pairing

    def _pair(self, key: str | None, entry: Entry) -> None:
        if self.name == "b":
            self._pairing.add_b(key, entry)
        else:
            self._pairing.match_a(key, entry)

    def _output_columns(self, output: Any, parsed: Output) -> None:
        """Add the names the output flattens to, exactly as :func:`flatten_record` names them."""
        names = output_names(parsed)
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
        """``count``, the percentiles (numpy's linear interpolation) and ``max``, in ms."""
        if not self.latencies:
            return {"count": 0, **{f"p{p}": None for p in PERCENTILES}, "max": None}
        values = np.frombuffer(self.latencies, dtype=np.float64)
        found = np.percentile(values, PERCENTILES)
        return {"count": int(values.size),
                **{f"p{p}": float(v) for p, v in zip(PERCENTILES, found, strict=True)},
                "max": float(values.max())}

    def error_rate(self) -> dict[str, Any]:
        """The side's error rate where its records can say it (all shadow records, whose failures
        are captured, or error records among them), else None and why."""
        known = self.errors > 0 or (self.records > 0 and self.shadow == self.records)
        return {"count": self.errors, "records": self.records,
                "rate": self.errors / self.records if known and self.records else None,
                "note": "" if known else PRIMARY_ERRORS_NOTE,
                "codes": dict(self.codes.most_common(TOP_CODES))}



@dataclasses.dataclass
class SideRead:

    source: str
    side: Side
    statistics: dict[str, Any]
    tally: Tally
