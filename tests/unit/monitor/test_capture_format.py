"""Capture objects' kinds, the window's choice of them, and GZIP objects read as a stream with
bounds (chalicelib.monitor.capture_format)."""
from __future__ import annotations

import datetime
import gzip
import io
import json
from pathlib import Path

import pytest

from chalicelib.monitor import capture_format
from chalicelib.monitor.capture_format import (
    CaptureObjectError,
    gzip_lines,
    key_hour,
    listing_span,
    plain_lines,
    wanted,
)
from chalicelib.monitor.partial import analyse_objects
from chalicelib.monitor.records import RecordReader, Tally
from tests.unit.monitor import capturegen

H = datetime.datetime(2026, 11, 25, 9, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)
MINUTE = datetime.timedelta(minutes=1)


class Chunked(io.RawIOBase):
    """Bytes handed over a few at a time, as a network body is: the reader must not assume a
    read returns all it asked for."""

    def __init__(self, data: bytes, chunk: int = 7) -> None:
        self.data, self.chunk, self.reads = data, chunk, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        self.reads += 1
        taken = self.data[:min(self.chunk, size if size >= 0 else len(self.data))]
        self.data = self.data[len(taken):]
        return taken


def test_a_gzip_object_is_read_line_by_line_as_a_stream() -> None:
    lines = [json.dumps({"n": i}).encode() + b"\n" for i in range(2000)]
    body = Chunked(gzip.compress(b"".join(lines)), chunk=4096)
    read = gzip_lines(body, "o.jsonl.gz")
    assert next(read) == lines[0]
    assert body.data  # the first line came before the whole object was read
    assert [lines[0], *read] == lines
    # several members one after the other are one stream (concatenated .gz files)
    joined = gzip.compress(b"".join(lines[:3])) + gzip.compress(b"".join(lines[3:5]))
    assert list(gzip_lines(Chunked(joined), "j.jsonl.gz")) == lines[:5]
    # a last line without its newline is a line
    assert list(gzip_lines(io.BytesIO(gzip.compress(b"a\nb")), "x")) == [b"a\n", b"b"]
    assert list(gzip_lines(io.BytesIO(gzip.compress(b"")), "empty.jsonl.gz")) == []


WHOLE = gzip.compress(b"hello world\n" * 100)


@pytest.mark.parametrize(("data", "message"), [
    (b"{\"not\": \"gzip\"}\n", "not a readable GZIP file"),
    (WHOLE[:-9], "not a whole GZIP file"),
    (WHOLE[:10] + b"\xff" + WHOLE[11:], "damaged GZIP data .*invalid block type"),
    (WHOLE[:-8] + bytes(4) + WHOLE[-4:], "not a readable GZIP file .CRC check failed"),
    (b"", ""),  # an empty object is no line, not a bad object
])
def test_an_object_that_is_not_whole_gzip_is_a_capture_object_error(
        data: bytes, message: str) -> None:
    if not message:
        assert list(gzip_lines(io.BytesIO(data), "e.jsonl.gz")) == []
        return
    with pytest.raises(CaptureObjectError, match=message) as raised:
        list(gzip_lines(io.BytesIO(data), "s3://b/k.jsonl.gz"))
    assert str(raised.value).startswith("s3://b/k.jsonl.gz: ")
    assert "\n" not in str(raised.value)


def test_the_lines_before_the_damage_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = gzip.compress(b"".join(b"%05d\n" % i for i in range(50_000)))
    got: list[bytes] = []
    with pytest.raises(CaptureObjectError, match="not a whole GZIP file"):
        got.extend(gzip_lines(io.BytesIO(whole[:len(whole) // 2]), "t.jsonl.gz"))
    assert got and got[:3] == [b"00000\n", b"00001\n", b"00002\n"]


def test_decompression_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = gzip.compress(b"x" * 100 + b"\n" + b"\n" * 3_000_000)  # 3 MB from a few KB
    assert len(bomb) < 10_000
    monkeypatch.setattr(capture_format, "MAX_DECOMPRESSED_BYTES", 1_000_000)
    with pytest.raises(CaptureObjectError, match=r"decompresses to more than 0 MiB"):
        list(gzip_lines(io.BytesIO(bomb), "bomb.jsonl.gz"))
    monkeypatch.setattr(capture_format, "MAX_DECOMPRESSED_BYTES", 10_000_000)
    monkeypatch.setattr(capture_format, "MAX_LINE_BYTES", 50)
    with pytest.raises(CaptureObjectError, match="a line longer than 0 MiB"):
        list(gzip_lines(io.BytesIO(bomb), "long.jsonl.gz"))


def test_a_bad_object_is_counted_and_the_next_one_read() -> None:
    def line(value: float) -> bytes:
        return json.dumps(capturegen.record([value, 1.0, 2.0, 3.0], 0.5, H)).encode() + b"\n"

    good = gzip.compress(line(1.0) + line(2.0))
    cut = gzip.compress(line(3.0) + line(4.0) * 2000)[:-200]
    objects = [("a.jsonl.gz", gzip_lines(io.BytesIO(good), "a.jsonl.gz")),
               ("b.jsonl.gz", gzip_lines(io.BytesIO(b"plain text"), "b.jsonl.gz")),
               ("c.jsonl.gz", gzip_lines(io.BytesIO(cut), "c.jsonl.gz")),
               ("d.jsonl", [line(5.0)])]
    part = analyse_objects(RecordReader(), objects)
    assert part.objects == 4
    tally = part.tally
    assert tally.bad_objects == 2 and tally.bad_lines == 0
    assert tally.first_bad_object.startswith("b.jsonl.gz: not a readable GZIP file")
    # c's records before its damage are read, as a's and d's
    assert 4 < tally.records == tally.rows < 2004
    assert part.statistics.item_count == tally.rows


def test_the_listing_spans_the_hour_on_each_side_within_the_calendar() -> None:
    assert listing_span(H, H + HOUR) == (H - HOUR, H + 2 * HOUR)
    assert listing_span(H + 20 * MINUTE, H + 40 * MINUTE) == (H - HOUR, H + 100 * MINUTE)
    first = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)
    last = datetime.datetime(9999, 12, 31, 23, 30, tzinfo=datetime.UTC)
    assert listing_span(first, first + HOUR) == (first, first + 2 * HOUR)
    assert listing_span(last - HOUR, last) == (last.replace(minute=0) - 2 * HOUR, last)


@pytest.mark.parametrize(("name", "hour", "modified", "read"), [
    # the S3 and directory sinks: a folder is its records' inference hour
    ("a.jsonl", H, None, True),
    ("a.jsonl", H - HOUR, H + MINUTE, False),
    ("a.jsonl", H + HOUR, None, False),
    ("a.json", H, None, False),
    ("a.jsonl.tmp", H, None, False),
    # a Firehose stream: a folder is the arrival hour of its objects' oldest records
    ("f.jsonl.gz", H, None, True),
    ("f.jsonl.gz", H + HOUR, None, True),  # arrived after the window's end
    ("f.jsonl.gz", H + 2 * HOUR, None, False),
    ("f.jsonl.gz", H - HOUR, H + 30 * datetime.timedelta(seconds=1), True),  # open at H
    ("f.jsonl.gz", H - HOUR, H - 30 * datetime.timedelta(seconds=1), True),  # clocks' slack
    ("f.jsonl.gz", H - HOUR, H - 5 * MINUTE, False),  # delivered before the window
    ("f.jsonl.gz", H - HOUR, None, True),
    ("f.jsonl.gz", H - 2 * HOUR, None, False),
])
def test_a_window_reads_each_kind_from_the_folders_it_can_be_in(
        name: str, hour: datetime.datetime, modified: datetime.datetime | None,
        read: bool) -> None:
    assert wanted(name, hour, H, H + HOUR, modified) is read


def test_a_keys_hour_is_its_folders() -> None:
    assert key_hour("captures/iris/AllTraffic/2026/11/25/09/x.jsonl.gz") == H
    assert key_hour("2026/11/25/09/x.jsonl") == H
    assert key_hour("captures/iris/AllTraffic/2026/11/25/09") is None  # a folder, not in one
    assert key_hour("captures/iris/2026/13/25/09/x.jsonl") is None
    assert key_hour("captures/iris/2026/11/25/09/extra/x.jsonl") is None


def test_firehose_shaped_objects_hold_each_record_once_and_some_beside_their_hour() -> None:
    objects = capturegen.firehose_window("captures", "iris", 3000, hour=H)
    folders = {key_hour(item.key) for item in objects}
    assert folders == {H - HOUR, H, H + HOUR}
    chosen = [item for item in objects
              if wanted(item.key, key_hour(item.key) or H, H, H + HOUR, item.last_modified)]
    tally = Tally()
    reader = RecordReader(window=(H, H + HOUR))
    reader.tally = tally
    rows = [row for item in chosen for row in reader.rows(
        item.key, gzip_lines(io.BytesIO(item.body), item.key))]
    assert len(rows) == capturegen.in_hour(objects) == tally.rows
    assert tally.outside_window > 0


def test_a_plain_objects_lines_are_bounded_as_a_gzip_objects_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``.jsonl`` line longer than the bound stops the object where it starts (the lines
    before it are given), however the bytes arrive; never read whole into memory."""
    monkeypatch.setattr(capture_format, "MAX_LINE_BYTES", 50)
    monkeypatch.setattr(capture_format, "READ_BYTES", 16)
    lines = [b"", b"a" * 49, b"b" * 17, b"c"]  # near the bound, past a read, the last unended
    for data in (b"\n".join(lines), b"\n".join(lines) + b"\n", b"\r\n".join(lines)):
        got = list(plain_lines(io.BytesIO(data), "f.jsonl"))
        assert [line.rstrip(b"\r") for line in got] == lines
        assert list(plain_lines(Chunked(data), "f.jsonl")) == got
    long = b"x\n" + b"y" * 51 + b"\nz\n"
    got = []
    with pytest.raises(CaptureObjectError, match=r"f\.jsonl: a line longer than 0 MiB"):
        got.extend(plain_lines(io.BytesIO(long), "f.jsonl"))
    assert got == [b"x"]
    assert list(plain_lines(io.BytesIO(b"a" * 50), "f.jsonl")) == [b"a" * 50]  # at the bound
    with pytest.raises(CaptureObjectError, match="a line longer than"):  # with no newline
        list(plain_lines(io.BytesIO(b"y" * 200), "f.jsonl"))


def test_a_plain_line_past_the_bound_is_a_bad_object_and_the_next_file_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``sagegate monitor`` opens a folder's ``.jsonl`` files (sources.open_captures)."""
    from sagegate.monitor import sources

    folder = capturegen.write_window(tmp_path / "endpoint", 4, per_file=2) / "AllTraffic"
    first, second = sorted(folder.rglob("*.jsonl"))
    first.write_bytes(first.read_bytes().replace(b'"eventVersion"', b'"pad": "'
                                                 + b"p" * 5000 + b'", "eventVersion"', 1))
    monkeypatch.setattr(capture_format, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(capture_format, "READ_BYTES", 1024)  # below the bound, as it is
    reader = RecordReader()
    part = analyse_objects(reader, sources.open_captures(str(folder),
                                                         [str(first), str(second)]))
    assert part.tally.bad_objects == 1 and "a line longer than" in part.tally.first_bad_object
    assert part.tally.records == 2 and part.statistics.item_count == 2  # the second file's
