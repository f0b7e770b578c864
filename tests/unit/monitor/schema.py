"""The documented schemas of Model Monitor's files (the SageMaker Developer Guide's
"Schema for Statistics", "Schema for Constraints", "Schema for Violations"), as assertions."""
from __future__ import annotations

from typing import Any

TYPES = {"Integral", "Fractional", "String", "Unknown"}
CHECKS = {"data_type_check", "completeness_check", "baseline_drift_check",
          "missing_column_check", "extra_column_check", "categorical_values_check"}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_statistics(document: dict[str, Any]) -> None:
    assert document["version"] == 0
    assert _number(document["dataset"]["item_count"])
    assert document["features"], "no features"
    for feature in document["features"]:
        assert isinstance(feature["name"], str)
        assert feature["inferred_type"] in TYPES
        if feature["inferred_type"] in ("Integral", "Fractional"):
            _check_numerical(feature["numerical_statistics"])
        else:
            _check_string(feature["string_statistics"])


def _check_common(common: dict[str, Any]) -> None:
    assert _number(common["num_present"]) and _number(common["num_missing"])


def _check_numerical(stats: dict[str, Any]) -> None:
    _check_common(stats["common"])
    for key in ("mean", "sum", "std_dev", "min", "max"):
        assert _number(stats[key]), key
    kll = stats["distribution"]["kll"]
    assert len(kll["buckets"]) == 10
    for bucket in kll["buckets"]:
        assert set(bucket) == {"lower_bound", "upper_bound", "count"}
        assert all(_number(v) for v in bucket.values())
    assert set(kll["sketch"]["parameters"]) == {"c", "k"}
    assert all(_number(v) for v in kll["sketch"]["parameters"].values())
    assert all(isinstance(level, list) and all(_number(v) for v in level)
               for level in kll["sketch"]["data"])


def _check_string(stats: dict[str, Any]) -> None:
    _check_common(stats["common"])
    assert _number(stats["distinct_count"])
    for bucket in stats.get("distribution", {}).get("categorical", {}).get("buckets", []):
        assert isinstance(bucket["value"], str) and _number(bucket["count"])


def check_constraints(document: dict[str, Any]) -> None:
    assert document["version"] == 0
    for feature in document["features"]:
        assert isinstance(feature["name"], str)
        assert feature["inferred_type"] in TYPES
        assert 0.0 <= feature["completeness"] <= 1.0
        if "num_constraints" in feature:
            assert isinstance(feature["num_constraints"]["is_non_negative"], bool)
        if "string_constraints" in feature:
            assert all(isinstance(v, str) for v in feature["string_constraints"]["domains"])
    config = document["monitoring_config"]
    assert config["evaluate_constraints"] in ("Enabled", "Disabled")
    assert config["emit_metrics"] in ("Enabled", "Disabled")
    assert _number(config["datatype_check_threshold"])
    assert _number(config["domain_content_threshold"])
    distribution = config["distribution_constraints"]
    assert distribution["perform_comparison"] in ("Enabled", "Disabled")
    assert distribution["comparison_method"] in ("Simple", "Robust")
    assert distribution["categorical_drift_method"] in ("LInfinity", "ChiSquared")
    assert _number(distribution["comparison_threshold"])
    assert _number(distribution["categorical_comparison_threshold"])


def check_violations(document: dict[str, Any]) -> None:
    assert set(document) == {"violations"}
    for violation in document["violations"]:
        assert set(violation) == {"feature_name", "constraint_check_type", "description"}
        assert violation["constraint_check_type"] in CHECKS
        assert isinstance(violation["description"], str) and violation["description"]
