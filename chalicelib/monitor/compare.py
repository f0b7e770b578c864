"""The verdict between two models' traffic (``sagegate monitor compare``): A, the primary
(champion), against B, the challenger or the primary's shadow.

Each side's records are read as the check reads them (:class:`RecordReader`: the window, the
cache hits, a record preprocessor, the same flattened columns), except that B keeps shadow
records (``invocationSource`` ``ShadowExperiment``, which the analysis skips). Beside its rows,
each record kept is seen by a :class:`Side` (the reader's ``observe``), which reads the
experiment's keys of ``eventMetadata``: ``sagegateArm`` (the arm or shadow's name),
``sagegateLatencyMs`` (the endpoint exchange's milliseconds) and ``sagegateError`` (a failed
shadow call's ``{"Code", "Message"}``; such a record has no output, and its rows are held back
from the distributions). A side given an arm (``--arm-a``/``--arm-b``) keeps only that arm's
or shadow's records, by ``sagegateArm``: experiments sharing an endpoint share its folder.
Then:

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

Its parts: :mod:`chalicelib.monitor.compare_answers` (a record's top-1 answer and output
columns), :mod:`chalicelib.monitor.compare_sides` (the two capture sets read and paired),
:mod:`chalicelib.monitor.compare_figures` (the distances, each side's figures) and
:mod:`chalicelib.monitor.compare_verdict` (the thresholds, the reasons, the exit status). This
module assembles compare.json (:func:`compare`) and the lines printed (:func:`lines`); the
command and the report import every name from it.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from chalicelib.monitor.compare_answers import ARGMAX, FIRST_COLUMN, Top1, top1
from chalicelib.monitor.compare_figures import column, compared_columns, ratio, side_document
from chalicelib.monitor.compare_sides import (
    ARM_KEY,
    ERROR_KEY,
    FAILED,
    LATENCY_KEY,
    MIXED,
    PAIR_KEY,
    PERCENTILES,
    PRIMARY_ERRORS_NOTE,
    TOP_CODES,
    TOP_DISAGREEMENTS,
    Entry,
    Pairing,
    Side,
    SideRead,
)
from chalicelib.monitor.compare_verdict import METHODS, Thresholds, percent, short, verdict

__all__ = ["ARGMAX", "ARM_KEY", "ERROR_KEY", "FAILED", "FIRST_COLUMN", "KIND", "LATENCY_KEY",
           "METHODS", "MIXED", "NOTHING_COMPARED", "PAIR_KEY", "PERCENTILES",
           "PRIMARY_ERRORS_NOTE", "PRINTED_COLUMNS", "TOP_CODES", "TOP_DISAGREEMENTS",
           "VERSION", "Entry", "Pairing", "Side", "SideRead", "Thresholds", "Top1", "Window",
           "column", "compare", "lines", "percent", "ranked", "short", "top1"]

KIND, VERSION = "sagegate-monitor-compare", 1
PRINTED_COLUMNS = 20
"""Past this many columns (an image classifier's 1000 probabilities), the printed lines and
the report's charts are of the columns :func:`ranked` first; compare.json has every one."""
Window = tuple[datetime.datetime, datetime.datetime]


def compare(a: SideRead, b: SideRead, pairing: Pairing, thresholds: Thresholds,
            window: Window | None, preprocessed: bool = False) -> dict[str, Any]:
    """The comparison's document (compare.json): each side, the columns' distances, the
    agreement, the latency ratios, the thresholds and the verdict with its reasons."""
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
    """What the command prints: the figures, then the verdict and each reason, one a line."""
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
    """The verdict's reasons, those of columns (the first ``column_reasons``) cut to
    :data:`PRINTED_COLUMNS` and a line counting the rest, as the distances are."""
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
    """The columns' distances, one a line under a header saying what a distance is; past
    :data:`PRINTED_COLUMNS`, the ranked first ones and a line counting the rest."""
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
    """The columns not printed, counted against the last one printed (``last``, its
    distance): as many at its distance, smaller, larger (not gated: ranked after the gated
    ones) and without a distance."""
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
    """The columns in the order to show them when there are many: beyond the threshold first,
    then the gated ones, then by distance, largest first (none last)."""
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
