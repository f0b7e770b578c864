"""InvokeEndpointAsync's queue outlives the emulator: a real emulator process with a state
directory is killed (SIGKILL, by its PID) while one invocation runs and another waits; started
again on the same directory, it runs both, writes each output once where the 202 said, and
sends one success notification each (moto's server on 127.0.0.1 as S3 and SNS)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from emulator.process import EmulatorProcess, start_emulator
from tests.integration.test_emulator_async import CREDENTIALS, ERROR, SUCCESS, object_at

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
DELAY_S = 3
"""The slow model's think time: long enough to kill the emulator in the middle of it."""
ROW = b"5.1,3.5,1.4,0.2"


def write_config(directory: Path) -> Path:
    iris = ROOT / "emulator" / "models" / "iris" / "model.onnx"
    asynchronous = {"output_path": "s3://durable-results/output",
                    "failure_path": "s3://durable-results/failure",
                    "success_topic": SUCCESS, "error_topic": ERROR,
                    "max_concurrent_invocations": 1}  # fmt: skip
    config = {
        "models": {"slow": {"kind": "tensor", "path": str(iris), "delay_seconds": DELAY_S}},
        "endpoints": {"slow-async": {"variants": [{"name": "AllTraffic", "model": "slow"}],
                                     "async": asynchronous}},
    }  # fmt: skip
    path = directory / "emulator-durable.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def aws(moto_url: str) -> dict[str, Any]:
    s3 = boto3.client("s3", endpoint_url=moto_url, **CREDENTIALS)
    for bucket in ("durable-inputs", "durable-results"):
        s3.create_bucket(Bucket=bucket)
    sns = boto3.client("sns", endpoint_url=moto_url, **CREDENTIALS)
    sqs = boto3.client("sqs", endpoint_url=moto_url, **CREDENTIALS)
    queues = {}
    for topic in (SUCCESS, ERROR):
        sns.create_topic(Name=topic.rsplit(":", 1)[1])
        url = sqs.create_queue(QueueName="durable-" + topic.rsplit(":", 1)[1])["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=topic, Protocol="sqs",
                      Endpoint=arn["Attributes"]["QueueArn"])  # fmt: skip
        queues[topic] = url
    return {"url": moto_url, "s3": s3, "sqs": sqs, "queues": queues}


def start(config: Path, state: Path, aws: dict[str, Any]) -> EmulatorProcess:
    args = ["--s3-endpoint-url", aws["url"], "--state-dir", str(state)]
    return start_emulator(config, timeout=60, extra_args=args)


def runtime_client(emulator: EmulatorProcess) -> Any:
    return boto3.client("sagemaker-runtime", endpoint_url=emulator.url,
                        config=Config(retries={"max_attempts": 1}), **CREDENTIALS)  # fmt: skip


def wait_for_log(emulator: EmulatorProcess, text: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while text not in emulator.stderr_tail():
        assert time.monotonic() < deadline, f"no {text!r} in:\n{emulator.stderr_tail()}"
        time.sleep(0.05)


def kill(emulator: EmulatorProcess) -> None:
    """SIGKILL the emulator this test started, by its PID: no shutdown code runs."""
    os.kill(emulator.pid, signal.SIGKILL)
    emulator.process.wait(10)
    emulator.stop(timeout=2.0)  # closes its pipes; the process is gone already


def notified(aws: dict[str, Any], ids: set[str], limit: float = 40.0) -> Counter[tuple[str, str]]:
    """(topic, inference id) of the notifications received until each of ``ids`` has one,
    then one more empty poll, so a second copy would be counted too."""
    seen: Counter[tuple[str, str]] = Counter()
    deadline = time.monotonic() + limit
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        got = 0
        for topic, url in aws["queues"].items():
            answer = aws["sqs"].receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                WaitTimeSeconds=1)  # fmt: skip
            for item in answer.get("Messages", []):
                message = json.loads(json.loads(item["Body"])["Message"])
                seen[(topic, message["inferenceId"])] += 1
                got += 1
        done = ids <= {inference for _, inference in seen}
        quiet = quiet + 1 if done and not got else 0
    return seen


def absent(s3: Any, location: str) -> bool:
    bucket, key = location.removeprefix("s3://").split("/", 1)
    return s3.list_objects_v2(Bucket=bucket, Prefix=key)["KeyCount"] == 0


def test_running_and_queued_invocations_survive_a_sigkill(aws: dict[str, Any],
                                                         tmp_path: Path) -> None:
    config, state = write_config(tmp_path), tmp_path / "state"
    aws["s3"].put_object(Bucket="durable-inputs", Key="rows.csv", Body=ROW,
                         ContentType="text/csv")  # fmt: skip
    first = start(config, state, aws)
    try:
        runtime = runtime_client(first)
        running = runtime.invoke_endpoint_async(
            EndpointName="slow-async", InputLocation="s3://durable-inputs/rows.csv",
            ContentType="text/csv", InferenceId="running-1")  # fmt: skip
        wait_for_log(first, "async running-1 on slow-async: running (attempt 1)")
        queued = runtime.invoke_endpoint_async(  # waits behind it: one worker
            EndpointName="slow-async", Body=b'{"instances": [[6.7, 3.0, 5.2, 2.3]]}',
            ContentType="application/json", InferenceId="queued-1")  # fmt: skip
    finally:
        kill(first)
    assert absent(aws["s3"], running["OutputLocation"])  # it died mid-flight: nothing written
    assert absent(aws["s3"], queued["OutputLocation"])

    with start(config, state, aws) as second:
        body, _ = object_at(aws["s3"], running["OutputLocation"], limit=40)
        assert len(json.loads(body)["predictions"]) == 1
        body, _ = object_at(aws["s3"], queued["OutputLocation"], limit=40)
        assert len(json.loads(body)["predictions"]) == 1
        seen = notified(aws, {"running-1", "queued-1"})
        assert seen == Counter({(SUCCESS, "running-1"): 1, (SUCCESS, "queued-1"): 1})
        assert "running-1 on slow-async: running (attempt 2)" in second.stderr_tail()
    assert absent(aws["s3"], running["FailureLocation"])
    assert list((state / "async").glob("*.json")) == []  # nothing left to resume
