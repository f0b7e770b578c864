"""``constraints.json``: suggested from a baseline's statistics, and read back as edited.

The suggestion is the analyzer's: each feature's ``inferred_type`` and observed ``completeness``;
``is_non_negative`` when its minimum is not negative; ``domains`` for a String feature of few
distinct values; a ``monitoring_config`` with the defaults below. A user may tighten any of it,
and give a feature ``monitoringConfigOverrides`` that replace the global values for it alone.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

DATATYPE_CHECK_THRESHOLD = 1.0
"""The fraction of a window's values that must have the baseline's type: 1.0, as the analyzer's
code defaults it and its descriptions read ("Expected match: 100.0%"). The guide's table prints
0.1, which as a required fraction would let 90 % of the values change type unnoticed."""
DOMAIN_CONTENT_THRESHOLD = 1.0
"""The fraction of a String feature's values that must be in its baseline domain; 1.0 for the
same reason."""
COMPARISON_THRESHOLD = 0.1
CATEGORICAL_COMPARISON_THRESHOLD = 0.1
COMPARISON_METHOD = "Robust"
CATEGORICAL_DRIFT_METHOD = "LInfinity"
DOMAIN_MAX_VALUES = 20
"""A String feature gets a ``domains`` constraint when it has at most this many values."""

DEFAULT_MONITORING_CONFIG: dict[str, Any] = {
    "evaluate_constraints": "Enabled",
    "emit_metrics": "Enabled",
    "datatype_check_threshold": DATATYPE_CHECK_THRESHOLD,
    "domain_content_threshold": DOMAIN_CONTENT_THRESHOLD,
    "distribution_constraints": {
        "perform_comparison": "Enabled",
        "comparison_threshold": COMPARISON_THRESHOLD,
        "comparison_method": COMPARISON_METHOD,
        "categorical_comparison_threshold": CATEGORICAL_COMPARISON_THRESHOLD,
        "categorical_drift_method": CATEGORICAL_DRIFT_METHOD,
    },
}


def suggest(statistics: Mapping[str, Any]) -> dict[str, Any]:
    """The ``constraints.json`` a baseline's ``statistics.json`` suggests."""
    items = int(statistics["dataset"]["item_count"])
    return {"version": 0,
            "features": [_feature(f, items) for f in statistics["features"]],
            "monitoring_config": copy.deepcopy(DEFAULT_MONITORING_CONFIG)}


def _feature(feature: Mapping[str, Any], items: int) -> dict[str, Any]:
    kind = feature["inferred_type"]
    stats = feature.get("numerical_statistics") or feature.get("string_statistics") or {}
    present = int(stats.get("common", {}).get("num_present", 0))
    entry: dict[str, Any] = {"name": feature["name"], "inferred_type": kind,
                             "completeness": present / items if items else 0.0}
    if "numerical_statistics" in feature:
        entry["num_constraints"] = {"is_non_negative": float(stats.get("min", 0.0)) >= 0.0}
    elif kind == "String":
        values = stats.get("distribution", {}).get("categorical", {}).get("buckets", [])
        if 0 < int(stats.get("distinct_count", 0)) <= DOMAIN_MAX_VALUES \
                and len(values) <= DOMAIN_MAX_VALUES:
            entry["string_constraints"] = {"domains": [str(b["value"]) for b in values]}
    return entry


class FeatureConfig:
    """The monitoring settings in force for one feature: ``monitoring_config`` (missing keys take
    the defaults), then its ``monitoringConfigOverrides``."""

    def __init__(self, global_config: Mapping[str, Any] | None,
                 overrides: Mapping[str, Any] | None = None) -> None:
        merged = copy.deepcopy(DEFAULT_MONITORING_CONFIG)
        for source in (global_config or {}, overrides or {}):
            for key, value in source.items():
                if key == "distribution_constraints" and isinstance(value, Mapping):
                    merged[key].update(value)
                elif key in merged["distribution_constraints"]:
                    merged["distribution_constraints"][key] = value
                else:
                    merged[key] = value
        self.values = merged
        self.distribution: dict[str, Any] = merged["distribution_constraints"]

    @property
    def evaluate(self) -> bool:
        return _enabled(self.values.get("evaluate_constraints"))

    @property
    def compare(self) -> bool:
        """Whether distributions are compared (``baseline_drift_check``)."""
        return _enabled(self.distribution.get("perform_comparison"))

    def number(self, key: str) -> float:
        """A threshold, from ``monitoring_config`` or its ``distribution_constraints``."""
        value: Any = self.distribution.get(key, self.values.get(key))
        return float(value)

    def text(self, key: str) -> str:
        value = self.distribution.get(key)
        if value is None and key == "comparison_method":  # the guide's old spelling
            value = self.distribution.get("comparion_method")
        return str(value or "")


def _enabled(value: Any) -> bool:
    return str(value).strip().lower() != "disabled"
