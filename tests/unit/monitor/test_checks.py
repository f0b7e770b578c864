"""Every check, the constraints a baseline suggests, and a hand-edited constraints file."""
from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from chalicelib.monitor import analysis, checks, constraints, sketches


def _baseline(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    files = analysis.baseline(rows)
    return json.loads(files[analysis.STATISTICS]), json.loads(files[analysis.CONSTRAINTS])


def _rows(n: int, seed: int, shift: float = 0.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"a": f"{rng.gauss(5, 1):.3f}", "b": f"{rng.gauss(shift, 1):.3f}",
             "n": str(rng.randint(0, 9)), "c": rng.choice(["red", "green", "blue"])}
            for _ in range(n)]


@pytest.fixture(scope="module")
def base() -> tuple[dict[str, Any], dict[str, Any]]:
    return _baseline(_rows(4000, seed=1))


def _types(result: analysis.CheckResult) -> list[tuple[str, str]]:
    return [(v["feature_name"], v["constraint_check_type"])
            for v in result.evaluation.violations["violations"]]


def test_suggests_the_analyzers_constraints(base: tuple[dict, dict]) -> None:
    suggested = {f["name"]: f for f in base[1]["features"]}
    assert suggested["a"] == {"name": "a", "inferred_type": "Fractional", "completeness": 1.0,
                              "num_constraints": {"is_non_negative": True}}
    assert suggested["b"]["num_constraints"] == {"is_non_negative": False}
    assert suggested["n"]["inferred_type"] == "Integral"
    assert sorted(suggested["c"]["string_constraints"]["domains"]) == ["blue", "green", "red"]
    assert base[1]["monitoring_config"] == constraints.DEFAULT_MONITORING_CONFIG


def test_a_window_like_the_baseline_has_no_violation(base: tuple[dict, dict]) -> None:
    result = analysis.check(_rows(1500, seed=2), *base, title="t")
    assert _types(result) == []
    assert all(f.distance is not None and f.distance < 0.06 for f in result.evaluation.features)


def test_a_shifted_feature_drifts_and_no_other(base: tuple[dict, dict]) -> None:
    result = analysis.check(_rows(1500, seed=2, shift=0.6), *base, title="t")
    assert _types(result) == [("b", "baseline_drift_check")]
    description = result.evaluation.violations["violations"][0]["description"]
    assert description.startswith("Baseline drift distance: 0.2")
    assert description.endswith("exceeds threshold: 0.1")


def test_a_feature_missing_from_a_third_of_records_is_incomplete(base: tuple[dict, dict]
                                                                 ) -> None:
    rows = _rows(1500, seed=2)
    for row in rows[::3]:
        row["n"] = ""
    result = analysis.check(rows, *base, title="t")
    assert _types(result) == [("n", "completeness_check")]
    assert result.evaluation.violations["violations"][0]["description"] == (
        "Data completeness requirement is not met. Expected: 100.0%. Observed: Only "
        "66.66666666666666%.")


def test_completeness_is_worded_as_a_real_model_monitor_run_words_it() -> None:
    """A second real run (CONTRACTS.md section 8): one value missing of 32."""
    baseline = _baseline([{"x": str(n)} for n in range(32)])
    rows: list[dict[str, Any]] = [{"x": str(n)} for n in range(31)] + [{"x": ""}]
    result = analysis.check(rows, *baseline, title="t")
    assert result.evaluation.violations["violations"] == [{
        "feature_name": "x", "constraint_check_type": "completeness_check",
        "description": "Data completeness requirement is not met. Expected: 100.0%. "
                       "Observed: Only 96.875%."}]


def test_missing_and_extra_columns_are_worded_with_both_counts(base: tuple[dict, dict]) -> None:
    rows = _rows(300, seed=4)
    for row in rows:
        del row["a"], row["b"]
        row["extra"] = "1"
    result = analysis.check(rows, *base, title="t")  # the window: n, c, extra; baseline: 4
    described = {(v["feature_name"], v["constraint_check_type"]): v["description"]
                 for v in result.evaluation.violations["violations"]}
    counts = "Number of columns in current dataset: 3, Number of columns in baseline " \
             "constraints: 4"
    assert described == {
        ("a", "missing_column_check"): f"There are missing columns in current dataset. {counts}",
        ("b", "missing_column_check"): f"There are missing columns in current dataset. {counts}",
        ("extra", "extra_column_check"): f"There are extra columns in current dataset. {counts}"}


def test_data_type_missing_extra_and_categorical_checks(base: tuple[dict, dict]) -> None:
    rows = _rows(600, seed=3)
    for index, row in enumerate(rows):
        del row["a"]
        row["extra"] = "1"
        if index % 10 == 0:
            row["n"] = "4.5"
            row["c"] = "purple"
    result = analysis.check(rows, *base, title="t")
    assert sorted(_types(result)) == [
        ("a", "missing_column_check"), ("c", "categorical_values_check"),
        ("extra", "extra_column_check"), ("n", "data_type_check")]
    described = {v["constraint_check_type"]: v["description"]
                 for v in result.evaluation.violations["violations"]}
    assert described["data_type_check"] == (
        "Data type match requirement is not met. Expected data type: Integral, Expected "
        "match: 100.0%. Observed: Only 90.0% of data is Integral.")
    assert "Only 90.0% of data is within the baseline domain" in \
        described["categorical_values_check"]


def test_a_hand_edited_threshold_and_a_feature_override_are_honoured(
        base: tuple[dict, dict]) -> None:
    window = _rows(1500, seed=2, shift=0.6)
    loose = copy.deepcopy(base[1])
    loose["monitoring_config"]["distribution_constraints"]["comparison_threshold"] = 0.5
    assert _types(analysis.check(window, base[0], loose, title="t")) == []
    overridden = copy.deepcopy(base[1])
    feature = next(f for f in overridden["features"] if f["name"] == "b")
    feature["monitoringConfigOverrides"] = {"comparison_threshold": 0.9}
    assert _types(analysis.check(window, base[0], overridden, title="t")) == []
    tight = copy.deepcopy(base[1])
    tight["monitoring_config"]["distribution_constraints"]["comparison_threshold"] = 0.001
    tight["monitoring_config"]["distribution_constraints"]["comparison_method"] = "Simple"
    drifted = {name for name, kind in _types(analysis.check(_rows(1500, seed=2), base[0],
                                                            tight, title="t"))}
    assert {"a", "b", "n"} <= drifted


def test_robust_does_not_call_a_small_windows_noise_drift() -> None:
    statistics, suggested = _baseline(_rows(5000, seed=1))
    small = _rows(12, seed=9)
    result = analysis.check(small, statistics, suggested, title="t")
    distances = {f.name: f.distance for f in result.evaluation.features}
    assert max(d for d in distances.values() if d is not None) > 0.1  # noise above 0.1 ...
    assert [k for _, k in _types(result)] == []  # ... yet within the KS test's bound
    simple = copy.deepcopy(suggested)
    simple["monitoring_config"]["distribution_constraints"]["comparison_method"] = "Simple"
    assert "baseline_drift_check" in [k for _, k in _types(
        analysis.check(small, statistics, simple, title="t"))]


def test_categorical_drift_by_linfinity_and_by_chi_squared(base: tuple[dict, dict]) -> None:
    rows = _rows(1500, seed=2)
    for row in rows[: len(rows) // 2]:
        row["c"] = "red"
    assert ("c", "baseline_drift_check") in _types(analysis.check(rows, *base, title="t"))
    chi = copy.deepcopy(base[1])
    chi["monitoring_config"]["distribution_constraints"]["categorical_drift_method"] = \
        "ChiSquared"
    result = analysis.check(rows, base[0], chi, title="t")
    assert ("c", "baseline_drift_check") in _types(result)
    same = analysis.check(_rows(1500, seed=2), base[0], chi, title="t")
    assert ("c", "baseline_drift_check") not in _types(same)


@pytest.mark.parametrize("key", ["monitoringConfigOverrides", "monitoring_config_overrides"])
def test_evaluate_constraints_disabled_skips_the_feature(base: tuple[dict, dict],
                                                         key: str) -> None:
    # the guide's spelling, and the one the SDK's Constraints.set_monitoring writes
    rows = _rows(300, seed=2, shift=3.0)
    assert ("b", "baseline_drift_check") in _types(analysis.check(rows, *base, title="t"))
    off = copy.deepcopy(base[1])
    next(f for f in off["features"] if f["name"] == "b")[key] = {
        "evaluate_constraints": "Disabled"}
    assert ("b", "baseline_drift_check") not in _types(
        analysis.check(rows, base[0], off, title="t"))


def test_ks_critical_distance_and_linf_distance() -> None:
    assert sketches.ks_critical(100, 100) == pytest.approx(1.3581 * (2 / 100) ** 0.5, rel=1e-3)
    same = sketches.WeightedCdf([[1.0, 2.0, 3.0, 4.0]])
    assert sketches.linf_distance(same, same) == 0.0
    apart = sketches.WeightedCdf([[10.0, 11.0]])
    assert sketches.linf_distance(same, apart) == 1.0
    # every point of both sides: at the baseline's points alone the first is 2/3 apart, at
    # the window's alone the second is
    low, high = sketches.WeightedCdf([[1.0, 2.0, 3.0]]), sketches.WeightedCdf([[5.0, 6.0, 7.0]])
    assert sketches.linf_distance(high, low) == 1.0
    assert sketches.linf_distance(low, high) == 1.0
    interleaved = sketches.WeightedCdf([[1.5, 2.5, 10.0]])  # the gap is at 2.5 and at 3.0
    assert sketches.linf_distance(low, interleaved) == pytest.approx(1 / 3)
    weighted = sketches.WeightedCdf([[1.0], [2.0]])  # 1 once, 2 twice
    assert weighted(__import__("numpy").array([1.0, 2.0])).tolist() == \
        pytest.approx([1 / 3, 1.0])


def test_violations_come_first_in_the_results(base: tuple[dict, dict]) -> None:
    result = analysis.check(_rows(1500, seed=2, shift=0.6), *base, title="t")
    assert result.evaluation.features[0].name == "b"
    assert isinstance(result.evaluation, checks.Evaluation)


def test_a_baseline_in_the_analyzers_own_sketch_layout_is_compared(
        base: tuple[dict, dict]) -> None:
    # Deequ's KLL as Model Monitor writes it: c 0.64, k 2048.0, levels of weight 2**h
    statistics = copy.deepcopy(base[0])
    feature = next(f for f in statistics["features"] if f["name"] == "b")
    rng = random.Random(11)
    level0 = sorted(rng.gauss(0, 1) for _ in range(1000))
    level1 = sorted(rng.gauss(0, 1) for _ in range(1500))  # each stands for two values
    feature["numerical_statistics"]["distribution"]["kll"]["sketch"] = {
        "parameters": {"c": 0.64, "k": 2048.0}, "data": [level0, level1]}
    assert _types(analysis.check(_rows(1500, seed=2), statistics, base[1], title="t")) == []
    assert _types(analysis.check(_rows(1500, seed=2, shift=0.6), statistics, base[1],
                                 title="t")) == [("b", "baseline_drift_check")]


@pytest.mark.parametrize(("value", "text"), [
    (99.64592817400101, "99.64592817400101"), (100.0, "100.0"), (0.0, "0.0"),
    (0.001, "0.001"), (1e-4, "1.0E-4"), (12345678.9, "1.23456789E7"), (1e7, "1.0E7"),
    (-2.5e20, "-2.5E20"), (9999999.5, "9999999.5"), (float("nan"), "NaN"),
    (float("inf"), "Infinity")])
def test_doubles_are_printed_as_java_prints_them(value: float, text: str) -> None:
    assert checks.java_double(value) == text


def test_a_feature_whose_type_changed_is_not_also_reported_as_drift(
        base: tuple[dict, dict]) -> None:
    rows = _rows(600, seed=4)
    for row in rows:
        row["n"] = f"{float(row['n']) * 50 + 0.5}"  # Integral -> Fractional, far away
    result = analysis.check(rows, *base, title="t")
    assert ("n", "data_type_check") in _types(result)
    assert ("n", "baseline_drift_check") not in _types(result)
    feature = next(f for f in result.evaluation.features if f.name == "n")
    assert feature.distance is not None and feature.distance > 0.5


def test_a_simple_drift_exactly_at_the_threshold_is_not_flagged() -> None:
    # four values each side, so each sketch holds them all at weight 1 and every step of the
    # two CDFs is exact: moving the window's largest value from 4 to 5 parts the CDFs by
    # exactly 1/4 at x = 4 (the threshold below), and to 5 twice by 1/2
    statistics, suggested = _baseline([{"x": str(v)} for v in (1, 2, 3, 4)])
    simple = copy.deepcopy(suggested)
    config = simple["monitoring_config"]["distribution_constraints"]
    config["comparison_method"], config["comparison_threshold"] = "Simple", 0.25
    at = analysis.check([{"x": str(v)} for v in (1, 2, 3, 5)], statistics, simple, title="t")
    [feature] = at.evaluation.features
    assert (feature.distance, feature.threshold, feature.method) == (0.25, 0.25, "Simple")
    assert _types(at) == []  # "above the threshold", as the analyzer compares: not at it
    over = analysis.check([{"x": str(v)} for v in (1, 2, 5, 5)], statistics, simple, title="t")
    assert over.evaluation.features[0].distance == 0.5
    assert _types(over) == [("x", "baseline_drift_check")]


def _even_rows(count: int) -> list[dict[str, Any]]:
    return [{"n": str(i % 10), "c": ("red", "green", "blue")[i % 3]} for i in range(count)]


@pytest.mark.parametrize(("feature", "value", "check"), [
    ("n", "4.5", checks.DATA_TYPE), ("n", "", checks.COMPLETENESS),
    ("c", "purple", checks.CATEGORICAL)])
def test_one_value_in_two_hundred_is_flagged_against_a_threshold_of_one(
        feature: str, value: str, check: str) -> None:
    # 199 of 200 is a fraction of 0.995 against the suggested 1.0: the tolerance only absorbs
    # a double's rounding, never half a percent
    statistics, suggested = _baseline(_even_rows(300))
    rows = _even_rows(200)
    assert _types(analysis.check(rows, statistics, suggested, title="t")) == []
    rows[0][feature] = value
    assert _types(analysis.check(rows, statistics, suggested, title="t")) == [(feature, check)]
