"""The jobs' wiring: their settings, model.json's ``jobs`` block, the event dicts the job
functions read, the composition root's job parts (store, clients, connection holders) and the
pipeline halves an asynchronous endpoint runs between."""
from __future__ import annotations

import base64
import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws

from chalicelib import services as services_module
from chalicelib.calls import Call, CallOptions, InvokeResult, ModelRequest
from chalicelib.core.config import Settings
from chalicelib.core.errors import (
    ConfigurationError,
    InvalidUploadError,
    JobsDisabledError,
    SignatureMismatchError,
    UnsupportedMediaTypeError,
    UploadTooLargeError,
    UploadTypeMismatchError,
)
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.endpoint_config import policy_from
from chalicelib.inference.tensors import MAX_ELEMENTS, MAX_INSTANCES, batch_limits
from chalicelib.inference.timing import StageTimer
from chalicelib.jobs.backends.asynchronous import JOB_MAX_ELEMENTS, JOB_MAX_INSTANCES
from chalicelib.jobs.backends.base import backend_of
from chalicelib.jobs.events import s3_keys, sns_messages
from chalicelib.jobs.invoking import (
    JOB_MAX_ATTEMPTS,
    JOB_MAX_DELAY_SECONDS,
    WholeAnswers,
    job_retry_policy,
)
from chalicelib.jobs.objects import read_input
from chalicelib.jobs.records import Job, JobState, new_job_id
from chalicelib.jobs.service import job_id_of_ticket, ticket_key
from chalicelib.jobs.store import MemoryJobStore
from chalicelib.jobs.table import TableJobStore
from chalicelib.kinds.tensor import tensor_input
from chalicelib.registry.kinds import JobsBackend
from chalicelib.registry.loading import Registered, load_model
from chalicelib.registry.specs import JobsSpec
from chalicelib.services import Services
from tests.imagefactory import jpeg

ENV = {"ENDPOINT_NAME": "efficientnet-lite0"}
SETTINGS = Settings(endpoint_name="efficientnet-lite0")
IRIS = {"endpoint": "iris", "pipeline": "tensor",
        "signature": {"inputs": [{"name": "features", "dtype": "float32", "shape": [-1, 4]}],
                      "outputs": [{"name": "probabilities", "dtype": "float32",
                                   "shape": [-1, 3]}]}}


# --- settings ---------------------------------------------------------------------------------

def test_the_job_settings_default_as_the_design_says() -> None:
    settings = Settings.from_env(ENV)
    assert (settings.jobs_success_topic, settings.jobs_error_topic) == ("", "")
    assert settings.job_max_image_pixels == 200_000_000
    assert settings.job_budget_seconds == 840.0
    assert settings.job_read_timeout == 70.0  # past SageMaker's own 60 s


def test_the_job_settings_are_read_from_the_environment() -> None:
    topic = "arn:aws:sns:eu-west-1:123456789012:sagegate-dev-jobs"
    settings = Settings.from_env({**ENV, "JOBS_SUCCESS_TOPIC": topic,
                                  "JOBS_ERROR_TOPIC": "sagegate-dev-failed",
                                  "JOB_MAX_IMAGE_PIXELS": "300000000",
                                  "JOB_BUDGET_SECONDS": "600"})
    assert settings.jobs_success_topic == topic
    assert settings.jobs_error_topic == "sagegate-dev-failed"
    assert (settings.job_max_image_pixels, settings.job_budget_seconds) == (300_000_000, 600.0)


def test_a_jobs_retry_policy_has_the_jobs_budget_and_timeout() -> None:
    settings = Settings.from_env({**ENV, "JOB_BUDGET_SECONDS": "300",
                                  "ENDPOINT_CONNECT_TIMEOUT": "1"})
    job, request = policy_from(settings, job=True), policy_from(settings)
    assert (job.budget_seconds, job.attempt_timeout) == (300.0, 71.0)
    assert (request.budget_seconds, request.attempt_timeout) == (25.0, 21.0)


@pytest.mark.parametrize(("var", "value"), [
    ("JOBS_SUCCESS_TOPIC", "arn:aws:sqs:us-east-1:123456789012:q"),
    ("JOBS_ERROR_TOPIC", "two words"),
    ("JOB_MAX_IMAGE_PIXELS", "2000000000"), ("JOB_MAX_IMAGE_PIXELS", "many"),
    ("JOB_BUDGET_SECONDS", "901"), ("JOB_BUDGET_SECONDS", "60")])
def test_bad_job_settings_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({**ENV, var: value})
    assert str(caught.value).startswith(var)


# --- model.json's jobs block ------------------------------------------------------------------

def _model(tmp_path: Path, document: dict[str, Any], env: dict[str, str] | None = None,
           handler: str | None = None) -> Any:
    path = tmp_path / "model-a"
    path.mkdir()
    (path / "model.json").write_text(json.dumps(document))
    if handler is not None:
        (path / "handler.py").write_text(handler)
    return load_model(path, SETTINGS, {**ENV, **(env or {})})


def test_without_a_jobs_block_a_model_runs_jobs_on_its_own_endpoint(tmp_path: Path) -> None:
    model = _model(tmp_path, IRIS)
    assert model.jobs == JobsSpec(JobsBackend.REALTIME, None, 100 * 1024 * 1024, 900)
    assert model.jobs_endpoint == "iris"


def test_an_async_block_names_its_endpoint(tmp_path: Path) -> None:
    model = _model(tmp_path, {**IRIS, "jobs": {
        "backend": "async", "endpoint": "$IRIS_ASYNC", "max_upload_bytes": 1024,
        "invocation_timeout_seconds": 3600}}, {"IRIS_ASYNC": "iris-async-prod"})
    assert model.jobs == JobsSpec(JobsBackend.ASYNC, "iris-async-prod", 1024, 3600)
    assert model.jobs_endpoint == "iris-async-prod"


@pytest.mark.parametrize(("jobs", "key"), [
    ({"backend": "async"}, "jobs.endpoint"),
    ({"backend": "batch"}, "jobs.backend"),
    ({"endpoint": "bad name!"}, "jobs.endpoint"),
    ({"endpoint": "$UNSET_VARIABLE"}, "jobs.endpoint"),
    ({"max_upload_bytes": 0}, "jobs.max_upload_bytes"),
    ({"max_upload_bytes": 2 * 1024 ** 3}, "jobs.max_upload_bytes"),
    ({"max_upload_bytes": True}, "jobs.max_upload_bytes"),
    ({"max_upload_bytes": -1}, "jobs.max_upload_bytes"),
    ({"max_upload_bytes": 1.5}, "jobs.max_upload_bytes"),
    ({"max_upload_bytes": "10"}, "jobs.max_upload_bytes"),
    ({"invocation_timeout_seconds": 3601}, "jobs.invocation_timeout_seconds"),
    ({"queue": "x"}, "jobs.queue"),
    ([], "jobs")])
def test_a_bad_jobs_block_names_the_file_and_key(tmp_path: Path, jobs: Any, key: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _model(tmp_path, {**IRIS, "jobs": jobs})
    assert f"models/model-a/model.json: key {key!r}" in str(caught.value)


def test_a_handler_model_cannot_be_async(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _model(tmp_path, {"endpoint": "iris", "pipeline": "cortex",
                          "jobs": {"backend": "async", "endpoint": "iris-async"}},
               handler="def handle_post(payload, invoke, model):\n    return {}\n")
    assert "key 'jobs.backend'" in str(caught.value) and "handler" in str(caught.value)


# --- Lambda's event dicts ---------------------------------------------------------------------

def test_s3_keys_are_decoded_and_only_this_buckets() -> None:
    event = {"Records": [
        {"s3": {"bucket": {"name": "b"}, "object": {"key": "dev/jobs/tickets/a%2Bb+c"}}},
        {"s3": {"bucket": {"name": "other"}, "object": {"key": "dev/jobs/tickets/x"}}},
        {"s3": "not a record"}, "junk", {"s3": {"bucket": {"name": "b"}, "object": {}}}]}
    assert s3_keys(event, "b") == ["dev/jobs/tickets/a+b c"]
    assert s3_keys({"Records": "nope"}, "b") == s3_keys([], "b") == []


def test_sns_messages_are_read_from_each_record() -> None:
    event = {"Records": [{"Sns": {"Message": "one"}}, {"Sns": {"Message": 2}}, {"Sns": None},
                         {"Sns": {"Message": "two"}}]}
    assert sns_messages(event) == ["one", "two"]
    assert sns_messages({}) == []


def test_a_ticket_names_a_job_only_under_this_stages_prefix() -> None:
    job_id = new_job_id()
    assert job_id_of_ticket(ticket_key("dev/jobs/", job_id), "dev/jobs/") == job_id
    assert job_id_of_ticket(ticket_key("prod/jobs/", job_id), "dev/jobs/") is None
    assert job_id_of_ticket("dev/jobs/tickets/../" + job_id, "dev/jobs/") is None


@pytest.mark.parametrize("key", [
    # as long as "dev/jobs/tickets/", so the id sits where a ticket's would: only the prefix
    # tells them apart
    "dev/jobs/uploads/{id}", "dev/jobs/results/{id}", "qa1/jobs/tickets/{id}",
    "dev/jobs/Tickets/{id}", "xxxxxxxxxxxxxxxxx{id}"])
def test_a_key_of_the_same_length_elsewhere_is_no_ticket(key: str) -> None:
    assert len(key.format(id="")) == len("dev/jobs/tickets/")
    assert job_id_of_ticket(key.format(id=new_job_id()), "dev/jobs/") is None


def test_a_location_is_read_only_in_this_stages_bucket(aws: None) -> None:
    context = Services(Settings(endpoint_name="e", jobs_bucket="sagegate-jobs")).jobs_context
    assert context.key_of("s3://sagegate-jobs/jobs/uploads/x") == "jobs/uploads/x"
    assert context.key_of(context.location("jobs/inputs/y")) == "jobs/inputs/y"
    for stranger in ("s3://other-bucket/jobs/uploads/x", "s3://sagegate-jobs-2/jobs/uploads/x",
                     "s3://sagegate-job/jobs/uploads/x", "s3:///sagegate-jobs/jobs/uploads/x",
                     "https://sagegate-jobs.s3.amazonaws.com/jobs/uploads/x"):
        with pytest.raises(InvalidUploadError, match="not an upload of this stage"):
            context.key_of(stranger)


def test_a_jobs_batch_bound_is_its_backends() -> None:
    registry = Services(SETTINGS).registry
    iris = registry.get("iris")
    assert iris.jobs.backend == JobsBackend.ASYNC  # a whole batch goes to the endpoint
    backends = Registered().backends
    assert backend_of(iris, backends).batch_limits(iris) == (JOB_MAX_INSTANCES, JOB_MAX_ELEMENTS)
    realtime = dataclasses.replace(iris, jobs=JobsSpec(JobsBackend.REALTIME))
    assert backend_of(realtime, backends).batch_limits(realtime) == (
        MAX_INSTANCES, MAX_ELEMENTS)  # one request's


# --- the composition root ---------------------------------------------------------------------

@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def test_jobs_are_refused_on_a_stage_without_a_bucket() -> None:
    with pytest.raises(JobsDisabledError):
        _ = Services(SETTINGS).jobs


def test_the_store_is_the_table_when_one_is_named(aws: None) -> None:
    settings = Settings(endpoint_name="e", jobs_bucket="sagegate-jobs",
                        jobs_table="sagegate-jobs")
    boto3.client("dynamodb").create_table(
        TableName="sagegate-jobs", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}])
    services = Services(settings)
    assert isinstance(services.job_store, TableJobStore)
    job = services.job_store.create(Job(job_id=new_job_id(), model="iris",
                                        state=JobState.QUEUED, created_at=1.0, updated_at=1.0))
    assert services.job_store.get(job.job_id) == job
    assert services.job_store in services.connection_holders()
    assert isinstance(Services(Settings(endpoint_name="e")).job_store, MemoryJobStore)


def test_the_job_endpoint_client_has_the_jobs_timeouts(aws: None) -> None:
    services = Services(Settings(endpoint_name="e", jobs_bucket="sagegate-jobs"))
    client = services.job_endpoint
    assert client.client.meta.config.read_timeout == 70.0
    assert client in services.connection_holders()
    # InvokeEndpointAsync goes through it too: one retry rule for both backends, its own
    assert services.jobs_context.endpoint is client
    assert client.client.meta.config.retries["total_max_attempts"] == 1  # botocore's: none


def test_the_job_endpoint_client_retries_until_the_jobs_deadline(aws: None) -> None:
    services = Services(Settings(endpoint_name="e", jobs_bucket="sagegate-jobs",
                                 endpoint_max_attempts=2))
    policy = services.job_endpoint._policy
    assert policy == job_retry_policy(services.settings)
    assert policy.max_attempts == JOB_MAX_ATTEMPTS  # the deadline ends them, not a count
    assert (policy.base_delay, policy.max_delay) == (0.5, JOB_MAX_DELAY_SECONDS)
    assert (policy.budget_seconds, policy.attempt_timeout) == (840.0, 72.0)
    assert isinstance(services.job_endpoint.client, WholeAnswers)  # no second call after one


def test_a_given_job_endpoint_client_also_sends_invoke_endpoint_async(aws: None) -> None:
    client = EndpointClient(boto3.client("sagemaker-runtime"))
    services = Services(Settings(endpoint_name="e", jobs_bucket="sagegate-jobs"),
                        job_endpoint=client)
    assert services.jobs_context.endpoint is client  # tests stub one client


def test_nothing_of_jobs_is_built_before_its_first_use() -> None:
    services = Services(SETTINGS)
    holders = services.connection_holders()
    assert all(not isinstance(holder, EndpointClient) for holder in holders)


# --- the pipeline halves around an asynchronous endpoint ---------------------------------------

def _answer(document: Any) -> dict[str, Any]:
    body = json.dumps(document).encode()
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json",
            "InvokedProductionVariant": "AllTraffic"}


def test_the_split_image_pipeline_answers_as_the_whole_one() -> None:
    runtime = boto3.client("sagemaker-runtime", region_name="us-east-1",
                           aws_access_key_id="testing", aws_secret_access_key="testing")
    settings = Settings(endpoint_name="efficientnet-lite0", passthrough=False)
    services = Services(settings, endpoint=EndpointClient(runtime),
                        job_endpoint=EndpointClient(runtime))
    model = services.registry.get("efficientnet-lite0")
    scores = [0.001] * 1000
    scores[285] = 0.9
    request = ModelRequest(Call(jpeg(800, 600), "application/octet-stream"), CallOptions(k=3))
    with Stubber(runtime) as stubber:
        stubber.add_response("invoke_endpoint", _answer(scores))
        whole = services.pipeline_for(model).serve(request, "r-1", StageTimer())
    split = services.job_pipeline_for(model)
    call = split.preprocess(request, StageTimer())
    assert call.body == whole.sent and call.content_type == whole.sent_content_type
    half = split.postprocess(request, InvokeResult(json.dumps(scores).encode(),
                                                   "application/json", None, None, 1),
                             "r-1", call.body)
    assert json.loads(half.answer.body)["predictions"] == json.loads(
        whole.answer.body)["predictions"]
    assert half.invoked and half.sent == call.body


def test_an_async_jobs_batch_may_hold_more_rows_than_one_request() -> None:
    model = Services(SETTINGS).registry.get("iris")
    batch = Call(b"5.1,3.5,1.4,0.2\n" * (MAX_INSTANCES + 1), "text/csv")
    with pytest.raises(SignatureMismatchError, match=f"at most {MAX_INSTANCES}"):
        tensor_input(model, batch)
    with batch_limits(JOB_MAX_INSTANCES, JOB_MAX_ELEMENTS):
        sent = json.loads(tensor_input(model, batch))
    assert len(sent["instances"]) == MAX_INSTANCES + 1
    with pytest.raises(SignatureMismatchError):  # and the request's bound is back after
        tensor_input(model, batch)


# --- the jobs service on moto's S3 ------------------------------------------------------------

def _service(services: Services) -> Any:
    services.jobs_context.s3.create_bucket(Bucket="sagegate-jobs")
    return services.jobs


def test_an_upload_is_presigned_with_the_models_cap_and_the_type_it_reads(aws: None) -> None:
    services = Services(Settings(endpoint_name="efficientnet-lite0", jobs_bucket="sagegate-jobs",
                                 jobs_prefix="dev/jobs/"))
    jobs = _service(services)
    upload = jobs.presign("iris", "text/csv")
    policy = json.loads(base64.b64decode(upload.fields["policy"]))
    assert ["content-length-range", 1, 32 * 1024 * 1024] in policy["conditions"]
    assert {"Content-Type": "text/csv"} in policy["conditions"]
    assert upload.key == f"dev/jobs/uploads/{upload.upload_id}"
    jpeg_upload = jobs.presign("efficientnet-lite0", "image/JPG")  # read as image/jpeg
    assert jpeg_upload.fields["Content-Type"] == "image/jpeg"
    with pytest.raises(UnsupportedMediaTypeError, match="text/csv"):
        jobs.presign("iris-cortex", "text/csv")


def test_a_job_input_is_read_whatever_type_the_model_reads(aws: None) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="sagegate-b")
    key = "dev/jobs/uploads/" + "c" * 32
    s3.put_object(Bucket="sagegate-b", Key=key, Body=b"1,2,3,4\n",
                  ContentType="text/csv; charset=utf-8")
    assert read_input(s3, "sagegate-b", "dev/jobs/", key, 64,
                      lambda kind: kind == "text/csv") == (b"1,2,3,4\n", "text/csv")
    with pytest.raises(UploadTypeMismatchError):
        read_input(s3, "sagegate-b", "dev/jobs/", key, 64, lambda kind: kind == "application/json")
    with pytest.raises(UploadTooLargeError):
        read_input(s3, "sagegate-b", "dev/jobs/", key, 4, lambda kind: True)
    with pytest.raises(InvalidUploadError):
        read_input(s3, "sagegate-b", "prod/jobs/", key, 64, lambda kind: True)


def test_presigned_uploads_and_results_are_signature_v4_on_the_regional_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore's default presigns S3 with Signature Version 2 on the global host: buckets
    # made since mid-2020 refuse the first, and a new bucket of another region redirects
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    client = services_module._s3_client()
    post = client.generate_presigned_post(Bucket="sagegate-dev-jobs", Key="jobs/uploads/a",
                                          ExpiresIn=60)
    assert post["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    assert "signature" not in post["fields"] and "AWSAccessKeyId" not in post["fields"]
    assert post["url"] == "https://sagegate-dev-jobs.s3.eu-west-1.amazonaws.com/"
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": "sagegate-dev-jobs", "Key": "jobs/results/a"},
        ExpiresIn=60)
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "&Signature=" not in url
