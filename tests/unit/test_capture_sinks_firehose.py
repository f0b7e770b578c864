"""The Firehose sink's records and calls: the partition keys spliced into ``eventMetadata``
for the stream's dynamic partitioning, calls within PutRecordBatch's limits, records over
Firehose's limit left out and counted as dropped once (never also as stored), no record sent
twice when a failed write is retried."""
from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from chalicelib.capture import Capturer, sinks
from chalicelib.capture.records import INVALID_NAME, CaptureRecord, Exchange, build_record
from chalicelib.capture.sinks import (
    FIREHOSE_BATCH,
    FIREHOSE_CALL_BYTES,
    FIREHOSE_RECORD_BYTES,
    FirehoseSink,
    firehose_line,
)
from chalicelib.capture.writer import CaptureWriter
from chalicelib.core.observability import Outcome

WHEN = datetime.datetime(2026, 11, 23, 9, 5, 7, 123456, tzinfo=datetime.UTC)


def exchange(**overrides: Any) -> Exchange:
    values: dict[str, Any] = dict(
        endpoint="efficientnet-lite0", variant="AllTraffic", inference_id="req-1",
        sent=b"\x89PNG\r\n\x1a\n-resized-", sent_content_type="application/x-image",
        received=b"[0.25, 0.75]", received_content_type="application/json",
        custom_attributes="trace=abc")
    values.update(overrides)
    return Exchange(**values)


def record(**overrides: Any) -> CaptureRecord:
    event_id = overrides.pop("event_id", None)
    return build_record(exchange(**overrides), "both", now=WHEN, event_id=event_id)


def partition_keys(line: bytes) -> dict[str, Any]:
    """What the stream's MetadataExtractionQuery (``{endpoint: .eventMetadata.
    sagegateEndpoint, variant: .eventMetadata.sagegateVariant}``) reads from a record."""
    metadata = json.loads(line)["eventMetadata"]
    return {"endpoint": metadata.get("sagegateEndpoint"),
            "variant": metadata.get("sagegateVariant")}


class FakeFirehose:
    """PutRecordBatch that records every call, and fails the calls it is told to."""

    def __init__(self, fail_calls: frozenset[int] = frozenset()) -> None:
        self.calls: list[list[bytes]] = []
        self.fail_calls = fail_calls

    def put_record_batch(self, DeliveryStreamName: str, Records: list[dict[str, bytes]]
                         ) -> dict[str, Any]:
        self.calls.append([entry["Data"] for entry in Records])
        if len(self.calls) in self.fail_calls:
            raise RuntimeError("the connection was reset")  # not retried by the sink
        return {"FailedPutCount": 0, "RequestResponses": [{"RecordId": "x"} for _ in Records]}

    @property
    def delivered(self) -> list[bytes]:
        return [line for number, call in enumerate(self.calls, 1)
                if number not in self.fail_calls for line in call]


def test_the_line_carries_its_endpoint_and_variant_first_in_event_metadata() -> None:
    captured = record(event_id="e-1")
    line = firehose_line(captured)
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line: no second newline
    raw, original = json.loads(line), json.loads(captured.line)
    assert list(raw["eventMetadata"])[:2] == ["sagegateEndpoint", "sagegateVariant"]
    assert partition_keys(line) == {"endpoint": "efficientnet-lite0", "variant": "AllTraffic"}
    # nothing else changes: the same record with two keys more
    del raw["eventMetadata"]["sagegateEndpoint"], raw["eventMetadata"]["sagegateVariant"]
    assert raw == original
    added = b'"sagegateEndpoint":"efficientnet-lite0","sagegateVariant":"AllTraffic",'
    assert line.replace(added, b"", 1) == captured.line


def test_the_keys_name_the_path_the_other_sinks_write_to() -> None:
    for endpoint, variant in (("iris", "variant-2"), ("../x", "AllTraffic"),
                              ("iris", "a/b"), ("iris", ""), ('e"x', "v\nw")):
        captured = record(endpoint=endpoint, variant=variant)
        keys = partition_keys(firehose_line(captured))
        assert "/".join((keys["endpoint"], keys["variant"])) == \
            captured.partition().rsplit("/", 4)[0]
    assert partition_keys(firehose_line(record(endpoint="../x")))["endpoint"] == INVALID_NAME


@pytest.mark.parametrize("body", [
    b'{"eventMetadata":{"eventId":"forged"}}',
    b'"eventMetadata":{',
    b'\\"eventMetadata\\":{',
])
def test_a_body_holding_the_key_text_does_not_move_the_splice(body: bytes) -> None:
    # a JSON body is recorded as text (escaped in a JSON string), and so is the upload's
    # original when it is JSON: neither holds an unescaped "eventMetadata":{
    captured = build_record(
        exchange(received=body, sent=body, sent_content_type="application/json",
                 original=body, original_content_type="application/json"),
        "both", include_original=True, now=WHEN, event_id="e-2")
    assert body.decode() in json.loads(captured.line)["captureData"]["endpointOutput"]["data"]
    raw = json.loads(firehose_line(captured))
    assert raw["eventMetadata"]["eventId"] == "e-2"
    assert raw["eventMetadata"]["sagegateEndpoint"] == "efficientnet-lite0"
    for side in (raw["captureData"]["endpointInput"], raw["captureData"]["endpointOutput"],
                 raw["originalInput"]):
        assert side["data"] == body.decode()  # the bodies untouched


def test_empty_event_metadata_stays_json() -> None:
    captured = CaptureRecord("iris", "AllTraffic", "e-3", WHEN,
                             b'{"captureData":{},"eventMetadata":{},"eventVersion":"0"}\n')
    assert json.loads(firehose_line(captured))["eventMetadata"] == {
        "sagegateEndpoint": "iris", "sagegateVariant": "AllTraffic"}


def test_a_line_without_event_metadata_is_sent_as_it_is() -> None:
    captured = CaptureRecord("iris", "AllTraffic", "e-4", WHEN, b'{"x":1}\n')
    assert firehose_line(captured) == captured.line


def test_the_sink_sends_the_spliced_lines() -> None:
    client = FakeFirehose()
    records = [record(inference_id=f"r{i}") for i in range(3)]
    FirehoseSink(client, "sagegate-dev-captures").write(records)
    assert client.delivered == [firehose_line(r) for r in records]


def test_calls_stay_within_put_record_batchs_limits() -> None:
    big = b"x" * (FIREHOSE_RECORD_BYTES - 2048)  # base64 grows it: just under the limit
    records = [record(inference_id=f"r{i}", sent=big[: len(big) * 3 // 4]) for i in range(9)]
    records += [record(inference_id=f"s{i}") for i in range(FIREHOSE_BATCH + 10)]
    client = FakeFirehose()
    FirehoseSink(client, "stream").write(records)
    assert client.delivered == [firehose_line(r) for r in records]  # all, in order
    assert len(client.calls) > 3
    for call in client.calls:
        assert len(call) <= FIREHOSE_BATCH
        assert sum(map(len, call)) <= FIREHOSE_CALL_BYTES


def test_a_record_over_firehoses_limit_is_left_out_and_returned_refused(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    huge = record(inference_id="huge", sent=b"x" * FIREHOSE_RECORD_BYTES)
    small = [record(inference_id=f"r{i}") for i in range(2)]
    client = FakeFirehose()
    refused = FirehoseSink(client, "stream").write([small[0], huge, small[1]])
    assert client.delivered == [firehose_line(r) for r in small]
    assert refused == [huge]  # for the caller to count as dropped, once
    assert _counts(capsys.readouterr().out) == {}  # the sink does not count it too
    assert "dropped 1 record(s) over Firehose's" in caplog.text


def test_a_record_over_firehoses_limit_is_counted_dropped_once_and_never_stored(
        capsys: pytest.CaptureFixture[str]) -> None:
    huge = exchange(inference_id="huge", sent=b"x" * FIREHOSE_RECORD_BYTES)
    small = [exchange(inference_id=f"r{i}") for i in range(2)]
    client = FakeFirehose()
    writer = CaptureWriter(FirehoseSink(client, "stream"),
                           lambda item: build_record(item, "both", now=WHEN))
    for item in (small[0], huge, small[1]):
        assert writer.submit(item)
    assert writer.flush(10)
    assert (writer.written, writer.dropped) == (2, 1)
    counts = _counts(capsys.readouterr().out)
    assert counts == {"CaptureRecords": 2, "CaptureDropped": 1}


def test_an_inline_capture_over_firehoses_limit_is_dropped_not_written(
        capsys: pytest.CaptureFixture[str]) -> None:
    client = FakeFirehose()
    capturer = Capturer("both", FirehoseSink(client, "stream"))
    outcome = capturer.capture(exchange(sent=b"x" * FIREHOSE_RECORD_BYTES), timeout=None)
    assert outcome == Outcome.DROPPED and client.delivered == []
    assert _counts(capsys.readouterr().out) == {"CaptureDropped": 1}


def _counts(out: str) -> dict[str, int]:
    """The counts of the EMF lines printed (metric name -> sum)."""
    counts: dict[str, int] = {}
    for line in out.splitlines():
        if not line.startswith("{") or "_aws" not in line:
            continue
        document = json.loads(line)
        for metric in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
            name = metric["Name"]
            value = document[name]
            counts[name] = counts.get(name, 0) + int(value[0] if isinstance(value, list)
                                                     else value)
    return counts


def test_a_retried_write_does_not_send_what_the_failed_one_delivered() -> None:
    records = [record(inference_id=f"r{i}") for i in range(FIREHOSE_BATCH + 5)]
    client = FakeFirehose(fail_calls=frozenset({2}))  # the second call of the first write
    sink = FirehoseSink(client, "stream")
    with pytest.raises(sinks.CaptureSinkError):
        sink.write(records)
    sink.write(records)  # the capture writer tries the batch again
    lines = [firehose_line(r) for r in records]
    assert sorted(client.delivered) == sorted(lines)  # each record once
    assert len(client.calls) == 3 and client.calls[2] == lines[FIREHOSE_BATCH:]
    # once a write succeeded, nothing is remembered: the same records are new records again
    sink.write(records[:1])
    assert client.calls[3] == lines[:1]


def test_a_record_over_the_limit_is_refused_once_when_the_write_is_tried_again() -> None:
    records = [record(inference_id="huge", sent=b"x" * FIREHOSE_RECORD_BYTES),
               record(inference_id="r0")]
    client = FakeFirehose(fail_calls=frozenset({1}))
    sink = FirehoseSink(client, "stream")
    with pytest.raises(sinks.CaptureSinkError) as failed:
        sink.write(records)
    assert list(failed.value.refused) == records[:1]
    assert list(failed.value.unstored or ()) == records[1:]
    assert sink.write(records) == []  # refused once: not again on the retry
    assert client.delivered == [firehose_line(records[1])]


def test_a_record_over_the_limit_in_a_write_that_fails_is_counted_dropped_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    client = FakeFirehose(fail_calls=frozenset({1}))
    writer = CaptureWriter(FirehoseSink(client, "stream"),
                           lambda item: build_record(item, "both", now=WHEN),
                           sleep=lambda _: None)
    for item in (exchange(inference_id="huge", sent=b"x" * FIREHOSE_RECORD_BYTES),
                 exchange(inference_id="r0")):
        assert writer.submit(item)
    assert writer.flush(10)
    assert (writer.written, writer.dropped) == (1, 1)
    assert _counts(capsys.readouterr().out) == {"CaptureRecords": 1, "CaptureDropped": 1}


def test_each_line_of_a_mixed_batch_names_its_own_records_folder() -> None:
    """Two endpoints, two variants and both sides of an hour in one write: the keys the
    stream partitions by (endpoint, variant, and the hour of ``inferenceTime``) are each
    record's own, the folder the other sinks file it in."""
    before_ten = datetime.datetime(2026, 11, 23, 9, 59, 59, 900000, tzinfo=datetime.UTC)
    places = [("iris", "AllTraffic", 0), ("efficientnet-lite0", "Canary", 1),
              ("iris", "Canary", 1), ("efficientnet-lite0", "AllTraffic", 0)]
    records = [build_record(exchange(endpoint=endpoint, variant=variant, inference_id=f"r{i}"),
                            "both", now=before_ten + datetime.timedelta(seconds=seconds))
               for i, (endpoint, variant, seconds) in enumerate(places)]
    client = FakeFirehose()
    FirehoseSink(client, "sagegate-dev-captures").write(records)
    folders = []
    for line in client.delivered:
        metadata = json.loads(line)["eventMetadata"]
        at = metadata["inferenceTime"]
        folders.append(f"{metadata['sagegateEndpoint']}/{metadata['sagegateVariant']}/"
                       f"{at[0:4]}/{at[5:7]}/{at[8:10]}/{at[11:13]}")
    assert folders == [captured.partition() for captured in records]
    assert len(set(folders)) == len(records)


class OneRefused(FakeFirehose):
    """PutRecordBatch that keeps refusing the records of one inference (a per-record error)."""

    def __init__(self, refused_id: str) -> None:
        super().__init__()
        self.refused_id = refused_id

    def put_record_batch(self, DeliveryStreamName: str, Records: list[dict[str, bytes]]
                         ) -> dict[str, Any]:
        self.calls.append([entry["Data"] for entry in Records])
        results: list[dict[str, str]] = [
            {"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "busy"}
            if f'"inferenceId":"{self.refused_id}"'.encode() in entry["Data"]
            else {"RecordId": "x"} for entry in Records]
        return {"FailedPutCount": sum("ErrorCode" in r for r in results),
                "RequestResponses": results}


def test_a_failed_write_names_only_the_records_firehose_did_not_take() -> None:
    records = [record(inference_id=f"r{i}") for i in range(FIREHOSE_BATCH + 5)]
    sink = FirehoseSink(OneRefused("r3"), "stream", sleep=lambda _: None)
    with pytest.raises(sinks.CaptureSinkError) as raised:
        sink.write(records)
    assert raised.value.unstored == [records[3]]  # the writer retries and drops only it
