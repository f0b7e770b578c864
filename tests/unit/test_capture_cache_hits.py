"""Cache hits are traffic too: their capture records are marked, carry the answer served, and
``sagegate capture`` reads or leaves them out."""
from __future__ import annotations

import datetime
import io
import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.calls import Answer, Served
from chalicelib.capture import Capturer
from chalicelib.capture.records import CACHE_HIT_KEY, Exchange, build_record
from chalicelib.capture.sinks import DirectorySink
from chalicelib.core.observability import Outcome
from chalicelib.monitor import records as monitor_records
from sagegate.captures import reader

WHEN = datetime.datetime(2026, 11, 23, 9, 5, 7, tzinfo=datetime.UTC)
ANSWER = json.dumps([0.1, 0.7, 0.2]).encode()


class ListSink:
    """An in-memory sink."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def write(self, records: list[Any]) -> None:
        self.lines.extend(json.loads(record.line) for record in records)

    def close(self) -> None:
        pass


def test_the_writer_and_the_monitor_use_one_name_for_the_mark() -> None:
    assert CACHE_HIT_KEY == monitor_records.CACHE_HIT_KEY == "sagegateCacheHit"


def exchange(inference_id: str, cache_hit: bool) -> Exchange:
    return Exchange(endpoint="iris", variant="AllTraffic", inference_id=inference_id,
                    sent=b'{"instances": [[5.1, 3.5, 1.4, 0.2]]}',
                    sent_content_type="application/json", received=ANSWER,
                    received_content_type="application/json", cache_hit=cache_hit)


def test_a_hit_record_is_marked_and_a_miss_record_is_not() -> None:
    hit = json.loads(build_record(exchange("a", True), "both", now=WHEN).line)
    miss = json.loads(build_record(exchange("b", False), "both", now=WHEN).line)
    assert hit["eventMetadata"][CACHE_HIT_KEY] is True
    assert CACHE_HIT_KEY not in miss["eventMetadata"]


def served_hit(sent: bytes = b"") -> Served:
    return Served(Answer(b"{}", "application/json"), "efficientnet-lite0", variant="A",
                  sent=sent, sent_content_type="application/x-image", received=ANSWER,
                  received_content_type="application/json", cached=True,
                  original=b"\xff\xd8\xff-upload", original_content_type="application/x-image")


def test_an_image_hit_is_captured_with_the_upload_and_the_cached_answer() -> None:
    sink = ListSink()
    outcome = Capturer("both", sink).capture_served(served_hit(), "req-9", None, 1e12)
    assert outcome == Outcome.WRITTEN
    (record,) = sink.lines
    assert record["eventMetadata"][CACHE_HIT_KEY] is True
    assert record["captureData"]["endpointOutput"]["data"] == ANSWER.decode()
    sent = record["captureData"]["endpointInput"]
    assert sent["encoding"] == "BASE64" and sent["observedContentType"] == "application/x-image"


def test_a_hit_whose_pipeline_made_the_body_is_captured_with_that_body() -> None:
    sink = ListSink()
    Capturer("both", sink).capture_served(served_hit(b"\x89PNG-made"), "req-9", None, 1e12)
    assert sink.lines[0]["captureData"]["endpointInput"]["data"] == "iVBORy1tYWRl"


def test_cache_hits_off_captures_no_hit_but_still_the_misses() -> None:
    sink = ListSink()
    capturer = Capturer("both", sink, cache_hits=False)
    assert capturer.capture_served(served_hit(), "req-9", None, 1e12) == Outcome.OFF
    miss = served_hit(b"x")
    miss.cached, miss.invoked = False, True
    assert capturer.capture_served(miss, "req-10", None, 1e12) == Outcome.WRITTEN
    assert len(sink.lines) == 1


# sagegate capture ------------------------------------------------------------------------


def write_mixed(root: Path) -> None:
    DirectorySink(root).write([build_record(exchange(f"r{i}", i % 2 == 1), "both", now=WHEN)
                               for i in range(4)])


def rows(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in io.StringIO(out)]


def test_capture_rows_mark_cache_hits(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    write_mixed(tmp_path)
    assert reader.main([str(tmp_path), "--labels", ""]) == 0
    read = rows(capsys.readouterr().out)
    assert [(r["inferenceId"], r["cacheHit"]) for r in read] == [
        ("r0", False), ("r1", True), ("r2", False), ("r3", True)]


def test_exclude_cache_hits_leaves_them_out_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_mixed(tmp_path)
    assert reader.main([str(tmp_path), "--labels", "", "--exclude-cache-hits"]) == 0
    captured = capsys.readouterr()
    assert [r["inferenceId"] for r in rows(captured.out)] == ["r0", "r2"]
    assert "2 row(s) from 4 record(s)" in captured.err
    assert "2 cache hit(s) excluded" in captured.err


def test_exclude_cache_hits_applies_before_a_preprocessor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_mixed(tmp_path / "captures")
    handler = tmp_path / "preprocessor.py"
    handler.write_text("def preprocess_handler(inference_record):\n"
                       "    return {'id': inference_record.event_dict['eventMetadata']"
                       "['inferenceId']}\n")
    assert reader.main([str(tmp_path / "captures"), "--exclude-cache-hits",
                        "--preprocess-handler", str(handler)]) == 0
    assert [r["id"] for r in rows(capsys.readouterr().out)] == ["r0", "r2"]
