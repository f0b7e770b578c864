"""The job routes through Chalice's test client and the job functions called as Lambda calls
them (S3 and SNS event dicts), on moto's in-process S3 and a stubbed sagemaker-runtime client:
both backends end to end, the upload and job checks, retried events, failures, jobs off."""
from __future__ import annotations

import base64
import dataclasses
import importlib.util
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.stub import ANY, Stubber
from chalice.test import Client
from moto import mock_aws

import app as app_module
from chalicelib.calls import CallOptions
from chalicelib.capture import Capturer
from chalicelib.capture.records import CaptureRecord
from chalicelib.core.config import Settings
from chalicelib.core.errors import UploadNotFoundError
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.tensors import MAX_INSTANCES
from chalicelib.jobs import runner
from chalicelib.jobs.backends.base import backend_of
from chalicelib.jobs.lifetime import RunnerLifetime
from chalicelib.jobs.records import Job, JobState, new_job_id
from chalicelib.jobs.store import MemoryJobStore
from chalicelib.jobs.table import TableJobStore
from chalicelib.registry.kinds import JobsBackend
from chalicelib.registry.specs import JobsSpec
from chalicelib.services import Services
from tests.functional.conftest import ENDPOINT, endpoint_response, probabilities
from tests.imagefactory import jpeg

BUCKET, PREFIX = "sagegate-test-jobs", "test/jobs/"
SUCCESS_TOPIC = "arn:aws:sns:us-east-1:123456789012:sagegate-test-jobs-done"
ERROR_TOPIC = "arn:aws:sns:us-east-1:123456789012:sagegate-test-jobs-failed"
IRIS_ROW = b"5.1,3.5,1.4,0.2\n"
RUNNER_LIFETIME_SECONDS = RunnerLifetime().lease_seconds(None)  # no JOB_RUNNER_TIMEOUT_SECONDS


def _app_with_jobs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """app.py imported afresh with a jobs stage's variables, as Lambda and `chalice package`
    import it: the job functions are declared only then."""
    for name, value in {"JOBS_BUCKET": BUCKET, "JOBS_PREFIX": PREFIX,
                        "JOBS_SUCCESS_TOPIC": SUCCESS_TOPIC,
                        "JOBS_ERROR_TOPIC": ERROR_TOPIC}.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("app_with_jobs",
                                                  Path(app_module.__file__))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MemorySink:
    """Keeps the records written (a capture sink in memory)."""

    def __init__(self) -> None:
        self.records: list[CaptureRecord] = []

    def write(self, records: Any) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass

    def lines(self) -> list[bytes]:
        return [record.line for record in self.records]


@dataclasses.dataclass
class Stage:
    app: ModuleType
    client: Client
    s3: Any
    stubber: Stubber
    store: MemoryJobStore
    sink: MemorySink
    services: Services

    def put_upload(self, body: bytes, content_type: str) -> str:
        upload_id = uuid.uuid4().hex
        self.s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}uploads/{upload_id}", Body=body,
                           ContentType=content_type)
        return upload_id

    def post(self, path: str, body: bytes | str, content_type: str = "application/json") -> Any:
        return self.client.http.post(path, body=body, headers={"Content-Type": content_type})

    def post_job(self, model: str, upload_id: str, query: str = "") -> Any:
        return self.post(f"/models/{model}/jobs{query}", json.dumps({"upload_id": upload_id}))

    def get(self, path: str) -> tuple[int, Any]:
        response = self.client.http.get(path)
        return response.status_code, json.loads(response.body)

    def tickets(self) -> list[str]:
        listed = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}tickets/")
        return [item["Key"] for item in listed.get("Contents", [])]

    def run_tickets(self, keys: list[str] | None = None, request_id: str | None = None) -> Any:
        """What S3 delivers to the runner: one record per ticket (keys URL-encoded); with
        ``request_id``, in a Lambda invocation of that request id (else none, as locally)."""
        records = [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                    "s3": {"bucket": {"name": BUCKET}, "object": {"key": key, "size": 40}}}
                   for key in (self.tickets() if keys is None else keys)]
        context = SimpleNamespace(aws_request_id=request_id) if request_id else None
        return self.app.job_runner({"Records": records}, context)

    def notify(self, message: dict[str, Any], function: str = "job_results") -> Any:
        topic = SUCCESS_TOPIC if function == "job_results" else ERROR_TOPIC
        event = {"Records": [{"EventSource": "aws:sns", "Sns": {
            "Type": "Notification", "TopicArn": topic, "Message": json.dumps(message),
            "MessageAttributes": {}, "Subject": None}}]}
        return getattr(self.app, function)(event, None)


@pytest.fixture
def stage(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stage]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    module = _app_with_jobs(monkeypatch)
    settings = Settings.from_env({"ENDPOINT_NAME": ENDPOINT}, passthrough=False,
                                 jobs_bucket=BUCKET, jobs_prefix=PREFIX)
    runtime = boto3.client("sagemaker-runtime", region_name="us-east-1")
    sink = MemorySink()
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        store = MemoryJobStore()
        services = Services(
            settings, job_store=store, s3=s3, capturer=Capturer("both", sink),
            job_endpoint=EndpointClient(runtime, RetryPolicy(max_attempts=1, budget_seconds=100,
                                                             attempt_timeout=72)))
        setattr(module, "services", services)  # noqa: B010 (a module loaded at run time)
        with Stubber(runtime) as stubber, Client(module.app, stage_name="local") as client:
            yield Stage(module, client, s3, stubber, store, sink, services)
            stubber.assert_no_pending_responses()


def _output(stage: Stage, body: bytes) -> str:
    key = f"async-output/{uuid.uuid4().hex}.out"
    stage.s3.put_object(Bucket=BUCKET, Key=key, Body=body, ContentType="application/json")
    return f"s3://{BUCKET}/{key}"


def _notification(job_id: str, status: str = "Completed", output: str | None = None,
                  reason: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "awsRegion": "us-east-1", "eventTime": "2027-01-15T08:00:00.000Z",
        "receivedTime": "2027-01-15T07:59:58.000Z", "invocationStatus": status,
        "requestParameters": {"endpointName": "iris-async"},
        "responseParameters": {"contentType": "application/json", "outputLocation": output},
        "inferenceId": job_id, "eventVersion": "1.0", "eventSource": "aws:sagemaker",
        "eventName": "InferenceResult"}
    if reason is not None:
        message["failureReason"] = reason
    return message


def test_a_realtime_image_job_answers_as_the_synchronous_route(stage: Stage) -> None:
    upload_id = stage.put_upload(jpeg(1600, 1200), "image/jpeg")
    response = stage.post_job(ENDPOINT, upload_id, "?k=2")
    assert response.status_code == 202, response.body
    accepted = json.loads(response.body)
    job_id = accepted["job_id"]
    assert accepted == {"job_id": job_id, "state": "queued"}
    assert response.headers["Location"] == f"/jobs/{job_id}"
    assert stage.get(f"/jobs/{job_id}")[1]["state"] == "queued"
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({285: 0.8})))
    assert stage.run_tickets() == {"jobs": {job_id: "succeeded"}}
    status, job = stage.get(f"/jobs/{job_id}")
    assert status == 200 and job["state"] == "succeeded"
    assert job["result"]["predictions"][0]["index"] == 285
    assert len(job["result"]["predictions"]) == 2  # the job's k
    assert job["result"]["request_id"] == job_id
    records = [json.loads(line) for line in stage.sink.lines()]
    assert [record["eventMetadata"]["inferenceId"] for record in records] == [job_id]


def test_a_retried_ticket_runs_nothing_twice(stage: Stage) -> None:
    upload_id = stage.put_upload(jpeg(320, 240), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({7: 0.9})))
    first = stage.run_tickets()
    again = stage.run_tickets()  # the stubber holds no second answer: a call would fail
    assert first == again == {"jobs": {job_id: "succeeded"}}


def test_an_async_tensor_job_is_queued_then_finished_by_the_notification(stage: Stage) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    job_id = json.loads(stage.post_job("iris", upload_id, "?k=1").body)["job_id"]
    endpoint_input = f"s3://{BUCKET}/{PREFIX}inputs/{job_id}"
    stage.stubber.add_response(
        "invoke_endpoint_async", {"InferenceId": job_id, "OutputLocation": "s3://x/y.out"},
        {"EndpointName": "iris-async", "InputLocation": endpoint_input, "InferenceId": job_id,
         "ContentType": "application/json", "InvocationTimeoutSeconds": 900})
    assert stage.run_tickets() == {"jobs": {job_id: "running"}}
    assert stage.run_tickets() == {"jobs": {job_id: "running"}}  # retried: not queued again
    sent = stage.s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}inputs/{job_id}")["Body"].read()
    assert json.loads(sent)["instances"] == [[5.1, 3.5, 1.4, 0.2]]
    output = _output(stage, json.dumps({"predictions": [[0.9, 0.06, 0.04]]}).encode())
    for _ in range(2):  # SNS delivers at least once
        assert stage.notify(_notification(job_id, output=output)) == {
            "jobs": {job_id: "succeeded"}}
    status, job = stage.get(f"/jobs/{job_id}")
    assert status == 200
    assert job["result"]["predictions"] == [[{"index": 0, "label": "setosa",
                                              "probability": pytest.approx(0.9)}]]
    assert job["result"]["endpoint"] == "iris-async" and job["result"]["request_id"] == job_id
    records = [json.loads(line) for line in stage.sink.lines()]
    assert len(records) == 1  # captured once, as SageMaker's async capture writes it
    assert json.loads(records[0]["captureData"]["endpointInput"]["data"]) == json.loads(sent)
    assert records[0]["eventMetadata"]["inferenceId"] == job_id


def _running_async_iris_job(stage: Stage) -> str:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    job_id: str = json.loads(stage.post_job("iris", upload_id, "?k=1").body)["job_id"]
    stage.stubber.add_response("invoke_endpoint_async",
                               {"InferenceId": job_id, "OutputLocation": "s3://x/y.out"})
    assert stage.run_tickets() == {"jobs": {job_id: "running"}}
    return job_id


def test_an_output_object_that_is_gone_fails_the_job_instead_of_leaving_it_running(
        stage: Stage) -> None:
    # a retry cannot bring the object back: raising would spend Lambda's retries and leave
    # the job running for ever
    job_id = _running_async_iris_job(stage)
    gone = f"s3://{BUCKET}/async-output/{uuid.uuid4().hex}.out"
    assert stage.notify(_notification(job_id, output=gone)) == {"jobs": {job_id: "failed"}}
    error = stage.get(f"/jobs/{job_id}")[1]["error"]
    assert error["Code"] == "InvalidEndpointResponse" and gone in error["Message"]


def test_an_input_that_is_gone_is_captured_without_it_and_the_job_succeeds(
        stage: Stage) -> None:
    job_id = _running_async_iris_job(stage)
    stage.s3.delete_object(Bucket=BUCKET, Key=f"{PREFIX}inputs/{job_id}")
    for listed in stage.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}uploads/")["Contents"]:
        stage.s3.delete_object(Bucket=BUCKET, Key=listed["Key"])
    output = _output(stage, json.dumps({"predictions": [[0.9, 0.06, 0.04]]}).encode())
    assert stage.notify(_notification(job_id, output=output)) == {"jobs": {job_id: "succeeded"}}
    [record] = [json.loads(line) for line in stage.sink.lines()]
    assert record["captureData"]["endpointInput"]["data"] == ""


@pytest.mark.parametrize("status,reason,code", [
    ("Failed", "ClientError: Received server error (500) from model: bad row", "ModelError"),
    ("Expired", "Request expired in the queue.", "EndpointTimeout"),
    # the endpoint's own transient failures, classified as a real-time job's call's are
    ("Failed", "ServiceUnavailable: ServiceUnavailable (emulator fault injection)",
     "EndpointUnavailable"),
    ("Failed", "ThrottlingException: too many requests", "EndpointUnavailable"),
    ("Failed", "InternalFailure: An internal failure occurred.", "EndpointUnavailable")])
def test_an_async_failure_fails_the_job_with_the_endpoints_message(
        stage: Stage, status: str, reason: str, code: str) -> None:
    job = stage.services.jobs.create_from_body(stage.services.registry.get("iris"), IRIS_ROW,
                                               "text/csv", CallOptions(), None)
    stage.store.advance(job.job_id, JobState.RUNNING)
    assert stage.notify(_notification(job.job_id, status, reason=reason),
                        "job_failures") == {"jobs": {job.job_id: "failed"}}
    assert stage.get(f"/jobs/{job.job_id}")[1]["error"] == {"Code": code, "Message": reason}


def test_an_endpoint_failure_lands_as_failed_with_the_models_message(stage: Stage) -> None:
    upload_id = stage.put_upload(jpeg(320, 240), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    stage.stubber.add_client_error(
        "invoke_endpoint", service_error_code="ModelError", http_status_code=424,
        response_meta={}, modeled_fields={"OriginalStatusCode": 500,
                                          "OriginalMessage": "CUDA out of memory"})
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    error = stage.get(f"/jobs/{job_id}")[1]["error"]
    assert error["Code"] == "ModelError" and "CUDA out of memory" in error["Message"]


def test_an_answer_too_large_to_inline_is_a_presigned_get(
        stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "INLINE_RESULT_BYTES", 64)
    upload_id = stage.put_upload(jpeg(320, 240), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({3: 0.7})))
    stage.run_tickets()
    job = stage.get(f"/jobs/{job_id}")[1]
    assert "result" not in job and job["state"] == "succeeded"
    answer = requests.get(job["result_url"], timeout=10)
    assert answer.status_code == 200 and answer.json()["predictions"][0]["index"] == 3


def test_an_upload_posted_through_the_presigned_form_runs_as_a_job(stage: Stage) -> None:
    response = stage.post("/uploads", json.dumps({"model": ENDPOINT,
                                                  "content_type": "image/jpeg"}))
    assert response.status_code == 200, response.body
    upload = json.loads(response.body)
    assert set(upload) == {"upload_id", "url", "fields", "expires_at"}
    posted = requests.post(upload["url"], data=upload["fields"],
                           files={"file": ("photo.jpg", jpeg(640, 480), "image/jpeg")},
                           timeout=10)
    assert posted.status_code in (200, 204), posted.text
    assert stage.post_job(ENDPOINT, upload["upload_id"]).status_code == 202


def test_an_upload_made_for_a_caller_is_that_callers_only(stage: Stage) -> None:
    # where auth identifies callers, an upload id that leaks is no use to anyone else: the
    # object carries its caller (a field and a condition of the presigned POST)
    jobs, iris = stage.services.jobs, stage.services.registry.get("iris")
    upload = jobs.presign("iris", "text/csv", "apikey:alice")
    assert upload.fields["x-amz-meta-sagegate-owner"] == "apikey:alice"
    posted = requests.post(upload.url, data=upload.fields,
                           files={"file": ("rows.csv", IRIS_ROW, "text/csv")}, timeout=10)
    assert posted.status_code in (200, 204), posted.text
    for other in ("apikey:bob", None):
        with pytest.raises(UploadNotFoundError, match="No uploaded object"):
            jobs.create_from_upload(iris, upload.upload_id, CallOptions(), other)
    assert stage.tickets() == []
    job = jobs.create_from_upload(iris, upload.upload_id, CallOptions(), "apikey:alice")
    assert job.owner == "apikey:alice" and job.state is JobState.QUEUED
    anyone = jobs.presign("iris", "text/csv")  # no caller identified: no owner field
    assert not any(name.startswith("x-amz-meta-") for name in anyone.fields)


@pytest.mark.parametrize("body,status,code", [
    ({"model": "resnet", "content_type": "image/jpeg"}, 404, "ModelNotFound"),
    ({"model": "iris", "content_type": "image/jpeg"}, 415, "UnsupportedMediaType"),
    ({"model": "iris", "content_type": "text/csv; charset=utf-8"}, 400, "InvalidUpload"),
    ({"model": "iris"}, 400, "InvalidUpload"),
    ({"model": "iris", "content_type": "text/csv", "key": "../x"}, 400, "InvalidUpload"),
    ("not json", 400, "InvalidJSON")])
def test_bad_upload_requests_are_4xx(stage: Stage, body: Any, status: int, code: str) -> None:
    response = stage.post("/uploads", body if isinstance(body, str) else json.dumps(body))
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (status, code), answer


def test_a_missing_upload_is_404_naming_the_cap(stage: Stage) -> None:
    response = stage.post_job("iris", uuid.uuid4().hex)
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (404, "UploadNotFound")
    assert str(32 * 1024 * 1024) in answer["Message"]
    assert stage.tickets() == []


def test_an_upload_of_a_type_the_model_does_not_read_is_415(stage: Stage) -> None:
    upload_id = stage.put_upload(jpeg(64, 64), "image/jpeg")
    response = stage.post_job("iris", upload_id)
    assert (response.status_code, json.loads(response.body)["Code"]) == (415,
                                                                         "UploadTypeMismatch")


def test_an_upload_over_the_models_cap_is_413(stage: Stage) -> None:
    registry = stage.services.registry
    registry.models["iris"] = dataclasses.replace(registry.models["iris"],
                                                  jobs=JobsSpec(max_upload_bytes=8))
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    response = stage.post_job("iris", upload_id)
    assert (response.status_code, json.loads(response.body)["Code"]) == (413, "UploadTooLarge")


@pytest.mark.parametrize("body", [{"upload_id": "../../other/" + "a" * 32},
                                  {"upload_id": 5}, {"upload_id": None},
                                  {"upload_id": "A" * 32},
                                  {"upload_id": "a" * 32, "k": 3}])
def test_an_upload_id_the_server_never_made_is_400(stage: Stage, body: Any) -> None:
    response = stage.post("/models/iris/jobs", json.dumps(body))
    assert (response.status_code, json.loads(response.body)["Code"]) == (400, "InvalidUpload")


def test_bad_query_options_are_refused_before_a_job_is_made(stage: Stage) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    for query in ("?k=0", "?colour=red"):
        response = stage.post_job("iris", upload_id, query)
        assert (response.status_code, json.loads(response.body)["Code"]) == (
            400, "InvalidParameter")
    assert stage.tickets() == []


def test_a_query_parameter_given_twice_is_refused_before_a_job_is_made(stage: Stage) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    for response in (stage.post_job("iris", upload_id, "?k=1&k=2"),
                     stage.post("/models/iris/jobs?k=2&k=2", IRIS_ROW, "text/csv")):
        answer = json.loads(response.body)
        assert (response.status_code, answer["Code"]) == (400, "InvalidParameter")
        assert "'k' given twice" in answer["Message"]
    assert stage.tickets() == []


def test_an_inline_body_becomes_a_job_and_an_oversized_one_is_413(stage: Stage) -> None:
    response = stage.post("/models/iris/jobs", IRIS_ROW, "text/csv")
    assert response.status_code == 202
    too_large = stage.post("/models/iris/jobs", b"1," * (4 * 1024 * 1024), "text/csv")
    assert (too_large.status_code, json.loads(too_large.body)["Code"]) == (
        413, "PayloadTooLarge")
    wrong = stage.post("/models/iris/jobs", jpeg(64, 64), "image/jpeg")
    assert (wrong.status_code, json.loads(wrong.body)["Code"]) == (415, "UnsupportedMediaType")


@pytest.mark.parametrize("model,body,kind,code", [
    ("iris", b"5.1,3.5,1.4,0.2", "application/json", "InvalidJSON"),  # CSV sent as JSON
    ("iris", b'{"instances": "five"}', "application/json", "SignatureMismatch"),
    (ENDPOINT, b'{"image": "not base64!"}', "application/json", "InvalidBase64"),
    (ENDPOINT, b'{"picture": "AAAA"}', "application/json", "MissingImage")])
def test_an_inline_body_the_model_cannot_read_is_refused_before_a_job_is_made(
        stage: Stage, model: str, body: bytes, kind: str, code: str) -> None:
    # the same answer the model route gives the same body, not a 202 and a failed job
    synchronous = stage.post(f"/models/{model}/predict", body, kind)
    response = stage.post(f"/models/{model}/jobs", body, kind)
    assert response.status_code == synchronous.status_code == 400, response.body
    assert json.loads(response.body)["Code"] == json.loads(synchronous.body)["Code"] == code
    assert stage.tickets() == []


def test_an_upload_gone_before_the_job_ran_fails_the_job(stage: Stage) -> None:
    upload_id = stage.put_upload(jpeg(320, 240), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    stage.s3.delete_object(Bucket=BUCKET, Key=f"{PREFIX}uploads/{upload_id}")
    stage.run_tickets()
    assert stage.get(f"/jobs/{job_id}")[1]["error"]["Code"] == "UploadNotFound"


def test_a_job_whose_input_is_outside_this_stages_uploads_fails(stage: Stage) -> None:
    stage.s3.put_object(Bucket=BUCKET, Key="other-stage/jobs/uploads/" + "b" * 32,
                        Body=IRIS_ROW, ContentType="text/csv")
    job = stage.store.create(Job(
        job_id=new_job_id(), model="iris-cortex", state=JobState.QUEUED, created_at=1.0,
        updated_at=1.0, input_location=f"s3://{BUCKET}/other-stage/jobs/uploads/" + "b" * 32))
    stage.run_tickets([f"{PREFIX}tickets/{job.job_id}"])
    assert stage.get(f"/jobs/{job.job_id}")[1]["error"]["Code"] == "InvalidUpload"


def test_tickets_that_name_no_job_of_this_stage_are_ignored(stage: Stage) -> None:
    assert stage.run_tickets([f"{PREFIX}tickets/{new_job_id()}", "elsewhere/tickets/x",
                              f"{PREFIX}tickets/not-an-id"]) == {"jobs": {}}
    assert stage.notify({"eventSource": "aws:s3"}) == {"jobs": {}}
    assert stage.notify(_notification(new_job_id(), output="s3://x/y")) == {"jobs": {}}


def test_another_callers_job_is_404_as_a_missing_one(stage: Stage) -> None:
    job = stage.store.create(Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
                                 created_at=1.0, updated_at=1.0, owner="apikey:someone"))
    theirs, missing = stage.get(f"/jobs/{job.job_id}"), stage.get(f"/jobs/{new_job_id()}")
    assert theirs[0] == missing[0] == 404
    assert theirs[1]["Code"] == missing[1]["Code"] == "JobNotFound"
    assert stage.get("/jobs/..%2F..%2Fsecret")[0] == 404


def test_jobs_are_501_on_a_stage_without_a_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    # the app's own services may have read a stage with a bucket already (a test entering
    # Chalice's default stage, dev): these are a stage's without one
    monkeypatch.setattr(app_module, "services",
                        Services(Settings.from_env({"ENDPOINT_NAME": ENDPOINT})))
    with Client(app_module.app, stage_name="local") as client:
        answers = [client.http.post("/uploads", body="{}",
                                    headers={"Content-Type": "application/json"}),
                   client.http.post("/models/iris/jobs", body=IRIS_ROW,
                                    headers={"Content-Type": "text/csv"}),
                   client.http.get(f"/jobs/{new_job_id()}")]
        described = json.loads(client.http.get("/models/iris").body)
        listed = json.loads(client.http.get("/models").body)
    # the catalog does not offer what the stage refuses (a client's auto mode reads it)
    assert described["jobs"] is None
    assert {model["jobs"] for model in listed["models"]} == {None}
    for response in answers:
        assert (response.status_code, json.loads(response.body)["Code"]) == (501,
                                                                             "JobsDisabled")
    assert not hasattr(app_module, "job_runner")  # and no event function is declared


def test_the_synchronous_timeout_names_the_job_route(stage: Stage) -> None:
    class TimingOut:
        def invoke_endpoint(self, **_: Any) -> Any:
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1:9")

    setattr(stage.app, "services", Services(  # noqa: B010 (a module loaded at run time)
        stage.services.settings,
        endpoint=EndpointClient(TimingOut(), sleep=lambda _: None)))  # type: ignore[arg-type]
    response = stage.post("/models/iris/predict", IRIS_ROW, "text/csv")
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (504, "EndpointTimeout")
    assert "POST /models/iris/jobs" in answer["Message"]


def test_an_async_endpoint_that_refuses_the_job_fails_it(stage: Stage) -> None:
    job_id = json.loads(stage.post("/models/slow/jobs", IRIS_ROW, "text/csv").body)["job_id"]
    stage.stubber.add_client_error(
        "invoke_endpoint_async", service_error_code="ValidationError", http_status_code=400,
        service_message="Endpoint slow-async of account 123456789012 not found.")
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    error = stage.get(f"/jobs/{job_id}")[1]["error"]
    # as a real-time job's call is answered: one translation of the endpoint's errors
    assert error["Code"] == "EndpointNotFound" and "'slow-async'" in error["Message"]


def test_an_async_call_still_failing_after_its_retries_fails_the_job(
        stage: Stage) -> None:
    # the job was claimed before the call: a retried event would find it so and send nothing
    job_id = json.loads(stage.post("/models/slow/jobs", IRIS_ROW, "text/csv").body)["job_id"]
    stage.stubber.add_client_error("invoke_endpoint_async",
                                   service_error_code="ThrottlingException",
                                   http_status_code=400)
    assert stage.run_tickets(request_id="request-1") == {"jobs": {job_id: "failed"}}
    error = stage.get(f"/jobs/{job_id}")[1]["error"]
    assert error["Code"] == "EndpointUnavailable"
    assert "'slow-async' could not take the job (ThrottlingException)" in error["Message"]
    assert stage.run_tickets(request_id="request-1") == {"jobs": {job_id: "failed"}}


def test_an_async_job_whose_claim_failed_is_sent_once_by_the_retried_event(
        stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    job_id = json.loads(stage.post_job("iris", upload_id, "?k=1").body)["job_id"]
    claim = stage.store.claim

    def throttled(job_id: str, runner_id: str, lease_until: float, reclaim: bool = False) -> Any:
        raise RuntimeError("ProvisionedThroughputExceededException (simulated)")

    monkeypatch.setattr(stage.store, "claim", throttled)
    with pytest.raises(RuntimeError):  # nothing was sent (no answer is stubbed for it)
        stage.run_tickets(request_id="request-1")
    assert stage.get(f"/jobs/{job_id}")[1]["state"] == "queued"
    monkeypatch.setattr(stage.store, "claim", claim)
    stage.stubber.add_response("invoke_endpoint_async",  # one answer: a second call fails
                               {"InferenceId": job_id, "OutputLocation": "s3://x/y.out"})
    for request_id in ("request-1", "request-1", "request-2"):  # retries, then a duplicate
        assert stage.run_tickets(request_id=request_id) == {"jobs": {job_id: "running"}}


def test_an_async_job_another_runner_claimed_first_is_not_sent_again(
        stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    job_id = json.loads(stage.post_job("iris", upload_id, "?k=1").body)["job_id"]
    claim = stage.store.claim

    def raced(job_id: str, runner_id: str, lease_until: float, reclaim: bool = False) -> Any:
        claim(job_id, "request-0", lease_until)  # a duplicate delivery's runner, a moment sooner
        return claim(job_id, runner_id, lease_until, reclaim)

    monkeypatch.setattr(stage.store, "claim", raced)
    # no answer is stubbed: a call would fail the job
    assert stage.run_tickets(request_id="request-1") == {"jobs": {job_id: "running"}}
    job = stage.store.get(job_id)
    assert job is not None and job.runner_id == "request-0"


def _running_image_job(stage: Stage, runner_id: str, claimed_at: float | None = None,
                       monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    """A real-time job the runner ``runner_id`` claimed (at ``claimed_at``) and is still at,
    or died at (the endpoint call is slow, or its function ran out of memory)."""
    upload_id = stage.put_upload(jpeg(64, 64), "image/jpeg")
    job_id: str = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    if claimed_at is not None and monkeypatch is not None:
        with monkeypatch.context() as past:
            past.setattr(stage.store, "_clock", lambda: claimed_at)
            _claim(stage, job_id, runner_id, claimed_at)
    else:
        _claim(stage, job_id, runner_id, time.time())
    return job_id


def _claim(stage: Stage, job_id: str, runner_id: str, at: float) -> Job:
    """Claim a job at ``at`` as its backend's runner would: its lease is the backend's (off
    Lambda: the stage's configured runner timeout, or the asynchronous endpoint's)."""
    context = stage.services.jobs_context
    job = stage.store.get(job_id)
    assert job is not None
    model = context.registry.get(job.model)
    lease = backend_of(model, context.backends).lease_seconds(model, context.lifetime, None)
    claimed, moved = stage.store.claim(job_id, runner_id, at + lease, reclaim=True)
    assert moved
    return claimed


def test_a_duplicate_delivery_does_not_run_a_job_its_runner_is_running(stage: Stage) -> None:
    job_id = _running_image_job(stage, "request-1")
    # no endpoint answer is stubbed: a call would fail the job
    assert stage.run_tickets(request_id="request-2") == {"jobs": {job_id: "running"}}
    assert stage.run_tickets() == {"jobs": {job_id: "running"}}  # no context: another runner
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({1: 0.9})))
    # Lambda's retry of request-1's event (its function raised) keeps the request id
    assert stage.run_tickets(request_id="request-1") == {"jobs": {job_id: "succeeded"}}


def test_a_job_whose_runner_is_gone_is_run_by_the_next_delivery(
        stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    long_ago = time.time() - RUNNER_LIFETIME_SECONDS - 5
    job_id = _running_image_job(stage, "request-1", long_ago, monkeypatch)
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({1: 0.9})))
    assert stage.run_tickets(request_id="request-2") == {"jobs": {job_id: "succeeded"}}


def test_a_realtime_job_calls_the_jobs_endpoint_of_model_json(stage: Stage) -> None:
    registry = stage.services.registry
    registry.models[ENDPOINT] = dataclasses.replace(
        registry.models[ENDPOINT], jobs=JobsSpec(JobsBackend.REALTIME, "efficientnet-big"))
    called: list[str] = []
    stage.services.job_endpoint.client.meta.events.register(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **kwargs: called.append(params["EndpointName"]))
    job_id = json.loads(stage.post_job(ENDPOINT, stage.put_upload(jpeg(64, 64),
                                                                  "image/jpeg")).body)["job_id"]
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({3: 0.9})))
    assert stage.run_tickets() == {"jobs": {job_id: "succeeded"}}
    assert called == ["efficientnet-big"]  # the deploy's IAM grants InvokeEndpoint on it
    assert stage.get(f"/jobs/{job_id}")[1]["result"]["endpoint"] == "efficientnet-big"


def test_a_jobs_custom_attributes_reach_its_endpoint_on_either_backend(stage: Stage) -> None:
    # real-time: the image job's endpoint call carries them, as the synchronous route's does
    realtime = json.loads(stage.post_job(ENDPOINT, stage.put_upload(jpeg(64, 64), "image/jpeg"),
                                         "?custom_attributes=trace-7").body)["job_id"]
    stage.stubber.add_response(
        "invoke_endpoint", endpoint_response(probabilities({3: 0.9})),
        {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/x-image",
         "Accept": "application/json", "InferenceId": realtime, "CustomAttributes": "trace-7"})
    assert stage.run_tickets() == {"jobs": {realtime: "succeeded"}}
    # asynchronous: InvokeEndpointAsync carries them too
    queued = json.loads(stage.post_job("iris", stage.put_upload(IRIS_ROW, "text/csv"),
                                       "?k=1&custom_attributes=trace-8").body)["job_id"]
    stage.stubber.add_response(
        "invoke_endpoint_async", {"InferenceId": queued, "OutputLocation": "s3://x/y.out"},
        {"EndpointName": "iris-async", "InputLocation": f"s3://{BUCKET}/{PREFIX}inputs/{queued}",
         "InferenceId": queued, "ContentType": "application/json",
         "InvocationTimeoutSeconds": 900, "CustomAttributes": "trace-8"})
    assert stage.run_tickets([f"{PREFIX}tickets/{queued}"]) == {"jobs": {queued: "running"}}
    output = _output(stage, json.dumps({"predictions": [[0.9, 0.06, 0.04]]}).encode())
    assert stage.notify(_notification(queued, output=output)) == {"jobs": {queued: "succeeded"}}
    captured = [json.loads(line)["eventMetadata"] for line in stage.sink.lines()]
    assert [(meta["inferenceId"], meta.get("customAttributes")) for meta in captured] == [
        (realtime, ["trace-7"]), (queued, ["trace-8"])]


def test_a_jobs_image_pixel_cap_is_the_jobs_setting_not_the_requests(stage: Stage) -> None:
    settings = dataclasses.replace(stage.services.settings, max_image_pixels=100 * 100,
                                   job_max_image_pixels=200 * 200)
    services = Services(settings, s3=stage.s3, job_store=stage.store,
                        capturer=Capturer("off", None),
                        job_endpoint=stage.services.job_endpoint)
    setattr(stage.app, "services", services)  # noqa: B010 (a module loaded at run time)
    refused = stage.post(f"/models/{ENDPOINT}/predict", jpeg(150, 150), "image/jpeg")
    assert json.loads(refused.body)["Code"] == "ImageTooLarge"  # the request's cap
    fits = json.loads(stage.post_job(ENDPOINT, stage.put_upload(jpeg(150, 150), "image/jpeg"))
                      .body)["job_id"]
    over = json.loads(stage.post_job(ENDPOINT, stage.put_upload(jpeg(250, 250), "image/jpeg"))
                      .body)["job_id"]
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({3: 0.9})))
    assert stage.run_tickets([f"{PREFIX}tickets/{fits}"]) == {"jobs": {fits: "succeeded"}}
    assert stage.run_tickets([f"{PREFIX}tickets/{over}"]) == {"jobs": {over: "failed"}}
    error = stage.get(f"/jobs/{over}")[1]["error"]
    assert error["Code"] == "ImageTooLarge" and str(200 * 200) in error["Message"]


def test_an_async_image_job_takes_its_options_from_the_query_only(stage: Stage) -> None:
    registry = stage.services.registry
    registry.models[ENDPOINT] = dataclasses.replace(
        registry.models[ENDPOINT], jobs=JobsSpec(JobsBackend.ASYNC, "efficientnet-async"))
    body = json.dumps({"image": base64.b64encode(jpeg(64, 64)).decode(), "k": 3})
    job_id = json.loads(stage.post(f"/models/{ENDPOINT}/jobs", body).body)["job_id"]
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    error = stage.get(f"/jobs/{job_id}")[1]["error"]
    assert error["Code"] == "InvalidParameter" and "query string" in error["Message"]


def test_an_async_image_job_sends_the_resized_image_and_answers_top_k(stage: Stage) -> None:
    registry = stage.services.registry
    registry.models[ENDPOINT] = dataclasses.replace(
        registry.models[ENDPOINT], jobs=JobsSpec(JobsBackend.ASYNC, "efficientnet-async"))
    upload_id = stage.put_upload(jpeg(2000, 1500), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id, "?k=1").body)["job_id"]
    stage.stubber.add_response(
        "invoke_endpoint_async", {"InferenceId": job_id},
        {"EndpointName": "efficientnet-async", "InferenceId": job_id,
         "InputLocation": f"s3://{BUCKET}/{PREFIX}inputs/{job_id}",
         "ContentType": "application/x-image", "InvocationTimeoutSeconds": 900})
    assert stage.run_tickets() == {"jobs": {job_id: "running"}}
    sent = stage.s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}inputs/{job_id}")["Body"].read()
    assert sent.startswith(b"\x89PNG") and len(sent) < 1_000_000  # resized, as synchronously
    output = _output(stage, json.dumps(probabilities({285: 0.8})).encode())
    stage.notify(_notification(job_id, output=output))
    result = stage.get(f"/jobs/{job_id}")[1]["result"]
    assert [p["index"] for p in result["predictions"]] == [285]
    assert result["endpoint"] == "efficientnet-async"


@pytest.mark.parametrize("backend_model,state,after,lost", [
    # Lambda may keep a throttled event 6 hours, then run it for 15 minutes
    ("efficientnet-lite0", JobState.QUEUED, 6 * 3600 + 15 * 60 + 1, False),
    ("iris", JobState.QUEUED, 6 * 3600 + 20 * 60, False),
    ("efficientnet-lite0", JobState.QUEUED, 6 * 3600 + 20 * 60 + 1, True),  # never ran it
    ("iris", JobState.QUEUED, 6 * 3600 + 20 * 60 + 1, True),
    ("efficientnet-lite0", JobState.RUNNING, 1139, False),
    ("efficientnet-lite0", JobState.RUNNING, 1141, True),  # its runner died on every attempt
    ("iris", JobState.RUNNING, 3600, False),  # an asynchronous endpoint may take its time...
    ("iris", JobState.RUNNING, 900 + 6 * 3600 + 301, True)])  # ... not past SageMaker's TTL
def test_a_job_nothing_will_move_any_more_is_failed_as_lost(
        stage: Stage, backend_model: str, state: JobState, after: int, lost: bool) -> None:
    body, kind = (jpeg(64, 64), "image/jpeg") if backend_model != "iris" else (IRIS_ROW,
                                                                                "text/csv")
    job = stage.services.jobs.create_from_body(stage.services.registry.get(backend_model), body,
                                               kind, CallOptions(), None)
    if state is JobState.RUNNING:
        _claim(stage, job.job_id, "request-1", time.time())
    moved = stage.store.get(job.job_id)
    assert moved is not None
    stage.services.jobs_context.clock = lambda: moved.updated_at + after
    answer = stage.get(f"/jobs/{job.job_id}")[1]
    assert answer["state"] == ("failed" if lost else str(state))
    if lost:
        assert answer["error"]["Code"] == "JobLost"
        assert f"was {state} for {after} s" in answer["error"]["Message"]
        kept = stage.store.get(job.job_id)
        assert kept is not None and kept.state is JobState.FAILED  # kept so


# --- S3 and DynamoDB failing: one 503 with Retry-After, the rest keeps its meaning ----------

def _refuse(*_: Any, **__: Any) -> None:
    """A botocore hook: the connection is refused (moto's server, or S3, down)."""
    raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9/")


def _assert_unavailable(response: Any) -> None:
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (503, "JobsUnavailable"), answer
    assert int(response.headers["Retry-After"]) >= 1
    assert set(answer) >= {"Code", "Message", "request_id"}
    assert "127.0.0.1" not in answer["Message"]


def test_jobs_answer_503_with_retry_after_while_s3_is_unreachable(stage: Stage) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    stage.s3.meta.events.register("before-send.s3", _refuse)
    _assert_unavailable(stage.post_job("iris", upload_id))  # its HEAD
    _assert_unavailable(stage.post("/models/iris/jobs", IRIS_ROW, "text/csv"))  # its PUT
    assert stage.post("/uploads", json.dumps({"model": "iris", "content_type": "text/csv"})
                      ).status_code == 200  # presigning asks S3 nothing
    stage.s3.meta.events.unregister("before-send.s3", _refuse)
    assert stage.post_job("iris", upload_id).status_code == 202  # S3 is back: as before


def test_a_throttled_or_failing_s3_is_503_and_its_refusals_keep_their_meaning(
        stage: Stage) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    with Stubber(stage.s3) as s3:
        s3.add_client_error("head_object", "SlowDown", http_status_code=503)
        s3.add_client_error("head_object", "InternalError", http_status_code=500)
        s3.add_client_error("head_object", "404", http_status_code=404)
        throttled = stage.post_job("iris", upload_id)
        _assert_unavailable(throttled)
        assert throttled.headers["Retry-After"] == "5"
        _assert_unavailable(stage.post_job("iris", upload_id))
        missing = stage.post_job("iris", upload_id)
    assert (missing.status_code, json.loads(missing.body)["Code"]) == (404, "UploadNotFound")


@pytest.fixture
def table_stage(stage: Stage) -> Stage:
    """The stage with its jobs in a DynamoDB table (moto's in-process one)."""
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    dynamodb.create_table(TableName="sagegate-test-jobs", BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "job_id",
                                                 "AttributeType": "S"}])
    services = Services(stage.services.settings, s3=stage.s3,
                        job_store=TableJobStore("sagegate-test-jobs", client=dynamodb),
                        capturer=Capturer("both", stage.sink))
    setattr(stage.app, "services", services)  # noqa: B010 (a module loaded at run time)
    return dataclasses.replace(stage, services=services)


def test_a_job_read_answers_503_while_its_table_is_unreachable(table_stage: Stage) -> None:
    stage = table_stage
    job_id = json.loads(stage.post("/models/iris/jobs", IRIS_ROW, "text/csv").body)["job_id"]
    assert stage.get(f"/jobs/{job_id}")[1]["state"] == "queued"
    table = stage.services.job_store.client  # type: ignore[attr-defined]
    table.meta.events.register("before-send.dynamodb", _refuse)
    response = stage.client.http.get(f"/jobs/{job_id}")
    _assert_unavailable(response)
    _assert_unavailable(stage.post("/models/iris/jobs", IRIS_ROW, "text/csv"))
    table.meta.events.unregister("before-send.dynamodb", _refuse)
    with Stubber(table) as dynamodb:
        dynamodb.add_client_error("get_item", "ProvisionedThroughputExceededException",
                                  http_status_code=400)
        dynamodb.add_client_error("get_item", "AccessDeniedException", http_status_code=400)
        throttled = stage.client.http.get(f"/jobs/{job_id}")
        denied = stage.client.http.get(f"/jobs/{job_id}")
    _assert_unavailable(throttled)
    assert denied.status_code == 500  # a misconfiguration: retrying would not cure it
    assert stage.get(f"/jobs/{job_id}") == (200, stage.get(f"/jobs/{job_id}")[1])


# --- an owner reads its own job, and only its own ---------------------------------------------

def _api_event(method: str, path: str, resource: str, api_key_id: str | None,
               body: bytes = b"", content_type: str = "text/csv",
               params: dict[str, str] | None = None) -> dict[str, Any]:
    """API Gateway's proxy event for a request of an API key's caller (its id in the request
    context, as API Gateway puts it once the key is checked)."""
    headers = {"Content-Type": content_type} if body else {}
    return {"resource": resource, "path": path, "httpMethod": method, "headers": headers,
            "multiValueHeaders": {name: [value] for name, value in headers.items()},
            "queryStringParameters": None, "multiValueQueryStringParameters": None,
            "pathParameters": params, "stageVariables": None,
            "body": base64.b64encode(body).decode() if body else None,
            "isBase64Encoded": bool(body),
            "requestContext": {"resourcePath": resource, "path": f"/api{path}",
                               "httpMethod": method, "stage": "api", "requestId": "r-1",
                               "identity": {"sourceIp": "203.0.113.7",
                                            "apiKeyId": api_key_id}}}


def _as_caller(stage: Stage, api_key_id: str | None, method: str, path: str, resource: str,
               body: bytes = b"", params: dict[str, str] | None = None) -> tuple[int, Any]:
    answer = stage.app.app(_api_event(method, path, resource, api_key_id, body,
                                      params=params), None)
    return answer["statusCode"], json.loads(answer["body"])


def test_a_callers_job_is_its_own_to_read(stage: Stage) -> None:
    status, accepted = _as_caller(stage, "key-alice", "POST", "/models/iris/jobs",
                                  "/models/{name}/jobs", IRIS_ROW, {"name": "iris"})
    assert status == 202, accepted
    job_id = accepted["job_id"]
    stored = stage.store.get(job_id)
    assert stored is not None and stored.owner == "apikey:key-alice"

    def read(caller: str | None) -> tuple[int, Any]:
        return _as_caller(stage, caller, "GET", f"/jobs/{job_id}", "/jobs/{job_id}",
                          params={"job_id": job_id})

    status, view = read("key-alice")
    assert (status, view["job_id"], view["state"]) == (200, job_id, "queued")
    for other in ("key-bob", None):
        status, refused = read(other)
        assert (status, refused["Code"]) == (404, "JobNotFound")


# --- the input the job was made for, and no other ---------------------------------------------

def _replace(stage: Stage, key: str, body: bytes, content_type: str) -> None:
    """What a client posting the same presigned fields again does."""
    stage.s3.put_object(Bucket=BUCKET, Key=key, Body=body, ContentType=content_type)


def test_an_upload_replaced_after_its_job_was_made_fails_the_job(stage: Stage) -> None:
    upload_id = stage.put_upload(jpeg(320, 240), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    _replace(stage, f"{PREFIX}uploads/{upload_id}", jpeg(640, 480), "image/jpeg")
    # no endpoint answer is stubbed: a call would fail the job with another code
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    error = stage.get(f"/jobs/{job_id}")[1]["error"]
    assert error["Code"] == "UploadChanged" and "replaced" in error["Message"]


def test_an_async_jobs_replaced_upload_is_not_sent(stage: Stage) -> None:
    upload_id = stage.put_upload(IRIS_ROW, "text/csv")
    job_id = json.loads(stage.post_job("iris", upload_id, "?k=1").body)["job_id"]
    _replace(stage, f"{PREFIX}uploads/{upload_id}", b"9.9,9.9,9.9,9.9\n", "text/csv")
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}  # nothing stubbed: none sent
    assert stage.get(f"/jobs/{job_id}")[1]["error"]["Code"] == "UploadChanged"


def test_an_inline_bodys_job_is_pinned_too(stage: Stage) -> None:
    job_id = json.loads(stage.post("/models/slow/jobs", IRIS_ROW, "text/csv").body)["job_id"]
    job = stage.store.get(job_id)
    assert job is not None and job.input_etag
    stage.s3.put_object(Bucket=BUCKET, Key=job.input_location.split(f"{BUCKET}/", 1)[1],
                        Body=b"1,1,1,1\n", ContentType="text/csv")
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    assert stage.get(f"/jobs/{job_id}")[1]["error"]["Code"] == "UploadChanged"


def test_an_unchanged_upload_is_copied_for_the_async_endpoint(
        stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    # preprocessing that leaves the upload as it is (already the endpoint's body): the
    # endpoint still reads the server's own copy, which no client can replace before the
    # endpoint gets to it
    pipeline = stage.services.job_pipeline_for(stage.services.registry.get("iris"))
    monkeypatch.setattr(type(pipeline), "preprocess", lambda self, request, *_: request.call)
    body = json.dumps({"instances": [[5.1, 3.5, 1.4, 0.2]]}).encode()
    upload_id = stage.put_upload(body, "application/json")
    job_id = json.loads(stage.post_job("iris", upload_id, "?k=1").body)["job_id"]
    stage.stubber.add_response(
        "invoke_endpoint_async", {"InferenceId": job_id},
        {"EndpointName": "iris-async", "InferenceId": job_id,
         "InputLocation": f"s3://{BUCKET}/{PREFIX}inputs/{job_id}",
         "ContentType": "application/json", "InvocationTimeoutSeconds": 900})
    assert stage.run_tickets() == {"jobs": {job_id: "running"}}
    sent = stage.s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}inputs/{job_id}")["Body"].read()
    assert sent == body


# --- a job's answer names the variant as the synchronous route's does --------------------------

def test_a_jobs_answer_names_the_variant_the_synchronous_answer_names(stage: Stage) -> None:
    with Stubber(stage.services.endpoint.client) as endpoint:  # the synchronous route's
        endpoint.add_response("invoke_endpoint", endpoint_response(
            json.dumps({"predictions": [[0.9, 0.06, 0.04]]}).encode()))
        synchronous = json.loads(stage.post("/models/iris/predict", IRIS_ROW, "text/csv").body)
    assert synchronous["variant"] == "AllTraffic"
    job_id = _running_async_iris_job(stage)  # iris's jobs: its asynchronous endpoint
    output = _output(stage, json.dumps({"predictions": [[0.9, 0.06, 0.04]]}).encode())
    stage.notify(_notification(job_id, output=output))
    assert stage.get(f"/jobs/{job_id}")[1]["result"]["variant"] == synchronous["variant"]
    upload_id = stage.put_upload(jpeg(320, 240), "image/jpeg")
    realtime = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    stage.stubber.add_response("invoke_endpoint", endpoint_response(probabilities({7: 0.9})))
    stage.run_tickets([f"{PREFIX}tickets/{realtime}"])
    assert stage.get(f"/jobs/{realtime}")[1]["result"]["variant"] == "AllTraffic"


# --- the runner's lifetime follows its function's timeout ---------------------------------------

@pytest.mark.parametrize(("after", "lost"), [(539, False), (541, True)])
def test_a_running_job_is_lost_after_its_configured_runner_could_have_finished(
        stage: Stage, monkeypatch: pytest.MonkeyPatch, after: int, lost: bool) -> None:
    # a 300 s runner: gone 360 s after its last move, its event's last retry 180 s later
    monkeypatch.setenv("JOB_RUNNER_TIMEOUT_SECONDS", "300")
    job = stage.services.jobs.create_from_body(stage.services.registry.get(ENDPOINT),
                                               jpeg(64, 64), "image/jpeg", CallOptions(), None)
    claimed = _claim(stage, job.job_id, "request-1", time.time())
    stage.services.jobs_context.clock = lambda: claimed.updated_at + after
    answer = stage.get(f"/jobs/{job.job_id}")[1]
    assert answer["state"] == ("failed" if lost else "running")


@pytest.mark.parametrize(("after", "runs"), [(300, False), (361, True)])
def test_another_delivery_takes_a_job_once_its_configured_runner_is_gone(
        stage: Stage, monkeypatch: pytest.MonkeyPatch, after: int, runs: bool) -> None:
    monkeypatch.setenv("JOB_RUNNER_TIMEOUT_SECONDS", "300")
    job_id = _running_image_job(stage, "request-1", time.time() - after, monkeypatch)
    if runs:
        stage.stubber.add_response("invoke_endpoint",
                                   endpoint_response(probabilities({1: 0.9})))
    assert stage.run_tickets(request_id="request-2") == {
        "jobs": {job_id: "succeeded" if runs else "running"}}


def test_a_jobs_work_ends_before_its_invocations_time(stage: Stage) -> None:
    # 100 s left: not enough for one endpoint attempt (72 s) after the finishing margin
    upload_id = stage.put_upload(jpeg(64, 64), "image/jpeg")
    job_id = json.loads(stage.post_job(ENDPOINT, upload_id).body)["job_id"]
    context = SimpleNamespace(aws_request_id="request-1",
                              get_remaining_time_in_millis=lambda: 100_000)
    records = [{"s3": {"bucket": {"name": BUCKET}, "object": {"key": key}}}
               for key in stage.tickets()]
    assert stage.app.job_runner({"Records": records}, context) == {"jobs": {job_id: "failed"}}
    assert stage.get(f"/jobs/{job_id}")[1]["error"]["Code"] == "PreprocessingTimeout"


# --- a job's rows: a whole batch for an asynchronous endpoint, one request's for a real-time one

def test_an_inline_batch_is_bounded_by_its_jobs_backend(stage: Stage) -> None:
    rows = IRIS_ROW * (MAX_INSTANCES + 1)
    assert stage.post("/models/iris/jobs", rows, "text/csv").status_code == 202  # async
    registry = stage.services.registry
    registry.models["iris"] = dataclasses.replace(registry.models["iris"],
                                                  jobs=JobsSpec(JobsBackend.REALTIME))
    refused = stage.post("/models/iris/jobs", rows, "text/csv")
    assert (refused.status_code, json.loads(refused.body)["Code"]) == (400, "SignatureMismatch")
    assert stage.post("/models/iris/jobs", IRIS_ROW * MAX_INSTANCES,
                      "text/csv").status_code == 202


# --- a real-time job's endpoint calls over a real connection ------------------------------------

class ScriptedEndpoint:
    """InvokeEndpoint (and InvokeEndpointAsync) on 127.0.0.1, nothing listening until
    :meth:`listen` (connections are refused, as while the emulator restarts); then each call
    answered by the next of ``script``: ``ok`` (an answer, its variant named), ``queued``
    (InvokeEndpointAsync's 202), ``unavailable`` (503 ServiceUnavailable), ``throttled`` (429
    ThrottlingException), ``cut`` (an answer cut short after its headers)."""

    def __init__(self, *script: str) -> None:
        self.script = list(script)
        self.calls: list[str] = []
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def listen(self) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.calls.append(self.headers.get("X-Amzn-SageMaker-Inference-Id", ""))
                endpoint.answer(self, endpoint.script.pop(0))

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, handler: BaseHTTPRequestHandler, what: str) -> None:
        body = json.dumps(probabilities({5: 0.9})).encode()
        if what == "queued":  # InvokeEndpointAsync's answer
            body = json.dumps({"InferenceId": self.calls[-1]}).encode()
            handler.send_response(202)
            handler.send_header("X-Amzn-SageMaker-OutputLocation", "s3://x/y.out")
        elif what == "unavailable":
            body = json.dumps({"message": "restarting"}).encode()
            handler.send_response(503)
            handler.send_header("x-amzn-ErrorType", "ServiceUnavailable")
        elif what == "throttled":
            body = json.dumps({"message": "slow down"}).encode()
            handler.send_response(429)
            handler.send_header("x-amzn-ErrorType", "ThrottlingException")
        else:
            handler.send_response(200)
            handler.send_header("x-Amzn-Invoked-Production-Variant", "AllTraffic")
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body) * (4 if what == "cut" else 1)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def scripted(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedEndpoint]:
    """The stage's jobs calling a :class:`ScriptedEndpoint` with the job endpoint client the
    stage builds (its retry policy, its reader), not one the test gives."""
    endpoint = ScriptedEndpoint()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
    services = Services(stage.services.settings, s3=stage.s3, job_store=stage.store,
                        capturer=Capturer("both", stage.sink))
    setattr(stage.app, "services", services)  # noqa: B010 (a module loaded at run time)
    try:
        yield endpoint
    finally:
        endpoint.close()


def _image_job(stage: Stage) -> str:
    job_id: str = json.loads(stage.post_job(ENDPOINT, stage.put_upload(
        jpeg(64, 64), "image/jpeg")).body)["job_id"]
    return job_id


def test_a_realtime_job_waits_for_its_endpoint_to_come_back(
        stage: Stage, scripted: ScriptedEndpoint) -> None:
    scripted.script = ["unavailable", "ok"]
    job_id = _image_job(stage)
    timer = threading.Timer(1.5, scripted.listen)  # refused for 1.5 s, as a restart is
    timer.start()
    try:
        assert stage.run_tickets() == {"jobs": {job_id: "succeeded"}}
    finally:
        timer.cancel()
    assert scripted.calls == [job_id, job_id]  # refused ones never arrived; the 503 retried
    result = stage.get(f"/jobs/{job_id}")[1]["result"]
    assert result["predictions"][0]["index"] == 5 and result["variant"] == "AllTraffic"


class ListenAfterRetries(logging.Handler):
    """Starts the scripted endpoint once the endpoint client has retried ``refused`` failed
    attempts: the endpoint comes back at a point the test chooses, not after a wall-clock
    wait that must beat the job's retry deadline."""

    def __init__(self, endpoint: ScriptedEndpoint, refused: int) -> None:
        super().__init__()
        self.endpoint, self.left = endpoint, refused

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("retrying endpoint call"):
            self.left -= 1
            if self.left == 0:
                self.endpoint.listen()


def test_an_async_job_waits_for_its_endpoint_to_come_back_as_a_realtime_job_does(
        stage: Stage, scripted: ScriptedEndpoint) -> None:
    # connections refused while the endpoint restarts (they never arrived), then a throttle
    # (a refusal): retried as a real-time job's call is; a 5xx is not (the job may be queued)
    scripted.script = ["throttled", "queued"]
    job_id = json.loads(stage.post("/models/slow/jobs", IRIS_ROW, "text/csv").body)["job_id"]
    trigger = ListenAfterRetries(scripted, refused=2)
    endpoint_log = logging.getLogger("sagegate.endpoint")
    endpoint_log.addHandler(trigger)
    try:
        assert stage.run_tickets() == {"jobs": {job_id: "running"}}
    finally:
        endpoint_log.removeHandler(trigger)
    assert trigger.left <= 0  # two refused attempts came first
    assert scripted.calls == [job_id, job_id]  # refused ones never arrived; the throttle retried
    output = _output(stage, json.dumps({"predictions": [[0.1, 0.2, 0.7]]}).encode())
    assert stage.notify(_notification(job_id, output=output)) == {"jobs": {job_id: "succeeded"}}
    assert stage.get(f"/jobs/{job_id}")[1]["result"]["predictions"][0][0]["index"] == 2


def test_an_async_job_is_not_queued_twice_after_a_5xx(
        stage: Stage, scripted: ScriptedEndpoint) -> None:
    scripted.script = ["unavailable", "queued"]
    scripted.listen()
    job_id = json.loads(stage.post("/models/slow/jobs", IRIS_ROW, "text/csv").body)["job_id"]
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    assert scripted.calls == [job_id]  # the endpoint may have queued it: not sent again


def test_an_answer_cut_short_is_not_asked_for_twice(
        stage: Stage, scripted: ScriptedEndpoint) -> None:
    scripted.script = ["cut", "ok"]
    scripted.listen()
    job_id = _image_job(stage)
    assert stage.run_tickets() == {"jobs": {job_id: "failed"}}
    assert scripted.calls == [job_id]  # the endpoint ran it once; it is not run again
    assert stage.get(f"/jobs/{job_id}")[1]["error"]["Code"] == "EndpointError"


def test_the_catalog_says_how_each_model_runs_as_a_job(stage: Stage) -> None:
    status, listed = stage.get("/models")
    assert status == 200
    jobs = {model["name"]: model["jobs"] for model in listed["models"]}
    assert jobs["iris"] == {"backend": "async", "max_upload_bytes": 32 * 1024 * 1024,
                            "path": "/models/iris/jobs"}
    assert jobs["efficientnet-lite0"] == {"backend": "realtime",
                                          "max_upload_bytes": 100 * 1024 * 1024,
                                          "path": f"/models/{ENDPOINT}/jobs"}
    status, iris = stage.get("/models/iris")
    assert (status, iris["jobs"]) == (200, jobs["iris"])
