"""How ``--workers`` cuts its input: capture files into contiguous groups balanced by bytes
(sagegate.monitor.workers.split), a dataset file into byte ranges whose rows and messages are
the whole file's (sagegate.monitor.datasets.dataset_parts and part_rows)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.monitor.records import RecordReader
from sagegate.monitor import datasets, workers
from sagegate.monitor.files import SourceError


@pytest.mark.parametrize(("sizes", "parts", "expected"), [
    ([10, 10, 10, 10], 2, [[0, 1], [2, 3]]),
    ([1, 1, 1, 100], 2, [[0, 1, 2], [3]]),
    ([100, 1, 1, 1], 2, [[0], [1, 2, 3]]),
    ([5, 0, 0, 5], 2, [[0, 1], [2, 3]]),
    ([7], 4, [[0]]),
    ([3, 3], 8, [[0], [1]]),
    ([], 2, []),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 3, [[0, 1, 2, 3, 4, 5], [6, 7], [8, 9]]),
])
def test_files_are_cut_into_contiguous_groups_of_about_equal_bytes(
        sizes: list[int], parts: int, expected: list[list[int]]) -> None:
    assert [list(group) for group in workers.split(sizes, parts)] == expected


def test_every_file_is_in_one_group_in_order() -> None:
    sizes = [(i * 7919) % 1000 for i in range(997)]
    for parts in (2, 3, 8, 50, 996, 997, 2000):
        groups = workers.split(sizes, parts)
        assert [i for group in groups for i in group] == list(range(len(sizes)))
        assert len(groups) == min(parts, len(sizes)) and all(groups)
    totals = [sum(sizes[i] for i in group) for group in workers.split(sizes, 4)]
    assert max(totals) - min(totals) <= 2 * max(sizes)


def test_part_counts_give_each_worker_a_few_parts_of_some_megabytes() -> None:
    assert workers.part_count(1000, 2) == 2
    assert workers.part_count(workers.MIN_PART_BYTES * 5, 2) == 5
    assert workers.part_count(10**12, 2) == 2 * workers.PARTS_PER_WORKER


def _all_part_rows(path: Path, parts: int, header: bool | None = None
                   ) -> tuple[list[datasets.DatasetPart], list[dict[str, Any]], RecordReader]:
    cut = datasets.dataset_parts(str(path), header, parts)
    reader = RecordReader()
    rows = [row for part in cut for row in datasets.part_rows(part, reader)]
    return cut, rows, reader


def test_a_csv_cut_into_parts_gives_the_files_rows(tmp_path: Path) -> None:
    path = tmp_path / "train.csv"
    lines = ["label,a,b,c"] + [f"{i % 2},{i},{i * 0.5},x{i % 7}" for i in range(3000)]
    lines[1500] += ",extra,more"  # a wider row in the middle: _c4, _c5 by position
    lines[2000] = "1,2"  # a shorter one
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    one = list(datasets.dataset_rows(str(path), None))
    for count in (2, 3, 7):
        cut, rows, _reader = _all_part_rows(path, count)
        assert len(cut) == count and rows == one
        assert cut[0].start == 0
        assert cut[-1].end == path.stat().st_size
        assert all(a.end == b.start for a, b in itertools.pairwise(cut))
        assert all(part.names == ("label", "a", "b", "c") for part in cut[1:])
    assert one[1499]["_c5"] == "more" and "b" not in one[1999]


def test_a_headerless_csv_is_named_by_position_in_every_part(tmp_path: Path) -> None:
    path = tmp_path / "train.csv"
    path.write_text("".join(f"{i},{i % 3}.5\n" for i in range(2000)), encoding="utf-8")
    cut, rows, _reader = _all_part_rows(path, 4)
    assert rows == list(datasets.dataset_rows(str(path), None))
    assert cut[1].names == ("_c0", "_c1") and rows[0] == {"_c0": "0", "_c1": "0.5"}


def test_quoted_line_breaks_are_never_cut(tmp_path: Path) -> None:
    # a field may hold a line break: cuts at records' ends, read from the file, not at lines
    path = tmp_path / "notes.csv"
    records = ['id,note'] + [f'{i},"line one\nline ""two"" of {i}\n\nand more"' if i % 2
                             else f"{i},plain" for i in range(1500)]
    path.write_text("\n".join(records) + "\n", encoding="utf-8")
    one = list(datasets.dataset_rows(str(path), True))
    assert len(one) == 1500 and one[1]["note"].startswith("line one\nline \"two\"")
    for count in (2, 5):
        cut, rows, _reader = _all_part_rows(path, count, True)
        assert len(cut) == count and rows == one


def test_a_bad_line_in_a_later_part_is_named_as_the_whole_file_names_it(
        tmp_path: Path) -> None:
    path = tmp_path / "train.csv"  # past the 64 KB read to detect a header
    data = b"".join(f"{i},{i}\n".encode() for i in range(20_000))
    lines = data.split(b"\n")
    lines[15_600] = b"15\xff00,1"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SourceError) as single:
        list(datasets.dataset_rows(str(path), False))
    cut = datasets.dataset_parts(str(path), False, 2)
    assert len(cut) == 2
    assert list(datasets.part_rows(cut[0]))  # the first part is clean
    with pytest.raises(SourceError) as parted:
        list(datasets.part_rows(cut[1]))
    assert str(parted.value) == str(single.value)
    assert "train.csv:15601: not UTF-8" in str(single.value)


def test_json_lines_of_objects_and_of_capture_records_are_cut_at_lines(tmp_path: Path) -> None:
    plain = tmp_path / "rows.jsonl"
    plain.write_text("\n" + "".join(json.dumps({"a": i, "b": {"c": [i, str(i)]}}) + "\n"
                                    for i in range(2000)), encoding="utf-8")
    cut, rows, _reader = _all_part_rows(plain, 3)
    assert [part.format for part in cut] == [datasets.JSON_ROWS] * 3
    assert rows == list(datasets.dataset_rows(str(plain), None))
    captures = tmp_path / "captures.jsonl"
    record = {"captureData": {"endpointInput": {"observedContentType": "text/csv",
                                                "mode": "INPUT", "data": "1,2",
                                                "encoding": "CSV"}}, "eventVersion": "0"}
    captures.write_text("".join(json.dumps(record) + "\n" if i != 1700 else "not json\n"
                                for i in range(2000)), encoding="utf-8")
    cut, rows, reader = _all_part_rows(captures, 3)
    assert [part.format for part in cut] == [datasets.CAPTURES] * 3
    whole = RecordReader()
    assert rows == list(datasets.dataset_rows(str(captures), None, whole))
    assert reader.tally == whole.tally
    assert whole.tally.first_bad == f"{captures}:1701: not JSON"


@pytest.mark.parametrize("content", [b"", b"only,one,line\n", b"\xff\xfe,not utf-8\n1,2\n",
                                     b"a,\"open quote\n" + b"1,2\n" * 100])
def test_a_file_not_worth_cutting_or_unreadable_is_read_in_one_pass(
        tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    assert datasets.dataset_parts(str(path), None, 4) == []
