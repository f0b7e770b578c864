"""Asynchronous Inference without S3 or SNS: configuration, the wire as boto3 sees it, the
queue's bound, RequestTTLSeconds and InvocationTimeoutSeconds with injected clocks, and the
failure objects and notifications of each fault."""

from __future__ import annotations

import http.client
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator import errors
from emulator.asyncinvoke import (
    AsyncInference,
    AsyncRequest,
    Outbox,
    split_location,
)
from emulator.config import ConfigError, parse_config
from emulator.container import ContainerReply
from emulator.runtime import InvokeRequest, Runtime
from emulator.server import EmulatorServer
from tests.unit.emulator.fakes import Clock, FakeContainer, MemoryStore, Topics

SUCCESS = "arn:aws:sns:us-east-1:123456789012:async-success"
ERROR = "arn:aws:sns:us-east-1:123456789012:async-error"
RAW: dict[str, Any] = {
    "models": {"m": {"path": "m.onnx"}},
    "endpoints": {
        "rt": {"variants": [{"name": "AllTraffic", "model": "m"}]},
        "queued": {
            "variants": [{"name": "AllTraffic", "model": "m"}],
            "async": {
                "output_path": "s3://results/out/",
                "failure_path": "s3://results/failed",
                "success_topic": SUCCESS,
                "error_topic": ERROR,
                "max_queued": 2,
                "max_input_bytes": 1000,
            },
        },
    },
}


def build(
    container: Any = None, outbox: Outbox | None = None, wait: Any = None
) -> tuple[AsyncInference, MemoryStore, Topics, Clock]:
    config = parse_config(RAW, Path("/configs"))
    runtime = Runtime(config, {"m": container or FakeContainer()}, random.Random(1), lambda s: None)
    store, topics, clock = MemoryStore(), Topics(), Clock()
    ids = iter(f"id-{index}" for index in range(1000))
    options: dict[str, Any] = {} if wait is None else {"wait": wait}
    service = AsyncInference(runtime, store, topics, outbox, clock, new_id=lambda: next(ids),
                             **options)  # fmt: skip
    return service, store, topics, clock


def submit(service: AsyncInference, **fields: Any) -> Any:
    fields.setdefault("input_location", "s3://inputs/cat.jpg")
    fields.setdefault("inference_id", "job-1")
    return service.submit(AsyncRequest("queued", **fields))


# configuration


def test_async_block_is_parsed_with_defaults() -> None:
    config = parse_config(RAW, Path("/configs"))
    settings = config.endpoints["queued"].asynchronous
    assert settings is not None
    assert settings.output_path == "s3://results/out"
    assert settings.failure_path == "s3://results/failed"
    assert (settings.max_concurrent_invocations, settings.max_queued) == (1, 2)
    assert config.endpoints["rt"].asynchronous is None


@pytest.mark.parametrize(
    ("block", "key"),
    [
        ({}, "endpoints.queued.async.output_path"),
        ({"output_path": "results/out"}, "endpoints.queued.async.output_path"),
        ({"output_path": "s3://b/o", "success_topic": "topic"}, "async.success_topic"),
        ({"output_path": "s3://b/o", "max_input_bytes": 2 * 1024**3}, "async.max_input_bytes"),
        ({"output_path": "s3://b/o", "max_queued": 0}, "async.max_queued"),
        ({"output_path": "s3://b/o", "max_queued": 10_001}, "async.max_queued"),
        ({"output_path": "s3://b/o", "max_concurrent_invocations": 1001},
         "async.max_concurrent_invocations"),
        ({"output_path": "s3://b/o", "kms_key": "x"}, "async.kms_key"),
    ],
)
def test_bad_async_blocks_name_the_key(block: dict[str, Any], key: str) -> None:
    raw = json.loads(json.dumps(RAW))
    raw["endpoints"]["queued"]["async"] = block
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_config(raw, Path("/configs"))


def test_the_largest_allowed_bounds_are_accepted() -> None:
    raw = json.loads(json.dumps(RAW))
    raw["endpoints"]["queued"]["async"] = {"output_path": "s3://b/o", "max_queued": 10_000,
                                           "max_concurrent_invocations": 1000}
    settings = parse_config(raw, Path("/configs")).endpoints["queued"].asynchronous
    assert settings is not None
    assert (settings.max_queued, settings.max_concurrent_invocations) == (10_000, 1000)


def test_the_outbox_rotates_at_its_size_cap_and_keeps_the_newest_lines(tmp_path: Path) -> None:
    path = tmp_path / "outbox.jsonl"
    outbox = Outbox(path, max_bytes=100)
    for number in range(20):
        outbox.append({"n": number, "pad": "x" * 20})  # 33 bytes a line
    current = [json.loads(line)["n"] for line in path.read_text().splitlines()]
    rotated = [json.loads(line)["n"] for line in outbox.rotated.read_text().splitlines()]
    assert sorted(path.parent.iterdir()) == [path, outbox.rotated]  # never a third file
    assert path.stat().st_size <= 100 and outbox.rotated.stat().st_size <= 100
    assert rotated + current == list(range(20))[-len(rotated + current):]  # the newest, in order
    assert current[-1] == 19


# which operation each kind of endpoint takes


def test_invoke_endpoint_on_an_async_endpoint_is_a_validation_error() -> None:
    service, *_ = build()
    with pytest.raises(errors.ValidationError, match="InvokeEndpointAsync"):
        service.runtime.invoke(InvokeRequest("queued", b"x", 1, "image/jpeg"))


def test_invoke_endpoint_async_on_a_real_time_endpoint_is_a_validation_error() -> None:
    service, *_ = build()
    with pytest.raises(errors.ValidationError, match="not an asynchronous"):
        service.submit(AsyncRequest("rt", input_location="s3://inputs/cat.jpg"))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input_location": "ftp://x/y"}, "inputLocation"),
        ({"input_location": None}, "Exactly one of InputLocation"),
        ({"body": b"x", "body_length": 1}, "Exactly one of InputLocation"),
        ({"invocation_timeout": "3601"}, "invocationTimeoutSeconds"),
        ({"invocation_timeout": "soon"}, "invocationTimeoutSeconds"),
        ({"request_ttl": "59"}, "requestTTLSeconds"),
        ({"inference_id": " leading-space"}, "inferenceId"),
        ({"inference_id": "x" * 65}, "inferenceId"),
    ],
)
def test_bad_members_are_validation_errors(fields: dict[str, Any], message: str) -> None:
    service, *_ = build()
    with pytest.raises(errors.ValidationError, match=message):
        submit(service, **fields)


def test_split_location_reads_s3_and_https_forms() -> None:
    assert split_location("s3://b/k/x.jpg") == ("b", "k/x.jpg")
    assert split_location("https://b.s3.us-east-1.amazonaws.com/k/x.jpg") == ("b", "k/x.jpg")
    assert split_location("https://127.0.0.1:9000/b/k") == ("b", "k")


# the queue


def test_the_queue_is_bounded_and_answers_throttling_when_full() -> None:
    service, *_ = build()
    submit(service)
    submit(service)
    with pytest.raises(errors.ThrottlingException, match="queued"):
        submit(service)
    service.run_next("queued")
    submit(service)  # one slot freed


def test_a_job_runs_the_model_and_writes_the_output_and_the_success_notification(
    tmp_path: Path,
) -> None:
    container = FakeContainer(ContainerReply(200, b'{"top": 3}', "application/json"))
    service, store, topics, clock = build(container, Outbox(tmp_path / "outbox.jsonl"))
    store.objects[("inputs", "cat.jpg")] = (b"jpeg bytes", "image/jpeg")
    accepted = submit(service, inference_id="job-1", accept="application/json",
                      custom_attributes="a=1")  # fmt: skip
    assert accepted.inference_id == "job-1"
    assert accepted.output_location == "s3://results/out/id-0.out"
    assert accepted.failure_location == "s3://results/failed/id-0-error.out"
    clock.now += 2.5
    completion = service.run_next("queued")
    assert completion is not None and completion.status == "Completed"
    assert store.objects[("results", "out/id-0.out")] == (b'{"top": 3}', "application/json")
    assert container.calls == [(b"jpeg bytes", "image/jpeg", "application/json")]
    [(topic, message)] = topics.published
    assert topic == SUCCESS
    assert message["invocationStatus"] == "Completed"
    assert message["inferenceId"] == "job-1"
    assert message["requestParameters"] == {
        "endpointName": "queued", "inputLocation": "s3://inputs/cat.jpg",
        "accept": "application/json", "customAttributes": "a=1",
    }  # fmt: skip
    assert message["responseParameters"] == {
        "contentType": "application/json", "outputLocation": "s3://results/out/id-0.out",
    }  # fmt: skip
    assert message["receivedTime"] == "2023-11-14T22:13:20.000Z"
    assert message["eventTime"] == "2023-11-14T22:13:22.500Z"
    assert (message["eventSource"], message["eventName"]) == ("aws:sagemaker", "InferenceResult")
    [line] = (tmp_path / "outbox.jsonl").read_text().splitlines()
    assert json.loads(line) == {"topic_arn": SUCCESS, "status": "Completed", "message": message}


def test_an_inline_body_is_run_without_s3() -> None:
    container = FakeContainer()
    service, *_ = build(container)
    service.submit(AsyncRequest("queued", body=b"[1, 2]", body_length=6,
                                content_type="application/json"))  # fmt: skip
    completion = service.run_next("queued")
    assert completion is not None and completion.status == "Completed"
    assert container.calls == [(b"[1, 2]", "application/json", None)]


# faults: a failure object and an error notification, never an exception


def failed(service: AsyncInference, store: MemoryStore, topics: Topics) -> dict[str, Any]:
    completion = service.run_next("queued")
    assert completion is not None
    [(topic, message)] = topics.published
    assert topic == ERROR
    assert message["responseParameters"]["failureLocation"] == "s3://results/failed/id-0-error.out"
    assert ("results", "failed/id-0-error.out") in store.objects
    assert not any(key[1].startswith("out/") for key in store.objects)
    return message


def test_a_missing_input_fails_with_a_failure_object() -> None:
    service, store, topics, _ = build()
    submit(service, input_location="s3://inputs/missing.jpg")
    message = failed(service, store, topics)
    assert message["invocationStatus"] == "Failed"
    assert "does not exist" in message["failureReason"]


def test_an_input_over_the_cap_fails_before_the_model_runs() -> None:
    container = FakeContainer()
    service, store, topics, _ = build(container)
    store.objects[("inputs", "cat.jpg")] = (b"x" * 1001, "image/jpeg")
    submit(service)
    message = failed(service, store, topics)
    assert "over the limit of 1000" in message["failureReason"]
    assert container.calls == []


def test_a_model_error_stores_the_containers_answer_as_the_failure_object() -> None:
    reply = ContainerReply(415, b"Unsupported Media Type: text/plain", "text/plain")
    service, store, topics, _ = build(FakeContainer(reply))
    store.objects[("inputs", "cat.jpg")] = (b"text", "text/plain")
    submit(service)
    message = failed(service, store, topics)
    assert message["failureReason"].startswith("ClientError: Received client error (415)")
    body, _ = store.objects[("results", "failed/id-0-error.out")]
    assert body == b"Unsupported Media Type: text/plain"


def test_a_request_that_waited_past_its_ttl_expires_without_running() -> None:
    container = FakeContainer()
    service, store, topics, clock = build(container)
    store.objects[("inputs", "cat.jpg")] = (b"jpeg", "image/jpeg")
    submit(service, request_ttl="60")
    clock.now += 61
    message = failed(service, store, topics)
    assert message["invocationStatus"] == "Expired"
    assert "RequestTTLSeconds of 60" in message["failureReason"]
    assert container.calls == []


def test_a_request_within_its_ttl_runs() -> None:
    service, store, _, clock = build()
    store.objects[("inputs", "cat.jpg")] = (b"jpeg", "image/jpeg")
    submit(service, request_ttl="60")
    clock.now += 59
    completion = service.run_next("queued")
    assert completion is not None and completion.status == "Completed"


def test_a_model_slower_than_the_invocation_timeout_fails_the_invocation() -> None:
    waits: list[float] = []

    def timed_out(event: threading.Event, timeout: float) -> bool:
        waits.append(timeout)
        return False  # as if the timeout passed before the model answered

    service, store, topics, _ = build(wait=timed_out)
    store.objects[("inputs", "cat.jpg")] = (b"jpeg", "image/jpeg")
    submit(service, invocation_timeout="5")
    message = failed(service, store, topics)
    assert waits == [5]
    assert "InvocationTimeoutSeconds of 5" in message["failureReason"]


def test_the_default_invocation_timeout_is_900_seconds() -> None:
    waits: list[float] = []

    def answered(event: threading.Event, timeout: float) -> bool:
        waits.append(timeout)
        return event.wait(30)

    service, store, _, _ = build(wait=answered)
    store.objects[("inputs", "cat.jpg")] = (b"jpeg", "image/jpeg")
    submit(service)
    completion = service.run_next("queued")
    assert completion is not None and completion.status == "Completed"
    assert waits == [900]


def test_a_store_that_fails_on_write_is_a_failure_not_a_crash() -> None:
    service, store, topics, _ = build()
    store.objects[("inputs", "cat.jpg")] = (b"jpeg", "image/jpeg")

    def broken(bucket: str, key: str, body: bytes, content_type: str) -> None:
        raise OSError("bucket gone")

    store.write = broken  # type: ignore[method-assign]
    submit(service)
    completion = service.run_next("queued")
    assert completion is not None and completion.status == "Failed"
    [(topic, message)] = topics.published
    assert topic == ERROR and "bucket gone" in message["failureReason"]
    assert "failureLocation" not in message["responseParameters"]


# the wire, as boto3 sends and reads it


@pytest.fixture
def served() -> Iterator[tuple[Any, AsyncInference]]:
    service, *_ = build()
    server = EmulatorServer(("127.0.0.1", 0), service.runtime, service)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    client = boto3.client(
        "sagemaker-runtime", endpoint_url=server.url, region_name="us-east-1",
        aws_access_key_id="x", aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}),
    )  # fmt: skip
    try:
        yield client, service
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_boto3_invoke_endpoint_async_reads_the_202_answer(
    served: tuple[Any, AsyncInference],
) -> None:
    client, service = served
    answer = client.invoke_endpoint_async(
        EndpointName="queued", InputLocation="s3://inputs/cat.jpg", InferenceId="wire-1",
        ContentType="image/jpeg", Accept="application/json", CustomAttributes="k=v",
        InvocationTimeoutSeconds=120, RequestTTLSeconds=600,
    )  # fmt: skip
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert answer["InferenceId"] == "wire-1"
    assert answer["OutputLocation"] == "s3://results/out/id-0.out"
    assert answer["FailureLocation"] == "s3://results/failed/id-0-error.out"
    job = service.queues["queued"].get_nowait()
    assert job is not None
    assert (job.request.content_type, job.request.accept) == ("image/jpeg", "application/json")
    assert job.request.custom_attributes == "k=v"
    assert (job.timeout_s, job.ttl_s) == (120, 600)


def test_boto3_sees_the_modeled_errors(served: tuple[Any, AsyncInference]) -> None:
    client, _ = served
    with pytest.raises(client.exceptions.ValidationError, match="not an asynchronous"):
        client.invoke_endpoint_async(EndpointName="rt", InputLocation="s3://inputs/cat.jpg")
    with pytest.raises(client.exceptions.ValidationError, match="InvokeEndpointAsync"):
        client.invoke_endpoint(EndpointName="queued", Body=b"x", ContentType="image/jpeg")
    with pytest.raises(client.exceptions.ValidationError, match="not found"):
        client.invoke_endpoint_async(EndpointName="nope", InputLocation="s3://inputs/cat.jpg")
    for _ in range(2):
        client.invoke_endpoint_async(EndpointName="queued", InputLocation="s3://inputs/cat.jpg")
    with pytest.raises(ClientError) as raised:
        client.invoke_endpoint_async(EndpointName="queued", InputLocation="s3://inputs/cat.jpg")
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"


def test_without_an_inference_id_one_is_generated_apart_from_the_object_name() -> None:
    service, *_ = build()
    accepted = service.submit(AsyncRequest("queued", input_location="s3://inputs/cat.jpg"))
    assert accepted.inference_id == "id-0"
    assert accepted.output_location == "s3://results/out/id-1.out"


def test_an_output_path_extension_and_filename_shape_the_locations() -> None:
    service, *_ = build()
    accepted = submit(service, output_extension="team/a", filename="answer.json")
    assert accepted.output_location == "s3://results/out/team/a/answer.json"
    assert accepted.failure_location == "s3://results/failed/team/a/id-0-error.out"


@pytest.mark.parametrize(
    ("headers", "member"),
    [
        ({"X-Amzn-SageMaker-RequestTTLSeconds": "9" * 40}, "requestTTLSeconds"),
        ({"X-Amzn-SageMaker-InvocationTimeoutSeconds": "-1"}, "invocationTimeoutSeconds"),
        # digits to str.isdigit, not to int(): a 400, never a 500
        ({"X-Amzn-SageMaker-InvocationTimeoutSeconds": "--5"}, "invocationTimeoutSeconds"),
        ({"X-Amzn-SageMaker-RequestTTLSeconds": "\u00b2"}, "requestTTLSeconds"),
        ({"X-Amzn-SageMaker-Inference-Id": "caf\u00e9"}, "inferenceId"),
        ({"X-Amzn-SageMaker-InputLocation": "s3:/"}, "inputLocation"),
    ],
)
def test_raw_requests_with_bad_headers_get_a_400_envelope(
    served: tuple[Any, AsyncInference], headers: dict[str, str], member: str
) -> None:
    client, _ = served
    url = urlsplit(client.meta.endpoint_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    sent = {"X-Amzn-SageMaker-InputLocation": "s3://inputs/cat.jpg", **headers}
    connection.putrequest("POST", "/endpoints/queued/async-invocations")
    for name, value in sent.items():
        connection.putheader(name, value.encode("latin-1"))
    connection.putheader("Content-Length", "0")
    connection.endheaders()
    answer = connection.getresponse()
    document = json.loads(answer.read())
    connection.close()
    assert answer.status == 400
    assert answer.getheader("x-amzn-ErrorType") == "ValidationError"
    assert member in document["message"]
