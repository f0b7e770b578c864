"""chalicelib.core.retries, the one retry policy, and its users other than the endpoint client
(tests/unit/test_endpoint_budget.py): the capture sinks and the emulator's supervisor
(sagegate's HTTP client: tests/unit/test_client.py). Clocks and randomness are injected."""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from chalicelib.capture import sinks
from chalicelib.capture.records import CaptureRecord
from chalicelib.capture.sinks import CaptureSinkError, FirehoseSink, S3Sink, retry_kind
from chalicelib.core.retries import (
    MAX_RETRY_AFTER_S,
    QUOTA_CAPACITY,
    RETRY_COST,
    THROTTLED_RETRY_COST,
    Retrier,
    RetryPolicy,
    RetryQuota,
    classify,
    parse_retry_after,
    upstream_hint,
)
from sagegate.local import supervision


@dataclass
class Clock:
    now: float = 100.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def aws_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


# -- the policy and the quota -----------------------------------------------------------------

def test_the_backoff_is_full_jitter_under_a_doubling_ceiling() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=0.5)
    assert [policy.ceiling(n) for n in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert policy.delay(3, lambda: 0.25) == pytest.approx(0.1)
    assert policy.delay(3, lambda: 0.0) == 0.0


def test_the_quota_is_botocores_token_bucket() -> None:
    quota = RetryQuota()
    assert quota.available == QUOTA_CAPACITY == 500
    assert (quota.acquire(throttled=True), quota.acquire(throttled=False)) == (5, 14)
    assert quota.available == 500 - THROTTLED_RETRY_COST - RETRY_COST
    quota.release(1000)
    assert quota.available == 500  # never over the capacity
    small = RetryQuota(capacity=13)
    assert small.acquire(throttled=False) == 0 and small.available == 13  # refused whole
    assert not small.can_pay(throttled=False) and small.can_pay(throttled=True)


def test_a_retrier_stops_at_max_attempts_and_refunds_its_last_retry() -> None:
    clock, quota = Clock(), RetryQuota()
    retrier = Retrier(RetryPolicy(max_attempts=3), quota, clock=clock, rng=lambda: 1.0)
    assert retrier.failed(throttled=True) == pytest.approx(0.1)
    assert retrier.failed(throttled=False) == pytest.approx(0.2)
    assert retrier.failed() is None and retrier.attempts == 3
    assert quota.available == 500 - 5 - 14
    retrier.succeeded()
    assert quota.available == 500 - 5  # the last retry's cost back, as botocore


def test_a_retrier_never_starts_an_attempt_that_would_outlive_its_budget() -> None:
    clock = Clock()
    policy = RetryPolicy(max_attempts=10, budget_seconds=5.0, attempt_timeout=2.0,
                         base_delay=1.0, max_delay=1.0)
    retrier = Retrier(policy, RetryQuota(), clock=clock, rng=lambda: 1.0)
    clock.now += 1.5
    assert retrier.failed() == 1.0  # 3.5 s left: 1 s backoff + 2 s attempt fit
    clock.now += 1.0 + 0.6
    assert retrier.failed() is None  # 1.9 s left
    assert not retrier.quota_refused and retrier.quota.available == 500 - RETRY_COST


def test_an_upstreams_wait_is_a_floor_and_part_of_the_advice() -> None:
    retrier = Retrier(RetryPolicy(max_attempts=2), RetryQuota(), clock=Clock(),
                      rng=lambda: 0.5)
    assert retrier.failed(hint=3.0) == 3.0
    assert retrier.failed(hint=3.0) is None
    assert retrier.retry_after(hint=3.0) == 3
    assert retrier.retry_after(hint=2.01) == 3  # rounded up: never sooner than asked
    assert retrier.retry_after(hint=math.inf) == 1  # nonsense ignored
    assert retrier.retry_after(hint=1e9) == MAX_RETRY_AFTER_S


def test_an_empty_quota_advises_the_policys_quota_wait() -> None:
    quota = RetryQuota(capacity=4)
    retrier = Retrier(RetryPolicy(quota_wait=12.0), quota, clock=Clock(), rng=lambda: 1.0)
    assert retrier.failed(throttled=True) is None and retrier.quota_refused
    assert retrier.retry_after(throttled=True) == 12
    full = Retrier(RetryPolicy(quota_wait=12.0), RetryQuota(), clock=Clock())
    assert full.retry_after() == 1


@pytest.mark.parametrize(("value", "seconds"), [
    ("5", 5.0), (" 5 ", 5.0), ("Thu, 01 Jan 1970 00:01:40 GMT", 60.0),
    ("Thu, 01 Jan 1970 00:00:01 GMT", 0.0), ("soon", None), ("-3", None), ("", None),
    (None, None), ("\u00b2", None), ("\u0663", None),  # HTTP's digits are ASCII ones
])
def test_retry_after_is_read_as_seconds_or_a_date(value: str | None,
                                                  seconds: float | None) -> None:
    assert parse_retry_after(value, now=lambda: 40.0) == seconds


def test_an_aws_answers_wait_is_read_as_botocore_reads_it() -> None:
    assert upstream_hint({"x-amz-retry-after": "1500", "retry-after": "9"}) == 1.5
    assert upstream_hint({"retry-after": "9"}) == 9.0
    assert upstream_hint({}) is None
    assert upstream_hint({"x-amz-retry-after": "\u00b2"}) is None


# -- the capture sinks ------------------------------------------------------------------------

def record() -> CaptureRecord:
    return CaptureRecord(endpoint="ep", variant="AllTraffic", event_id="r",
                         time=datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC),
                         line=b'{"x": 1}\n')


class FlakyAws:
    """put_object / put_record_batch failing with ``errors`` in turn, then succeeding."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)

    def put_object(self, **_: Any) -> dict[str, Any]:
        self._call()
        return {}

    def put_record_batch(self, Records: list[dict[str, bytes]], **_: Any) -> dict[str, Any]:
        self._call()
        return {"FailedPutCount": 0, "RequestResponses": [{"RecordId": "x"} for _ in Records]}


def sink(kind: type[S3Sink] | type[FirehoseSink], client: Any, clock: Clock) -> Any:
    if kind is S3Sink:
        return S3Sink(client, "bucket", "capture", sleep=clock.sleep, clock=clock,
                      rng=lambda: 1.0)
    return FirehoseSink(client, "stream", sleep=clock.sleep, clock=clock, rng=lambda: 1.0)


@pytest.mark.parametrize("kind", [S3Sink, FirehoseSink])
def test_a_sink_retries_throttling_and_hiccups_by_the_policy(kind: Any) -> None:
    clock = Clock()
    client = FlakyAws(aws_error("SlowDown", 503),
                      EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    writer = sink(kind, client, clock)
    writer.write([record()])
    assert client.calls == 3
    assert clock.sleeps == [pytest.approx(0.05), pytest.approx(0.1)]  # the policy's ceilings
    assert writer.quota.available == 500 - THROTTLED_RETRY_COST  # the last retry's cost back


@pytest.mark.parametrize("kind", [S3Sink, FirehoseSink])
def test_a_sink_gives_up_on_what_a_retry_cannot_cure(kind: Any) -> None:
    clock = Clock()
    client = FlakyAws(aws_error("AccessDenied", 403))
    # the sink's error names the record it did not store; the AWS error is its cause
    with pytest.raises(CaptureSinkError) as failed:
        sink(kind, client, clock).write([record()])
    assert isinstance(failed.value.__cause__, ClientError)
    assert len(failed.value.unstored or ()) == 1
    assert (client.calls, clock.sleeps) == (1, [])


@pytest.mark.parametrize("kind", [S3Sink, FirehoseSink])
def test_a_sinks_retries_stop_at_its_quota(kind: Any) -> None:
    clock = Clock()
    client = FlakyAws(*[aws_error("ThrottlingException")] * 20)
    writer = sink(kind, client, clock)
    writer.quota = RetryQuota(capacity=THROTTLED_RETRY_COST)
    for _ in range(3):
        with pytest.raises(CaptureSinkError) as failed:
            writer.write([record()])
        assert isinstance(failed.value.__cause__, ClientError)
    assert client.calls == 3 + 1  # one retry paid for, then none


def test_firehose_refusals_are_retried_after_a_backoff() -> None:
    clock = Clock()

    class Refusing(FlakyAws):
        def put_record_batch(self, Records: list[dict[str, bytes]], **_: Any
                             ) -> dict[str, Any]:
            self.calls += 1
            return {"FailedPutCount": len(Records), "RequestResponses": [
                {"ErrorCode": "ServiceUnavailableException"} for _ in Records]}

    client = Refusing()
    with pytest.raises(CaptureSinkError, match=r"refused 1 record.*after 3 attempts"):
        sink(FirehoseSink, client, clock).write([record()])
    assert client.calls == 3 and clock.sleeps == [pytest.approx(0.05), pytest.approx(0.1)]


def test_botocores_retryable_failures_are_recognised() -> None:
    assert retry_kind(aws_error("ThrottlingException")) is True
    assert retry_kind(aws_error("Whatever", 429)) is True
    assert retry_kind(aws_error("InternalError", 500)) is False
    assert retry_kind(EndpointConnectionError(endpoint_url="http://127.0.0.1:1")) is False
    assert retry_kind(aws_error("NoSuchBucket", 404)) is None
    assert retry_kind(ValueError("x")) is None


@pytest.mark.parametrize(("code", "status", "kind"), [
    ("ThrottlingException", 400, True),
    ("SlowDown", 503, True),  # throttling wins over the transient status
    ("RequestLimitExceeded", 400, True),
    ("ServiceUnavailableException", None, True),  # Firehose's per-record throttle
    ("Unknown", 429, True),
    ("ModelNotReadyException", 429, True),
    ("InternalFailure", 500, False),
    ("InternalDependencyException", 530, False),
    ("ServiceUnavailable", 503, False),
    ("RequestTimeout", 400, False),
    ("Unknown", 504, False),
    ("ValidationError", 400, None),
    ("ModelError", 424, None),
    (None, None, None),
])
def test_one_classifier_decides_for_every_aws_caller(code: str | None, status: int | None,
                                                     kind: bool | None) -> None:
    assert classify(code, status) is kind
    if status is not None:  # the capture sinks read a boto3 error the same way
        assert retry_kind(aws_error(code or "", status)) is kind


# -- the emulator's supervisor ------------------------------------------------------------------

def test_the_supervisor_waits_the_policys_ceiling() -> None:
    assert [supervision.backoff(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 8, 8]
    policy = supervision.RESTART_POLICY
    assert [supervision.backoff(n) for n in range(1, 7)] == [policy.ceiling(n)
                                                            for n in range(1, 7)]


@pytest.mark.parametrize("service", ["s3", "firehose"])
def test_botocore_does_not_retry_under_the_sinks(service: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One policy: botocore's standard mode under the sinks' would multiply the attempts."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert sinks._client(service).meta.config.retries["total_max_attempts"] == 1
