"""The local jobs plumbing against a real moto server on 127.0.0.1 (:mod:`sagegate.local.aws`,
:mod:`sagegate.local.events`): moto's S3 notification of the tickets prefix and its SNS
subscriptions really reach SQS in server mode; the pump turns them into the events Chalice's
own S3 and SNS handlers read; inside a real ``chalice local`` child (a project of fake job
functions) events are delivered, retried after a failure, and never block its shutdown."""
from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3
from chalice import Chalice

from chalicelib.capture.records import Exchange, build_record
from chalicelib.capture.sinks import S3Sink
from chalicelib.core.config import Settings
from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from emulator.process import free_port
from sagegate.local.aws import LocalJobs, MotoProcess, MotoStack, provision, start_moto
from sagegate.local.events import EventPump, routes_from
from sagegate.local.processes import DUMMY_AWS_ENV, start_chalice_local

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
               "region_name": "us-east-1"}
WAIT_S = 30.0


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoProcess]:
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log_path, "wb") as log, start_moto(free_port(), log=log) as process:
        yield process


@pytest.fixture(scope="module")
def jobs(moto: MotoProcess) -> LocalJobs:
    return provision(LocalJobs(moto.url), ["other-bucket"], key=moto.provision_key)


def client(jobs: LocalJobs, name: str) -> Any:
    return boto3.client(name, endpoint_url=jobs.endpoint_url, **CREDENTIALS)


def until(check: Any, what: str, limit: float = WAIT_S) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {limit:g} s")


def drain(jobs: LocalJobs) -> None:
    """Deletes what an earlier test left (S3's test event, events of its own)."""
    sqs = client(jobs, "sqs")
    for url in (jobs.tickets_queue, jobs.notifications_queue):
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                              WaitTimeSeconds=0).get("Messages", []):
            for message in messages:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def fake_app(bucket: str, prefix: str, seen: list[tuple[str, Any]]) -> Any:
    """A module of job functions declared as app.py declares them (Chalice's own wrappers)."""
    app = Chalice("fake")

    @app.on_s3_event(bucket=bucket, prefix=prefix, events=["s3:ObjectCreated:*"],
                     name="job_runner")
    def job_runner(event: Any) -> None:
        seen.append(("job_runner", (event.bucket, event.key)))

    @app.on_sns_message(topic="sagegate-local-jobs-success", name="job_results")
    def job_results(event: Any) -> None:
        seen.append(("job_results", json.loads(event.message)))

    @app.on_sns_message(topic="sagegate-local-jobs-error", name="job_failures")
    def job_failures(event: Any) -> None:
        seen.append(("job_failures", (event.subject, json.loads(event.message))))

    return {"job_runner": job_runner, "job_results": job_results, "job_failures": job_failures}


def test_moto_delivers_tickets_and_notifications_and_chalices_handlers_read_them(
        jobs: LocalJobs) -> None:
    drain(jobs)
    seen: list[tuple[str, Any]] = []
    handlers = fake_app(jobs.bucket, jobs.tickets_prefix, seen)
    pump = EventPump(client(jobs, "sqs"), routes_from(jobs.api_env()), handlers,
                     lambda name, invocation: None, wait_seconds=1, workers=1)
    s3, sns = client(jobs, "s3"), client(jobs, "sns")

    s3.put_object(Bucket=jobs.bucket, Key=f"{jobs.tickets_prefix}job 1", Body=b"{}")
    s3.put_object(Bucket=jobs.bucket, Key=f"{jobs.prefix}uploads/not-a-ticket", Body=b"x")
    sns.publish(TopicArn=jobs.success_topic, Message='{"inferenceId": "a"}')
    sns.publish(TopicArn=jobs.error_topic, Message='{"inferenceId": "b"}', Subject="failed")
    pump.start()
    try:
        until(lambda: len(seen) >= 3, "three calls")
        time.sleep(1.5)  # one more long poll: nothing else may arrive
    finally:
        pump.stop()

    assert sorted(seen, key=str) == sorted([
        ("job_runner", (jobs.bucket, f"{jobs.tickets_prefix}job 1")),
        ("job_results", {"inferenceId": "a"}),
        ("job_failures", ("failed", {"inferenceId": "b"})),
    ], key=str)


def test_a_presigned_post_over_its_cap_is_refused_as_s3_refuses_it(jobs: LocalJobs) -> None:
    s3 = client(jobs, "s3")
    key = f"{jobs.prefix}uploads/capped"
    post = s3.generate_presigned_post(
        jobs.bucket, key, Fields={"Content-Type": "text/csv"},
        Conditions=[{"Content-Type": "text/csv"}, ["content-length-range", 1, 1000]])

    def send(size: int) -> urllib3.BaseHTTPResponse:
        return urllib3.request("POST", post["url"], fields={
            **post["fields"], "file": ("rows.csv", b"1" * size, "text/csv")})

    refused = send(1001)
    assert refused.status == 400 and b"<Code>EntityTooLarge</Code>" in refused.data
    assert s3.list_objects_v2(Bucket=jobs.bucket, Prefix=key)["KeyCount"] == 0
    assert send(1000).status == 204
    head = s3.head_object(Bucket=jobs.bucket, Key=key)
    assert (head["ContentLength"], head["ContentType"]) == (1000, "text/csv")


PROJECT_APP = '''
import json
import os
from pathlib import Path

from chalice import Chalice

app = Chalice(app_name="fake-jobs")
CALLS = Path(os.environ["FAKE_CALLS"])


def record(name, value):
    with CALLS.open("a") as calls:
        calls.write(json.dumps([name, value]) + "\\n")


@app.route("/health")
def health():
    return {"ok": True}


@app.on_s3_event(bucket=os.environ["JOBS_BUCKET"], prefix="jobs/tickets/",
                 events=["s3:ObjectCreated:*"], name="job_runner")
def job_runner(event):
    record("job_runner", event.key)


@app.on_sns_message(topic=os.environ["JOBS_SUCCESS_TOPIC"], name="job_results")
def job_results(event):
    record("job_results", json.loads(event.message))
    if sum(1 for line in CALLS.read_text().splitlines() if "job_results" in line) < 3:
        raise RuntimeError("the result cannot be read yet")
'''


def calls(path: Path) -> list[list[Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_chalice_local_runs_the_pump_retries_a_failed_event_and_stops(
        jobs: LocalJobs, tmp_path: Path) -> None:
    drain(jobs)
    (tmp_path / ".chalice").mkdir()
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps(
        {"version": "2.0", "app_name": "fake-jobs", "stages": {"dev": {}}}))
    (tmp_path / "app.py").write_text(PROJECT_APP)
    record = tmp_path / "calls.jsonl"
    env = {**DUMMY_AWS_ENV, **jobs.api_env(), "FAKE_CALLS": str(record)}
    with open(tmp_path / "api.log", "wb") as log, start_chalice_local(
            free_port(), "http://127.0.0.1:9", project_dir=tmp_path, stage=None, log=log,
            env=env) as api:
        client(jobs, "s3").put_object(Bucket=jobs.bucket, Key="jobs/tickets/j-1", Body=b"{}")
        client(jobs, "sns").publish(TopicArn=jobs.success_topic, Message='{"n": 1}')
        until(lambda: len(calls(record)) >= 4, "the ticket and three attempts")
        time.sleep(2.5)  # past the retry delay: a fourth attempt would have come by now
        api.stop()

    assert calls(record) == [["job_runner", "jobs/tickets/j-1"]] + [["job_results", {"n": 1}]] * 3
    assert api.process.returncode is not None
    log_text = (tmp_path / "api.log").read_text(errors="replace")
    assert log_text.count("job_results failed (attempt") == 2
    attributes = client(jobs, "sqs").get_queue_attributes(
        QueueUrl=jobs.notifications_queue, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


def test_a_killed_moto_is_restarted_and_provisioned_again() -> None:
    """``sagegate run``'s moto under its supervisor: killed, it comes back on the same port
    with the same bucket, queues and notifications, its objects gone, and the console says so."""
    port = free_port()
    lines: list[str] = []
    stack = MotoStack(port, LocalJobs(f"http://127.0.0.1:{port}"), DEFAULT_EMULATOR_CONFIG,
                      lines.append)
    first = stack.supervisor.start()
    try:
        before = stack.jobs
        client(before, "s3").put_object(Bucket=before.bucket, Key="jobs/uploads/a", Body=b"1")
        os.kill(first.pid, signal.SIGKILL)  # our own child
        first.process.wait(10)
        until(lambda: stack.supervisor.check() and stack.supervisor.restarts == 1,
              "the restart")
        after = stack.jobs
        s3 = client(after, "s3")
        assert s3.list_objects_v2(Bucket=after.bucket)["KeyCount"] == 0  # lost, as said
        drain(after)
        s3.put_object(Bucket=after.bucket, Key=f"{after.tickets_prefix}t", Body=b"{}")
        received = client(after, "sqs").receive_message(
            QueueUrl=after.tickets_queue, WaitTimeSeconds=5).get("Messages", [])
    finally:
        stack.supervisor.stop()

    assert (after.tickets_queue, after.notifications_queue) == \
        (before.tickets_queue, before.notifications_queue)
    assert [json.loads(m["Body"])["Records"][0]["s3"]["object"]["key"] for m in received] == \
        ["jobs%2Ftickets%2Ft"]
    assert f"moto's server (pid {first.pid}) exited with code -9" in lines[0]
    assert "what it held (uploads, results, queued events) is lost" in lines[0]
    assert lines[-1].startswith("sagegate: moto's server restarted (pid ")


def test_a_run_with_jobs_off_still_gets_its_capture_bucket_and_cache_table_on_moto() -> None:
    """A stage with jobs off that captures to S3 (as a firehose:// destination does locally)
    and caches predictions: ``sagegate run``'s moto is started for it and holds the bucket
    and the table, and a capture written through the run's endpoints is stored there."""
    port = free_port()
    settings = Settings.from_env({"ENDPOINT_NAME": "iris", "CAPTURE_MODE": "both",
                                  "CACHE_TABLE": "local-cache",
                                  "CAPTURE_DESTINATION": "s3://sagegate-local-captures/fh"})
    assert not settings.jobs_enabled
    stack = MotoStack.for_plan(port, settings, DEFAULT_EMULATOR_CONFIG, print)
    assert stack is not None
    stack.supervisor.start()
    try:
        jobs = stack.jobs
        env = jobs.api_env()
        assert not any(name.startswith("JOBS_") for name in env)
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], **CREDENTIALS)
        record = build_record(Exchange(endpoint="iris", variant="AllTraffic",
                                       inference_id="r-1", sent=b"1,2", sent_content_type=
                                       "text/csv", received=b"[0.5]",
                                       received_content_type="application/json"), "both")
        S3Sink(s3, "sagegate-local-captures", "fh").write([record])
        listed = s3.list_objects_v2(Bucket="sagegate-local-captures", Prefix="fh/iris/")
        tables = boto3.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL_DYNAMODB"],
                              **CREDENTIALS).list_tables()["TableNames"]
    finally:
        stack.supervisor.stop()
    assert listed["KeyCount"] == 1
    assert tables == ["local-cache"]
