"""The S3 and Firehose capture sinks against moto's server on 127.0.0.1 (real boto3, real HTTP).

moto stands in only for S3 and Firehose, which cannot run here; SageMaker runtime is always
the emulator.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import boto3
import pytest

from chalicelib.capture import Capturer
from chalicelib.capture.records import CaptureRecord, Exchange, build_record
from chalicelib.capture.sinks import FirehoseSink, S3Sink, sink_for
from chalicelib.core.observability import Outcome
from sagegate.captures import reader

pytestmark = pytest.mark.integration


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ENDPOINT_URL_FIREHOSE": moto_url,
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    return moto_url


def exchange(i: int) -> Exchange:
    return Exchange(endpoint="efficientnet-lite0", variant="AllTraffic", inference_id=f"r{i}",
                    sent=b"\x89PNG-resized", sent_content_type="application/x-image",
                    received=json.dumps([0.25, 0.75]).encode(),
                    received_content_type="application/json")


def s3_lines(bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    s3 = boto3.client("s3")
    lines: list[dict[str, Any]] = []
    for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode()
        lines.extend(json.loads(line) for line in body.splitlines() if line)
    return lines


def test_s3_sink_writes_model_monitor_layout_readable_by_the_cli(
        aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="capture-bucket")
    capturer = Capturer.from_settings("both", "s3://capture-bucket/datacapture", 100, False)
    assert isinstance(capturer._sink, S3Sink)
    assert [capturer.capture(exchange(i)) for i in range(3)] == [Outcome.WRITTEN] * 3
    keys = [item["Key"] for item in boto3.client("s3").list_objects_v2(
        Bucket="capture-bucket")["Contents"]]
    assert len(keys) == 3
    assert all(key.startswith("datacapture/efficientnet-lite0/AllTraffic/") and
               key.endswith(".jsonl") and key.count("/") == 7 for key in keys)
    assert reader.main(["s3://capture-bucket/datacapture", "--labels", "", "--top-k", "1"]) \
        == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(row["inferenceId"] for row in rows) == ["r0", "r1", "r2"]
    assert all(row["top1_index"] == 1 for row in rows)


def test_the_cli_reads_the_prefix_as_a_folder_not_its_neighbours(
        aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="neighbours")
    for prefix, count in (("capture", 2), ("capture-old", 3)):
        capturer = Capturer.from_settings("both", f"s3://neighbours/{prefix}", 100, False)
        assert [capturer.capture(exchange(i)) for i in range(count)] == [Outcome.WRITTEN] * count

    for uri in ("s3://neighbours/capture", "s3://neighbours/capture/"):
        assert reader.main([uri, "--labels", "", "--top-k", "1"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 2
    assert reader.main(["s3://neighbours", "--labels", "", "--top-k", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5


def test_s3_failure_is_counted_not_raised(aws: str) -> None:
    capturer = Capturer.from_settings("both", "s3://no-such-bucket/x", 100, False)
    assert capturer.capture(exchange(0)) == Outcome.FAILED


def test_firehose_sink_delivers_every_record(aws: str) -> None:
    boto3.client("s3").create_bucket(Bucket="firehose-bucket")
    boto3.client("firehose").create_delivery_stream(
        DeliveryStreamName="sagegate-capture",
        ExtendedS3DestinationConfiguration={
            "RoleARN": "arn:aws:iam::123456789012:role/firehose", "Prefix": "capture/",
            "BucketARN": "arn:aws:s3:::firehose-bucket"})
    sink = sink_for("firehose://sagegate-capture")
    assert isinstance(sink, FirehoseSink)
    capturer = Capturer("both", sink)
    assert [capturer.capture(exchange(i)) for i in range(5)] == [Outcome.WRITTEN] * 5
    records = s3_lines("firehose-bucket", "capture/")
    assert sorted(r["eventMetadata"]["inferenceId"] for r in records) == \
        [f"r{i}" for i in range(5)]
    assert all(r["eventVersion"] == "0" for r in records)


def test_firehose_failure_is_counted_not_raised(aws: str) -> None:
    assert Capturer("both", sink_for("firehose://no-such-stream")).capture(exchange(0)) == \
        Outcome.FAILED


BEFORE_TEN = datetime.datetime(2026, 11, 23, 9, 59, 59, 900000, tzinfo=datetime.UTC)


def mixed_batch() -> list[CaptureRecord]:
    """What the background writer hands a sink at once: two endpoints, two variants, and
    records on both sides of an hour."""
    places = [("iris", "AllTraffic", 0), ("efficientnet-lite0", "AllTraffic", 0),
              ("iris", "Canary", 1), ("efficientnet-lite0", "Canary", 0),
              ("iris", "AllTraffic", 1), ("iris", "Canary", 0),
              ("efficientnet-lite0", "AllTraffic", 1)]
    return [build_record(dataclasses.replace(exchange(i), endpoint=endpoint, variant=variant),
                         "both", now=BEFORE_TEN + datetime.timedelta(seconds=seconds))
            for i, (endpoint, variant, seconds) in enumerate(places)]


def test_the_s3_sink_stores_each_record_of_a_mixed_batch_under_its_own_folder(
        aws: str) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="mixed")
    batch = mixed_batch()
    S3Sink(s3, "mixed", "capture").write(batch)
    folders: dict[str, str] = {}  # inference id -> the folder of the object holding it
    for item in s3.list_objects_v2(Bucket="mixed")["Contents"]:
        body = s3.get_object(Bucket="mixed", Key=item["Key"])["Body"].read().decode()
        for line in body.splitlines():
            folders[json.loads(line)["eventMetadata"]["inferenceId"]] = \
                item["Key"].rsplit("/", 1)[0]
    assert folders == {f"r{i}": f"capture/{record.partition()}"
                       for i, record in enumerate(batch)}
    assert len(set(folders.values())) == len(batch)  # no two of them share a folder
