"""sagegate's check against a real Model Monitor run: the introduction notebook's hour.

The notebook (aws/amazon-sagemaker-examples, sagemaker_model_monitor/introduction) baselined
its training CSV (with a header) and checked an hour of captured headerless CSV traffic; the
real execution ended "CompletedWithViolations: Job completed successfully with 60 violations",
all data_type_check, named by the baseline's features. tests/unit/monitor/notebook.py rebuilds
that hour as the notebook sent it.
"""
from __future__ import annotations

import csv
import json
from typing import Any

import pytest

from chalicelib.monitor import analysis
from chalicelib.monitor.records import RecordReader
from sagegate.monitor.datasets import dataset_rows
from tests.unit.monitor import notebook


@pytest.fixture(scope="module")
def baseline() -> tuple[dict[str, Any], dict[str, Any]]:
    files = analysis.baseline(dataset_rows(str(notebook.TRAINING), header=True))
    return json.loads(files[analysis.STATISTICS]), json.loads(files[analysis.CONSTRAINTS])


def _check(baseline: tuple[dict[str, Any], dict[str, Any]],
           names: list[str] | None) -> analysis.CheckResult:
    statistics, constraints = baseline
    reader = RecordReader(csv_names=names)
    return analysis.check(reader.rows("hour.jsonl", notebook.capture_lines()), statistics,
                          constraints, title="DEMO")


def _expected_features() -> set[str]:
    """Churn (the label column, which sees the model's probabilities), and every baseline
    Integral input column whose value in the traffic's fractional first row is fractional."""
    with notebook.TRAINING.open() as handle:
        header = next(csv.reader(handle))
    first = notebook.TEST_INPUTS.read_text().splitlines()[0].split(",")
    integral_in_training = set()
    with notebook.TRAINING.open() as handle:
        rows = list(csv.DictReader(handle))
    for name in header:
        if all("." not in row[name] for row in rows):
            integral_in_training.add(name)
    fractional_now = {header[i + 1] for i, value in enumerate(first) if "." in value}
    return {"Churn"} | (fractional_now & integral_in_training)


def test_the_hour_gives_the_real_runs_60_data_type_violations(baseline: Any) -> None:
    statistics, _ = baseline
    result = _check(baseline, [f["name"] for f in statistics["features"]])
    real = notebook.real_run()["monitoring_run"]
    violations = result.evaluation.violations["violations"]
    assert result.statistics["dataset"]["item_count"] == 1977
    assert len(violations) == real["violation_count"] == 60
    assert {v["constraint_check_type"] for v in violations} == {"data_type_check"}
    assert {v["feature_name"] for v in violations} == _expected_features()
    by_name = {v["feature_name"]: v for v in violations}
    for shown in real["violations_shown"]:  # the ten rows the notebook prints, word for word
        assert by_name[shown["feature_name"]] == shown


def test_positional_names_key_the_windows_statistics(baseline: Any) -> None:
    statistics, _ = baseline
    names = [f["name"] for f in statistics["features"]]
    result = _check(baseline, names)
    assert [f["name"] for f in result.statistics["features"]] == names


def test_without_the_baselines_names_the_columns_do_not_line_up(baseline: Any) -> None:
    # what sagegate did before: _c0.. against the header's names, 140 column violations
    result = _check(baseline, None)
    kinds = [v["constraint_check_type"] for v in result.evaluation.violations["violations"]]
    assert kinds.count("missing_column_check") == kinds.count("extra_column_check") == 70
