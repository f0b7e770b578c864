"""Data capture: Model Monitor records, the directory sink, sampling, and reading back."""
from __future__ import annotations

import base64
import csv
import datetime
import io
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chalicelib.capture import Capturer
from chalicelib.capture.records import CaptureRecord, Exchange, build_record
from chalicelib.capture.sinks import (
    CaptureSinkError,
    DirectorySink,
    FirehoseSink,
    S3Sink,
    firehose_line,
)
from chalicelib.core.observability import Outcome
from sagegate.captures import reader, rows

WHEN = datetime.datetime(2026, 11, 23, 9, 5, 7, 123456, tzinfo=datetime.UTC)


def exchange(**overrides: Any) -> Exchange:
    probabilities = np.full(1000, 0.0005)
    probabilities[285], probabilities[281] = 0.4, 0.1005
    values: dict[str, Any] = dict(
        endpoint="efficientnet-lite0", variant="AllTraffic", inference_id="req-1",
        sent=b"\x89PNG\r\n\x1a\n-resized-", sent_content_type="application/x-image",
        received=json.dumps(probabilities.tolist()).encode(),
        received_content_type="application/json", custom_attributes="trace=abc",
        original=b"\xff\xd8\xff-original-", original_content_type="image/jpeg")
    values.update(overrides)
    return Exchange(**values)


def test_both_mode_record_is_model_monitor_shaped() -> None:
    record = build_record(exchange(), "both", now=WHEN, event_id="e-1")
    raw = json.loads(record.line)
    assert record.line.endswith(b"\n") and record.line.count(b"\n") == 1
    assert raw["eventVersion"] == "0"
    assert raw["eventMetadata"] == {"eventId": "e-1", "inferenceTime": "2026-11-23T09:05:07Z",
                                    "inferenceId": "req-1", "customAttributes": ["trace=abc"]}
    sent = raw["captureData"]["endpointInput"]
    assert sent == {"observedContentType": "application/x-image", "mode": "INPUT",
                    "encoding": "BASE64",
                    "data": base64.b64encode(b"\x89PNG\r\n\x1a\n-resized-").decode()}
    received = raw["captureData"]["endpointOutput"]
    assert (received["mode"], received["encoding"]) == ("OUTPUT", "JSON")
    assert json.loads(received["data"])[285] == 0.4
    assert "originalInput" not in raw


@pytest.mark.parametrize("mode,keys", [("input", {"endpointInput"}),
                                       ("output", {"endpointOutput"}),
                                       ("both", {"endpointInput", "endpointOutput"})])
def test_mode_picks_the_sides(mode: str, keys: set[str]) -> None:
    raw = json.loads(build_record(exchange(), mode).line)
    assert set(raw["captureData"]) == keys


def test_off_is_not_a_record_mode() -> None:
    with pytest.raises(ValueError, match="capture mode"):
        build_record(exchange(), "off")


def test_original_upload_is_an_extra_top_level_field() -> None:
    raw = json.loads(build_record(exchange(), "both", include_original=True).line)
    assert raw["originalInput"]["data"] == base64.b64encode(b"\xff\xd8\xff-original-").decode()
    assert raw["originalInput"]["observedContentType"] == "image/jpeg"


def test_no_custom_attributes_key_when_none_were_sent() -> None:
    raw = json.loads(build_record(exchange(custom_attributes=None), "both").line)
    assert "customAttributes" not in raw["eventMetadata"]


def test_a_non_utf8_json_body_falls_back_to_base64() -> None:
    raw = json.loads(build_record(exchange(received=b"\xff\xfe"), "output").line)
    assert raw["captureData"]["endpointOutput"]["encoding"] == "BASE64"


def test_partition_and_file_name_follow_model_monitor_layout() -> None:
    record = build_record(exchange(variant="Canary"), "both", now=WHEN, event_id="e-9")
    assert record.partition() == "efficientnet-lite0/Canary/2026/11/23/09"
    assert record.file_stem() == "05-07-123-e-9"
    assert S3Sink(None, "bucket", "/capture/").key(record) == \
        "capture/efficientnet-lite0/Canary/2026/11/23/09/05-07-123-e-9.jsonl"


def test_directory_sink_writes_one_line_per_record_under_the_layout(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path)
    records = [build_record(exchange(inference_id=f"r{i}"), "both", now=WHEN) for i in range(3)]
    sink.write(records)
    files = list(tmp_path.rglob("*.jsonl"))
    assert len(files) == 1
    assert files[0].parent == tmp_path / "efficientnet-lite0/AllTraffic/2026/11/23/09"
    ids = [json.loads(line)["eventMetadata"]["inferenceId"] for line in files[0].open()]
    assert ids == ["r0", "r1", "r2"]


def test_directory_sink_files_each_record_of_a_mixed_batch_under_its_own_folder(
        tmp_path: Path) -> None:
    """What the background writer hands a sink at once: two endpoints, two variants, both
    sides of an hour."""
    before_ten = datetime.datetime(2026, 11, 23, 9, 59, 59, 900000, tzinfo=datetime.UTC)
    places = [("iris", "AllTraffic", 0), ("efficientnet-lite0", "AllTraffic", 0),
              ("iris", "Canary", 1), ("efficientnet-lite0", "Canary", 0),
              ("iris", "AllTraffic", 1), ("iris", "Canary", 0)]
    batch = [build_record(exchange(endpoint=endpoint, variant=variant, inference_id=f"r{i}"),
                          "both", now=before_ten + datetime.timedelta(seconds=seconds))
             for i, (endpoint, variant, seconds) in enumerate(places)]
    DirectorySink(tmp_path).write(batch)
    folders = {json.loads(line)["eventMetadata"]["inferenceId"]:
               path.parent.relative_to(tmp_path).as_posix()
               for path in tmp_path.rglob("*.jsonl") for line in path.open()}
    assert folders == {f"r{i}": record.partition() for i, record in enumerate(batch)}
    assert len(set(folders.values())) == len(batch)


def test_directory_sink_never_loses_or_tears_a_record_under_threads(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path)
    capturer = Capturer("both", sink)
    start = threading.Barrier(8)

    def one(i: int) -> str:
        if i < 8:
            start.wait(timeout=5)
        return capturer.capture(exchange(inference_id=f"r{i}",
                                         variant="A" if i % 2 else "B"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(one, range(200)))
    assert outcomes == [Outcome.WRITTEN] * 200
    lines = [line for path in tmp_path.rglob("*.jsonl") for line in path.open()]
    ids = sorted(json.loads(line)["eventMetadata"]["inferenceId"] for line in lines)
    assert ids == sorted(f"r{i}" for i in range(200))


class FailingSink:
    def __init__(self) -> None:
        self.calls = 0

    def write(self, records: Sequence[CaptureRecord]) -> None:
        self.calls += 1
        raise OSError("disk full")


def test_a_sink_failure_is_an_outcome_not_an_exception() -> None:
    sink = FailingSink()
    assert Capturer("both", sink).capture(exchange()) == Outcome.FAILED
    assert sink.calls == 1


def test_sampling_uses_the_percentage() -> None:
    draws = iter([0.05, 0.5, 0.249, 0.25, 0.99])
    written: list[CaptureRecord] = []

    class Collect:
        def write(self, records: Sequence[CaptureRecord]) -> None:
            written.extend(records)

    capturer = Capturer("both", Collect(), sampling_percentage=25, rng=lambda: next(draws))
    outcomes = [capturer.capture(exchange()) for _ in range(5)]
    assert outcomes == [Outcome.WRITTEN, Outcome.SAMPLED_OUT, Outcome.WRITTEN,
                        Outcome.SAMPLED_OUT, Outcome.SAMPLED_OUT]
    assert len(written) == 2


def test_off_captures_nothing() -> None:
    assert Capturer("off", None).capture(exchange()) == Outcome.OFF
    with pytest.raises(ValueError):
        Capturer("both", None)


class FakeFirehose:
    def __init__(self, refuse_first: int) -> None:
        self.refuse = refuse_first
        self.delivered: list[bytes] = []
        self.calls = 0

    def put_record_batch(self, DeliveryStreamName: str, Records: list[dict[str, bytes]]
                         ) -> dict[str, Any]:
        self.calls += 1
        results = []
        for record in Records:
            if self.refuse > 0:
                self.refuse -= 1
                results.append({"ErrorCode": "ServiceUnavailableException"})
            else:
                self.delivered.append(record["Data"])
                results.append({"RecordId": "x"})
        failed = sum("ErrorCode" in r for r in results)
        return {"FailedPutCount": failed, "RequestResponses": results}


def test_firehose_sink_resends_only_refused_records() -> None:
    client = FakeFirehose(refuse_first=2)
    records = [build_record(exchange(inference_id=f"r{i}"), "both") for i in range(5)]
    FirehoseSink(client, "capture").write(records)
    assert client.calls == 2
    assert sorted(client.delivered) == sorted(firehose_line(r) for r in records)


def test_firehose_sink_gives_up_after_its_attempts() -> None:
    client = FakeFirehose(refuse_first=100)
    with pytest.raises(CaptureSinkError, match="refused 1"):
        FirehoseSink(client, "capture", attempts=3).write([build_record(exchange(), "both")])
    assert client.calls == 3


# Reading back ------------------------------------------------------------------------------


def write_captures(root: Path, count: int = 3) -> None:
    DirectorySink(root).write([build_record(exchange(inference_id=f"r{i}"), "both", now=WHEN)
                               for i in range(count)])


def test_flatten_gives_metadata_top_k_and_every_probability(tmp_path: Path) -> None:
    write_captures(tmp_path, 1)
    (entry,) = reader.read_entries(str(tmp_path))
    (row,) = rows.flatten(entry, 2, ["c"] * 285 + ["Egyptian cat"] + ["c"] * 714)
    assert row["inferenceId"] == "r0" and row["inferenceTime"] == "2026-11-23T09:05:07Z"
    assert row["endpoint"] == "efficientnet-lite0"
    assert (row["top1_index"], row["top1_label"], row["top1_probability"]) == \
        (285, "Egyptian cat", 0.4)
    assert row["top2_index"] == 281 and "top3_index" not in row
    assert row["prediction285"] == 0.4 and row["prediction999"] == 0.0005
    assert row["inputBytes"] == len(b"\x89PNG\r\n\x1a\n-resized-")


PREPROCESSOR = '''
import json

def preprocess_handler(inference_record):
    output = json.loads(inference_record.endpoint_output.data)
    if inference_record.event_dict["eventMetadata"]["inferenceId"] == "r1":
        return []
    assert inference_record.endpoint_input.encoding == "BASE64"
    assert inference_record.endpoint_input.observedContentType == "application/x-image"
    return {str(i).zfill(4): v for i, v in enumerate(output[:3])}

def postprocess_handler():
    print("postprocess ran")
'''


def test_cli_applies_a_model_monitor_preprocess_handler_unchanged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_captures(tmp_path / "captures")
    handler = tmp_path / "preprocessor.py"
    handler.write_text(PREPROCESSOR)
    out = tmp_path / "rows.csv"
    assert reader.main([str(tmp_path / "captures"), "--format", "csv", "-o", str(out),
                        "--preprocess-handler", str(handler)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2  # r1 dropped by the handler
    assert list(rows[0]) == ["0000", "0001", "0002"] and rows[0]["0000"] == "0.0005"
    captured = capsys.readouterr()
    assert captured.out == ""  # the handler's print is its worker's: on stderr, prefixed
    assert "preprocess_handler output: postprocess ran" in captured.err.splitlines()
    assert "2 row(s) from 3 record(s)" in captured.err


def test_cli_jsonl_default_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_captures(tmp_path)
    assert reader.main([str(tmp_path), "--top-k", "1"]) == 0
    rows = [json.loads(line) for line in io.StringIO(capsys.readouterr().out)]
    assert [r["inferenceId"] for r in rows] == ["r0", "r1", "r2"]
    assert all(r["top1_label"] == "Egyptian cat" for r in rows)


def test_cli_reports_a_line_that_is_not_a_record(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.jsonl").write_text('{"captureData": {}}\n')
    assert reader.main([str(tmp_path)]) == 2
    assert "bad.jsonl:1: not a capture record" in capsys.readouterr().err


# A folder of several endpoints --------------------------------------------------------------


def iris(inference_id: str, answer: list[list[float]], endpoint: str = "iris") -> Exchange:
    return exchange(endpoint=endpoint, inference_id=inference_id,
                    sent=json.dumps({"instances": [[5.1, 3.5, 1.4, 0.2]] * len(answer)}).encode(),
                    sent_content_type="application/json",
                    received=json.dumps({"predictions": answer}).encode(),
                    received_content_type="application/json", custom_attributes=None)


def mixed_folder(root: Path) -> Path:
    DirectorySink(root).write([
        build_record(exchange(inference_id="img-0"), "both", now=WHEN),
        build_record(iris("iris-0", [[0.9, 0.06, 0.04]]), "both", now=WHEN),
        build_record(exchange(inference_id="img-1"), "both", now=WHEN),
        build_record(iris("iris-1", [[0.1, 0.2, 0.7], [0.2, 0.7, 0.1]]), "both", now=WHEN)])
    return root


def test_each_endpoint_is_read_with_its_own_models_labels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = mixed_folder(tmp_path / "captures")
    assert reader.main([str(source), "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    rows = {(r["inferenceId"], r.get("row")): r
            for r in map(json.loads, captured.out.splitlines())}
    assert rows["img-0", None]["top1_label"] == "Egyptian cat"
    assert rows["img-1", None]["endpoint"] == "efficientnet-lite0"
    assert rows["iris-0", None]["top1_label"] == "setosa"
    assert (rows["iris-1", 0]["top1_label"], rows["iris-1", 1]["top1_label"]) == \
        ("virginica", "versicolor")  # a batch answer: one row per instance
    assert "prediction3" not in rows["iris-0", None]
    assert "note:" not in captured.err and "5 row(s) from 4 record(s)" in captured.err


def test_an_endpoint_no_model_calls_is_named_and_read_with_indices(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = mixed_folder(tmp_path / "captures")
    DirectorySink(source).write([build_record(iris("x-0", [[0.2, 0.8]], "retired-model"),
                                              "both", now=WHEN)])
    assert reader.main([str(source), "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    (row,) = [r for r in map(json.loads, captured.out.splitlines())
              if r["inferenceId"] == "x-0"]
    assert (row["endpoint"], row["top1_label"]) == ("retired-model", "1")
    (note,) = [line for line in captured.err.splitlines() if line.startswith("note:")]
    assert "'retired-model'" in note and "--labels" in note


def test_one_label_file_for_a_mixed_folder_names_the_endpoint_and_the_way_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = mixed_folder(tmp_path / "captures")
    assert reader.main([str(source), "--labels", "imagenet1k", "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    (note,) = captured.err.strip().splitlines()[:-1]
    assert note.startswith("note: ") and "endpoint 'iris'" in note and "--labels ''" in note
    assert "returned 3 classes; the label file has 1000" in note
    labels = [(r["inferenceId"], r["top1_label"])
              for r in map(json.loads, captured.out.splitlines())]
    assert labels == [("img-0", "Egyptian cat"), ("img-1", "Egyptian cat"), ("iris-0", "0"),
                      ("iris-1", "2"), ("iris-1", "1")]  # every record, none stopped at


def test_answers_that_are_not_probabilities_still_give_their_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = mixed_folder(tmp_path / "captures")
    DirectorySink(source).write([build_record(exchange(
        endpoint="churn", inference_id=f"c{i}", sent=b"1,2,3", sent_content_type="text/csv",
        received=b"0.93\n", received_content_type="text/csv"), "both", now=WHEN)
        for i in range(2)])
    assert reader.main([str(source), "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    churn = [r for r in rows if r["endpoint"] == "churn"]
    assert [r["inferenceId"] for r in churn] == ["c0", "c1"]
    assert all("top1_index" not in r and r["inputBytes"] == 5 for r in churn)
    assert len(rows) == 7
    notes = [line for line in captured.err.splitlines() if line.startswith("note:")]
    assert len(notes) == 2  # churn is in no model (indices), and its answers are no probabilities
    assert "not class probabilities" in notes[1] and "--preprocess-handler" in notes[1]


def test_the_size_cap_holds_per_endpoint(tmp_path: Path) -> None:
    cap = 400_000
    sink = DirectorySink(tmp_path, max_bytes=cap)
    sink.write([build_record(iris(f"iris-{i}", [[0.9, 0.06, 0.04]]), "both", now=WHEN)
                for i in range(20)])
    iris_files = sorted((tmp_path / "iris").rglob("*.jsonl"))
    image = exchange(sent=bytes(30_000))
    for hour in range(10, 20):  # image traffic, later hours, 3 MB in all
        sink.write([build_record(image, "both", now=WHEN.replace(hour=hour))
                    for _ in range(10)])
        image_bytes = sum(p.stat().st_size
                          for p in (tmp_path / "efficientnet-lite0").rglob("*.jsonl"))
        assert image_bytes <= cap
    assert iris_files and sorted((tmp_path / "iris").rglob("*.jsonl")) == iris_files
    assert len(list(reader.read_records(str(tmp_path / "iris")))) == 20
    assert not list((tmp_path / "efficientnet-lite0").rglob("10/*.jsonl"))  # its oldest hour
