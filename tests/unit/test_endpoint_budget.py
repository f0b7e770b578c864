"""EndpointClient's time budget, on an injected clock: no attempt starts unless a whole one
(connect and read timeouts) still fits before the deadline, and the backoff sleeps count; its
retry quota (a throttled endpoint is not sent every request three times); its ``Retry-After``.

A real botocore client with a Stubber answers; the clock is a fake that moves only when an
attempt is made (each takes ``ATTEMPT_SECONDS``) or when the client sleeps, so every figure
below is exact and no test waits.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.response import StreamingBody
from botocore.stub import Stubber

from chalicelib.calls import CallOptions
from chalicelib.core.config import Settings
from chalicelib.core.errors import EndpointUnavailableError, PreprocessingTimeoutError
from chalicelib.core.retries import (
    MAX_RETRY_AFTER_S,
    QUOTA_CAPACITY,
    RETRY_COST,
    THROTTLED_RETRY_COST,
    RetryPolicy,
    RetryQuota,
)
from chalicelib.images import imaging
from chalicelib.inference.endpoint import EndpointClient, Invocation
from chalicelib.inference.pipeline import Predictor
from tests import imagefactory

ATTEMPT_SECONDS = 0.5  # what one failed attempt takes on the fake clock
START = 1000.0
INVOCATION = Invocation("efficientnet-lite0", b"x", "image/png", "application/json")


@dataclass
class FakeClock:
    now: float = START
    sleeps: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    """The clock's time as each attempt began."""

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def attempt(self, **_: Any) -> None:
        self.starts.append(self.now)
        self.now += ATTEMPT_SECONDS


@dataclass
class Budgeted:
    clock: FakeClock
    stubber: Stubber
    client: Any

    def endpoint(self, policy: RetryPolicy, delay: float) -> EndpointClient:
        """The client under test; every backoff is ``delay`` (full jitter drawn at its top)."""
        assert policy.base_delay == policy.max_delay == delay
        return EndpointClient(self.client, policy, sleep=self.clock.sleep, clock=self.clock,
                              rng=lambda: 1.0)

    def throttle(self, times: int) -> None:
        for _ in range(times):
            self.stubber.add_client_error("invoke_endpoint", "ThrottlingException",
                                          "Rate exceeded", 400)


@pytest.fixture
def budgeted() -> Iterator[Budgeted]:
    client = boto3.client("sagemaker-runtime", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    clock = FakeClock()
    # emitted for every call the client makes, stubbed or not
    client.meta.events.register("before-parameter-build.sagemaker-runtime.InvokeEndpoint",
                                clock.attempt)
    with Stubber(client) as stubber:
        yield Budgeted(clock, stubber, client)


@pytest.mark.parametrize("remaining", [2.99, 0.0, -1.0])
def test_no_attempt_starts_when_the_budget_cannot_hold_one(budgeted: Budgeted,
                                                           remaining: float) -> None:
    """The cause named truthfully: a 503 to retry, not the endpoint's 504 timeout."""
    endpoint = budgeted.endpoint(RetryPolicy(attempt_timeout=3.0, base_delay=0.1,
                                             max_delay=0.1), 0.1)
    with pytest.raises(PreprocessingTimeoutError, match="before the endpoint could be called"
                       ) as raised:
        endpoint.invoke(INVOCATION, deadline=START + remaining)
    assert budgeted.clock.starts == []  # nothing was queued: the endpoint was never called
    assert (raised.value.STATUS_CODE, raised.value.CODE) == (503, "PreprocessingTimeout")
    assert raised.value.headers == {"Retry-After": "2"}
    assert f"{max(0.0, remaining):.1f} s were left; a call needs 3.0 s" in raised.value.message


def test_an_attempt_starts_when_exactly_one_fits(budgeted: Budgeted) -> None:
    budgeted.throttle(1)
    endpoint = budgeted.endpoint(RetryPolicy(max_attempts=5, attempt_timeout=3.0,
                                             base_delay=0.1, max_delay=0.1), 0.1)
    with pytest.raises(EndpointUnavailableError):
        endpoint.invoke(INVOCATION, deadline=START + 3.0)
    assert budgeted.clock.starts == [START]  # and no retry: 2.5 s left after it
    assert budgeted.clock.sleeps == []


def test_retries_stop_when_the_budget_cannot_hold_one_more_attempt(budgeted: Budgeted) -> None:
    """Budget 10 s (the policy's, from the injected clock), an attempt needs 3 s, each failed
    attempt takes 0.5 s and each backoff 1 s: attempts start at 0, 1.5, 3, 4.5 and 6 s; after
    the fifth, 3.5 s are left, less than a backoff and an attempt (4 s). Max attempts (10) is
    not what stops it."""
    policy = RetryPolicy(max_attempts=10, budget_seconds=10.0, attempt_timeout=3.0,
                         base_delay=1.0, max_delay=1.0)
    budgeted.throttle(policy.max_attempts)
    endpoint = budgeted.endpoint(policy, 1.0)
    with pytest.raises(EndpointUnavailableError) as raised:
        endpoint.invoke(INVOCATION)
    # the endpoint's own last answer, as a 503 the client may retry later
    assert raised.value.details == {"endpoint_error": "ThrottlingException"}
    assert [start - START for start in budgeted.clock.starts] == [0.0, 1.5, 3.0, 4.5, 6.0]
    assert budgeted.clock.sleeps == [1.0] * 4
    deadline = START + policy.budget_seconds
    assert all(deadline - start >= policy.attempt_timeout for start in budgeted.clock.starts)


def test_the_backoff_sleep_counts_against_the_budget(budgeted: Budgeted) -> None:
    """After the first attempt 4.5 s are left: an attempt (3 s) would fit, but not after the
    2 s backoff, so there is no sleep and no second attempt (it would have started with 2.5 s
    left and outlived the budget)."""
    budgeted.throttle(3)
    endpoint = budgeted.endpoint(RetryPolicy(max_attempts=3, attempt_timeout=3.0,
                                             base_delay=2.0, max_delay=2.0), 2.0)
    with pytest.raises(EndpointUnavailableError):
        endpoint.invoke(INVOCATION, deadline=START + 5.0)
    assert budgeted.clock.starts == [START]
    assert budgeted.clock.sleeps == []


def test_a_retry_that_fits_is_made(budgeted: Budgeted) -> None:
    """The same, with 0.5 s more: backoff and attempt fit, and the second attempt answers."""
    budgeted.throttle(1)
    body = b"[0.25, 0.75]"
    budgeted.stubber.add_response("invoke_endpoint", {
        "Body": StreamingBody(BytesIO(body), len(body)), "ContentType": "application/json"})
    endpoint = budgeted.endpoint(RetryPolicy(max_attempts=3, attempt_timeout=3.0,
                                             base_delay=2.0, max_delay=2.0), 2.0)
    result = endpoint.invoke(INVOCATION, deadline=START + 5.5)
    assert (result.body, result.attempts) == (body, 2)
    assert budgeted.clock.starts == [START, START + 2.5]
    assert budgeted.clock.sleeps == [2.0]
    budgeted.stubber.assert_no_pending_responses()


# -- the pipeline: preprocessing has the budget less one attempt; the endpoint, that attempt ----

ATTEMPT = 3.0
BUDGET = 10.0
DECODE_SECONDS = 2.0  # what the decode and resize take on the fake clock
ENCODE_SECONDS = 0.5


@dataclass
class Pipeline:
    predictor: Predictor
    encodes: list[float]
    """The clock's time at each encode."""


@pytest.fixture
def pipeline(budgeted: Budgeted, monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    """A Predictor on the fake clock, whose decode-and-resize and encode move it."""
    clock = budgeted.clock
    encodes: list[float] = []
    decode_and_resize, encode = imaging.decode_and_resize, imaging.encode

    def slow_decode(*args: Any, **kwargs: Any) -> Any:
        clock.now += DECODE_SECONDS
        return decode_and_resize(*args, **kwargs)

    def slow_encode(*args: Any, **kwargs: Any) -> Any:
        encodes.append(clock.now)
        clock.now += ENCODE_SECONDS
        return encode(*args, **kwargs)

    monkeypatch.setattr(imaging, "decode_and_resize", slow_decode)
    monkeypatch.setattr(imaging, "encode", slow_encode)
    policy = RetryPolicy(max_attempts=3, budget_seconds=BUDGET, attempt_timeout=ATTEMPT,
                         base_delay=0.1, max_delay=0.1)
    settings = Settings.from_env({"ENDPOINT_NAME": "efficientnet-lite0"}, passthrough=False)
    return Pipeline(Predictor(settings, budgeted.endpoint(policy, 0.1), None), encodes)


def answer(budgeted: Budgeted) -> None:
    body = b"[0.25, 0.75]"
    budgeted.stubber.add_response("invoke_endpoint", {
        "Body": StreamingBody(BytesIO(body), len(body)), "ContentType": "application/json"})


@pytest.mark.parametrize("late", [0.01, 1.0, 5.0])
def test_a_decode_past_its_share_is_refused_before_the_encode_and_the_call(
        budgeted: Budgeted, pipeline: Pipeline, late: float) -> None:
    """The request started long enough ago that the decode ends ``late`` seconds past the
    preprocessing deadline (budget end less one attempt): 503, no encode, no call."""
    started = START - (BUDGET - ATTEMPT - DECODE_SECONDS) - late
    with pytest.raises(PreprocessingTimeoutError):
        pipeline.predictor.predict(imagefactory.jpeg(320, 240), CallOptions(k=1), "r",
                                   deadline=started + BUDGET)
    assert pipeline.encodes == [] and budgeted.clock.starts == []


def test_an_encode_past_the_share_is_refused_before_the_call(budgeted: Budgeted,
                                                             pipeline: Pipeline) -> None:
    """The decode ends inside the share, the encode after it: the endpoint is not called."""
    deadline = START + DECODE_SECONDS + ATTEMPT + ENCODE_SECONDS / 2
    with pytest.raises(PreprocessingTimeoutError):
        pipeline.predictor.predict(imagefactory.jpeg(320, 240), CallOptions(k=1), "r",
                                   deadline=deadline)
    assert len(pipeline.encodes) == 1 and budgeted.clock.starts == []


@pytest.mark.parametrize("spare", [0.0, 0.5, 4.0])
def test_preprocessing_done_within_its_share_always_gets_a_whole_attempt(
        budgeted: Budgeted, pipeline: Pipeline, spare: float) -> None:
    """Decode and encode end ``spare`` seconds before the preprocessing deadline (0: exactly
    on it): the endpoint is called, with a whole attempt's time before the budget ends."""
    deadline = START + DECODE_SECONDS + ENCODE_SECONDS + spare + ATTEMPT
    answer(budgeted)
    result = pipeline.predictor.predict(imagefactory.jpeg(320, 240), CallOptions(k=1), "r",
                                        deadline=deadline)
    assert result.attempts == 1
    assert budgeted.clock.starts == [START + DECODE_SECONDS + ENCODE_SECONDS]
    assert deadline - budgeted.clock.starts[0] >= ATTEMPT


# -- the retry quota: botocore's standard mode's token bucket --------------------------------

class ThrottledRuntime:
    """A sagemaker-runtime client that throttles every call until told to answer."""

    def __init__(self) -> None:
        self.calls = 0
        self.answering = False

    def invoke_endpoint(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        if self.answering:
            return {"Body": BytesIO(b"[1.0]"), "ContentType": "application/json"}
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "InvokeEndpoint")


def quota_client(runtime: ThrottledRuntime, quota: RetryQuota,
                 policy: RetryPolicy | None = None) -> EndpointClient:
    clock = FakeClock()
    return EndpointClient(cast(Any, runtime), policy or RetryPolicy(attempt_timeout=3.0),
                          quota=quota, sleep=clock.sleep, clock=clock, rng=lambda: 1.0)


def test_a_throttled_endpoint_sees_at_most_the_quotas_retries() -> None:
    """200 requests, 3 attempts each, all throttled: without a quota 600 calls; with one,
    each request's first call and only the retries the bucket pays (500 / 5)."""
    runtime, quota = ThrottledRuntime(), RetryQuota()
    endpoint = quota_client(runtime, quota)
    requests = 200
    for _ in range(requests):
        with pytest.raises(EndpointUnavailableError):
            endpoint.invoke(INVOCATION)
    assert runtime.calls == requests + QUOTA_CAPACITY // THROTTLED_RETRY_COST
    assert quota.available == 0


def test_a_connection_failure_retry_costs_more() -> None:
    quota = RetryQuota()
    runtime = ThrottledRuntime()

    def refuse(**_: Any) -> dict[str, Any]:
        runtime.calls += 1
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    runtime.invoke_endpoint = refuse  # type: ignore[method-assign]
    with pytest.raises(EndpointUnavailableError):
        quota_client(runtime, quota).invoke(INVOCATION)
    assert (runtime.calls, quota.available) == (3, QUOTA_CAPACITY - 2 * RETRY_COST)


def test_successes_refund_the_quota() -> None:
    """A success after a retry gives back what the retry took; one at once gives back 1."""
    runtime, quota = ThrottledRuntime(), RetryQuota()
    quota.acquire(throttled=False)  # 486 left
    endpoint = quota_client(runtime, quota)
    with pytest.raises(EndpointUnavailableError):
        endpoint.invoke(INVOCATION)  # two throttled retries: 476 left
    assert quota.available == QUOTA_CAPACITY - RETRY_COST - 2 * THROTTLED_RETRY_COST
    runtime.answering = True
    for _ in range(3):
        assert endpoint.invoke(INVOCATION).attempts == 1
    assert quota.available == QUOTA_CAPACITY - RETRY_COST - 2 * THROTTLED_RETRY_COST + 3
    for _ in range(QUOTA_CAPACITY):
        endpoint.invoke(INVOCATION)
    assert quota.available == QUOTA_CAPACITY  # never over the capacity


def test_an_empty_quota_gives_up_at_once_and_recovers_with_successes() -> None:
    runtime, quota = ThrottledRuntime(), RetryQuota(capacity=THROTTLED_RETRY_COST)
    endpoint = quota_client(runtime, quota)
    with pytest.raises(EndpointUnavailableError):
        endpoint.invoke(INVOCATION)  # one retry paid, then no more
    assert (runtime.calls, quota.available) == (2, 0)
    with pytest.raises(EndpointUnavailableError) as raised:
        endpoint.invoke(INVOCATION)
    assert runtime.calls == 3  # no retry at all
    assert raised.value.headers == {"Retry-After": "10"}  # come back later: the policy's wait
    runtime.answering = True
    for _ in range(THROTTLED_RETRY_COST):
        endpoint.invoke(INVOCATION)
    runtime.answering, runtime.calls = False, 0
    with pytest.raises(EndpointUnavailableError):
        endpoint.invoke(INVOCATION)
    assert runtime.calls == 2  # refilled: one retry again


# -- Retry-After: what is known, not a constant ------------------------------------------------

def unavailable(budgeted: Budgeted, policy: RetryPolicy, headers: dict[str, str] | None = None,
                ) -> EndpointUnavailableError:
    for _ in range(policy.max_attempts):
        budgeted.stubber.add_client_error(
            "invoke_endpoint", "ThrottlingException", "Rate exceeded", 400,
            response_meta={"HTTPHeaders": headers or {}})
    endpoint = EndpointClient(budgeted.client, policy, sleep=budgeted.clock.sleep,
                              clock=budgeted.clock, rng=lambda: 0.5)
    with pytest.raises(EndpointUnavailableError) as raised:
        endpoint.invoke(INVOCATION)
    return raised.value


@pytest.mark.parametrize(("policy", "retry_after"), [
    (RetryPolicy(attempt_timeout=3.0), "1"),  # 0.4 s next: at least a second
    (RetryPolicy(attempt_timeout=3.0, base_delay=1.0, max_delay=8.0), "4"),
    (RetryPolicy(attempt_timeout=3.0, base_delay=1.5, max_delay=2.5), "3"),  # 2.5, rounded up
])
def test_retry_after_is_the_backoff_the_policy_would_wait_next(
        budgeted: Budgeted, policy: RetryPolicy, retry_after: str) -> None:
    assert unavailable(budgeted, policy).headers == {"Retry-After": retry_after}


@pytest.mark.parametrize(("headers", "retry_after"), [
    ({"retry-after": "7"}, "7"),
    ({"x-amz-retry-after": "2500"}, "3"),  # milliseconds, rounded up
    ({"retry-after": "86400"}, str(MAX_RETRY_AFTER_S)),
    ({"retry-after": "soon"}, "1"),  # unreadable: the policy's own
])
def test_retry_after_honours_the_endpoints_own(budgeted: Budgeted, headers: dict[str, str],
                                               retry_after: str) -> None:
    policy = RetryPolicy(max_attempts=1, attempt_timeout=3.0)
    error = unavailable(budgeted, policy, headers)
    assert error.headers == {"Retry-After": retry_after}


def test_the_endpoints_own_wait_is_a_floor_for_the_backoff(budgeted: Budgeted) -> None:
    policy = RetryPolicy(max_attempts=2, attempt_timeout=3.0, base_delay=0.1, max_delay=0.1)
    unavailable(budgeted, policy, {"retry-after": "2"})
    assert budgeted.clock.sleeps == [2.0]
