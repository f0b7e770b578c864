"""The deployed monitor run once as a Lambda handler: app.py imported with a stage that sets
MONITOR_BASELINE, its scheduled function called with a scheduled event, S3 on moto's server."""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest

from chalicelib.monitor import analysis
from chalicelib.monitor.records import RecordReader
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[3]
EVENT = ROOT / "tests" / "events" / "schedule-monitor.json"
BUCKET = "monitor-bucket"
HOUR_FOLDER = "2026/11/25/09"  # the hour before the event's time (10:05Z)


class Context:
    """What Lambda hands a handler (the parts Chalice reads)."""

    function_name = "sagegate-dev-monitor"
    aws_request_id = "monitor-test"

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                        "MONITOR_BASELINE": f"s3://{BUCKET}/baselines/",
                        "CAPTURE_DESTINATION": f"s3://{BUCKET}/captures",
                        "CAPTURE_MODE": "both", "ENDPOINT_NAME": "efficientnet-lite0",
                        "AWS_LAMBDA_FUNCTION_NAME": "sagegate-dev-monitor",
                        }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MONITOR_OUTPUT", raising=False)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    yield s3
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=item["Key"])
    s3.delete_bucket(Bucket=BUCKET)


def monitored_app() -> ModuleType:
    """app.py imported afresh (as Lambda imports it) with the monitor stage's environment."""
    spec = importlib.util.spec_from_file_location("app_monitored", ROOT / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def put_tree(s3: Any, folder: Path, prefix: str) -> None:
    for path in sorted(folder.rglob("*.jsonl")):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(folder).as_posix()}",
                      Body=path.read_bytes())


def put_baseline(s3: Any, tmp_path: Path, endpoint: str) -> None:
    folder = capturegen.write_window(tmp_path / "baseline-window", 2000, seed=7)
    lines = (line for path in sorted(folder.rglob("*.jsonl"))
             for line in path.read_bytes().splitlines())
    files = analysis.baseline(RecordReader().rows("baseline", lines))
    for name, text in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"baselines/{endpoint}/{name}", Body=text.encode())


def test_one_scheduled_run_writes_the_files_and_names_the_drifted_feature(
        aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s3 = aws
    put_baseline(s3, tmp_path, "iris")
    # an hour of iris captures whose third input column (_c3: output first) has shifted
    window = capturegen.write_window(tmp_path / "iris", 1500,
                                     features=capturegen.iris_like(shift={2: 3.0}))
    put_tree(s3, window, "captures/iris")
    # another hour of it, which the run must not read
    later = capturegen.write_window(tmp_path / "later", 300, hour=capturegen.HOUR
                                    + datetime.timedelta(hours=1),
                                    features=capturegen.iris_like(shift={0: 9.0}))
    put_tree(s3, later, "captures/iris")

    module = monitored_app()
    handler = module.monitor
    capsys.readouterr()
    answer = handler(json.loads(EVENT.read_text()), Context())
    printed = capsys.readouterr().out.splitlines()

    assert answer["endpoints"]["iris"] == "checked"
    assert answer["violations"] == 1
    assert answer["endpoints"]["sentiment"] == "no-baseline"
    keys = sorted(item["Key"] for item in s3.list_objects_v2(
        Bucket=BUCKET, Prefix="monitoring/")["Contents"])
    folder = f"monitoring/iris/{HOUR_FOLDER}"
    assert keys == [f"{folder}/{name}" for name in (
        "constraint_violations.json", "constraints.json", "report.html", "statistics.json")]
    violations = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{folder}/"
                                          "constraint_violations.json")["Body"].read())
    assert [(v["feature_name"], v["constraint_check_type"])
            for v in violations["violations"]] == [("_c3", "baseline_drift_check")]
    statistics = json.loads(s3.get_object(Bucket=BUCKET,
                                          Key=f"{folder}/statistics.json")["Body"].read())
    assert statistics["dataset"]["item_count"] == 1500
    report = s3.get_object(Bucket=BUCKET, Key=f"{folder}/report.html")
    assert report["ContentType"].startswith("text/html")

    emf = [json.loads(line) for line in printed if '"_aws"' in line]
    assert len(emf) == 1
    [directive] = emf[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "aws/sagemaker/Endpoints/data-metrics"
    assert directive["Dimensions"] == [["Endpoint", "MonitoringSchedule"]]
    assert emf[0]["Endpoint"] == "iris"
    assert emf[0]["MonitoringSchedule"] == "sagegate-dev-monitor"
    named = {metric["Name"] for metric in directive["Metrics"]}
    assert {f"feature_baseline_drift__c{i}" for i in range(5)} <= named
    drifts = {name: emf[0][name] for name in named if name.startswith("feature_baseline_drift_")}
    assert max(drifts, key=drifts.__getitem__) == "feature_baseline_drift__c3"
    assert drifts["feature_baseline_drift__c3"] > 0.5
    assert all(value < 0.1 for name, value in drifts.items() if not name.endswith("_c3"))
    assert emf[0]["feature_violations__c3"] == 1
    assert emf[0]["constraint_violations"] == 1
    assert emf[0]["_aws"]["Timestamp"] == int(datetime.datetime(
        2026, 11, 25, 10, tzinfo=datetime.UTC).timestamp() * 1000)


def test_an_unreadable_baseline_is_one_endpoints_failure_not_the_runs(
        aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s3 = aws
    put_baseline(s3, tmp_path, "iris")
    s3.put_object(Bucket=BUCKET, Key="baselines/sentiment/statistics.json", Body=b"{not json")
    s3.put_object(Bucket=BUCKET, Key="baselines/sentiment/constraints.json", Body=b"{}")
    put_tree(s3, capturegen.write_window(tmp_path / "iris", 300), "captures/iris")
    answer = monitored_app().monitor(json.loads(EVENT.read_text()), Context())
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()
              if '"message": "monitor"' in line]
    assert answer["endpoints"]["sentiment"] == "failed"
    assert answer["endpoints"]["iris"] == "checked"
    failed = next(line for line in logged if line["endpoint"] == "sentiment")
    assert "not JSON" in failed["error"]


def test_without_monitor_baseline_app_py_declares_no_scheduled_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONITOR_BASELINE", raising=False)
    module = monitored_app()
    assert not hasattr(module, "monitor")
    assert not module.app.event_sources


def test_importing_app_py_loads_neither_the_monitor_nor_datasketches() -> None:
    """The request path's cold start: app.py (even with monitoring on) imports no monitor."""
    code = ("import sys, app; loaded = [m for m in sys.modules if m.startswith("
            "('chalicelib.monitor', 'datasketches'))]; print(loaded); "
            "assert not loaded, loaded")
    env = {"PATH": os.environ.get("PATH", ""), "MONITOR_BASELINE": "s3://b/baselines",
           "CAPTURE_DESTINATION": "s3://b/captures", "ENDPOINT_NAME": "efficientnet-lite0",
           "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "[]"


def test_a_models_preprocessor_runs_unchanged_in_the_scheduled_run(
        aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Developer Guide's CSV preprocessor, as a model folder's preprocessor.py: the
    window's features get its names, and a preprocessor that raises is that endpoint's one
    clear failure naming the file and the record."""
    from chalicelib.monitor import deployed, deployed_settings

    s3 = aws
    model = tmp_path / "models" / "iris"
    model.mkdir(parents=True)
    (model / "preprocessor.py").write_text(
        (ROOT / "tests" / "preprocessors" / "devguide_flatten_csv.py").read_text())
    broken = tmp_path / "models" / "sentiment"
    broken.mkdir()
    (broken / "preprocessor.py").write_text(
        "def preprocess_handler(inference_record):\n    return inference_record.event_data\n")
    endpoints = deployed.endpoint_preprocessors([("iris", model), ("sentiment", broken),
                                                 ("efficientnet-lite0", tmp_path)])
    assert endpoints == {"iris": [model / "preprocessor.py"],
                         "sentiment": [broken / "preprocessor.py"], "efficientnet-lite0": []}
    window = capturegen.write_window(tmp_path / "window", 400)
    base = capturegen.write_window(tmp_path / "base", 1000, seed=9)
    from chalicelib.monitor.captured_data import CapturedData
    from chalicelib.monitor.preprocessing import Preprocessor

    handler = Preprocessor(model / "preprocessor.py")
    lines = [line for path in sorted(base.rglob("*.jsonl"))
             for line in path.read_bytes().splitlines()]
    rows = RecordReader(lambda record, where: handler(CapturedData(record), where)).rows(
        "base", lines)
    for endpoint in ("iris", "sentiment"):
        for name, text in analysis.baseline(rows if endpoint == "iris" else []).items():
            s3.put_object(Bucket=BUCKET, Key=f"baselines/{endpoint}/{name}", Body=text.encode())
        put_tree(s3, window, f"captures/{endpoint}")
    settings = deployed_settings.MonitorSettings.from_env({
        "MONITOR_BASELINE": f"s3://{BUCKET}/baselines",
        "CAPTURE_DESTINATION": f"s3://{BUCKET}/captures"})
    assert settings is not None
    runs = {run.endpoint: run for run in deployed.run(
        endpoints, settings, "schedule", now=capturegen.HOUR + datetime.timedelta(hours=1),
        s3=s3, emit=lambda line: None)}
    assert runs["iris"].status == "checked" and runs["iris"].violations == 0
    statistics = json.loads(s3.get_object(
        Bucket=BUCKET, Key=f"monitoring/iris/{HOUR_FOLDER}/statistics.json")["Body"].read())
    assert statistics["features"][0]["name"] == "0" * 20
    assert runs["sentiment"].status == "failed"
    error = runs["sentiment"].error
    assert "preprocessor.py: preprocess_handler failed on s3://" in error
    assert ".jsonl:1: AttributeError" in error and "\n" not in error
    assert runs["efficientnet-lite0"].status == "no-baseline"


def test_the_lambda_contexts_remaining_time_bounds_the_run(
        aws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # too little time left for any endpoint: each is skipped, and the invocation returns
    # (a timed-out run would write nothing and be retried on the same hour)
    put_baseline(aws, tmp_path, "iris")
    put_tree(aws, capturegen.write_window(tmp_path / "iris", 50), "captures/iris")

    class Late(Context):
        def get_remaining_time_in_millis(self) -> int:
            return 30_000

    answer = monitored_app().monitor(json.loads(EVENT.read_text()), Late())
    assert set(answer["endpoints"].values()) == {"skipped"}
    assert not aws.list_objects_v2(Bucket=BUCKET, Prefix="monitoring/").get("Contents")


@pytest.mark.parametrize(("engine", "fanned_out"), [
    ("stepfunctions", True), (" StepFunctions ", True), ("lambda", False), ("", False)])
def test_monitor_engine_decides_the_functions_app_py_declares(
        monkeypatch: pytest.MonkeyPatch, engine: str, fanned_out: bool) -> None:
    from chalicelib.monitor import deployed_settings

    monkeypatch.setenv("MONITOR_BASELINE", "s3://b/baselines")
    monkeypatch.setenv("MONITOR_ENGINE", engine)
    module = monitored_app()
    assert module.DEPLOYMENT.monitor_fanned_out is fanned_out  # read once, with the rest
    settings = deployed_settings.MonitorSettings.from_env({
        "MONITOR_BASELINE": "s3://b/baselines", "CAPTURE_DESTINATION": "s3://b/captures",
        "MONITOR_ENGINE": engine})
    assert settings is not None and settings.fanned_out is fanned_out
    declared = {function.name for function in module.app.pure_lambda_functions}
    if fanned_out:  # called by the state machine, which the template schedules
        assert declared == {"monitor_plan", "monitor_map", "monitor_reduce"}
        assert not module.app.event_sources and not hasattr(module, "monitor")
    else:
        assert not declared and hasattr(module, "monitor")
        assert [source.name for source in module.app.event_sources] == ["monitor"]


def test_the_fanned_out_handlers_run_a_window_of_firehose_objects(
        aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """app.py's three functions, as Lambda calls them, on moto's S3: the plan's reads, each
    prefix's objects (the ItemReader's shape) in batches to the map, the ResultWriter's files
    (written here as the guide documents them), the reduce writing Model Monitor's files."""
    s3 = aws
    monkeypatch.setenv("MONITOR_ENGINE", "stepfunctions")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sagegate-dev-monitor_reduce")
    put_baseline(s3, tmp_path, "iris")
    delivered = capturegen.firehose_window("captures", "iris", 1200,
                                           features=capturegen.iris_like(shift={2: 3.0}))
    for item in delivered:
        s3.put_object(Bucket=BUCKET, Key=item.key, Body=item.body)
    module = monitored_app()
    event = json.loads(EVENT.read_text())
    plan = module.monitor_plan({"event": event, "execution": "hourly-1"}, Context())
    assert {entry["endpoint"] for entry in plan["endpoints"]} >= {"iris", "sentiment"}
    reads = []
    for read in plan["reads"]:
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=read["prefix"])["Contents"]
        items = [{"Etag": entry["ETag"], "Key": entry["Key"], "Size": entry["Size"],
                  "LastModified": int(entry["LastModified"].timestamp()),
                  "StorageClass": "STANDARD"} for entry in listed]
        outputs = [module.monitor_map({"BatchInput": {"run": plan["run"], "read": read},
                                       "Items": items[start:start + 16]}, Context())
                   for start in range(0, len(items), 16)]
        key = f"{read['results']}map-run-id/SUCCEEDED_0.json"
        s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(
            [{"Status": "SUCCEEDED", "Output": json.dumps(output)} for output in outputs]))
        manifest = f"{read['results']}map-run-id/manifest.json"
        s3.put_object(Bucket=BUCKET, Key=manifest, Body=json.dumps(
            {"ResultFiles": {"FAILED": [], "PENDING": [], "SUCCEEDED": [{"Key": key}]}}))
        reads.append({**read, "manifest": {"Bucket": BUCKET, "Key": manifest}})
    capsys.readouterr()
    outcomes = {entry["endpoint"]: module.monitor_reduce(
        {"run": plan["run"], "endpoint": entry, "reads": reads}, Context())
        for entry in plan["endpoints"]}
    assert outcomes["iris"]["status"] == "checked" and outcomes["iris"]["violations"] == 1
    assert outcomes["sentiment"]["status"] == "no-baseline"
    statistics = json.loads(s3.get_object(
        Bucket=BUCKET, Key=f"monitoring/iris/{HOUR_FOLDER}/statistics.json")["Body"].read())
    assert statistics["dataset"]["item_count"] == capturegen.in_hour(delivered)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines()
           if '"_aws"' in line]
    assert [line["MonitoringSchedule"] for line in emf] == ["sagegate-dev-monitor"]
    assert emf[0]["feature_violations__c3"] == 1
