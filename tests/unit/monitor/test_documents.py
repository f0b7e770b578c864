"""Baseline documents read back: every shape sagegate and Model Monitor write loads; a bad part
is one DocumentError naming the file and its JSON path."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from chalicelib.monitor import analysis, documents
from chalicelib.monitor.json_paths import DocumentError

ROWS = [{"label": str(i % 2), "x": i * 0.5, "n": i, "kind": "ab"[i % 2]} for i in range(200)]


def _sagegates() -> tuple[dict[str, Any], dict[str, Any]]:
    files = analysis.baseline(ROWS)
    return json.loads(files[analysis.STATISTICS]), json.loads(files[analysis.CONSTRAINTS])


def _model_monitors() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shapes Model Monitor's analyzer writes (its schemas' examples): floats for counts,
    its own KLL parameters, version 0.0."""
    common = {"num_present": 2333.0, "num_missing": 0.0}
    statistics = {"version": 0.0, "dataset": {"item_count": 2333}, "features": [
        {"name": "Churn", "inferred_type": "Integral", "numerical_statistics": {
            "common": common, "mean": 0.139306, "sum": 325.0, "std_dev": 0.346265,
            "min": 0.0, "max": 1.0, "completeness": 1.0,  # these two since (a 2026 run)
            "approximate_num_distinct_values": 2, "distribution": {"kll": {
                "buckets": [{"lower_bound": 0.0, "upper_bound": 0.1, "count": 2008.0}],
                "sketch": {"parameters": {"c": 0.64, "k": 2048.0},
                           "data": [[0.0, 0.0, 1.0], [], [0.0]]}}}}},
        {"name": "State", "inferred_type": "String", "string_statistics": {
            "common": common, "distinct_count": 51.0, "distribution": {"categorical": {
                "buckets": [{"value": "WV", "count": 77}, {"value": 12, "count": 3}]}}}}]}
    constraints = {"version": 0.0, "features": [
        {"name": "Churn", "inferred_type": "Integral", "completeness": 1.0,
         "num_constraints": {"is_non_negative": True},
         "monitoring_config_overrides": {"comparison_threshold": 0.2}},
        {"name": "State", "inferred_type": "String", "completeness": None,
         "string_constraints": {"domains": ["WV", "NY"]}, "monitoringConfigOverrides": None}],
        "monitoring_config": {
            "evaluate_constraints": "Enabled", "emit_metrics": "Disabled",
            "datatype_check_threshold": 1.0, "domain_content_threshold": 1.0,
            "distribution_constraints": {"perform_comparison": "enabled",
                                         "comparison_threshold": 0.1,
                                         "comparion_method": "Simple",
                                         "categorical_comparison_threshold": 0.1,
                                         "categorical_drift_method": "ChiSquared"}}}
    return statistics, constraints


@pytest.mark.parametrize("make", [_sagegates, _model_monitors], ids=["sagegate", "analyzer"])
def test_the_documents_sagegate_and_model_monitor_write_load(make: Any) -> None:
    statistics, constraints = make()
    assert documents.load_statistics(json.dumps(statistics), "s.json") == statistics
    assert documents.load_constraints(json.dumps(constraints).encode(), "c.json") == constraints


def test_keys_sagegate_does_not_read_are_left_alone() -> None:
    statistics, constraints = _model_monitors()
    statistics["features"][0]["numerical_statistics"]["mean"] = float("nan")
    statistics["features"][0]["numerical_statistics"]["sum"] = None  # past the doubles
    statistics["features"][0]["numerical_statistics"]["completeness"] = "unread"
    statistics["custom"] = [object.__name__]
    constraints["features"][0]["future_constraint"] = {"any": ["thing"]}
    documents.check_statistics(statistics, "s.json")
    documents.check_constraints(constraints, "c.json")


def _edited(document: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    edited = copy.deepcopy(document)
    target = edited
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return edited


@pytest.mark.parametrize(("path", "value", "message"), [
    (["features", 1, "inferred_type"], "string", 'c.json: features[1].inferred_type: "string" '
     'is not "Integral" or "Fractional" or "String" or "Unknown"'),
    (["features", 0, "completeness"], 1.01, "features[0].completeness: 1.01 is not a fraction"),
    (["features", 0, "num_constraints"], {"is_non_negative": "yes"},
     'features[0].num_constraints.is_non_negative: "yes" is not true or false'),
    (["features", 1, "string_constraints"], {"domains": [["WV"]]},
     "features[1].string_constraints.domains[0]: a list is not a string or a number"),
    (["features", 0, "monitoring_config_overrides"], {"categorical_drift_method": "L2"},
     'features[0].monitoring_config_overrides.categorical_drift_method: "L2" is not '
     '"LInfinity" or "ChiSquared"'),
    (["monitoring_config", "domain_content_threshold"], "x" * 100,
     'monitoring_config.domain_content_threshold: "' + "x" * 40 + '..." is not a number'),
    (["monitoring_config", "distribution_constraints", "comparison_threshold"],
     float("inf"), "comparison_threshold: Infinity is not a finite number"),
])
def test_a_bad_constraint_names_its_path(path: list[Any], value: Any, message: str) -> None:
    constraints = _edited(_model_monitors()[1], path, value)
    with pytest.raises(DocumentError) as raised:
        documents.check_constraints(constraints, "c.json")
    assert message in str(raised.value)
    assert str(raised.value).startswith("c.json: ")


@pytest.mark.parametrize(("path", "value", "message"), [
    (["dataset"], [], "s.json: dataset: a list is not an object"),
    (["features", 0, "numerical_statistics", "common", "num_present"], -1,
     "features[0].numerical_statistics.common.num_present: -1 is not a count"),
    (["features", 0, "numerical_statistics", "distribution", "kll", "sketch", "parameters",
      "c"], 0, "sketch.parameters.c: 0 is not a positive number"),
    (["features", 0, "numerical_statistics", "distribution", "kll", "buckets", 0],
     {"count": "1"}, 'kll.buckets[0].count: "1" is not a number'),
    (["features", 1, "string_statistics", "distribution", "categorical", "buckets", 1],
     {"value": "x"}, 'categorical.buckets[1]: has no "count"'),
    (["features", 1, "sagegate_type_counts"], {"Integral": 1.5e400},
     "sagegate_type_counts.Integral: Infinity is not a finite number"),
    (["features", 1, "string_statistics", "distribution"], None,
     "features[1].string_statistics.distribution: null is not an object"),
])
def test_a_bad_statistic_names_its_path(path: list[Any], value: Any, message: str) -> None:
    statistics = _edited(_model_monitors()[0], path, value)
    with pytest.raises(DocumentError) as raised:
        documents.check_statistics(statistics, "s.json")
    assert message in str(raised.value)


@pytest.mark.parametrize(("data", "message"), [
    (b"\x80\x81\x82", "s.json: not UTF-8 text"), ("[" * 50_000, "s.json: nested too deep"),
    ('{"features": []', "s.json: not JSON (Expecting"), ("1" * 5000, "s.json: not JSON"),
    ('{"features": []} x', "s.json: not JSON (Extra data")])
def test_a_file_that_is_not_json_is_one_error(data: str | bytes, message: str) -> None:
    with pytest.raises(DocumentError) as raised:
        documents.load_statistics(data, "s.json")
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)
