"""The local event pump on its own (:mod:`sagegate.local.events`): the Lambda events it builds
from what moto delivers to SQS, what it does with a message once its function returned or
raised (delete, redeliver, drop after the last attempt), its receivers and scheduled functions
started and stopped, and the jobs' re-drive run on its period with its tickets sent to the
tickets queue. An in-memory SQS and fake functions."""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from chalicelib.core.errors import ConfigurationError
from sagegate.local.events import (
    JOB_FAILURES,
    JOB_RESULTS,
    JOB_RUNNER,
    NOTIFICATIONS_QUEUE_ENV,
    TICKETS_QUEUE_ENV,
    EventPump,
    Route,
    Scheduled,
    handlers_of,
    redrive_schedule,
    routes_from,
    s3_events,
    sns_router,
    start_pump,
)

SUCCESS = "arn:aws:sns:us-east-1:123456789012:sagegate-local-jobs-success"
ERROR = "arn:aws:sns:us-east-1:123456789012:sagegate-local-jobs-error"
S3_NOTIFICATION = {"Records": [{
    "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
    "eventName": "ObjectCreated:Put",
    "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": "sagegate-local-jobs"},
           "object": {"key": "jobs%2Ftickets%2Fabc", "size": 17}}}]}


def envelope(topic: str = SUCCESS, message: str = '{"invocationStatus": "Completed"}',
             **extra: Any) -> dict[str, Any]:
    """SNS's envelope as moto delivers it to SQS (raw delivery off)."""
    return {"Type": "Notification", "MessageId": "m-1", "TopicArn": topic, "Message": message,
            "Timestamp": "2026-11-25T16:49:03.285Z", "SignatureVersion": "2",
            "Signature": "c2ln", "SigningCertURL": "https://sns.example/cert.pem",
            "UnsubscribeURL": "https://sns.example/?Action=Unsubscribe", **extra}


class FakeSqs:
    """The three SQS calls the pump makes, on one in-memory queue."""

    def __init__(self, *bodies: str) -> None:
        self.waiting = [{"Body": body, "ReceiptHandle": f"r{i}", "Attributes": {
            "ApproximateReceiveCount": "1"}} for i, body in enumerate(bodies)]
        self.deleted: list[str] = []
        self.hidden: list[tuple[str, int]] = []

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        taken = self.waiting[:kwargs["MaxNumberOfMessages"]]
        del self.waiting[:len(taken)]
        return {"Messages": taken} if taken else {}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        self.deleted.append(ReceiptHandle)

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str,
                                  VisibilityTimeout: int) -> None:
        self.hidden.append((ReceiptHandle, VisibilityTimeout))


class Function:
    """A job function that records its calls and raises its first ``failures`` times."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.events: list[dict[str, Any]] = []
        self.contexts: list[Any] = []

    def __call__(self, event: dict[str, Any], context: Any) -> None:
        self.events.append(event)
        self.contexts.append(context)
        if len(self.events) <= self.failures:
            raise RuntimeError("the endpoint is down")


def message(body: str, attempt: int = 1, message_id: str = "m-1") -> dict[str, Any]:
    return {"Body": body, "ReceiptHandle": "h", "MessageId": message_id,
            "Attributes": {"ApproximateReceiveCount": str(attempt)}}


def pump(sqs: FakeSqs, **handlers: Function) -> EventPump:
    return EventPump(sqs, [], handlers,
                     lambda name, invocation: SimpleNamespace(function_name=name,
                                                              aws_request_id=invocation),
                     wait_seconds=0)


TICKETS = Route("http://moto/queue/tickets", s3_events)
NOTES = Route("http://moto/queue/notes", sns_router(SUCCESS, ERROR))


# ---------------------------------------------------------------- events

def test_an_s3_notification_is_the_runners_event_as_is() -> None:
    assert s3_events(json.dumps(S3_NOTIFICATION)) == [(JOB_RUNNER, S3_NOTIFICATION)]


def test_s3s_test_event_reaches_no_function() -> None:
    body = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "sagegate-local-jobs"}

    assert s3_events(json.dumps(body)) == []


@pytest.mark.parametrize("body", ["[]", '{"Records": 1}', "not json"])
def test_what_is_not_an_s3_notification_is_refused(body: str) -> None:
    with pytest.raises(ValueError):
        s3_events(body)


def test_an_sns_envelope_becomes_lambdas_sns_record() -> None:
    [(name, event)] = NOTES.events(json.dumps(envelope()))

    assert name == JOB_RESULTS
    [record] = event["Records"]
    assert record["EventSource"] == "aws:sns" and record["EventVersion"] == "1.0"
    assert record["EventSubscriptionArn"].startswith(SUCCESS + ":")
    sns = record["Sns"]
    assert sns["Message"] == '{"invocationStatus": "Completed"}'
    assert sns["TopicArn"] == SUCCESS and sns["MessageId"] == "m-1"
    # Lambda's spelling, and the members Chalice's SNSEvent reads even when SNS sent none
    assert sns["SigningCertUrl"] == "https://sns.example/cert.pem"
    assert "SigningCertURL" not in sns
    assert sns["Subject"] is None and sns["MessageAttributes"] == {}


def test_a_subject_and_attributes_are_kept() -> None:
    body = envelope(Subject="done", MessageAttributes={"a": {"Type": "String", "Value": "1"}})

    [(_, event)] = NOTES.events(json.dumps(body))

    assert event["Records"][0]["Sns"]["Subject"] == "done"
    assert event["Records"][0]["Sns"]["MessageAttributes"]["a"]["Value"] == "1"


def test_the_error_topic_goes_to_the_failures_function_and_other_topics_to_none() -> None:
    assert NOTES.events(json.dumps(envelope(ERROR)))[0][0] == JOB_FAILURES
    assert NOTES.events(json.dumps(envelope("arn:aws:sns:us-east-1:1:other"))) == []


def test_topics_given_by_name_match_their_arns_and_one_topic_is_one_function() -> None:
    route = sns_router("sagegate-local-jobs-success", "sagegate-local-jobs-success")

    assert route(json.dumps(envelope(SUCCESS)))[0][0] == JOB_RESULTS


def test_what_is_not_a_notification_envelope_is_refused() -> None:
    with pytest.raises(ValueError):
        NOTES.events(json.dumps({"Type": "SubscriptionConfirmation"}))


# ---------------------------------------------------------------- delete / redeliver

def test_a_message_is_deleted_once_its_function_returned() -> None:
    sqs, runner = FakeSqs(), Function()

    assert pump(sqs, job_runner=runner).handle(TICKETS, message(json.dumps(S3_NOTIFICATION)))

    assert runner.events == [S3_NOTIFICATION]
    assert runner.contexts[0].function_name == JOB_RUNNER
    assert sqs.deleted == ["h"] and sqs.hidden == []


def test_every_attempt_at_one_event_has_its_request_id_and_other_events_others() -> None:
    # the job runner re-runs a job for a retry (the same aws_request_id, as Lambda's retries)
    # and not for a duplicate delivery (another one)
    sqs, runner = FakeSqs(), Function(failures=1)
    body = json.dumps(S3_NOTIFICATION)
    events = pump(sqs, job_runner=runner)
    events.handle(TICKETS, message(body, attempt=1))
    events.handle(TICKETS, message(body, attempt=2))
    events.handle(TICKETS, message(body, message_id="m-2"))
    first, retry, other = (context.aws_request_id for context in runner.contexts)
    assert first == retry and other != first
    assert str(uuid.UUID(first)) == first


def test_a_failed_call_leaves_the_message_for_a_later_attempt() -> None:
    sqs, runner = FakeSqs(), Function(failures=1)

    assert not pump(sqs, job_runner=runner).handle(TICKETS, message(json.dumps(S3_NOTIFICATION)))

    assert sqs.deleted == [] and sqs.hidden == [("h", 1)]


def test_after_the_last_attempt_the_message_is_dropped_with_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    sqs, runner = FakeSqs(), Function(failures=5)
    caplog.set_level(logging.WARNING, "sagegate.local_events")

    pump(sqs, job_runner=runner).handle(TICKETS, message(json.dumps(S3_NOTIFICATION), 3))

    assert sqs.deleted == ["h"] and sqs.hidden == []
    [line] = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert "job_runner failed 3 times" in line.getMessage()


def test_the_pump_goes_on_after_a_function_raised() -> None:
    sqs = FakeSqs(json.dumps(S3_NOTIFICATION), json.dumps(S3_NOTIFICATION))
    runner = Function(failures=1)
    events = pump(sqs, job_runner=runner)

    assert events.poll(TICKETS) == 2

    assert len(runner.events) == 2
    assert sqs.hidden == [("r0", 1)] and sqs.deleted == ["r1"]


def test_a_test_event_and_a_foreign_body_are_deleted_without_a_call() -> None:
    sqs, runner = FakeSqs(), Function()
    events = pump(sqs, job_runner=runner)

    events.handle(TICKETS, message(json.dumps({"Event": "s3:TestEvent"})))
    events.handle(TICKETS, message("{not json"))

    assert runner.events == [] and sqs.deleted == ["h", "h"]


def test_an_event_for_a_function_the_app_lacks_is_dropped() -> None:
    sqs = FakeSqs()

    pump(sqs).handle(NOTES, message(json.dumps(envelope(ERROR))))

    assert sqs.deleted == ["h"]


class PollingSqs(FakeSqs):
    """An empty queue that counts the long polls of each queue (each a few milliseconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.polls: dict[str, int] = {}
        self._lock = threading.Lock()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.polls[kwargs["QueueUrl"]] = self.polls.get(kwargs["QueueUrl"], 0) + 1
        time.sleep(0.005)
        return {}


def until(check: Any, what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {limit:g} s"
        time.sleep(0.01)


def test_the_receivers_start_polling_every_queue_then_stop_when_asked() -> None:
    sqs = PollingSqs()
    events = EventPump(sqs, [TICKETS, NOTES], {}, lambda name, invocation: None,
                       wait_seconds=0, workers=2)
    events.start()
    started = events.threads
    try:
        assert len(started) == 4 and all(thread.is_alive() for thread in started)
        until(lambda: all(sqs.polls.get(route.queue_url, 0) >= 4 for route in (TICKETS, NOTES)),
              "every receiver polling")
    finally:
        events.stop(timeout=5)

    assert not any(thread.is_alive() for thread in started)
    polled = dict(sqs.polls)
    time.sleep(0.05)
    assert sqs.polls == polled  # nothing polls any more


def test_a_scheduled_function_runs_on_its_period_until_the_pump_stops(
        caplog: pytest.LogCaptureFixture) -> None:
    runs: list[float] = []

    def work() -> None:
        runs.append(time.monotonic())
        if len(runs) == 1:
            raise RuntimeError("the table did not answer")  # the next run is due all the same

    events = EventPump(FakeSqs(), [], {}, lambda name, invocation: None,
                       scheduled=[Scheduled("job_redrive", work, 0.05)])
    started = time.monotonic()
    events.start()
    try:
        until(lambda: len(runs) >= 3, "three runs")
    finally:
        events.stop(timeout=5)
    done = len(runs)

    assert runs[0] - started >= 0.05  # a period after the start, as a rate's first run
    assert not any(thread.is_alive() for thread in events.threads)
    time.sleep(0.15)
    assert len(runs) == done
    assert any("job_redrive failed (RuntimeError" in r.getMessage() for r in caplog.records)


class RedrivingApp:
    """app.py as the pump sees it for the re-drive: the scheduled function, and the services
    whose jobs its work runs on."""

    def __init__(self) -> None:
        self.services = SimpleNamespace(jobs_context=object())

    def job_redrive(self, event: Any, context: Any) -> None:
        raise AssertionError("the pump runs the work with its own delivery, not this")


@pytest.fixture
def redrives(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The re-drive's work (chalicelib.jobs.functions.redrive_jobs), each call kept: it finds
    one lost ticket and delivers it."""
    from chalicelib.jobs import functions

    calls: list[tuple[Any, ...]] = []

    def redrive_jobs(context: Any, scheduled: str, function_name: str,
                     deliver: Any = None) -> dict[str, Any]:
        calls.append((context, scheduled, function_name))
        deliver({"Records": S3_NOTIFICATION["Records"]})
        return {"redriven": ["abc"]}

    monkeypatch.setattr(functions, "redrive_jobs", redrive_jobs)
    return calls


def test_the_redrive_runs_on_its_period_and_sends_its_tickets_to_the_tickets_queue(
        redrives: list[tuple[Any, ...]]) -> None:
    app, sent = RedrivingApp(), []
    environ = {TICKETS_QUEUE_ENV: "http://m/t", "JOB_REDRIVE_PERIOD_SECONDS": "7"}

    [scheduled] = redrive_schedule(app, environ, lambda queue, body: sent.append((queue, body)))
    scheduled.run()

    assert (scheduled.name, scheduled.period) == ("job_redrive", 7)
    # the app's own jobs, at the time of the run
    assert redrives == [(app.services.jobs_context, "", "job_redrive")]
    [(queue, body)] = sent
    assert queue == "http://m/t"
    # on the tickets queue, the event reaches the runner as S3's own notification would
    assert s3_events(body) == [(JOB_RUNNER, {"Records": S3_NOTIFICATION["Records"]})]


def test_no_redrive_without_the_app_declaring_it_or_without_a_tickets_queue(
        redrives: list[tuple[Any, ...]]) -> None:
    app = RedrivingApp()
    send = print

    assert redrive_schedule(SimpleNamespace(services=app.services),
                            {TICKETS_QUEUE_ENV: "http://m/t"}, send) == []
    assert redrive_schedule(app, {}, send) == []
    assert redrive_schedule(app, {TICKETS_QUEUE_ENV: "http://m/t"}, send)[0].period == 300
    with pytest.raises(ConfigurationError, match="JOB_REDRIVE_PERIOD_SECONDS"):
        redrive_schedule(app, {TICKETS_QUEUE_ENV: "q", "JOB_REDRIVE_PERIOD_SECONDS": "0"}, send)
    assert redrives == []  # none ran


# ---------------------------------------------------------------- wiring

def test_the_app_modules_job_functions_are_found() -> None:
    runner = Function()
    app = SimpleNamespace(job_runner=runner, job_results=None, app=object())

    assert handlers_of(app) == {JOB_RUNNER: runner}


def test_the_routes_are_the_queues_sagegate_run_named() -> None:
    environ: Mapping[str, str] = {TICKETS_QUEUE_ENV: "http://m/t", NOTIFICATIONS_QUEUE_ENV:
                                  "http://m/n", "JOBS_ERROR_TOPIC": ERROR}

    routes = routes_from(environ)

    assert [r.queue_url for r in routes] == ["http://m/t", "http://m/n"]
    assert routes[1].events(json.dumps(envelope(ERROR)))[0][0] == JOB_FAILURES


def test_no_pump_without_queues_or_without_functions() -> None:
    app = SimpleNamespace(job_runner=Function())

    assert start_pump(app, {}) is None
    assert start_pump(SimpleNamespace(), {TICKETS_QUEUE_ENV: "http://m/t"}) is None
