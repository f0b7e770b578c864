"""The figures of ``sagegate monitor compare`` that its document holds beside the agreement
(:meth:`chalicelib.monitor.compare_sides.Pairing.document`): per column both sides have, the
distance between the sides' distributions (the drift check's own) and, for numbers, the KS
critical distance; each side's records, rows, latency and errors; B's latency over A's.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from chalicelib.monitor import checks, sketches
from chalicelib.monitor.compare_sides import SideRead
from chalicelib.monitor.compare_verdict import Thresholds


def ratio(challenger: float | None, champion: float | None) -> float | None:
    """B's figure over A's; None when either is missing or A's is not above 0."""
    if challenger is None or champion is None or champion <= 0:
        return None
    return challenger / champion


def side_document(read: SideRead, role: str, latency: dict[str, Any]) -> dict[str, Any]:
    """One side as compare.json has it: its source and role, records and rows, arms, latency
    (``latency``: :meth:`Side.latency <chalicelib.monitor.compare_sides.Side.latency>`), errors
    and tally."""
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
    """The columns both sides have, each compared (:func:`column`; the outputs first), those of
    A only and of B only, and which are gated: ``output`` (the output's columns are known), or
    ``all``."""
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
