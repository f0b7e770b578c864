"""The verdict of ``sagegate monitor compare``: the thresholds B must stay within, each one
given checked against the comparison's figures, the reasons B is worse (one a line) and the
exit status (3 when B is worse, else 0). A threshold a figure cannot be computed for (no
column compared, no pairs, no latency, a rate the records do not give) fails, so a gate never
passes on nothing; when no figure at all could be computed (no column's distance, no pair
compared, no latency ratio, no error rate of B) nothing was compared, and the exit status is
4, as ``check``'s for nothing to check, whatever the thresholds.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from chalicelib.monitor.compare_sides import LATENCY_KEY, PERCENTILES

METHODS = ("Robust", "Simple")
EXIT_WORSE = 3
"""The exit status when B is worse than a threshold given (0 otherwise)."""
EXIT_NOTHING_COMPARED = 4
"""The exit status when no figure could be computed (``check``'s for nothing checked)."""


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


THRESHOLDS = ("max_distance", "min_agreement", "max_error_rate", "max_latency_ratio")


def verdict(document: Mapping[str, Any], thresholds: Thresholds) -> dict[str, Any]:
    """The verdict as compare.json has it: whether B is worse, the exit status, the thresholds
    checked and failed, and the reasons, from the comparison's figures (``document``);
    ``column_reasons``: how many of the first reasons are one column's (``--max-distance``:
    a thousand of them for an image classifier's probabilities, so the printed lines cap
    them)."""
    found = _reasons(document, thresholds)
    reasons = [reason for _key, reason in found]
    nothing = nothing_compared(document)
    status = EXIT_NOTHING_COMPARED if nothing else EXIT_WORSE if reasons else 0
    return {
        "worse": bool(reasons) and not nothing, "exit_status": status,
        "nothing_compared": nothing,
        "checked": [key for key in THRESHOLDS if getattr(thresholds, key) is not None],
        "failed": list(dict.fromkeys(key for key, _reason in found)), "reasons": reasons,
        "column_reasons": sum(key == "max_distance" for key, _reason in found)}


def nothing_compared(document: Mapping[str, Any]) -> bool:
    """No figure of the comparison could be computed: no column's distance, no pair's
    agreement, no latency ratio and no error rate of B (a preprocessor that drops every
    record, outputs neither side can read, and no experiment metadata)."""
    return (all(item["distance"] is None for item in document["columns"])
            and document["agreement"]["agreement"] is None
            and all(value is None for value in document["latency_ratio"].values())
            and document["b"]["errors"]["rate"] is None)


def _reasons(document: Mapping[str, Any], thresholds: Thresholds) -> list[tuple[str, str]]:
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
    if not reasons and not any(item["gated"] and item["distance"] is not None
                               for item in document["columns"]):
        reasons.append(f"no {_GATED[document['columns_gated']]} compared ({_rows(document)}): "
                       f"--max-distance cannot be checked")
    return reasons


_GATED = {"output": "output column", "all": "column"}


def _rows(document: Mapping[str, Any]) -> str:
    """Why no column was compared, as the sides' rows say it."""
    rows = f"{document['a']['rows']} row(s) in A, {document['b']['rows']} in B"
    if not document["columns"] and document["a"]["rows"] and document["b"]["rows"]:
        return f"{rows}, no column both sides have"
    return rows


def _latency_reasons(document: Mapping[str, Any], limit: float) -> list[str]:
    reasons = []
    for p in PERCENTILES:
        ratio = document["latency_ratio"][f"p{p}"]
        a, b = document["a"]["latency_ms"][f"p{p}"], document["b"]["latency_ms"][f"p{p}"]
        if ratio is None:
            why = f"a side without {LATENCY_KEY}" if a is None or b is None \
                else "no ratio to A's 0 ms"
            reasons.append(f"latency p{p}: n/a (A {_ms(a)}, B {_ms(b)}: {why}): "
                           f"--max-latency-ratio cannot be checked")
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
