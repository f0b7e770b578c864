"""The jobs' re-drive (:mod:`chalicelib.jobs.redrive`) on both stores: which queued jobs it
hands the runner again (due, still queued, with a ticket), the event it sends (the one S3
would have sent, read back by the runner's own reader), its schedule of retries, and that no
job is ever claimed twice however many events reach the runner. The table store's listing runs
on moto's DynamoDB mock with the keys and index the stack declares."""
from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.core.errors import ConfigurationError
from chalicelib.jobs.events import s3_keys
from chalicelib.jobs.records import Job, JobState, new_job_id
from chalicelib.jobs.redrive import (
    MAX_DELIVERED,
    Redriven,
    RedriveSettings,
    Tickets,
    due,
    invoke_runner,
    redrive,
    scheduled_time,
    ticket_event,
)
from chalicelib.jobs.service import QUEUED_PATIENCE_SECONDS
from chalicelib.jobs.store import JobStore, MemoryJobStore
from chalicelib.jobs.table import TableJobStore
from sagegate.deploy.jobs_template import jobs_table_schema

NOW = 1_800_000_000.0
LEASE_UNTIL = NOW + 960.0  # a runner's lease
BUCKET, PREFIX = "jobs-bucket", "jobs/"
SETTINGS = RedriveSettings(period_seconds=60, after_seconds=300)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class FakeS3:
    """HeadObject on a set of keys (a missing one is S3's 404)."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if Bucket != BUCKET or Key not in self.keys:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject")
        return {"ContentLength": 17}


class Runner:
    """The runner's side of a delivered event: the keys it reads, and each job claimed as
    the runner claims it (a fresh request id per event, as a new invocation has)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.events: list[dict[str, Any]] = []
        self.claims: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(json.loads(json.dumps(event)))  # what crosses the wire
        for key in s3_keys(event, BUCKET):
            job_id = key.removeprefix(f"{PREFIX}tickets/")
            _, claimed = self.store.claim(job_id, f"request-{len(self.events)}", LEASE_UNTIL)
            if claimed:
                self.claims.append(job_id)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "table"])
def store(request: pytest.FixtureRequest, clock: Clock,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[JobStore]:
    if request.param == "memory":
        yield MemoryJobStore(clock=clock)
        return
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        schema = jobs_table_schema()  # the keys and the index the stack declares
        schema.pop("TimeToLiveSpecification")
        client.create_table(TableName="jobs", BillingMode="PAY_PER_REQUEST", **schema)
        yield TableJobStore("jobs", client=client, clock=clock)


def queued(store: JobStore, s3: FakeS3 | None, waited: float, ticket: bool = True) -> str:
    """A job made ``waited`` seconds before NOW, still queued (with its ticket object)."""
    job = Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
              created_at=NOW - waited, updated_at=NOW - waited,
              input_location=f"s3://{BUCKET}/{PREFIX}uploads/x", expires_at=int(NOW) + 3600)
    store.create(job)
    if s3 is not None and ticket:
        s3.keys.add(f"{PREFIX}tickets/{job.job_id}")
    return job.job_id


def run(store: JobStore, s3: FakeS3, deliver: Any, now: float = NOW,
        settings: RedriveSettings = SETTINGS) -> Redriven:
    return redrive(store, Tickets(s3, BUCKET, PREFIX), deliver, settings, now)


def test_a_lost_job_is_handed_to_the_runner_once_and_runs_once(store: JobStore) -> None:
    s3 = FakeS3()
    lost = queued(store, s3, waited=301)
    runner = Runner(store)

    done = run(store, s3, runner)

    assert done.redriven == [lost] and runner.claims == [lost]
    # the event is S3's notification of the ticket, read back by the runner's own reader
    [event] = runner.events
    assert s3_keys(event, BUCKET) == [f"{PREFIX}tickets/{lost}"]
    assert event["Records"][0]["eventSource"] == "aws:s3"
    assert event["Records"][0]["eventName"].startswith("ObjectCreated:")
    # the original event arrives late after all: the runner finds the job claimed
    runner({"Records": event["Records"]})
    assert runner.claims == [lost]
    # and the next run finds nothing to do
    assert run(store, s3, runner, now=NOW + 60).redriven == []


def test_a_job_claimed_or_finished_is_not_handed_again(store: JobStore) -> None:
    s3 = FakeS3()
    running, finished = queued(store, s3, 400), queued(store, s3, 400)
    store.claim(running, "the-first-runner", LEASE_UNTIL)
    store.claim(finished, "the-first-runner", LEASE_UNTIL)
    store.advance(finished, JobState.SUCCEEDED)
    runner = Runner(store)

    done = run(store, s3, runner)

    assert done.redriven == [] and runner.events == []
    assert store.get(running).runner_id == "the-first-runner"  # type: ignore[union-attr]


def test_a_listed_job_claimed_meanwhile_is_read_again_and_left(store: JobStore) -> None:
    """The table's index lags its writes: a job it still lists as queued is read from the
    table itself before anything is sent."""
    s3 = FakeS3()
    job_id = queued(store, s3, 400)

    class Lagging:
        def queued_between(self, since: float, before: float,
                           limit: int) -> list[tuple[str, float]]:
            listed = store.queued_between(since, before, limit)
            store.claim(job_id, "claimed-meanwhile", LEASE_UNTIL)
            return listed

        def get(self, wanted: str) -> Job | None:
            return store.get(wanted)

    runner = Runner(store)
    done = redrive(Lagging(), Tickets(s3, BUCKET, PREFIX), runner,  # type: ignore[arg-type]
                   SETTINGS, NOW)

    assert done.redriven == [] and done.moved == 1 and runner.events == []


def test_young_jobs_jobs_without_a_ticket_and_lost_ones_are_left(store: JobStore) -> None:
    s3 = FakeS3()
    queued(store, s3, waited=299)  # its event may still come
    untracked = queued(store, s3, waited=400, ticket=False)  # the API failed before the ticket
    queued(store, s3, waited=QUEUED_PATIENCE_SECONDS + 1)  # JobLost on its next read
    runner = Runner(store)

    done = run(store, s3, runner)

    assert done.redriven == [] and runner.events == []
    assert done.no_ticket == 1 and store.get(untracked).state is JobState.QUEUED  # type: ignore[union-attr]


def test_a_failed_delivery_is_counted_and_the_others_go_on(store: JobStore) -> None:
    s3 = FakeS3()
    first, second = queued(store, s3, 301), queued(store, s3, 302)
    runner = Runner(store)

    def flaky(event: dict[str, Any]) -> None:
        if s3_keys(event, BUCKET) == [f"{PREFIX}tickets/{second}"]:
            raise ConnectionError("Lambda did not answer")
        runner(event)

    done = run(store, s3, flaky)

    assert done.redriven == [first] and done.failed == 1 and runner.claims == [first]


@pytest.mark.parametrize(("waited", "expected"), [
    (299, False), (300, True), (359, True), (360, True), (420, True), (480, False),
    (540, True), (600, False), (660, False), (780, True), (300 + 60 * 16, True),
    (300 + 60 * 17, False)])
def test_a_job_is_due_when_it_is_lost_then_each_time_its_wait_doubles(waited: float,
                                                                      expected: bool) -> None:
    assert due(waited, SETTINGS) is expected


def test_a_job_never_claimed_is_handed_again_on_that_schedule_only(store: JobStore) -> None:
    """A runner that is only throttled gets a few duplicates in its queue, not one a run."""
    s3 = FakeS3()
    job_id = queued(store, s3, waited=0)
    sent: list[tuple[float, list[str]]] = []
    for minute in range(30):
        now = NOW + 60 * minute
        run(store, s3, lambda event, at=now: sent.append((at, s3_keys(event, BUCKET))), now=now)
    assert [int((at - NOW) / 60) for at, _ in sent] == [5, 6, 7, 9, 13, 21]
    assert {key for _, keys in sent for key in keys} == {f"{PREFIX}tickets/{job_id}"}


def test_a_run_delivers_at_most_its_cap_oldest_first_and_the_rest_in_a_later_run() -> None:
    """After an outage, a run hands the runner at most MAX_DELIVERED events (a burst of
    thousands of asynchronous invocations would be throttled); the others wait for a later
    run, counted as not due in this one."""
    store, s3 = MemoryJobStore(clock=Clock()), FakeS3()
    # all due now (waited from the after_seconds on, within one period), oldest last
    ids = [queued(store, s3, waited=300 + index / 10) for index in range(MAX_DELIVERED + 5)]
    runner = Runner(store)

    first = run(store, s3, runner)
    assert len(first.redriven) == MAX_DELIVERED and first.not_due == 5
    assert set(first.redriven) == set(ids[5:]) and set(runner.claims) == set(ids[5:])

    second = run(store, s3, runner, now=NOW + 60)  # the next period: due again
    assert sorted(second.redriven) == sorted(ids[:5])
    assert second.not_due == 0  # the claimed ones are no longer listed
    assert sorted(runner.claims) == sorted(ids)  # each claimed once


def test_the_listing_is_oldest_first_within_its_bounds_and_its_limit(store: JobStore) -> None:
    ids = [queued(store, None, waited) for waited in (500, 700, 600)]
    claimed = queued(store, None, 800)
    store.claim(claimed, "r", LEASE_UNTIL)

    assert store.queued_between(NOW - 1000, NOW - 550, 10) == [
        (ids[1], NOW - 700), (ids[2], NOW - 600)]
    assert [job_id for job_id, _ in store.queued_between(NOW - 1000, NOW, 2)] == [ids[1],
                                                                                  ids[2]]


def test_the_table_listing_reads_every_page() -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="t",
                              aws_secret_access_key="t")
        schema = jobs_table_schema()
        schema.pop("TimeToLiveSpecification")
        client.create_table(TableName="jobs", BillingMode="PAY_PER_REQUEST", **schema)
        store = TableJobStore("jobs", client=client, clock=lambda: NOW)
        ids = {queued(store, None, 400 + index) for index in range(7)}
        pages: list[int] = []
        query = client.query

        def counted(**kwargs: Any) -> Any:
            answer = query(**{**kwargs, "Limit": min(kwargs["Limit"], 3)})
            pages.append(len(answer["Items"]))
            return answer

        client.query = counted

        assert {job_id for job_id, _ in store.queued_between(0, NOW, 100)} == ids
        assert len(pages) >= 3


def test_the_settings_have_defaults_and_refuse_what_is_not_seconds() -> None:
    assert RedriveSettings.from_env({}) == RedriveSettings(300, 300)
    assert RedriveSettings.from_env({"JOB_REDRIVE_PERIOD_SECONDS": " 2 ",
                                     "JOB_REDRIVE_AFTER_SECONDS": ""}) == RedriveSettings(2, 300)
    for bad in ("0", "-5", "1.5", "ten", "86401"):
        with pytest.raises(ConfigurationError, match="JOB_REDRIVE_AFTER_SECONDS"):
            RedriveSettings.from_env({"JOB_REDRIVE_AFTER_SECONDS": bad})


def test_on_lambda_a_ticket_is_an_asynchronous_invocation_of_the_runner() -> None:
    calls: list[dict[str, Any]] = []

    class Lambda:
        def invoke(self, **kwargs: Any) -> None:
            calls.append(kwargs)

    invoke_runner(Lambda(), "sagegate-dev-job_runner")(ticket_event(BUCKET, "jobs/tickets/a b"))

    [call] = calls
    assert (call["FunctionName"], call["InvocationType"]) == ("sagegate-dev-job_runner", "Event")
    assert s3_keys(json.loads(call["Payload"]), BUCKET) == ["jobs/tickets/a b"]


def test_the_runs_time_is_its_scheduled_time() -> None:
    assert scheduled_time("2027-01-15T08:00:00Z") == NOW
    assert scheduled_time("", clock=lambda: 7.0) == 7.0
    assert scheduled_time("yesterday", clock=lambda: 7.0) == 7.0


def test_the_scheduled_function_invokes_the_stages_own_runner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """app.py's re-drive on Lambda: the runner beside it (``sagegate-dev-job_redrive`` runs
    ``sagegate-dev-job_runner``), invoked asynchronously with the ticket's event; the hour is
    the schedule's event's."""
    import app as loaded
    from chalicelib.jobs import redrive as module

    store, s3 = MemoryJobStore(clock=lambda: NOW), FakeS3()
    lost = queued(store, s3, waited=400)
    calls: list[dict[str, Any]] = []

    class Lambda:
        def invoke(self, **kwargs: Any) -> None:
            calls.append(kwargs)

    # app.py as Lambda imports it for the stage's re-drive function (its name read then)
    for name, value in {"JOBS_BUCKET": BUCKET, "JOBS_PREFIX": PREFIX,
                        "AWS_LAMBDA_FUNCTION_NAME": "sagegate-dev-job_redrive"}.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("app_redrive", Path(loaded.__file__))
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    monkeypatch.setattr(app, "services", type("Services", (), {"jobs_context": type(
        "Context", (), {"store": store, "s3": s3, "bucket": BUCKET, "prefix": PREFIX})(),
        "handler_ended": lambda self, context: None})())
    monkeypatch.setattr(module, "lambda_client", Lambda)
    monkeypatch.delenv("JOB_REDRIVE_AFTER_SECONDS", raising=False)
    event = {"version": "0", "id": "e", "detail-type": "Scheduled Event",
             "source": "aws.events", "account": "123456789012", "time": "2027-01-15T08:00:00Z",
             "region": "us-east-1", "resources": [], "detail": {}}

    assert app.job_redrive(event, None)["redriven"] == [lost]

    [call] = calls
    assert (call["FunctionName"], call["InvocationType"]) == ("sagegate-dev-job_runner", "Event")
    assert s3_keys(json.loads(call["Payload"]), BUCKET) == [f"{PREFIX}tickets/{lost}"]
