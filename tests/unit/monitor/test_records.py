"""Capture records to rows: flattening, shadow and cache-hit records, the preprocessor's []."""
from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from chalicelib.monitor.records import RecordError, RecordReader, flatten_record
from chalicelib.monitor.windows import WindowError, hours, window
from tests.unit.monitor.capturegen import HOUR, record

WHEN = datetime.datetime(2026, 11, 25, 9, 30, tzinfo=datetime.UTC)


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document)


def test_csv_captures_are_the_output_then_the_input_as_c0_c1() -> None:
    rows = flatten_record(record([5.1, 3.5, None, 0.2], 0.9, WHEN))
    assert rows == [{"_c0": "0.9000", "_c1": "5.1", "_c2": "3.5", "_c3": "", "_c4": "0.2"}]


def test_json_captures_are_flattened_by_path() -> None:
    rows = flatten_record(record([5.1, 3.5], 0.25, WHEN, encoding="JSON"))
    assert rows == [{"predictions.0.0": 0.25, "predictions.0.1": 0.75, "instances.0.0": 5.1,
                     "instances.0.1": 3.5}]
    bare = record([1.0], 0.5, WHEN, encoding="JSON")
    bare["captureData"]["endpointOutput"]["data"] = "[0.1, 0.9]"
    bare["captureData"]["endpointInput"]["data"] = "[3, 4]"
    assert flatten_record(bare) == [{"prediction0": 0.1, "prediction1": 0.9,
                                     "feature0": 3, "feature1": 4}]


def test_a_csv_batch_of_several_lines_is_several_rows() -> None:
    batch = record([1.0, 2.0], 0.5, WHEN)
    batch["captureData"]["endpointInput"]["data"] = "1,2\n3,4\n"
    batch["captureData"]["endpointOutput"]["data"] = "0.1\n0.2\n"
    assert flatten_record(batch) == [{"_c0": "0.1", "_c1": "1", "_c2": "2"},
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


def test_a_line_that_is_not_a_record_names_the_file_and_line() -> None:
    with pytest.raises(RecordError, match=r"^f\.jsonl:2: not a JSON capture record$"):
        list(RecordReader().rows("f.jsonl", [_line(record([1.0], 0.5, WHEN)), "{oops"]))


def test_the_default_window_is_the_last_full_hour() -> None:
    now = datetime.datetime(2026, 11, 25, 10, 17, tzinfo=datetime.UTC)
    assert window(None, None, now) == (HOUR, HOUR + datetime.timedelta(hours=1))
    start, end = window("2026-11-25T07:30", "2026-11-25T10:00Z", now)
    assert [h.hour for h in hours(start, end)] == [7, 8, 9]
    with pytest.raises(WindowError, match="not before"):
        window("2026-11-25T10:00Z", "2026-11-25T09:00Z", now)
    with pytest.raises(WindowError, match="ISO 8601"):
        window("yesterday", None, now)
