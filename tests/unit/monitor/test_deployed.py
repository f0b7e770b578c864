"""The scheduled monitor's settings and metrics (chalicelib.monitor.deployed), without AWS."""
from __future__ import annotations

import datetime
import io
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from chalicelib.monitor import analysis, deployed
from chalicelib.monitor.records import RecordReader
from tests.unit.monitor import capturegen

WHEN = datetime.datetime(2026, 11, 25, 10, tzinfo=datetime.UTC)


def test_settings_from_the_stages_environment() -> None:
    settings = deployed.MonitorSettings.from_env({
        "MONITOR_BASELINE": "s3://b/baselines/", "CAPTURE_DESTINATION": "s3://b/team/captures"})
    assert settings is not None
    assert settings.baseline == deployed.S3Location("b", "baselines")
    assert settings.captures == deployed.S3Location("b", "team/captures")
    assert settings.output == deployed.S3Location("b", "team/monitoring")  # beside captures
    assert settings.schedule == "cron(5 * * * ? *)"
    assert settings.output.key("iris", "2026/11/25/09") == "team/monitoring/iris/2026/11/25/09"
    assert deployed.default_output(deployed.S3Location("c", "")) == \
        deployed.S3Location("c", "monitoring")
    assert deployed.default_output(deployed.S3Location("c", "captures")).folder("iris") == \
        "monitoring/iris/"


def test_monitoring_is_off_without_a_baseline_and_refused_without_s3_captures() -> None:
    assert deployed.MonitorSettings.from_env({"CAPTURE_DESTINATION": "s3://b/c"}) is None
    for destination in ("captures", "firehose://s", ""):
        with pytest.raises(deployed.MonitorConfigError, match="CAPTURE_DESTINATION"):
            deployed.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                               "CAPTURE_DESTINATION": destination})
    for schedule in ("hourly", "cron(5 * * * ? *", "rate(1 hour)) or (x)"):
        with pytest.raises(deployed.MonitorConfigError, match="MONITOR_SCHEDULE"):
            deployed.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                               "CAPTURE_DESTINATION": "s3://b/c",
                                               "MONITOR_SCHEDULE": schedule})
    custom = deployed.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                                "CAPTURE_DESTINATION": "s3://b/c",
                                                "MONITOR_SCHEDULE": "rate(1 day)"})
    assert custom is not None and custom.schedule == "rate(1 day)"
    with pytest.raises(deployed.MonitorConfigError, match="MONITOR_OUTPUT"):
        deployed.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                           "CAPTURE_DESTINATION": "s3://b/c",
                                           "MONITOR_OUTPUT": "s3:///nobucket"})


def _result(rows: Sequence[Mapping[str, Any]], baseline_rows: Sequence[Mapping[str, Any]]
            ) -> analysis.CheckResult:
    files = analysis.baseline(baseline_rows)
    return analysis.check(rows, json.loads(files[analysis.STATISTICS]),
                          json.loads(files[analysis.CONSTRAINTS]), title="t",
                          with_report=False)


def _rows(name: str, records: int, shift: dict[int, float] | None = None
          ) -> list[dict[str, object]]:
    rng = random.Random(len(name))
    features = capturegen.iris_like(shift)
    lines = [json.dumps(capturegen.record(features(rng, i), 0.5, WHEN)) for i in range(records)]
    return list(RecordReader().rows(name, lines))


def test_emf_names_model_monitors_metrics_under_its_namespace_and_dimensions() -> None:
    result = _result(_rows("window", 800, {1: 2.0}), _rows("base", 1500))
    [line] = deployed.emf_lines(result, "iris", "sagegate-dev-monitor", WHEN)
    document = json.loads(line)
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "aws/sagemaker/Endpoints/data-metrics"
    assert directive["Dimensions"] == [["Endpoint", "MonitoringSchedule"]]
    assert document["_aws"]["Timestamp"] == int(WHEN.timestamp() * 1000)
    assert (document["Endpoint"], document["MonitoringSchedule"]) == \
        ("iris", "sagegate-dev-monitor")
    for metric in directive["Metrics"]:  # every named metric has its value in the line
        assert isinstance(document[metric["Name"]], float)
    assert document["feature_baseline_drift__c2"] > 0.5
    assert document["feature_violations__c2"] == 1.0
    assert document["feature_non_null__c2"] == 1.0
    assert document["constraint_violations"] == float(result.violation_count) == 1.0


def test_emf_lines_hold_at_most_100_metrics_each() -> None:
    wide = [{f"f{i}": float(j % 7 + i) for i in range(60)} for j in range(50)]
    result = _result(wide, wide)
    lines = [json.loads(line) for line in deployed.emf_lines(result, "e", "s", WHEN)]
    counts = [len(line["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for line in lines]
    assert max(counts) <= 100
    assert sum(counts) == len(deployed.metrics(result)) > 100


def test_a_distance_that_is_not_finite_is_not_published() -> None:
    result = _result(_rows("window", 50), _rows("base", 50))
    result.evaluation.features[0].distance = float("nan")
    names = deployed.metrics(result)
    assert f"feature_baseline_drift_{result.evaluation.features[0].name}" not in names
    assert deployed.emf_lines(result, "e", "s", WHEN)  # still valid JSON


def test_an_endpoint_whose_models_bring_two_preprocessors_is_refused(tmp_path: Path) -> None:
    first, second, plain = (tmp_path / name for name in ("a", "b", "c"))
    for folder in (first, second, plain):
        folder.mkdir()
    for folder in (first, second):
        (folder / "preprocessor.py").write_text("def preprocess_handler(r):\n    return {}\n")
    found = deployed.endpoint_preprocessors([("shared", first), ("shared", second),
                                             ("shared", plain), ("other", plain)])
    assert found == {"shared": [first / "preprocessor.py", second / "preprocessor.py"],
                     "other": []}
    settings = deployed.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                                  "CAPTURE_DESTINATION": "s3://b/c"})
    assert settings is not None

    class S3:
        """Just enough S3 for a baseline that exists."""

        class exceptions:
            NoSuchKey = KeyError

        def get_object(self, **_: str) -> dict[str, object]:
            return {"Body": io.BytesIO(b"{}")}

    [run] = deployed.run({"shared": found["shared"]}, settings, "s", now=WHEN, s3=S3(),
                         emit=lambda line: None)
    assert run.status == "failed"
    assert "2 preprocessors (a/preprocessor.py, b/preprocessor.py)" in run.error


def test_sagegate_uses_the_monitor_rooms_record_classes() -> None:
    """One CapturedData/Preprocessor: the CLI's (sagegate.captured_record) is the Lambda's."""
    from chalicelib.monitor import preprocessing
    from sagegate import captured_record

    for name in captured_record.__all__:
        assert getattr(captured_record, name) is getattr(preprocessing, name), name
