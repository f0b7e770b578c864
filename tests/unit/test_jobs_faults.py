"""The jobs room under faults, part by part: the one mapping of AWS failures to 503
``JobsUnavailable`` (and what it leaves alone), and a job's endpoint calls, retried while a
retry may cure them and never sent again once an answer arrived."""
from __future__ import annotations

import io
import json
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from botocore.response import StreamingBody

from chalicelib.core.config import Settings
from chalicelib.core.errors import (
    EndpointError,
    EndpointUnavailableError,
    JobsUnavailableError,
    ModelError,
    RetryLaterError,
)
from chalicelib.inference.endpoint import EndpointClient, Invocation
from chalicelib.jobs.awsfaults import aws_faults, translated, unavailable
from chalicelib.jobs.invoking import WholeAnswers, job_retry_policy


def _client_error(code: str, status: int, operation: str = "GetItem",
                  headers: dict[str, str] | None = None) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (test)"},
                        "ResponseMetadata": {"HTTPStatusCode": status,
                                             "HTTPHeaders": headers or {}}}, operation)


# --- one mapping: what a retry may cure is a 503 with Retry-After ---------------------------

@pytest.mark.parametrize(("error", "retry_after"), [
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:9/b/k"), 2),  # refused
    (ConnectTimeoutError(endpoint_url="http://10.255.255.1/"), 2),
    (ReadTimeoutError(endpoint_url="http://127.0.0.1:9/"), 2),
    (ConnectionClosedError(endpoint_url="http://127.0.0.1:9/"), 2),  # reset
    (ResponseStreamingError(error="reset"), 2),
    (IncompleteReadError(actual_bytes=1, expected_bytes=2), 2),
    (_client_error("InternalError", 500, "HeadObject"), 2),
    (_client_error("ServiceUnavailable", 503, "PutObject"), 2),
    (_client_error("InternalServerError", 500), 2),
    (_client_error("RequestTimeout", 400, "PutObject"), 2),
    (_client_error("SlowDown", 503, "PutObject"), 5),  # throttled: come back later
    (_client_error("ProvisionedThroughputExceededException", 400), 5),
    (_client_error("ThrottlingException", 400, "UpdateItem"), 5),
    (_client_error("TooManyRequests", 429), 5),
    (_client_error("ThrottlingException", 400, headers={"x-amz-retry-after": "12000"}), 12),
    (_client_error("SlowDown", 503, headers={"retry-after": "600"}), 60)])  # capped
def test_a_failure_a_retry_may_cure_is_a_503_with_retry_after(error: Exception,
                                                              retry_after: int) -> None:
    failure = unavailable(error)
    assert isinstance(failure, JobsUnavailableError) and isinstance(failure, RetryLaterError)
    assert (failure.STATUS_CODE, failure.CODE) == (503, "JobsUnavailable")
    assert failure.headers == {"Retry-After": str(retry_after)}
    assert "127.0.0.1" not in failure.message and "(test)" not in failure.message


@pytest.mark.parametrize("error", [
    _client_error("404", 404, "HeadObject"), _client_error("NoSuchKey", 404, "GetObject"),
    _client_error("412", 412, "HeadObject"), _client_error("PreconditionFailed", 412),
    _client_error("ConditionalCheckFailedException", 400, "UpdateItem"),
    _client_error("AccessDenied", 403, "PutObject"),
    _client_error("ResourceNotFoundException", 400), _client_error("NoSuchBucket", 404),
    _client_error("ValidationException", 400),
    NoCredentialsError(), ValueError("not AWS's")])
def test_other_failures_keep_their_meaning(error: Exception) -> None:
    assert unavailable(error) is None
    with pytest.raises(type(error)) as caught, aws_faults("test"):
        raise error
    assert caught.value is error


def test_every_route_side_call_goes_through_the_one_mapping() -> None:
    @translated("read job")
    def read(fail: Exception | None) -> str:
        if fail is not None:
            raise fail
        return "read"

    assert read(None) == "read"
    with pytest.raises(JobsUnavailableError):
        read(EndpointConnectionError(endpoint_url="http://127.0.0.1:9/"))
    with pytest.raises(ClientError):
        read(_client_error("AccessDenied", 403))


# --- a job's endpoint calls -------------------------------------------------------------------

class Runtime:
    """A sagemaker-runtime client that replays ``outcomes`` (an exception to raise, or a body
    whose reading raises one, or an answer) and counts its calls."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def invoke_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def close(self) -> None:
        pass


class CutBody:
    """A body whose reading fails half-way (the connection dropped after the headers)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def read(self, amount: int | None = None) -> bytes:
        raise self.error


def _answer(body: Any = None) -> dict[str, Any]:
    raw = json.dumps(body if body is not None else [0.1, 0.9]).encode()
    return {"Body": StreamingBody(io.BytesIO(raw), len(raw)), "ContentType": "application/json",
            "InvokedProductionVariant": "AllTraffic"}


def _job_client(runtime: Runtime, sleeps: list[float]) -> EndpointClient:
    policy = job_retry_policy(Settings(endpoint_name="e"))
    return EndpointClient(WholeAnswers(runtime), policy,  # type: ignore[arg-type]
                          sleep=sleeps.append, rng=lambda: 0.5)


INVOCATION = Invocation("e", b"[1]", "application/json", "application/json",
                        inference_id="0" * 32)
REFUSED = EndpointConnectionError(endpoint_url="http://127.0.0.1:9/")


def test_a_job_waits_out_an_endpoint_restarting_for_seconds() -> None:
    # the emulator's restart: a few seconds of refused connections, then an answer
    runtime, sleeps = Runtime(*[REFUSED] * 6, _answer()), list[float]()
    result = _job_client(runtime, sleeps).invoke(INVOCATION)
    assert runtime.calls == 7 and result.variant == "AllTraffic"
    assert sleeps == [0.25, 0.5, 1.0, 2.0, 4.0, 7.5]  # full jitter, doubling to 15 s
    assert sum(sleeps) > 4  # longer than the synchronous route would wait


@pytest.mark.parametrize("failure", [
    _client_error("ServiceUnavailable", 503, "InvokeEndpoint"),
    _client_error("ThrottlingException", 400, "InvokeEndpoint"),
    _client_error("ModelNotReadyException", 429, "InvokeEndpoint"),
    _client_error("InternalFailure", 500, "InvokeEndpoint"),
    ConnectionClosedError(endpoint_url="http://127.0.0.1:9/"),  # reset before any answer
    ConnectTimeoutError(endpoint_url="http://127.0.0.1:9/")])
def test_a_retriable_failure_is_retried(failure: Exception) -> None:
    runtime, sleeps = Runtime(failure, failure, _answer()), list[float]()
    _job_client(runtime, sleeps).invoke(INVOCATION)
    assert runtime.calls == 3 and len(sleeps) == 2


@pytest.mark.parametrize(("failure", "error"), [
    (_client_error("ModelError", 424, "InvokeEndpoint"), ModelError),
    (_client_error("ValidationError", 400, "InvokeEndpoint"), EndpointError),
    (ReadTimeoutError(endpoint_url="http://127.0.0.1:9/"), EndpointError)])  # it may be at it
def test_a_models_error_or_a_refused_request_is_not_retried(failure: Exception,
                                                            error: type[Exception]) -> None:
    runtime, sleeps = Runtime(failure, _answer()), list[float]()
    with pytest.raises(error):
        _job_client(runtime, sleeps).invoke(INVOCATION)
    assert runtime.calls == 1 and sleeps == []


@pytest.mark.parametrize("cut", [ResponseStreamingError(error="reset"),
                                 IncompleteReadError(actual_bytes=10, expected_bytes=4000),
                                 ConnectionClosedError(endpoint_url="http://127.0.0.1:9/")])
def test_an_answer_cut_short_is_never_asked_for_again(cut: Exception) -> None:
    # the endpoint ran the job and began to answer: a second call would run it twice
    runtime, sleeps = Runtime({**_answer(), "Body": CutBody(cut)}, _answer()), list[float]()
    with pytest.raises(EndpointError) as caught:
        _job_client(runtime, sleeps).invoke(INVOCATION)
    assert not isinstance(caught.value, EndpointUnavailableError)
    assert "cut short" in caught.value.message or "AnswerCutShort" in caught.value.message
    assert runtime.calls == 1 and sleeps == []


def test_the_retries_stop_at_the_jobs_deadline() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    runtime = Runtime(*[REFUSED] * 1000)
    client = EndpointClient(WholeAnswers(runtime),  # type: ignore[arg-type]
                            job_retry_policy(Settings(endpoint_name="e")), sleep=sleep,
                            clock=lambda: now[0], rng=lambda: 0.99)
    with pytest.raises(EndpointUnavailableError) as caught:
        client.invoke(INVOCATION, deadline=300.0)
    assert now[0] <= 300.0 - 72.0  # a whole attempt must still fit when one starts
    assert max(sleeps) < 15.0 and runtime.calls == len(sleeps) + 1
    assert caught.value.headers["Retry-After"].isdigit()
