"""The local stack's AWS side without a server (:mod:`sagegate.local.aws`): what ``chalice
local`` and the emulator are told, the resources read from the emulator's configuration, the
stage's settings deciding whether moto runs, and the supervisor's lines for moto's server."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.jobs.table import TableJobStore
from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from emulator.process import terminate
from sagegate.deploy.jobs_template import jobs_table_schema
from sagegate.deploy.templates import cache_table_schema
from sagegate.local import aws as local_aws
from sagegate.local.aws import (
    ERROR_TOPIC,
    JOBS_BUCKET,
    MOTO_MEANWHILE,
    SUCCESS_TOPIC,
    LocalJobs,
    MotoStack,
    MotoStartError,
    arn_of,
    capture_bucket,
    emulator_resources,
    provision,
    table_schemas,
    topic_arn,
)
from sagegate.local.events import NOTIFICATIONS_QUEUE_ENV, TICKETS_QUEUE_ENV
from sagegate.local.moto_server import PROVISION_HEADER
from sagegate.local.supervision import Supervisor

URL = "http://127.0.0.1:8070"


def test_chalice_local_gets_the_bucket_the_topics_the_endpoints_and_the_queues() -> None:
    jobs = LocalJobs(URL, tickets_queue=f"{URL}/1/t", notifications_queue=f"{URL}/1/n")

    env = jobs.api_env()

    assert env["JOBS_BUCKET"] == JOBS_BUCKET == "sagegate-local-jobs"
    assert env["JOBS_SUCCESS_TOPIC"] == topic_arn(SUCCESS_TOPIC)
    assert env["JOBS_ERROR_TOPIC"].endswith(":" + ERROR_TOPIC)
    assert "JOBS_TABLE" not in env and "CACHE_TABLE" not in env  # records in memory
    assert {env[f"AWS_ENDPOINT_URL_{name}"] for name in ("S3", "SNS", "SQS", "DYNAMODB")} == {URL}
    assert (env[TICKETS_QUEUE_ENV], env[NOTIFICATIONS_QUEUE_ENV]) == (f"{URL}/1/t", f"{URL}/1/n")
    assert jobs.emulator_args() == ["--s3-endpoint-url", URL, "--sns-endpoint-url", URL]
    assert jobs.tickets_prefix == "jobs/tickets/"


def test_the_settings_are_valid_for_sagegate() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "e", **LocalJobs(URL).settings_env()})

    assert settings.jobs_enabled and settings.jobs_bucket == JOBS_BUCKET


def test_a_topic_name_becomes_the_arn_moto_gives_it() -> None:
    assert arn_of("done") == "arn:aws:sns:us-east-1:123456789012:done"
    assert arn_of("arn:aws:sns:eu-west-1:1:x") == "arn:aws:sns:eu-west-1:1:x"
    assert arn_of("") == ""


def test_the_committed_emulator_config_writes_to_the_jobs_bucket_and_topics() -> None:
    buckets, topics = emulator_resources(DEFAULT_EMULATOR_CONFIG)

    assert set(buckets) == {JOBS_BUCKET}
    assert set(topics) == {topic_arn(SUCCESS_TOPIC), topic_arn(ERROR_TOPIC)}


def test_an_unreadable_emulator_config_is_a_start_error(tmp_path: Path) -> None:
    broken = tmp_path / "config.json"
    broken.write_text("{ not json")

    with pytest.raises(MotoStartError, match="invalid JSON"):
        emulator_resources(broken)


def test_moto_runs_only_for_a_stage_with_jobs_on() -> None:
    on = Settings("e", jobs_bucket="my-jobs", jobs_prefix="stage/", jobs_success_topic="ok",
                  jobs_error_topic="")

    stack = MotoStack.for_plan(9070, on, DEFAULT_EMULATOR_CONFIG, print)

    assert stack is not None
    assert (stack.jobs.bucket, stack.jobs.prefix) == ("my-jobs", "stage/")
    assert (stack.jobs.success_topic, stack.jobs.error_topic) == (topic_arn("ok"), "")
    assert stack.jobs.endpoint_url == "http://127.0.0.1:9070"
    assert MotoStack.for_plan(9070, Settings("e", jobs_bucket=""), DEFAULT_EMULATOR_CONFIG,
                              print) is None
    assert MotoStack.for_plan(0, on, DEFAULT_EMULATOR_CONFIG, print) is None


class Child:
    """A real child process standing in for moto's server."""

    def __init__(self, code: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", code])
        self.url = URL

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 2.0) -> int:
        return terminate(self.process, timeout)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.stop()


def test_the_supervisor_names_moto_and_says_what_is_lost(children: list[Child]) -> None:
    lines: list[str] = []
    ticks = iter(range(0, 1000, 100))
    failing = iter([False, True])

    def start() -> Child:
        if next(failing, False):
            raise MotoStartError("moto's server exited with code 2")
        children.append(Child("import time; time.sleep(60)" if children else "pass"))
        return children[-1]

    supervisor = Supervisor(start, lines.append, clock=lambda: float(next(ticks)),
                            name="moto's server", meanwhile=MOTO_MEANWHILE,
                            start_errors=(MotoStartError,))
    supervisor.start()
    children[0].process.wait(10)

    verdicts = [supervisor.check() for _ in range(3)]

    assert verdicts == [True, True, True]
    assert lines[0].startswith(f"sagegate: moto's server (pid {children[0].pid}) exited with "
                               "code 0; uploads and jobs fail meanwhile, and what it held")
    assert lines[1].startswith("sagegate: moto's server did not restart: moto's server exited")
    assert lines[2] == f"sagegate: moto's server restarted (pid {children[1].pid}) on {URL}"


DEV = Settings("e", jobs_bucket="sagegate-dev-jobs", jobs_table="sagegate-dev-jobs",
               cache_table="sagegate-dev-prediction-cache", jobs_success_topic="ok",
               capture_mode="both", capture_destination="s3://sagegate-dev-data/captures")


def test_a_stage_with_tables_gets_them_on_moto_with_the_templates_keys() -> None:
    """``sagegate run --stage dev`` answered 500 on the job routes: the stage's JOBS_TABLE
    was a real DynamoDB table nothing provided, while the ready line said memory."""
    stack = MotoStack.for_plan(9070, DEV, DEFAULT_EMULATOR_CONFIG, print)
    assert stack is not None
    jobs = stack.jobs

    assert (jobs.table, jobs.cache_table, jobs.capture_bucket) == (
        "sagegate-dev-jobs", "sagegate-dev-prediction-cache", "sagegate-dev-data")
    assert jobs.settings_env()["AWS_ENDPOINT_URL_DYNAMODB"] == jobs.endpoint_url
    schemas = table_schemas(jobs)
    assert schemas["sagegate-dev-jobs"] == jobs_table_schema()
    assert schemas["sagegate-dev-prediction-cache"] == cache_table_schema()
    [index] = schemas["sagegate-dev-jobs"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == TableJobStore.QUEUED_INDEX  # what the re-drive queries
    line = stack.describe(300)
    assert "records in DynamoDB table sagegate-dev-jobs" in line and "memory (records in" in line
    assert "prediction cache table sagegate-dev-prediction-cache" in line
    assert "every 300 s" in line


def test_the_local_stage_says_its_records_are_in_chalice_locals_memory() -> None:
    stack = MotoStack.for_plan(9070, Settings("e", jobs_bucket=JOBS_BUCKET),
                               DEFAULT_EMULATOR_CONFIG, print)
    assert stack is not None

    assert table_schemas(stack.jobs) == {}
    assert "records in chalice local's memory" in stack.describe(300)
    assert capture_bucket("captures") == "" and capture_bucket("s3://b/p/q") == "b"


class Recorder:
    """boto3's S3, SNS, SQS and DynamoDB clients as provisioning uses them: every call
    recorded, in order, with the client it went through."""

    def __init__(self, calls: list[str], name: str) -> None:
        self.calls, self.name = calls, name

        class Exceptions:
            ResourceInUseException = type("ResourceInUseException", (Exception,), {})

        self.exceptions = Exceptions

    def __getattr__(self, operation: str) -> Any:
        def call(**kwargs: Any) -> dict[str, Any]:
            self.calls.append(f"{self.name}.{operation}")
            return {"QueueUrl": f"{URL}/q", "Attributes": {"QueueArn": "arn:q"},
                    "Subscriptions": []}

        return call


def test_moto_opens_to_others_only_once_the_bucket_notifies_and_the_tables_exist(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs made just after moto restarted stayed queued: the bucket took their tickets
    before its notification was configured. Nothing but provisioning gets in before."""
    calls: list[str] = []
    monkeypatch.setattr(local_aws, "_clients", lambda url, key: tuple(
        Recorder(calls, name) for name in ("s3", "sns", "sqs", "dynamodb")))
    monkeypatch.setattr(local_aws, "_open_gate",
                        lambda url, key: calls.append(f"open with {key}"))
    stack = MotoStack.for_plan(9070, DEV, DEFAULT_EMULATOR_CONFIG, print)
    assert stack is not None

    provision(stack.jobs, key="k3y")

    assert calls[-1] == "open with k3y"
    assert calls.index("s3.put_bucket_notification_configuration") < calls.index("open with k3y")
    assert calls.count("dynamodb.create_table") == 2
    assert calls.count("dynamodb.update_time_to_live") == 2
    assert calls.index("s3.create_bucket") < calls.index("s3.put_bucket_notification_configuration")


def test_every_provisioning_request_carries_the_gates_key() -> None:
    s3, sns, sqs, dynamodb = local_aws._clients(URL, "k3y")
    sent: list[str] = []

    def stop(request: Any, **_: Any) -> Any:
        sent.append(request.headers[PROVISION_HEADER])
        raise RuntimeError("not sent")

    for client in (s3, sns, sqs, dynamodb):
        client.meta.events.register("before-send", stop)
    for call in (lambda: s3.list_buckets(), lambda: sns.list_topics(),
                 lambda: sqs.list_queues(), lambda: dynamodb.list_tables()):
        with pytest.raises(RuntimeError):
            call()

    assert sent == ["k3y"] * 4
