"""The scheduled monitor (chalicelib.monitor.deployed), its settings, capture objects and
metrics, without AWS."""
from __future__ import annotations

import datetime
import io
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.core.aws import S3Uri
from chalicelib.monitor import analysis, capture_objects, deployed, deployed_settings, metrics
from chalicelib.monitor.deployed_settings import (
    MonitorConfigError,
    MonitorSettings,
    default_output,
)
from chalicelib.monitor.records import RecordReader
from tests.unit.monitor import capturegen

WHEN = datetime.datetime(2026, 11, 25, 10, tzinfo=datetime.UTC)


def test_settings_from_the_stages_environment() -> None:
    settings = MonitorSettings.from_env({
        "MONITOR_BASELINE": "s3://b/baselines/", "CAPTURE_DESTINATION": "s3://b/team/captures"})
    assert settings is not None
    assert settings.baseline == S3Uri("b", "baselines")
    assert settings.captures == S3Uri("b", "team/captures")
    assert settings.output == S3Uri("b", "team/monitoring")  # beside captures
    assert settings.schedule == "cron(5 * * * ? *)"
    assert settings.output.child("iris", "2026/11/25/09").key \
        == "team/monitoring/iris/2026/11/25/09"
    assert default_output(S3Uri("c", "")) == S3Uri("c", "monitoring")
    assert default_output(S3Uri("c", "captures")).folder("iris") == "monitoring/iris/"


def test_monitoring_is_off_without_a_baseline_and_refused_without_s3_captures() -> None:
    assert MonitorSettings.from_env({"CAPTURE_DESTINATION": "s3://b/c"}) is None
    for destination in ("captures", "firehose://s", ""):
        with pytest.raises(MonitorConfigError, match="CAPTURE_DESTINATION"):
            MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                      "CAPTURE_DESTINATION": destination})
    for schedule in ("hourly", "cron(5 * * * ? *", "rate(1 hour)) or (x)"):
        with pytest.raises(MonitorConfigError, match="MONITOR_SCHEDULE"):
            MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                      "CAPTURE_DESTINATION": "s3://b/c",
                                      "MONITOR_SCHEDULE": schedule})
    custom = MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                       "CAPTURE_DESTINATION": "s3://b/c",
                                       "MONITOR_SCHEDULE": "rate(1 day)"})
    assert custom is not None and custom.schedule == "rate(1 day)"
    with pytest.raises(MonitorConfigError, match="MONITOR_OUTPUT"):
        MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
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
    [line] = metrics.emf_lines(result, "iris", "sagegate-dev-monitor", WHEN)
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
    lines = [json.loads(line) for line in metrics.emf_lines(result, "e", "s", WHEN)]
    counts = [len(line["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for line in lines]
    assert max(counts) <= 100
    assert sum(counts) == len(metrics.metrics(result)) > 100


def test_a_distance_that_is_not_finite_is_not_published() -> None:
    result = _result(_rows("window", 50), _rows("base", 50))
    result.evaluation.features[0].distance = float("nan")
    names = metrics.metrics(result)
    assert f"feature_baseline_drift_{result.evaluation.features[0].name}" not in names
    assert metrics.emf_lines(result, "e", "s", WHEN)  # still valid JSON


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
    settings = deployed_settings.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                                  "CAPTURE_DESTINATION": "s3://b/c"})
    assert settings is not None

    class S3:
        """Just enough S3 for a baseline that exists."""

        class exceptions:
            NoSuchKey = KeyError

        def get_object(self, **_: str) -> dict[str, object]:
            return {"Body": io.BytesIO(b'{"features": [], "dataset": {"item_count": 0}}')}

    [run] = deployed.run({"shared": found["shared"]}, settings, "s", now=WHEN, s3=S3(),
                         emit=lambda line: None)
    assert run.status == "failed"
    assert "2 preprocessors (a/preprocessor.py, b/preprocessor.py)" in run.error


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("NoSuchKey", 404, ("no-baseline", "")),
    ("AccessDenied", 403, ("no-baseline", "access denied")),
    ("InternalError", 500, ("failed", "InternalError"))])
def test_a_baseline_denied_is_reported_as_none_not_as_a_failure(
        code: str, status: int, expected: tuple[str, str]) -> None:
    # S3 answers GetObject of a missing key with 403 when the role may not list its prefix
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k",
                      aws_secret_access_key="s")
    settings = deployed_settings.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                                  "CAPTURE_DESTINATION": "s3://b/c"})
    assert settings is not None
    stub = Stubber(s3)
    stub.add_client_error("get_object", service_error_code=code, http_status_code=status,
                          expected_params={"Bucket": "b", "Key": "base/iris/statistics.json"})
    logged: list[str] = []
    with stub:
        [run] = deployed.run({"iris": []}, settings, "s", now=WHEN, s3=s3, emit=logged.append)
    stub.assert_no_pending_responses()
    assert run.status == expected[0]
    assert expected[1] in run.error
    assert json.loads(logged[-1])["status"] == expected[0]


class FakeS3:
    """A bucket in memory: listings (with a delimiter), GetObject; thread-safe enough for
    the fetchers (dict reads), and it counts the objects fetched."""

    class exceptions:
        NoSuchKey = KeyError
        ClientError = RuntimeError

    class Body:
        def __init__(self, data: bytes) -> None:
            self.stream = io.BytesIO(data)

        def read(self, amt: int | None = None) -> bytes:
            return self.stream.read(amt)

        def iter_lines(self) -> Iterator[bytes]:
            yield from self.stream.read().splitlines()

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.fetched: list[str] = []
        self.put: dict[str, bytes] = {}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self.fetched.append(Key)
        return {"Body": self.Body(self.objects[Key])}

    def put_object(self, Bucket: str, Key: str, Body: bytes,
                   ContentType: str) -> None:
        self.put[Key] = Body

    def get_paginator(self, name: str) -> FakeS3:
        return self

    def paginate(self, Bucket: str, Prefix: str,
                 Delimiter: str | None = None) -> Iterator[dict[str, Any]]:
        keys = sorted(k for k in self.objects if k.startswith(Prefix))
        if Delimiter:
            folders = sorted({Prefix + k[len(Prefix):].split(Delimiter)[0] + Delimiter
                              for k in keys if Delimiter in k[len(Prefix):]})
            yield {"CommonPrefixes": [{"Prefix": f} for f in folders]}
        else:
            yield {"Contents": [{"Key": k, "Size": len(self.objects[k])} for k in keys]}


def _one_record_per_object(tmp_path: Path, records: int) -> dict[str, bytes]:
    """An hour of iris captures laid out as the S3 sink writes them: one record an object."""
    root = capturegen.write_window(tmp_path / "iris", records, per_file=1)
    return {f"c/iris/{p.relative_to(root).as_posix()}": p.read_bytes()
            for p in sorted(root.rglob("*.jsonl"))}


def _baseline_objects(tmp_path: Path) -> dict[str, bytes]:
    folder = capturegen.write_window(tmp_path / "base", 600, seed=7)
    lines = (line for p in sorted(folder.rglob("*.jsonl")) for line in p.read_bytes().splitlines())
    files = analysis.baseline(RecordReader().rows("baseline", lines))
    return {f"base/iris/{name}": text.encode() for name, text in files.items()}


SETTINGS = deployed_settings.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                              "CAPTURE_DESTINATION": "s3://b/c"})


def test_capture_files_fetches_ahead_in_key_order_and_stops_when_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = _one_record_per_object(tmp_path, 200)
    s3 = FakeS3(objects)
    location = S3Uri("b", "c")
    start, end = capturegen.HOUR, capturegen.HOUR + datetime.timedelta(hours=1)
    names = [name for name, _ in capture_objects.capture_files(s3, location, "iris", start, end)]
    assert names == [f"s3://b/{key}" for key in sorted(objects)]
    # told to stop after 30 files: the rest are counted, not read
    calls = iter(range(10_000))
    reading = capture_objects.Reading()
    read = [list(lines) for _, lines in capture_objects.capture_files(
        s3, location, "iris", start, end, stop=lambda: next(calls) >= 30, reading=reading)]
    assert len(read) == 30 == reading.files_read
    assert reading.files_left == 170
    # prefetching is bounded: never more than PREFETCH_BYTES (here three objects) ahead
    biggest = max(map(len, objects.values()))
    monkeypatch.setattr(capture_objects, "PREFETCH_BYTES", 3 * biggest)
    monkeypatch.setattr(capture_objects, "FETCHERS", 2)
    s3.fetched.clear()
    for taken, _ in enumerate(capture_objects.capture_files(s3, location, "iris", start, end), 1):
        assert len(s3.fetched) <= taken + 3
    assert taken == 200 and sorted(s3.fetched) == sorted(objects)
    # an object over a fetcher's share of that is not held ahead: streamed in its turn
    monkeypatch.setattr(capture_objects, "PREFETCH_BYTES", biggest // 2)
    s3.fetched.clear()
    for taken, _ in enumerate(capture_objects.capture_files(s3, location, "iris", start, end), 1):
        assert len(s3.fetched) == taken
    assert s3.fetched == sorted(objects)


def test_a_run_out_of_time_checks_what_it_read_and_says_it_is_partial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert SETTINGS is not None
    s3 = FakeS3({**_one_record_per_object(tmp_path, 300), **_baseline_objects(tmp_path)})
    clock = iter(range(1_000_000))  # each look at the clock is one second later
    monkeypatch.setattr(deployed.time, "monotonic", lambda: float(next(clock)))
    logged: list[str] = []
    # 100 s left: 40 s for the one endpoint's reading after the reserve
    [run] = deployed.run({"iris": []}, SETTINGS, "s", now=WHEN, s3=s3, emit=logged.append,
                         remaining=lambda: deployed.RESERVE_SECONDS + 40)
    assert run.status == "partial"
    assert 0 < run.files_read < 300 and run.files_read + run.files_left == 300
    assert run.records == run.files_read
    assert sorted(s3.put) == [f"monitoring/iris/2026/11/25/09/{name}" for name in (
        "constraint_violations.json", "constraints.json", "report.html", "statistics.json")]
    emf = [json.loads(line) for line in logged if '"_aws"' in line]
    assert emf[0]["partial_window"] == 1.0
    line = json.loads(logged[-1])
    assert line["partial"] is True and line["files_left"] == run.files_left


def test_a_run_with_time_enough_reads_every_object_and_none_left_is_skipped(
        tmp_path: Path) -> None:
    assert SETTINGS is not None
    s3 = FakeS3({**_one_record_per_object(tmp_path, 120), **_baseline_objects(tmp_path)})
    logged: list[str] = []
    [run] = deployed.run({"iris": []}, SETTINGS, "s", now=WHEN, s3=s3, emit=logged.append,
                         remaining=lambda: 900.0)
    assert (run.status, run.records, run.files_left) == ("checked", 120, 0)
    assert json.loads(next(line for line in logged if '"_aws"' in line))["partial_window"] == 0
    [late] = deployed.run({"iris": []}, SETTINGS, "s", now=WHEN, s3=s3, emit=logged.append,
                          remaining=lambda: deployed.RESERVE_SECONDS - 1)
    assert late.status == "skipped"


def test_the_monitor_reads_monitor_captures_when_the_captures_go_elsewhere() -> None:
    settings = MonitorSettings.from_env({
        "MONITOR_BASELINE": "s3://b/base", "CAPTURE_DESTINATION": "firehose://captures",
        "MONITOR_CAPTURES": "s3://delivered/firehose/"})
    assert settings is not None
    assert settings.captures == S3Uri("delivered", "firehose")
    assert settings.output == S3Uri("delivered", "monitoring")
    with pytest.raises(MonitorConfigError, match="MONITOR_CAPTURES"):
        MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                  "CAPTURE_DESTINATION": "firehose://captures"})
    with pytest.raises(MonitorConfigError, match="MONITOR_CAPTURES must be"):
        MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                  "MONITOR_CAPTURES": "/var/captures"})


def test_each_endpoint_reads_for_its_share_of_the_time_left_among_the_endpoints_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]  # the invocation's clock, moved by the checks below alone
    monkeypatch.setattr(deployed.time, "monotonic", lambda: clock[0])
    deadline = deployed.RESERVE_SECONDS + 300.0

    def remaining() -> float:
        return deadline - clock[0]

    used = {"a": 40.0}  # the first endpoint is done early: its unused time is passed on
    left_at: dict[str, float] = {}
    granted: dict[str, float] = {}

    def check(s3: Any, settings: Any, endpoint: str, preprocessors: Any, window: Any,
              schedule_name: str, emit: Any, stop: Any) -> deployed.EndpointRun:
        started = clock[0]
        left_at[endpoint] = remaining()
        while not stop():  # the share: how long this endpoint may read
            clock[0] += 1.0
        granted[endpoint] = clock[0] - started
        clock[0] = started + used.get(endpoint, granted[endpoint])
        return deployed.EndpointRun(endpoint, "checked")

    monkeypatch.setattr(deployed, "_check_endpoint", check)
    assert SETTINGS is not None
    runs = deployed.run({"a": [], "b": [], "c": []}, SETTINGS, "s", now=WHEN, s3=object(),
                        emit=lambda line: None, remaining=remaining)
    assert [run.status for run in runs] == ["checked"] * 3
    # the 2nd endpoint: what is left after the 1st, less the reserve, over the 2 endpoints left
    assert left_at["b"] == deployed.RESERVE_SECONDS + 260.0
    assert granted["b"] == (left_at["b"] - deployed.RESERVE_SECONDS) / 2 == 130.0
    assert granted == {"a": 100.0, "b": 130.0, "c": 130.0}


class FirehoseS3(FakeS3):
    """FakeS3 whose listings give each object's LastModified, as S3's do."""

    def __init__(self, objects: dict[str, bytes],
                 modified: dict[str, datetime.datetime]) -> None:
        super().__init__(objects)
        self.modified = modified

    def paginate(self, Bucket: str, Prefix: str,
                 Delimiter: str | None = None) -> Iterator[dict[str, Any]]:
        for page in super().paginate(Bucket, Prefix, Delimiter):
            for item in page.get("Contents", []):
                item["LastModified"] = self.modified.get(item["Key"], WHEN)
            yield page


def test_a_firehose_streams_objects_are_read_from_the_hours_around_the_window(
        tmp_path: Path) -> None:
    assert SETTINGS is not None
    delivered = capturegen.firehose_window("c", "iris", 3000)
    # and plain objects (the S3 sink's) in the next hour's folder: of records not in the window
    later = _one_record_per_object(tmp_path, 30)
    later = {key.replace("/09/", "/10/"): body for key, body in later.items()}
    broken = "c/iris/AllTraffic/2026/11/25/09/sagegate-dev-captures-1-broken.jsonl.gz"
    s3 = FirehoseS3({**{item.key: item.body for item in delivered}, **later,
                     broken: b"not gzip at all", **_baseline_objects(tmp_path)},
                    {item.key: item.last_modified for item in delivered})
    logged: list[str] = []
    [run] = deployed.run({"iris": []}, SETTINGS, "s", now=WHEN, s3=s3, emit=logged.append)
    assert run.status == "checked"
    statistics = json.loads(s3.put["monitoring/iris/2026/11/25/09/statistics.json"])
    assert statistics["dataset"]["item_count"] == capturegen.in_hour(delivered)
    fetched = set(s3.fetched)
    assert not fetched & set(later)  # a plain object's folder is its records' hour
    start = capturegen.HOUR - datetime.timedelta(minutes=1)
    assert fetched >= {item.key for item in delivered if item.last_modified >= start}
    assert not fetched & {item.key for item in delivered if item.last_modified < start}
    line = json.loads(logged[-1])
    assert (line["bad_objects"], line["bad_lines"]) == (1, 0)
    assert line["first_bad"].startswith(f"s3://b/{broken}: not a readable GZIP file")
