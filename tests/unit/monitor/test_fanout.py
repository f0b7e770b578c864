"""The fanned-out monitor's three functions (chalicelib.monitor.fanout) on moto's S3, fed the
event shapes the Step Functions developer guide documents, against a Firehose stream's objects
(GZIP, many records an object, the dynamic-partitioning layout, records near the hours' edges):
their files are the ones ``sagegate monitor check`` writes on the same records.

What Step Functions itself does between them is played here as the guide describes it (moto's
Step Functions has no ItemBatcher, and its ResultWriter writes an empty manifest):

* the ItemReader's ``s3:listObjectsV2`` gives each object as ``{"Etag", "Key",
  "LastModified" (epoch seconds), "Size", "StorageClass"}``;
* the ItemBatcher gives each child ``{"BatchInput": ..., "Items": [...]}``, the items in the
  listing's order, :data:`~sagegate.deploy.monitor_definition.MAX_ITEMS_PER_BATCH` at most;
* the ResultWriter writes ``<prefix>/<map run id>/manifest.json`` (``DestinationBucket``,
  ``MapRunArn``, ``ResultFiles`` with ``FAILED``, ``PENDING``, ``SUCCEEDED`` lists of
  ``{"Key", "Size"}``) and ``SUCCEEDED_0.json``, a JSON array of the child executions
  (``ExecutionArn``, ``Input`` and ``Output`` as JSON strings, ``Status`` ...), in no
  particular order (here: reversed), and the Map state's output is ``{"MapRunArn",
  "ResultWriterDetails": {"Bucket", "Key"}}``, of which the definition keeps the details.
"""
from __future__ import annotations

import contextlib
import datetime
import gzip
import json
import multiprocessing
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from chalicelib.monitor import analysis, fanout, user_workers
from chalicelib.monitor.deployed_settings import MonitorSettings
from chalicelib.monitor.records import RecordReader
from emulator.process import free_port
from sagegate.deploy import monitor_definition
from sagegate.deploy.stages import load_stage
from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen
from tests.unit.monitor.test_partial import assert_same_statistics

BUCKET = "sagegate-dev-data"
HOUR = capturegen.HOUR  # 2026-11-25T09
EVENT = {"event": {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events",
                   "time": "2026-11-25T10:05:00Z", "detail": {}},
         "execution": "f1e2d3c4-0000-4000-8000-000000000001"}
ENV = {"MONITOR_BASELINE": f"s3://{BUCKET}/baselines", "MONITOR_CAPTURES": f"s3://{BUCKET}/captures",
       "CAPTURE_DESTINATION": "firehose://sagegate-dev-captures",
       "MONITOR_ENGINE": "stepfunctions"}
MAP_RUN = "arn:aws:states:us-east-1:123456789012:mapRun:sagegate-dev-monitor/ReadPrefix:{}"
STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:sagegate-dev-monitor"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def settings() -> MonitorSettings:
    found = MonitorSettings.from_env(ENV)
    assert found is not None and found.fanned_out
    return found


def put_baseline(s3: Any, tmp_path: Path, endpoint: str) -> Path:
    """A baseline of 2,000 records, in S3 and in a local folder (for the command)."""
    folder = capturegen.write_window(tmp_path / f"{endpoint}-base-window", 2000, seed=7)
    lines = (line for path in sorted(folder.rglob("*.jsonl"))
             for line in path.read_bytes().splitlines())
    files = analysis.baseline(RecordReader().rows("baseline", lines))
    local = tmp_path / f"{endpoint}-baseline"
    local.mkdir()
    for name, text in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"baselines/{endpoint}/{name}", Body=text.encode())
        (local / name).write_text(text)
    return local


def put_objects(s3: Any, objects: list[capturegen.FirehoseObject]) -> None:
    for item in objects:
        s3.put_object(Bucket=BUCKET, Key=item.key, Body=item.body)


def item_reader(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """The ItemReader's items for ``s3:listObjectsV2`` (the guide's shape)."""
    items = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            items.append({"Etag": entry["ETag"], "Key": entry["Key"],
                          "LastModified": int(entry["LastModified"].timestamp()),
                          "Size": entry["Size"], "StorageClass": "STANDARD"})
    return items


def run_distributed_map(s3: Any, plan: dict[str, Any], read: dict[str, Any],
                        batch: int = monitor_definition.MAX_ITEMS_PER_BATCH,
                        preprocessors: dict[str, list[Path]] | None = None) -> dict[str, Any]:
    """One prefix's Distributed Map as Step Functions runs it: listed, batched, each child
    the map function, the ResultWriter's files; returns the read as the definition's
    ``ReadPrefix`` outputs it (with its ``manifest``)."""
    run = plan["run"]
    items = item_reader(s3, run["captures_bucket"], read["prefix"])
    executions = []
    for start in range(0, len(items), batch):
        child = {"BatchInput": {"run": run, "read": read}, "Items": items[start:start + batch]}
        child = json.loads(json.dumps(child))  # what crosses Step Functions is JSON
        output = fanout.map_objects(child, settings(), preprocessors or {}, s3=s3)
        assert len(json.dumps(output)) < 2048  # a child's output stays small
        name = str(uuid.uuid4())
        executions.append({
            "ExecutionArn": f"{STATE_MACHINE.replace('stateMachine', 'express')}/{name}",
            "Input": json.dumps(child), "InputDetails": {"Included": True}, "Name": name,
            "Output": json.dumps(output), "OutputDetails": {"Included": True},
            "RedriveCount": 0, "RedriveStatus": "NOT_REDRIVABLE",
            "RedriveStatusReason": "Execution is SUCCEEDED and cannot be redriven",
            "StartDate": "2026-11-25T10:05:10.000Z", "StateMachineArn": STATE_MACHINE,
            "Status": "SUCCEEDED", "StopDate": "2026-11-25T10:05:12.000Z"})
    run_id = str(uuid.uuid4())
    folder = f"{read['results']}{run_id}"
    results = json.dumps(executions[::-1]).encode()  # the order is not the objects'
    s3.put_object(Bucket=run["runs_bucket"], Key=f"{folder}/SUCCEEDED_0.json", Body=results)
    manifest = {"DestinationBucket": run["runs_bucket"], "MapRunArn": MAP_RUN.format(run_id),
                "ResultFiles": {"FAILED": [], "PENDING": [], "SUCCEEDED": [
                    {"Key": f"{folder}/SUCCEEDED_0.json", "Size": len(results)}]}}
    s3.put_object(Bucket=run["runs_bucket"], Key=f"{folder}/manifest.json",
                  Body=json.dumps(manifest).encode())
    details = {"MapRunArn": MAP_RUN.format(run_id),
               "ResultWriterDetails": {"Bucket": run["runs_bucket"],
                                       "Key": f"{folder}/manifest.json"}}
    return {**read, "manifest": {"Bucket": details["ResultWriterDetails"]["Bucket"],
                                 "Key": details["ResultWriterDetails"]["Key"]}}


def run_state_machine(s3: Any, batch: int = monitor_definition.MAX_ITEMS_PER_BATCH
                      ) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """Plan, every prefix's Distributed Map, every endpoint's reduce; returns the plan, the
    reduces' outputs and the lines logged."""
    logged: list[str] = []
    plan = fanout.plan(EVENT, settings(), ["iris", "sentiment"], s3=s3, emit=logged.append)
    plan = json.loads(json.dumps(plan))
    assert len(json.dumps(plan)) < 256 * 1024
    reads = [run_distributed_map(s3, plan, read, batch) for read in plan["reads"]]
    outcomes = [fanout.reduce_endpoint({"run": plan["run"], "endpoint": entry,
                                        "reads": reads}, settings(), "sagegate-dev-monitor",
                                       s3=s3, emit=logged.append)
                for entry in plan["endpoints"]]
    return plan, outcomes, logged


def check_with_the_command(baseline: Path, out: Path) -> int:
    return cli.main(["check", f"s3://{BUCKET}/captures/iris", "--baseline", str(baseline),
                     "-o", str(out), "--start", "2026-11-25T09:00Z",
                     "--end", "2026-11-25T10:00Z"])


def reduced_files(s3: Any) -> dict[str, bytes]:
    folder = f"monitoring/iris/{HOUR:%Y/%m/%d/%H}/"
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=folder).get("Contents", [])
    return {item["Key"][len(folder):]: s3.get_object(Bucket=BUCKET, Key=item["Key"])[
        "Body"].read() for item in listed}


def violations(document: bytes) -> list[tuple[str, str, str]]:
    return [(v["feature_name"], v["constraint_check_type"],
             v["description"] if v["constraint_check_type"] != "baseline_drift_check" else "")
            for v in json.loads(document)["violations"]]


def test_the_plan_lists_each_variants_hours_around_the_window_and_skips_no_baseline(
        s3: Any, tmp_path: Path) -> None:
    put_baseline(s3, tmp_path, "iris")
    put_objects(s3, capturegen.firehose_window("captures", "iris", 600))
    put_objects(s3, capturegen.firehose_window("captures", "iris", 50, variant="Canary",
                                               edge_seconds=0))
    put_objects(s3, capturegen.firehose_window("captures", "sentiment", 50))
    logged: list[str] = []
    plan = fanout.plan(EVENT, settings(), ["sentiment", "iris", "iris"], s3=s3,
                       emit=logged.append)
    run = plan["run"]
    assert (run["start"], run["end"]) == ("2026-11-25T09:00:00+00:00",
                                         "2026-11-25T10:00:00+00:00")
    assert run["run_id"] == f"2026/11/25/09/{EVENT['execution']}"
    assert (run["captures_bucket"], run["runs_bucket"]) == (BUCKET, BUCKET)
    folder = "captures/iris"
    # the Canary variant's records are all inside the hour: its neighbours' folders are empty
    assert [(read["endpoint"], read["prefix"], read["order"]) for read in plan["reads"]] == [
        ("iris", f"{folder}/AllTraffic/2026/11/25/08/", 0),
        ("iris", f"{folder}/AllTraffic/2026/11/25/09/", 1),
        ("iris", f"{folder}/AllTraffic/2026/11/25/10/", 2),
        ("iris", f"{folder}/Canary/2026/11/25/09/", 3)]
    assert plan["reads"][1]["results"] == \
        f"monitoring-runs/results/2026/11/25/09/{EVENT['execution']}/iris/1/"
    assert plan["endpoints"][0] == {"endpoint": "iris"}
    assert plan["endpoints"][1]["endpoint"] == "sentiment"
    assert plan["endpoints"][1]["status"] == "no-baseline"
    assert json.loads(logged[-1])["status"] == "no-baseline"
    job = json.loads(s3.get_object(Bucket=BUCKET, Key=f"monitoring-runs/jobs/{run['run_id']}/"
                                   "iris.json")["Body"].read())
    assert job == {"endpoint": "iris", "csv_names": [f"_c{i}" for i in range(5)]}
    # a run started by hand, without an event's time: the hour before now
    now = datetime.datetime.now(datetime.UTC)
    manual = fanout.plan({"event": {}, "execution": "by hand/../x"}, settings(), [], s3=s3)
    assert manual["run"]["end"] == now.replace(minute=0, second=0, microsecond=0).isoformat()
    assert manual["run"]["run_id"].endswith("/by_hand____x")  # no "." or "/" in a key part


def test_the_map_and_the_reduce_write_the_files_the_command_writes(
        s3: Any, tmp_path: Path) -> None:
    """Below the sketch's first compaction (under 2,050 values a feature): the violations file
    is the command's byte for byte, the statistics one worker's."""
    baseline = put_baseline(s3, tmp_path, "iris")
    delivered = capturegen.firehose_window(
        "captures", "iris", 1900, features=capturegen.iris_like(shift={1: 1.5}),
        buffer_records=90)
    put_objects(s3, delivered)
    plan, outcomes, logged = run_state_machine(s3)
    in_hour = capturegen.in_hour(delivered)
    assert [(o["endpoint"], o["status"]) for o in outcomes] == [
        ("iris", "checked"), ("sentiment", "no-baseline")]
    assert outcomes[0]["violations"] >= 1
    files = reduced_files(s3)
    assert sorted(files) == ["constraint_violations.json", "constraints.json", "report.html",
                             "statistics.json"]
    out = tmp_path / "command"
    assert check_with_the_command(baseline, out) == cli_shared.EXIT_VIOLATIONS
    statistics = json.loads(files["statistics.json"])
    assert statistics["dataset"]["item_count"] == in_hour
    assert_same_statistics(json.loads((out / "statistics.json").read_text()), statistics)
    assert files["constraint_violations.json"] == \
        (out / "constraint_violations.json").read_bytes()
    assert files["constraints.json"] == (baseline / "constraints.json").read_bytes()
    assert b"baseline_drift_check" in files["constraint_violations.json"]
    report = files["report.html"].decode()
    assert f"s3://{BUCKET}/captures/iris" in report and "_c2" in report
    # the metrics: Model Monitor's names, the run's name as the MonitoringSchedule
    [emf] = [json.loads(line) for line in logged if '"_aws"' in line]
    assert emf["MonitoringSchedule"] == "sagegate-dev-monitor" and emf["Endpoint"] == "iris"
    assert emf["feature_violations__c2"] == 1.0 and emf["partial_window"] == 0.0
    line = json.loads(next(line for line in logged if '"endpoint": "iris"' in line))
    assert line["status"] == "checked" and line["records"] > in_hour  # with the edges'
    # moto's LastModified is the upload's (now): every object of the hour before is read
    assert line["files_read"] == len(delivered)
    # the parts are the run's, under its own folder
    parts = s3.list_objects_v2(Bucket=BUCKET, Prefix="monitoring-runs/parts/")["Contents"]
    assert all(item["Key"].startswith(f"monitoring-runs/parts/{plan['run']['run_id']}/iris/")
               for item in parts)


def test_a_window_past_the_sketchs_compaction_gives_the_commands_violations(
        s3: Any, tmp_path: Path) -> None:
    baseline = put_baseline(s3, tmp_path, "iris")
    delivered = capturegen.firehose_window(
        "captures", "iris", 6000, features=capturegen.iris_like(shift={3: 2.0}),
        buffer_records=150)
    put_objects(s3, delivered)
    broken = "captures/iris/AllTraffic/2026/11/25/09/sagegate-dev-captures-1-broken.jsonl.gz"
    s3.put_object(Bucket=BUCKET, Key=broken, Body=delivered[10].body[:-40])
    _plan, outcomes, logged = run_state_machine(s3, batch=7)
    assert outcomes[0]["status"] == "checked"
    files = reduced_files(s3)
    out = tmp_path / "command"
    assert check_with_the_command(baseline, out) == cli_shared.EXIT_VIOLATIONS
    assert_same_statistics(json.loads((out / "statistics.json").read_text()),
                           json.loads(files["statistics.json"]))
    assert violations(files["constraint_violations.json"]) == \
        violations((out / "constraint_violations.json").read_bytes())
    line = json.loads(next(line for line in logged if '"endpoint": "iris"' in line))
    assert line["bad_objects"] == 1
    assert line["first_bad"].startswith(f"s3://{BUCKET}/{broken}: not a whole GZIP file")


@contextlib.contextmanager
def moto_on_loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's moto backends served on 127.0.0.1, every AWS client of the block (and
    of the processes it starts) pointed there."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        yield
    finally:
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        server.stop()


def test_a_preprocessors_failure_is_the_endpoints_as_in_one_pass(
        s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a fresh interpreter for the worker, as when this process runs other threads (earlier
    # tests' may still run): what it reads must not depend on sharing this process's memory
    monkeypatch.setattr(user_workers, "_context", lambda: multiprocessing.get_context("spawn"))
    baseline = put_baseline(s3, tmp_path, "iris")
    put_objects(s3, capturegen.firehose_window("captures", "iris", 400))
    handler = tmp_path / "models" / "iris" / "preprocessor.py"
    handler.parent.mkdir(parents=True)
    handler.write_text("def preprocess_handler(inference_record):\n"
                       "    return inference_record.event_data\n")
    plan = json.loads(json.dumps(fanout.plan(EVENT, settings(), ["iris"], s3=s3)))
    read = plan["reads"][1]
    items = item_reader(s3, BUCKET, read["prefix"])
    output = fanout.map_objects({"BatchInput": {"run": plan["run"], "read": read},
                                 "Items": items[3:5]}, settings(), {"iris": [handler]}, s3=s3)
    assert output["part"] is None
    assert "preprocess_handler failed on s3://" in output["error"]
    assert output["first"] == items[3]["Key"]
    # every child fails on its first record: the reduce reports the first in the objects'
    # order, the one the single pass stops on, and writes nothing
    reads = [run_distributed_map(s3, plan, read, batch=3, preprocessors={"iris": [handler]})
             for read in plan["reads"]]
    logged: list[str] = []
    failed = fanout.reduce_endpoint({"run": plan["run"], "endpoint": plan["endpoints"][0],
                                     "reads": reads}, settings(), "s", s3=s3,
                                    emit=logged.append)
    assert failed["status"] == "failed"
    assert not reduced_files(s3)
    error = json.loads(logged[-1])["error"]
    # the CLI runs the preprocessor in a worker process, which reads the window itself: a
    # forked worker would share this process's mock, a spawned one (this process runs other
    # threads) would not, so the mock is served on 127.0.0.1 and every worker reads it there
    with moto_on_loopback(monkeypatch):
        status = cli.main(["check", f"s3://{BUCKET}/captures/iris", "--baseline",
                           str(baseline), "-o", str(tmp_path / "out"),
                           "--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z",
                           "--preprocess-handler", str(handler)])
    assert status == cli_shared.EXIT_USAGE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert error == "HandlerFailed: " + line.removeprefix("sagegate monitor: ")
    assert ".jsonl.gz:" in error and ": AttributeError" in error


def test_a_lost_part_is_never_a_check_of_part_of_the_window(s3: Any, tmp_path: Path) -> None:
    put_baseline(s3, tmp_path, "iris")
    put_objects(s3, capturegen.firehose_window("captures", "iris", 400))
    plan = json.loads(json.dumps(fanout.plan(EVENT, settings(), ["iris"], s3=s3)))
    reads = [run_distributed_map(s3, plan, read) for read in plan["reads"]]
    # a prefix's Map failed (a child lost after its retries): caught into "lost"
    reads[1] = {**plan["reads"][1], "lost": {
        "Error": "States.ExceedToleratedFailureThreshold",
        "Cause": "The specified tolerated failure threshold was exceeded"}}
    logged: list[str] = []
    outcome = fanout.reduce_endpoint({"run": plan["run"], "endpoint": plan["endpoints"][0],
                                      "reads": reads}, settings(), "s", s3=s3,
                                     emit=logged.append)
    assert outcome["status"] == fanout.LOST
    assert "ExceedToleratedFailureThreshold" not in logged[-1]  # the cause, one line
    assert "its Distributed Map failed" in json.loads(logged[-1])["error"]
    assert not reduced_files(s3)
    # a manifest that lists a failed result file: lost too
    reads = [run_distributed_map(s3, plan, read) for read in plan["reads"]]
    manifest = reads[0]["manifest"]
    document = json.loads(s3.get_object(Bucket=BUCKET, Key=manifest["Key"])["Body"].read())
    document["ResultFiles"]["FAILED"] = [{"Key": "x/FAILED_0.json", "Size": 10}]
    s3.put_object(Bucket=BUCKET, Key=manifest["Key"], Body=json.dumps(document).encode())
    outcome = fanout.reduce_endpoint({"run": plan["run"], "endpoint": plan["endpoints"][0],
                                      "reads": reads}, settings(), "s", s3=s3,
                                     emit=logged.append)
    assert outcome["status"] == fanout.LOST
    assert "1 FAILED result file(s)" in json.loads(logged[-1])["error"]


def test_an_hour_without_captures_is_no_records_and_writes_nothing(
        s3: Any, tmp_path: Path) -> None:
    put_baseline(s3, tmp_path, "iris")
    later = capturegen.firehose_window("captures", "iris", 100,
                                       hour=HOUR + datetime.timedelta(hours=5))
    put_objects(s3, later)
    plan, outcomes, _logged = run_state_machine(s3)
    assert plan["reads"] == []
    assert outcomes[0]["status"] == "no-records"
    assert not reduced_files(s3)


def test_the_map_reads_only_what_the_window_reads(s3: Any, tmp_path: Path) -> None:
    put_baseline(s3, tmp_path, "iris")
    delivered = capturegen.firehose_window("captures", "iris", 800)
    put_objects(s3, delivered)
    plain = "captures/iris/AllTraffic/2026/11/25/10/a.jsonl"  # the S3 sink's, the next hour
    s3.put_object(Bucket=BUCKET, Key=plain, Body=gzip.decompress(delivered[-1].body))
    plan = json.loads(json.dumps(fanout.plan(EVENT, settings(), ["iris"], s3=s3)))
    before, _own, after = plan["reads"]
    items = item_reader(s3, BUCKET, before["prefix"])
    # the hour before's objects delivered before the window began are skipped by their
    # LastModified (the epoch seconds the ItemReader gives)
    old = {**items[0], "LastModified": int((HOUR - datetime.timedelta(minutes=5)).timestamp())}
    fresh = {**items[0], "LastModified": int(HOUR.timestamp())}
    for item, read in ((old, False), (fresh, True)):
        output = fanout.map_objects({"BatchInput": {"run": plan["run"], "read": before},
                                     "Items": [item]}, settings(), {}, s3=s3)
        assert (output["objects"] == 1) is read and (output["part"] is not None) is read
    output = fanout.map_objects({"BatchInput": {"run": plan["run"], "read": after},
                                 "Items": item_reader(s3, BUCKET, after["prefix"])},
                                settings(), {}, s3=s3)
    assert output["objects"] == len(item_reader(s3, BUCKET, after["prefix"])) - 1  # not a.jsonl


def test_the_room_and_the_deploy_name_the_runs_folders_alike() -> None:
    from sagegate.deploy import policy

    assert (policy.JOBS, policy.PARTS, policy.RESULTS) == \
        (fanout.JOBS, fanout.PARTS, fanout.RESULTS)


def _moto_variant(definition: dict[str, Any], bucket: str) -> dict[str, Any]:
    """The definition as moto's interpreter can run it: no ItemBatcher (moto has none), no
    ``ToleratedFailurePercentage`` (its parser refuses 0, which is also the default), STANDARD
    children (its parser knows no EXPRESS), the ResultWriter's bucket and prefix given as
    values (it evaluates their paths on the Map's results, where the CDK guide's example has
    the state's input), and each Lambda task a state of its own: the plan's answer as given,
    a child passing its object's key on, a reduce passing its endpoint and reads on (lost
    for the endpoint named ``lost``)."""
    variant = json.loads(json.dumps(definition))

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("ItemBatcher", None)
            node.pop("ToleratedFailurePercentage", None)
            if node.get("ExecutionType") == "EXPRESS":
                node["ExecutionType"] = "STANDARD"
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    strip(variant)
    states = variant["States"]
    read = states["ReadPrefixes"]["ItemProcessor"]["States"]["ReadPrefix"]
    read["ResultWriter"]["Parameters"] = {"Bucket": bucket, "Prefix": "monitoring-runs/results/e2e"}
    read["ItemProcessor"]["States"]["ReadObjects"] = {
        "Type": "Pass", "Parameters": {"key.$": "$.Key"}, "End": True}
    reduce = states["Reduce"]["ItemProcessor"]["States"]
    reduce["ReduceEndpoint"] = {"Type": "Choice", "Choices": [{
        "Variable": "$.endpoint.endpoint", "StringEquals": "lost", "Next": "Lost"}],
        "Default": "Reduced"}
    for name, status in (("Lost", "lost"), ("Reduced", "checked")):
        reduce[name] = {"Type": "Pass", "End": True, "Parameters": {
            "endpoint.$": "$.endpoint.endpoint", "reads.$": "$.reads", "status": status}}
    return variant


def _run(sfn: Any, definition: dict[str, Any], name: str) -> tuple[dict[str, Any], Any]:
    machine = sfn.create_state_machine(name=name, definition=json.dumps(definition),
                                       roleArn="arn:aws:iam::123456789012:role/monitor")
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"],
                                    input=json.dumps(EVENT["event"]))["executionArn"]
    for _ in range(300):
        described = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            break
        time.sleep(0.1)
    history = sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
    return described, history


def test_the_state_machine_runs_in_motos_interpreter_as_far_as_it_goes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Bonus, on moto's Step Functions (``execute_state_machine``): the definition's own paths
    (the plan's output to the prefixes' Map, each prefix's ItemReader on moto's S3, the
    ResultWriter's details kept as the read's manifest, a prefix whose listing fails caught
    as lost, the reduces, the verdict failing the run for a lost endpoint), with what moto
    cannot run replaced (:func:`_moto_variant`). The manifests moto writes are empty, so the
    real reduce, run on them after, finds no records for a prefix read and ``lost`` for the
    one that failed."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        put_baseline(s3, tmp_path, "iris")
        put_objects(s3, capturegen.firehose_window("captures", "iris", 300))
        plan = json.loads(json.dumps(fanout.plan(EVENT, settings(), ["iris"], s3=s3)))
        # a prefix whose listing fails in moto (it has no object), as a lost Map Run would
        plan["reads"].append({**plan["reads"][0], "endpoint": "lost", "order": 0,
                              "prefix": "captures/lost/AllTraffic/2026/11/25/09/"})
        plan["endpoints"].append({"endpoint": "lost"})
        definition = _moto_variant(monitor_definition.definition(load_stage("dev")), BUCKET)
        definition["States"]["Plan"] = {"Type": "Pass", "Result": plan, "Next": "ReadPrefixes"}
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        described, history = _run(sfn, definition, "sagegate-dev-monitor")
        assert described["status"] == "FAILED"
        assert described["error"] == "MonitorPartsLost"  # the verdict, after every reduce
        reduced = [json.loads(event["stateExitedEventDetails"]["output"]) for event in history
                   if event["type"] == "PassStateExited"
                   and event["stateExitedEventDetails"]["name"] in ("Reduced", "Lost")]
        assert sorted((o["endpoint"], o["status"]) for o in reduced) == [
            ("iris", "checked"), ("lost", "lost")]
        reads = reduced[0]["reads"]
        assert [read["prefix"] for read in reads] == [read["prefix"] for read in plan["reads"]]
        for read in reads:
            if read["endpoint"] == "lost":
                assert "manifest" not in read and read["lost"]["Error"] == "States.Runtime"
            else:  # the ResultWriter's details, kept by the ResultSelector as the manifest
                assert set(read["manifest"]) == {"Bucket", "Key"}
                assert read["manifest"]["Key"].endswith("/manifest.json")
        # the real reduce on what the run left: moto's manifests list no result file (it
        # writes none), so no part, no records; the endpoint whose prefix failed is lost
        outcomes = {entry["endpoint"]: fanout.reduce_endpoint(
            {"run": plan["run"], "endpoint": entry, "reads": reads}, settings(), "s", s3=s3,
            emit=lambda line: None)["status"] for entry in plan["endpoints"]}
        assert outcomes == {"iris": "no-records", "lost": fanout.LOST}
