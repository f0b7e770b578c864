"""The asynchronous backend: InvokeEndpointAsync as botocore's model of it takes it (Stubber),
sent through the jobs' endpoint client (retried by the rule a real-time job's call is), and the
SNS notification (SageMaker's shape, as the emulator's outbox writes it) finishing the job once,
whatever it carries."""
from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
)
from botocore.stub import Stubber

from chalicelib.calls import Answer
from chalicelib.core.errors import EndpointError
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import AsyncInvocation, EndpointClient
from chalicelib.jobs.asyncinference import complete, parse_completion, start
from chalicelib.jobs.records import Job, JobState, new_job_id
from chalicelib.jobs.store import MemoryJobStore

NOW = 1_800_000_000.0
LEASE_UNTIL = NOW + 900 + 6 * 3600 + 120  # the endpoint's timeout and SageMaker's TTL


def _queued(store: MemoryJobStore) -> Job:
    return store.create(Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
                            created_at=NOW, updated_at=NOW,
                            input_location="s3://b/dev/jobs/uploads/" + "e" * 32,
                            expires_at=int(NOW) + 60))


def _message(job_id: str, status: str = "Completed", **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"contentType": "application/json"}
    if status == "Completed":
        response["outputLocation"] = "s3://b/output/1f0c.out"
    message = {"awsRegion": "us-east-1", "eventTime": "2027-01-15T08:00:00.000Z",
               "receivedTime": "2027-01-15T07:59:58.000Z", "invocationStatus": status,
               "requestParameters": {"endpointName": "iris-async",
                                     "inputLocation": "s3://b/dev/jobs/uploads/x"},
               "responseParameters": response, "inferenceId": job_id, "eventVersion": "1.0",
               "eventSource": "aws:sagemaker", "eventName": "InferenceResult"}
    message.update(extra)
    return message


def _once(client: Any) -> EndpointClient:
    """The jobs' endpoint client around ``client``, one attempt (no retry)."""
    return EndpointClient(client, RetryPolicy(max_attempts=1, attempt_timeout=1.0))


def test_a_job_is_queued_on_the_endpoint_once_with_its_id() -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    client = boto3.client("sagemaker-runtime", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    with Stubber(client) as stubber:
        stubber.add_response(
            "invoke_endpoint_async",
            {"InferenceId": job.job_id, "OutputLocation": "s3://b/output/1f0c.out"},
            {"EndpointName": "iris-async", "InputLocation": job.input_location,
             "InferenceId": job.job_id, "ContentType": "text/csv",
             "InvocationTimeoutSeconds": 1200})
        running = start(_once(client), store, job, "iris-async", "text/csv", 1200, runner_id="r-1",
                        lease_until=LEASE_UNTIL)
        assert running.state is JobState.RUNNING and running.runner_id == "r-1"
        assert running.lease_expires_at == LEASE_UNTIL
        for runner_id in ("r-1", "r-2"):  # Lambda's retry, a duplicate delivery: no call
            again = start(_once(client), store, job, "iris-async", "text/csv", 1200,
                          runner_id=runner_id, lease_until=LEASE_UNTIL)
            assert again == running
        stubber.assert_no_pending_responses()


def _runtime() -> Any:
    return boto3.client("sagemaker-runtime", region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def test_a_start_that_loses_the_claim_sends_nothing() -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    store.claim(job.job_id, "r-1", LEASE_UNTIL)  # another runner claimed it a moment before
    client = _runtime()
    with Stubber(client) as stubber:  # no response queued: a call would fail the test
        started = start(_once(client), store, job, "iris-async", "text/csv", runner_id="r-2",
                        lease_until=LEASE_UNTIL)
        stubber.assert_no_pending_responses()
    assert started.state is JobState.RUNNING and started.runner_id == "r-1"


@pytest.mark.parametrize(("code", "status", "expected", "words"), [
    ("ThrottlingException", 400, "EndpointUnavailable", "'iris-async' could not take the job "
                                                        "(ThrottlingException)"),
    ("ServiceUnavailable", 503, "EndpointUnavailable", "(ServiceUnavailable), retries included"),
    ("ValidationError", 400, "EndpointError", "rejected the request (ValidationError)")])
def test_a_failed_call_fails_the_claimed_job_and_a_retry_sends_nothing(
        code: str, status: int, expected: str, words: str) -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    client = _runtime()
    with Stubber(client) as stubber:
        stubber.add_client_error("invoke_endpoint_async", service_error_code=code,
                                 http_status_code=status, service_message="no such endpoint")
        failed = start(_once(client), store, job, "iris-async", "text/csv", runner_id="r-1",
                       lease_until=LEASE_UNTIL)
        assert failed.state is JobState.FAILED
        assert failed.view()["error"]["Code"] == expected
        assert words in failed.view()["error"]["Message"]
        assert start(_once(client), store, job, "iris-async", "text/csv", runner_id="r-1",
                     lease_until=LEASE_UNTIL) == failed
        stubber.assert_no_pending_responses()


class Unreachable:
    """A runtime whose first ``refused`` calls find nothing listening, then queue the job."""

    def __init__(self, refused: int) -> None:
        self.refused, self.calls = refused, 0

    def invoke_endpoint_async(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.refused:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
        return {"InferenceId": kwargs["InferenceId"], "OutputLocation": "s3://b/o.out"}


def test_a_call_that_never_answered_fails_the_job_as_unavailable() -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    runtime = Unreachable(refused=1)
    failed = start(_once(runtime), store, job, "iris-async", "text/csv", runner_id="r-1",
                   lease_until=LEASE_UNTIL)
    error = failed.view()["error"]
    assert error["Code"] == "EndpointUnavailable"
    assert "'iris-async' could not take the job (unreachable)" in error["Message"]
    assert runtime.calls == 1


def test_a_refused_connection_is_retried_by_the_jobs_policy_until_the_job_is_queued() -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    runtime, sleeps = Unreachable(refused=5), list[float]()
    policy = RetryPolicy(max_attempts=10, budget_seconds=60, attempt_timeout=1.0)
    client = EndpointClient(runtime, policy, sleep=sleeps.append)  # type: ignore[arg-type]
    running = start(client, store, job, "iris-async", "text/csv", runner_id="r-1",
                    lease_until=LEASE_UNTIL)
    assert running.state is JobState.RUNNING
    assert runtime.calls == 6 and len(sleeps) == 5


def _answer_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "scripted"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "InvokeEndpointAsync")


class Scripted:
    """A runtime whose calls raise the scripted failures in turn, then queue the job."""

    def __init__(self, *failures: Exception) -> None:
        self.failures, self.calls = list(failures), 0

    def invoke_endpoint_async(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {"InferenceId": kwargs["InferenceId"], "OutputLocation": "s3://b/o.out"}


def _patient(runtime: Scripted) -> EndpointClient:
    policy = RetryPolicy(max_attempts=10, budget_seconds=60, attempt_timeout=1.0)
    return EndpointClient(runtime, policy, sleep=lambda _: None)  # type: ignore[arg-type]


def _async_call() -> AsyncInvocation:
    return AsyncInvocation("iris-async", "s3://b/in", "text/csv", new_job_id(), 60)


@pytest.mark.parametrize("failure", [
    ConnectionClosedError(endpoint_url="http://127.0.0.1:9"),  # the request may have arrived
    _answer_error("InternalFailure", 500),  # ... and been queued before the endpoint failed
    _answer_error("ServiceUnavailable", 503)], ids=["closed", "500", "503"])
def test_a_failure_after_the_request_may_have_arrived_is_not_sent_again(
        failure: Exception) -> None:
    runtime = Scripted(failure)
    with pytest.raises(EndpointError):
        _patient(runtime).invoke_async(_async_call())
    assert runtime.calls == 1  # the same InferenceId is never queued twice


@pytest.mark.parametrize("failure", [
    EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),  # refused: never arrived
    ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"),
    _answer_error("ThrottlingException", 400),  # a throttle is a refusal
    _answer_error("TooManyRequests", 429)], ids=["refused", "connect-timeout", "throttled",
                                                  "429"])
def test_a_failure_that_proves_the_request_never_arrived_is_retried(failure: Exception) -> None:
    runtime = Scripted(failure, failure)
    assert _patient(runtime).invoke_async(_async_call()) == "s3://b/o.out"
    assert runtime.calls == 3


def test_a_completed_inference_becomes_the_jobs_answer_once() -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    read: list[str] = []

    def read_output(location: str) -> Answer:
        read.append(location)
        return Answer.json({"predictions": [[0.9, 0.05, 0.05]]})

    completion = parse_completion(json.dumps(_message(job.job_id)))
    assert completion is not None
    done = complete(store, completion, read_output, lambda job, answer: "unused")
    assert done is not None and done.state is JobState.SUCCEEDED
    assert done.result == {"predictions": [[0.9, 0.05, 0.05]]}
    assert complete(store, completion, read_output, lambda job, answer: "unused") == done
    assert read == ["s3://b/output/1f0c.out"]


@pytest.mark.parametrize(("status", "reason", "code"), [
    ("Failed", "Received server error (500) from model: division by zero", "ModelError"),
    ("Expired", "The request waited longer than RequestTTLSeconds", "EndpointTimeout")])
def test_a_failed_inference_fails_the_job_with_the_endpoints_message(status: str, reason: str,
                                                                      code: str) -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    job = _queued(store)
    completion = parse_completion(_message(job.job_id, status, failureReason=reason))
    assert completion is not None
    failed = complete(store, completion, lambda location: pytest.fail("nothing to read"),
                      lambda job, answer: "unused")
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.view()["error"] == {"Code": code, "Message": reason}


@pytest.mark.parametrize("message", [
    "not json", "[]", json.dumps({"eventSource": "aws:s3"}),
    json.dumps({**_message("x"), "invocationStatus": "Running"}),
    json.dumps({**_message("x"), "inferenceId": 7})])
def test_other_messages_are_not_notifications(message: str) -> None:
    assert parse_completion(message) is None


def test_a_notification_for_no_job_of_this_stage_is_ignored() -> None:
    store = MemoryJobStore(clock=lambda: NOW)
    for inference_id in ("not-a-job-id", new_job_id()):
        completion = parse_completion(_message(inference_id))
        assert completion is not None
        assert complete(store, completion, lambda location: pytest.fail("read"),
                        lambda job, answer: "unused") is None
