"""The verdict between two models' traffic (``sagegate monitor compare``): A, the primary
(champion), against B, the challenger or the primary's shadow.

Each side's records are read as the check reads them (:class:`RecordReader`), except that B keeps
shadow records (``ShadowExperiment``, which the analysis skips). Each record kept is also seen by
a :class:`~chalicelib.monitor.compare_sides.Side`, which reads the experiment's ``eventMetadata``
keys: ``sagegateArm`` (the arm or shadow), ``sagegateLatencyMs`` (the endpoint exchange's
milliseconds) and ``sagegateError`` (a failed shadow call's ``{"Code", "Message"}``: no output,
its rows held back from the distributions). A side given an arm (``--arm-a``/``--arm-b``) keeps
only that arm's records: experiments sharing an endpoint share its folder. Then:

- per column both sides have: the drift check's distance
  (:func:`chalicelib.monitor.checks.distance`) and, for numbers, the two-sample
  Kolmogorov-Smirnov critical distance ``Robust`` also requires. ``max_distance`` gates the
  output columns (those ``endpointOutput`` flattens to); with a preprocessor, whose rows do not
  say which are outputs, every column;
- agreement (:class:`~chalicelib.monitor.compare_sides.Pairing`): B's records paired with A's by
  ``inferenceId`` (a shadow's record carries its primary's); a pair agrees when the top-1 answers
  are equal (:func:`~chalicelib.monitor.compare_answers.top1`);
- latency percentiles (p50, p90, p99 of the records with an output) and error rates, where the
  records can say it (a shadow side, or one holding error records; a primary's failures are not
  captured, so its rate is otherwise n/a);
- the verdict: each threshold given, checked; one a figure cannot be computed for fails, so a
  gate never passes on nothing.

This module holds the comparison itself: the distances and figures, thresholds, reasons and exit
status (3 when B is worse, else 0; 4 when no figure could be computed, as ``check``'s for nothing
to check), compare.json (:func:`compare`) and the lines printed (:func:`lines`).
"""
from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping
from typing import Any

from chalicelib.monitor import checks, sketches
from chalicelib.monitor.compare_sides import LATENCY_KEY, PERCENTILES, Pairing, SideRead

METHODS = ("Robust", "Simple")
EXIT_WORSE = 3
EXIT_NOTHING_COMPARED = 4


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """What the challenger (B) must stay within; None: not checked."""

    max_distance: float | None = None
    """Each gated column's distance at most this (``Robust``: and within the KS critical
    distance, as the drift check's default method)."""
    min_agreement: float | None = None
    max_error_rate: float | None = None
    max_latency_ratio: float | None = None
    """B's p50, p90 and p99 latency each at most this times A's."""
    comparison_method: str = "Robust"

    def document(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


THRESHOLDS = ("max_distance", "min_agreement", "max_error_rate", "max_latency_ratio")


def verdict(document: Mapping[str, Any], thresholds: Thresholds) -> dict[str, Any]:
    """The verdict as compare.json has it, from the comparison's figures (``document``);
    ``column_reasons``: how many of the first reasons are one column's (an image classifier's
    thousand probabilities: the printed lines cap them)."""
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
    """No figure could be computed: no distance, no agreement, no latency ratio, no error rate of
    B (a preprocessor dropping every record, unreadable outputs, no experiment metadata)."""
    return (all(item["distance"] is None for item in document["columns"])
            and document["agreement"]["agreement"] is None
            and all(value is None for value in document["latency_ratio"].values())
            and document["b"]["errors"]["rate"] is None)


def _reasons(document: Mapping[str, Any], thresholds: Thresholds) -> list[tuple[str, str]]:
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
    return f"{value:.4g}"


def percent(fraction: float) -> str:
    """A share as a percentage, to two decimals (compare.json keeps the exact figure)."""
    return f"{fraction * 100:.2f}%"


def ratio(challenger: float | None, champion: float | None) -> float | None:
    """B's figure over A's; None when either is missing or A's is not above 0."""
    if challenger is None or champion is None or champion <= 0:
        return None
    return challenger / champion


def side_document(read: SideRead, role: str, latency: dict[str, Any]) -> dict[str, Any]:
    """One side as compare.json has it (``latency``: :meth:`Side.latency
    <chalicelib.monitor.compare_sides.Side.latency>`)."""
    side = read.side
    return {"source": read.source, "role": role, "records": side.records,
            "rows": int(read.statistics.get("dataset", {}).get("item_count", 0)),
            "shadow_records": side.shadow, "arms": dict(side.arms.most_common()),
            "arm": side.arm, "other_arms": side.other_arms,
            "latency_ms": latency, "errors": side.error_rate(),
            "tally": dataclasses.asdict(read.tally)}


def compared_columns(a: SideRead, b: SideRead, thresholds: Thresholds, preprocessed: bool
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                list[dict[str, Any]], str]:
    """The columns both sides have, compared (outputs first), those of A only and of B only, and
    which are gated: ``output`` (the output's columns are known) or ``all``."""
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
    """One column's comparison; ``beyond`` is None when not gated or no threshold is given."""
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


KIND, VERSION = "sagegate-monitor-compare", 1
PRINTED_COLUMNS = 20
"""Past this many columns (an image classifier's 1000 probabilities), the printed lines and the
report's charts show the columns :func:`ranked` first; compare.json has every one."""
Window = tuple[datetime.datetime, datetime.datetime]


def compare(a: SideRead, b: SideRead, pairing: Pairing, thresholds: Thresholds,
            window: Window | None, preprocessed: bool = False) -> dict[str, Any]:
    columns, only_a, only_b, gated = compared_columns(a, b, thresholds, preprocessed)
    latency = {side.side.name: side.side.latency() for side in (a, b)}
    ratios = {f"p{p}": ratio(latency["b"][f"p{p}"], latency["a"][f"p{p}"])
              for p in PERCENTILES}
    document: dict[str, Any] = {
        "kind": KIND, "version": VERSION,
        "window": {"start": _iso(window[0]), "end": _iso(window[1])} if window else None,
        "a": side_document(a, "champion", latency["a"]),
        "b": side_document(b, "challenger", latency["b"]),
        "columns_gated": gated, "columns": columns, "only_a": only_a, "only_b": only_b,
        "agreement": pairing.document(), "latency_ratio": ratios,
        "thresholds": thresholds.document()}
    document["verdict"] = verdict(document, thresholds)
    return document


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lines(document: Mapping[str, Any]) -> list[str]:
    out = []
    for name in ("a", "b"):
        side = document[name]
        shadow = f", {side['shadow_records']} shadow" if side["shadow_records"] else ""
        arms = ", ".join(f"{arm} {count}" for arm, count in side["arms"].items())
        chosen = f" (arm {side['arm']}; {side['other_arms']} other record(s) left out)" \
            if side.get("arm") is not None else ""
        out.append(f"{name.upper()} ({side['role']}) {side['source']}{chosen}: "
                   f"{side['records']} record(s){shadow}, {side['rows']} row(s)"
                   f"{f'; arms: {arms}' if arms else ''}")
    out.append(_agreement_line(document["agreement"]))
    out.extend(_distance_lines(document["columns"]))
    for key in ("only_a", "only_b"):
        if document[key]:
            names = ", ".join(item["name"] for item in document[key])
            out.append(f"columns of {key[-1].upper()} only: {names}")
    out.append(_latency_line(document))
    out.append("error rate: " + ", ".join(
        f"{name.upper()} {_rate(document[name]['errors'])}" for name in ("a", "b")))
    verdict = document["verdict"]
    if verdict.get("nothing_compared"):
        out.append(f"verdict: nothing compared: {NOTHING_COMPARED} (exit 4)")
        out.extend(f"not checked: {reason}" for reason in verdict["reasons"])
    elif not verdict["checked"]:
        out.append("verdict: no threshold given (exit 0)")
    elif verdict["worse"]:
        out.append(f"verdict: B is worse than A by {len(verdict['reasons'])} reason(s) "
                   f"(exit 3)")
        out.extend(f"worse: {reason}" for reason in _capped_reasons(verdict))
    else:
        out.append(f"verdict: B is within every threshold given "
                   f"({', '.join(verdict['checked'])}; exit 0)")
    return out


def _capped_reasons(verdict: Mapping[str, Any]) -> list[str]:
    """The verdict's reasons, the columns' cut to :data:`PRINTED_COLUMNS` and a line counting the
    rest."""
    reasons: list[str] = verdict["reasons"]
    columns = verdict.get("column_reasons", 0)
    if columns <= PRINTED_COLUMNS:
        return reasons
    rest = reasons[PRINTED_COLUMNS:columns]
    unchecked = sum(reason.endswith("cannot be checked") for reason in rest)
    return [*reasons[:PRINTED_COLUMNS],
            f"... and {len(rest)} more column(s) failing --max-distance ({len(rest) - unchecked} "
            f"above it, {unchecked} not checkable; compare.json's verdict has every reason)",
            *reasons[columns:]]


DISTANCE_HEADER = ("distances, one a column: how far B's distribution of the column is from "
                   "A's, 0 (the same) to 1 (apart), the drift check's L-infinity distance")
NOTHING_COMPARED = ("no column's distance, no pair's agreement, no latency ratio, no error "
                    "rate of B could be computed")


def _distance_lines(columns: list[dict[str, Any]]) -> list[str]:
    if not columns:
        return []
    shown = columns if len(columns) <= PRINTED_COLUMNS else ranked(columns)[:PRINTED_COLUMNS]
    out = [DISTANCE_HEADER]
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
        out.append(f"... and {len(columns) - len(shown)} more column(s): "
                   f"{_remainder(shown[-1]['distance'], ranked(columns)[len(shown):])} (the "
                   f"{len(shown)} above: beyond the threshold first, then the gated ones, "
                   f"then the largest; compare.json has every one)")
    return out


def _remainder(last: float | None, rest: list[dict[str, Any]]) -> str:
    """The columns not printed, counted against the last printed (``last``): as many at its
    distance, smaller, larger (not gated: ranked after) and without a distance."""
    distances = [item["distance"] for item in rest]
    counted = [d for d in distances if d is not None]
    parts = []
    if last is not None:
        for count, label in ((sum(d == last for d in counted), f"more at distance {short(last)}"),
                             (sum(d < last for d in counted), "smaller"),
                             (sum(d > last for d in counted), "larger, not gated")):
            if count:
                parts.append(f"{count} {label}")
    elif counted:
        parts.append(f"{len(counted)} with a distance")
    if len(counted) < len(distances):
        parts.append(f"{len(distances) - len(counted)} without a distance")
    return ", ".join(parts)


def ranked(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Beyond the threshold first, then the gated ones, then by distance, largest first (none
    last)."""
    return sorted(columns, key=lambda c: (not c["beyond"], not c["gated"],
                                          c["distance"] is None, -(c["distance"] or 0.0)))


def _agreement_line(agreement: Mapping[str, Any]) -> str:
    unpaired = f"unpaired: {agreement['unpaired_a']} of A, {agreement['unpaired_b']} of B"
    pairs = f"{agreement['pairs']} pair(s) by {agreement['key']}"
    extra = "".join(f", {agreement[k]} {label}" for k, label in
                    (("with_error", "with a failed call"),
                     ("undefined", "with an undefined answer (NaN)"),
                     ("not_comparable", "without an answer to compare"),
                     ("beyond_cap_b", "B record(s) past the pairing cap, not kept"))
                    if agreement.get(k))
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
