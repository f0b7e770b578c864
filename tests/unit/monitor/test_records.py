"""Capture records to rows: flattening, shadow and cache-hit records, the preprocessor's []."""
from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from chalicelib.monitor import flattening
from chalicelib.monitor.flattening import flatten_record
from chalicelib.monitor.records import ColumnLimitError, RecordReader
from chalicelib.monitor.windows import WindowError, hours, window
from tests.unit.monitor.capturegen import HOUR, record

WHEN = datetime.datetime(2026, 11, 25, 9, 30, tzinfo=datetime.UTC)


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document)


def test_csv_captures_are_the_output_then_the_input_as_c0_c1() -> None:
    rows = list(flatten_record(record([5.1, 3.5, None, 0.2], 0.9, WHEN)))
    assert rows == [{"_c0": "0.9000", "_c1": "5.1", "_c2": "3.5", "_c3": "", "_c4": "0.2"}]


def test_json_captures_are_flattened_by_path() -> None:
    rows = list(flatten_record(record([5.1, 3.5], 0.25, WHEN, encoding="JSON")))
    assert rows == [{"prediction0": 0.25, "prediction1": 0.75, "feature0": 5.1,
                     "feature1": 3.5}]
    bare = record([1.0], 0.5, WHEN, encoding="JSON")
    bare["captureData"]["endpointOutput"]["data"] = "[0.1, 0.9]"
    bare["captureData"]["endpointInput"]["data"] = '{"a": {"b": [3, 4]}}'
    assert list(flatten_record(bare)) == [{"prediction0": 0.1, "prediction1": 0.9,
                                           "a.b.0": 3, "a.b.1": 4}]


def test_a_csv_batch_of_several_lines_is_several_rows() -> None:
    batch = record([1.0, 2.0], 0.5, WHEN)
    batch["captureData"]["endpointInput"]["data"] = "1,2\n3,4\n"
    batch["captureData"]["endpointOutput"]["data"] = "0.1\n0.2\n"
    assert list(flatten_record(batch)) == [{"_c0": "0.1", "_c1": "1", "_c2": "2"},
                                           {"_c0": "0.2", "_c1": "3", "_c2": "4"}]


def test_binary_captures_give_no_row_and_are_counted() -> None:
    image = record([1.0], 0.5, WHEN)
    image["captureData"]["endpointInput"].update(encoding="BASE64", data="AAEC")
    image["captureData"]["endpointOutput"].update(encoding="BASE64", data="AAEC")
    reader = RecordReader()
    assert list(reader.rows("f", [_line(image)])) == []
    assert reader.tally.empty == 1


def test_shadow_records_are_skipped_and_cache_hits_kept_unless_excluded() -> None:
    shadow = record([1.0], 0.5, WHEN, {"invocationSource": "ShadowExperiment"})
    hit = record([2.0], 0.5, WHEN, {"sagegateCacheHit": True})
    plain = record([3.0], 0.5, WHEN)
    lines = [_line(r) for r in (shadow, hit, plain)]
    kept = RecordReader()
    assert [row["_c1"] for row in kept.rows("f", lines)] == ["2.0", "3.0"]
    assert kept.tally.shadow == 1
    excluded = RecordReader(include_cache_hits=False)
    assert [row["_c1"] for row in excluded.rows("f", lines)] == ["3.0"]
    assert excluded.tally.cache_hits_excluded == 1


def test_the_preprocessor_sees_every_kept_record_and_its_falsy_result_drops_it() -> None:
    seen: list[str] = []

    def preprocess(document: dict[str, Any], where: str) -> dict[str, Any] | None:
        seen.append(where)
        value = document["captureData"]["endpointInput"]["data"]
        return [] if value == "2.0" else {"x": value}  # type: ignore[return-value]

    shadow = record([9.0], 0.5, WHEN, {"invocationSource": "ShadowExperiment"})
    lines = [_line(record([v], 0.5, WHEN)) for v in (1.0, 2.0)] + ["", _line(shadow)]
    reader = RecordReader(preprocess)
    assert list(reader.rows("file.jsonl", lines)) == [{"x": "1.0"}]
    assert seen == ["file.jsonl:1", "file.jsonl:2"]
    assert (reader.tally.dropped, reader.tally.shadow) == (1, 1)


def test_a_bad_line_among_good_ones_is_skipped_counted_and_named() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    bad_json = record([1.0], 0.5, WHEN, encoding="JSON")
    bad_json["captureData"]["endpointInput"]["data"] = "{oops"
    lines = [_line(record([1.0], 0.5, WHEN)), "{oops", deep, "[1, 2]", _line(bad_json),
             _line(record([2.0], 0.5, WHEN))]
    reader = RecordReader()
    assert [row["_c1"] for row in reader.rows("f.jsonl", lines)] == ["1.0", "2.0"]
    assert reader.tally.bad_lines == 4
    assert reader.tally.first_bad == "f.jsonl:2: not JSON"


def test_records_are_in_the_window_by_their_inference_time() -> None:
    start = WHEN.replace(minute=59)
    end = start + datetime.timedelta(minutes=1)
    times = [start - datetime.timedelta(seconds=1), start, end - datetime.timedelta(seconds=1),
             end]
    lines = [_line(record([float(i)], 0.5, when)) for i, when in enumerate(times)]
    untimed = record([9.0], 0.5, WHEN)
    del untimed["eventMetadata"]["inferenceTime"]
    reader = RecordReader(window=(start, end))
    assert [row["_c1"] for row in reader.rows("f", [*lines, _line(untimed)])] == ["1.0", "2.0"]
    assert (reader.tally.outside_window, reader.tally.untimed) == (2, 1)


def test_a_tf_serving_batch_is_one_row_per_instance_aligned_with_its_prediction() -> None:
    batch = record([1.0], 0.5, WHEN, encoding="JSON")
    instances = [[float(i), float(-i)] for i in range(1024)]
    batch["captureData"]["endpointInput"]["data"] = json.dumps({"instances": instances})
    batch["captureData"]["endpointOutput"]["data"] = json.dumps(
        {"predictions": [[i / 1024] for i in range(1024)], "model_version": "3"})
    rows = list(RecordReader().rows("f", [_line(batch)]))
    assert len(rows) == 1024
    assert rows[5] == {"prediction0": 5 / 1024, "model_version": "3", "feature0": 5.0,
                       "feature1": -5.0}


def test_a_record_wider_than_the_limit_is_refused_with_its_count() -> None:
    wide = record([1.0], 0.5, WHEN, encoding="JSON")
    wide["captureData"]["endpointInput"]["data"] = json.dumps({str(i): i for i in range(5000)})
    with pytest.raises(ColumnLimitError, match=r"^f:1: the record flattens to 5,002 columns, "
                       r"over the limit of 1,000 .*preprocess-handler"):
        list(RecordReader().rows("f", [_line(wide)]))
    assert len(next(RecordReader(max_columns=5002).rows("f", [_line(wide)]))) == 5002


def test_the_default_window_is_the_last_full_hour() -> None:
    now = datetime.datetime(2026, 11, 25, 10, 17, tzinfo=datetime.UTC)
    assert window(None, None, now) == (HOUR, HOUR + datetime.timedelta(hours=1))
    start, end = window("2026-11-25T07:30", "2026-11-25T10:00Z", now)
    assert [h.hour for h in hours(start, end)] == [7, 8, 9]
    with pytest.raises(WindowError, match="not before"):
        window("2026-11-25T10:00Z", "2026-11-25T09:00Z", now)
    with pytest.raises(WindowError, match="ISO 8601"):
        window("yesterday", None, now)


@pytest.mark.parametrize(("sent", "received"), [
    ({"instances": [[1, 2], [3, 4]], "signature_name": "s"}, {"predictions": [[0.1], [0.2]]}),
    ({"a": [], "instances": [{"x": 1}, {"x": 2}], "b": {"c": [1, 2]}}, {"predictions": [3]}),
    ({"instances": []}, {"predictions": []}),
    ({"inputs": {"x": [1, 2]}}, [0.5, 0.5]),
    ({"instances": 5}, {"predictions": [[1, 2]], "model_version": 7}),
])
def test_a_large_body_read_in_place_gives_the_rows_of_a_parsed_one(
        sent: Any, received: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    document = record([1.0], 0.5, WHEN, encoding="JSON")
    document["captureData"]["endpointInput"]["data"] = json.dumps(sent, indent=1)
    document["captureData"]["endpointOutput"]["data"] = json.dumps(received)
    parsed = list(flatten_record(document))
    monkeypatch.setattr(flattening, "STREAM_BYTES", 0)
    assert list(flatten_record(document)) == parsed


def test_a_json_side_that_is_not_json_is_a_bad_line() -> None:
    document = record([1.0], 0.5, WHEN, encoding="JSON")
    document["captureData"]["endpointOutput"]["data"] = '{"predictions": [1,'
    reader = RecordReader()
    assert list(reader.rows("f", [_line(document)])) == []
    assert reader.tally.first_bad == "f:1: endpointOutput's data is not JSON"


@pytest.mark.parametrize(("sent", "received"), [
    ("1,2,3", "0.5"), ("1,,3", "0.5\n"), ("1,2\r\n", "0.5"), ('"a,b",2', "0.5"), ("", ""),
    ("1,2\n3,4", "0.1\n0.2"), ("x", "1,2,3")])
def test_the_one_line_csv_fast_path_gives_the_general_paths_rows(sent: str,
                                                                  received: str) -> None:
    document = record([1.0], 0.5, WHEN)
    document["captureData"]["endpointInput"]["data"] = sent
    document["captureData"]["endpointOutput"]["data"] = received
    general = list(flatten_record(document, flattening.Naming(["label", "a"])))
    fast = flattening.simple_csv_row(document, flattening.Naming(["label", "a"]))
    assert fast is None or [fast] == general
    assert list(RecordReader(csv_names=["label", "a"]).rows("f", [_line(document)])) == general


@pytest.mark.parametrize(("sent", "received"), [("1,2,3,4", "0.9"),
                                                ("1,2,3,4\n5,6,7,8", "0.9\n0.8")])
def test_csv_values_past_the_baselines_names_are_numbered_by_position(sent: str,
                                                                      received: str) -> None:
    """The baseline's names by position (output first), then ``_cN`` where N is the value's
    own position in the row (Spark's name for it), in the one-line and the general path."""
    document = record([1.0], 0.5, WHEN)
    document["captureData"]["endpointInput"]["data"] = sent
    document["captureData"]["endpointOutput"]["data"] = received
    rows = list(RecordReader(csv_names=["label", "a", "b"]).rows("f", [_line(document)]))
    assert [list(row) for row in rows] == [["label", "a", "b", "_c3", "_c4"]] * len(rows)
    assert [row["_c4"] for row in rows] == ["4", "8"][:len(rows)]
    unnamed = list(RecordReader().rows("f", [_line(document)]))
    assert [list(row) for row in unnamed] == [["_c0", "_c1", "_c2", "_c3", "_c4"]] * len(rows)
