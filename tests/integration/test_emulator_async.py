"""InvokeEndpointAsync end to end: the real emulator serving the real image and iris models,
moto's server on 127.0.0.1 standing in for S3 and SNS (they cannot run here otherwise), real
boto3 over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import cv2
import pytest
from botocore.config import Config

from emulator.process import EmulatorProcess, start_emulator
from tests import imagefactory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SUCCESS = "arn:aws:sns:us-east-1:123456789012:emulator-async-success"
ERROR = "arn:aws:sns:us-east-1:123456789012:emulator-async-error"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
               "region_name": "us-east-1"}  # fmt: skip
POLL_LIMIT_S = 90.0


def _cat_jpeg() -> bytes:
    """A photo made here (scikit-image's cat), not samples/cat.jpg: that file is written by
    ``make run``, and no test may depend on another command's output."""
    ok, encoded = cv2.imencode(".jpg", imagefactory.photo("chelsea"),
                               [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return encoded.tobytes()


def write_config(directory: Path) -> Path:
    base = json.loads((ROOT / "emulator" / "config.json").read_text())
    models = {name: {**spec, "path": str(ROOT / "emulator" / spec["path"])}
              for name, spec in base["models"].items() if name in ("efficientnet-lite0", "iris")}
    asynchronous = {"output_path": "s3://async-results/output",
                    "failure_path": "s3://async-results/failure",
                    "success_topic": SUCCESS, "error_topic": ERROR,
                    "max_concurrent_invocations": 2}  # fmt: skip
    image = [{"name": "AllTraffic", "model": "efficientnet-lite0"}]
    config = {
        "allow_fault_header": True,
        "models": models,
        "endpoints": {
            "efficientnet-lite0": {"variants": image},
            "image-async": {"variants": image, "async": asynchronous},
            "iris-async": {"variants": [{"name": "AllTraffic", "model": "iris"}],
                           "async": asynchronous},
        },
    }  # fmt: skip
    path = directory / "emulator-async.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def aws(moto_url: str) -> dict[str, Any]:
    s3 = boto3.client("s3", endpoint_url=moto_url, **CREDENTIALS)
    for bucket in ("async-inputs", "async-results"):
        s3.create_bucket(Bucket=bucket)
    sns = boto3.client("sns", endpoint_url=moto_url, **CREDENTIALS)
    sqs = boto3.client("sqs", endpoint_url=moto_url, **CREDENTIALS)
    queues = {}
    for topic in (SUCCESS, ERROR):
        name = topic.rsplit(":", 1)[1]
        sns.create_topic(Name=name)
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=topic, Protocol="sqs",
                      Endpoint=arn["Attributes"]["QueueArn"])  # fmt: skip
        queues[topic] = url
    return {"url": moto_url, "s3": s3, "sqs": sqs, "queues": queues}


@pytest.fixture(scope="module")
def emulator(aws: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[EmulatorProcess, Path]]:  # fmt: skip
    directory = tmp_path_factory.mktemp("emulator-async")
    outbox = directory / "outbox.jsonl"
    args = ["--s3-endpoint-url", aws["url"], "--async-outbox", str(outbox)]
    with start_emulator(write_config(directory), timeout=60, extra_args=args) as process:
        yield process, outbox


@pytest.fixture(scope="module")
def runtime(emulator: tuple[EmulatorProcess, Path]) -> Any:
    return boto3.client("sagemaker-runtime", endpoint_url=emulator[0].url,
                        config=Config(retries={"max_attempts": 1}), **CREDENTIALS)  # fmt: skip


def object_at(s3: Any, location: str, limit: float = POLL_LIMIT_S) -> tuple[bytes, str]:
    bucket, key = location.removeprefix("s3://").split("/", 1)
    deadline = time.monotonic() + limit
    while True:
        try:
            answer = s3.get_object(Bucket=bucket, Key=key)
            return answer["Body"].read(), answer["ContentType"]
        except s3.exceptions.NoSuchKey:
            if time.monotonic() > deadline:
                raise AssertionError(f"{location} did not appear") from None
            time.sleep(0.1)


def notifications(aws: dict[str, Any], topic: str) -> list[dict[str, Any]]:
    answer = aws["sqs"].receive_message(QueueUrl=aws["queues"][topic], MaxNumberOfMessages=10,
                                        WaitTimeSeconds=1)  # fmt: skip
    return [json.loads(json.loads(item["Body"])["Message"]) for item in answer.get("Messages", [])]


def upload(aws: dict[str, Any], key: str, body: bytes, content_type: str) -> str:
    aws["s3"].put_object(Bucket="async-inputs", Key=key, Body=body, ContentType=content_type)
    return f"s3://async-inputs/{key}"


def test_an_image_runs_asynchronously_with_the_same_answer_as_invoke_endpoint(
    aws: dict[str, Any], runtime: Any, emulator: tuple[EmulatorProcess, Path]
) -> None:
    image = _cat_jpeg()
    location = upload(aws, "cat.jpg", image, "image/jpeg")
    accepted = runtime.invoke_endpoint_async(
        EndpointName="image-async", InputLocation=location, ContentType="image/jpeg",
        Accept="application/json", InferenceId="cat-1", InvocationTimeoutSeconds=300,
    )  # fmt: skip
    assert accepted["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert accepted["InferenceId"] == "cat-1"
    assert accepted["OutputLocation"].startswith("s3://async-results/output/")
    assert accepted["OutputLocation"].endswith(".out")
    assert accepted["FailureLocation"].startswith("s3://async-results/failure/")
    assert accepted["FailureLocation"].endswith("-error.out")
    body, content_type = object_at(aws["s3"], accepted["OutputLocation"])
    direct = runtime.invoke_endpoint(EndpointName="efficientnet-lite0", Body=image,
                                     ContentType="image/jpeg", Accept="application/json")
    assert json.loads(body) == json.loads(direct["Body"].read())
    assert content_type == direct["ContentType"]
    [message] = [m for m in notifications(aws, SUCCESS) if m["inferenceId"] == "cat-1"]
    assert message["invocationStatus"] == "Completed"
    assert message["requestParameters"]["inputLocation"] == location
    assert message["responseParameters"]["outputLocation"] == accepted["OutputLocation"]
    lines = [json.loads(line) for line in emulator[1].read_text().splitlines()]
    assert {"topic_arn": SUCCESS, "status": "Completed", "message": message} in lines


def test_a_missing_input_gives_a_failure_object_and_an_error_notification(
    aws: dict[str, Any], runtime: Any
) -> None:
    accepted = runtime.invoke_endpoint_async(
        EndpointName="image-async", InputLocation="s3://async-inputs/missing.jpg",
        ContentType="image/jpeg", InferenceId="missing-1",
    )  # fmt: skip
    body, _ = object_at(aws["s3"], accepted["FailureLocation"])
    assert b"does not exist" in body
    [message] = [m for m in notifications(aws, ERROR) if m["inferenceId"] == "missing-1"]
    assert message["invocationStatus"] == "Failed"
    assert message["responseParameters"]["failureLocation"] == accepted["FailureLocation"]
    bucket, key = accepted["OutputLocation"].removeprefix("s3://").split("/", 1)
    assert aws["s3"].list_objects_v2(Bucket=bucket, Prefix=key)["KeyCount"] == 0


def test_a_wrong_content_type_fails_and_real_time_endpoints_keep_serving(
    aws: dict[str, Any], runtime: Any
) -> None:
    location = upload(aws, "notes.txt", b"not an image", "text/plain")
    accepted = runtime.invoke_endpoint_async(EndpointName="image-async", InputLocation=location,
                                             InferenceId="text-1")  # fmt: skip
    body, _ = object_at(aws["s3"], accepted["FailureLocation"])
    assert body  # the container's own refusal
    [message] = [m for m in notifications(aws, ERROR) if m["inferenceId"] == "text-1"]
    assert "415" in message["failureReason"]
    image = _cat_jpeg()
    answer = runtime.invoke_endpoint(EndpointName="efficientnet-lite0", Body=image,
                                     ContentType="image/jpeg")  # fmt: skip
    assert len(json.loads(answer["Body"].read())) == 1000


def test_a_tabular_batch_runs_on_the_iris_endpoint(aws: dict[str, Any], runtime: Any) -> None:
    rows = "\n".join("5.1,3.5,1.4,0.2" for _ in range(500)).encode()
    location = upload(aws, "iris.csv", rows, "text/csv")
    accepted = runtime.invoke_endpoint_async(EndpointName="iris-async", InputLocation=location,
                                             ContentType="text/csv")  # fmt: skip
    body, _ = object_at(aws["s3"], accepted["OutputLocation"])
    predictions = json.loads(body)["predictions"]
    assert len(predictions) == 500 and len(predictions[0]) == 3


def test_a_model_slower_than_the_invocation_timeout_fails(
    aws: dict[str, Any], runtime: Any
) -> None:
    location = upload(aws, "iris-slow.csv", b"5.1,3.5,1.4,0.2", "text/csv")
    accepted = runtime.invoke_endpoint_async(
        EndpointName="iris-async", InputLocation=location, ContentType="text/csv",
        CustomAttributes="emulator-latency-ms=2500", InvocationTimeoutSeconds=1,
        InferenceId="slow-1",
    )  # fmt: skip
    body, _ = object_at(aws["s3"], accepted["FailureLocation"])
    assert b"InvocationTimeoutSeconds of 1" in body
    bucket, key = accepted["OutputLocation"].removeprefix("s3://").split("/", 1)
    assert aws["s3"].list_objects_v2(Bucket=bucket, Prefix=key)["KeyCount"] == 0


def test_the_operations_are_refused_on_the_other_kind_of_endpoint(runtime: Any) -> None:
    with pytest.raises(runtime.exceptions.ValidationError, match="InvokeEndpointAsync"):
        runtime.invoke_endpoint(EndpointName="iris-async", Body=b"[[1, 2, 3, 4]]",
                                ContentType="application/json")  # fmt: skip
    with pytest.raises(runtime.exceptions.ValidationError, match="not an asynchronous"):
        runtime.invoke_endpoint_async(EndpointName="efficientnet-lite0",
                                      InputLocation="s3://async-inputs/cat.jpg")  # fmt: skip
