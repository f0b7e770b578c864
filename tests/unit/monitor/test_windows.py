"""Window bounds as Model Monitor's schedules write them, and the hour folders of a window
found by walking the folders that exist."""
from __future__ import annotations

import datetime

import pytest

from chalicelib.monitor.windows import (
    WindowError,
    folder_span,
    hour_folders,
    hours,
    parse_time,
    window,
)

NOW = datetime.datetime(2026, 11, 25, 10, 17, tzinfo=datetime.UTC)
H = datetime.timedelta(hours=1)


@pytest.mark.parametrize(("text", "expected"), [
    ("-PT1H", NOW - H), ("-P1D", NOW - 24 * H), ("-P1DT12H", NOW - 36 * H),
    ("-PT90M", NOW - 1.5 * H), ("-PT30S", NOW - datetime.timedelta(seconds=30)),
    ("-P2W", NOW - 14 * 24 * H), ("PT1H", NOW + H), ("-PT0H", NOW), ("now", NOW),
    ("NOW", NOW), ("-pt1h", NOW - H), ("2026-11-25T07:30", NOW.replace(hour=7, minute=30)),
    ("2026-11-25T09:00+01:00", NOW.replace(hour=8, minute=0))])
def test_a_bound_is_a_time_now_or_a_duration_relative_to_now(
        text: str, expected: datetime.datetime) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("-P1M", "no fixed length"), ("P1Y", "no fixed length"), ("P", "ISO 8601"),
    ("-PT", "ISO 8601"), ("-PT1H2", "ISO 8601"), ("yesterday", "ISO 8601"),
    ("-P999999999W", "too long"), ("-P999999999D", "outside the calendar"),
    ("-P" + "9" * 5000 + "D", "ISO 8601")])
def test_an_unreadable_bound_is_a_window_error(text: str, message: str) -> None:
    with pytest.raises(WindowError, match=message):
        parse_time(text, NOW)


def test_a_relative_window_like_a_schedules() -> None:
    assert window("-PT2H", "-PT1H", NOW) == (NOW - 2 * H, NOW - H)
    assert window("-PT1H", "now", NOW) == (NOW - H, NOW)
    with pytest.raises(WindowError, match="not before"):
        window("now", "-PT1H", NOW)


@pytest.mark.parametrize(("start", "end"), [
    ("2026-11-25T07:00Z", "2026-11-25T07:00Z"), ("-PT1H", "-PT1H"), ("now", "now"),
    ("2026-11-25T08:00+01:00", "2026-11-25T07:00Z")])  # one instant, two spellings
def test_an_empty_window_is_refused(start: str, end: str) -> None:
    # [start, start) holds no time: a check of it would read nothing and pass
    with pytest.raises(WindowError, match=r"start \(.*\) is not before its end"):
        window(start, end, NOW)


def test_a_window_at_the_calendars_ends_is_a_window_error_or_its_hours() -> None:
    # the default start, an hour before the end, would be before the year 1
    with pytest.raises(WindowError, match="outside the calendar"):
        window(None, "0001-01-01T00:30Z", NOW)
    last = datetime.datetime(9999, 12, 31, 23, tzinfo=datetime.UTC)
    start, end = window("9999-12-31T22:30Z", "9999-12-31T23:59:59Z", NOW)
    assert list(hours(start, end)) == [last - H, last]


def test_folder_spans() -> None:
    utc = datetime.UTC
    assert folder_span((2024,)) == (datetime.datetime(2024, 1, 1, tzinfo=utc),
                                    datetime.datetime(2025, 1, 1, tzinfo=utc))
    assert folder_span((2024, 2))[1] == datetime.datetime(2024, 3, 1, tzinfo=utc)
    assert folder_span((2024, 2, 29))[1] == datetime.datetime(2024, 3, 1, tzinfo=utc)
    assert folder_span((2024, 2, 29, 23))[1] == datetime.datetime(2024, 3, 1, tzinfo=utc)
    with pytest.raises(ValueError):
        folder_span((2023, 2, 29))


class Tree:
    """Folders as a set of paths; counts the listings made."""

    def __init__(self, leaves: list[str]) -> None:
        self.paths = {"/".join(leaf.split("/")[:depth]) for leaf in leaves
                      for depth in range(1, 5)}
        self.listed: list[str] = []

    def children(self, path: str) -> list[str]:
        self.listed.append(path)
        depth = path.count("/") + 1 if path else 0
        return [p.split("/")[-1] for p in self.paths
                if p.count("/") == depth and (not path or p.startswith(path + "/"))]


def test_hour_folders_walks_only_what_exists_and_overlaps() -> None:
    tree = Tree(["2019/03/01/05", "2024/02/29/23", "2026/11/25/09", "2026/11/25/10",
                 "2026/11/26/00", "2031/01/01/00"])
    tree.paths |= {"2026/11/notes", "2026/13", "2026/11/25/xx", "20261"}  # not dates: ignored
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    end = datetime.datetime(2026, 11, 25, 10, 30, tzinfo=datetime.UTC)
    assert list(hour_folders(tree.children, start, end)) == [
        "2024/02/29/23", "2026/11/25/09", "2026/11/25/10"]
    # years 2019 and 2031 are never opened, nor the 26th of November
    assert sorted(tree.listed) == ["", "2024", "2024/02", "2024/02/29", "2026", "2026/11",
                                   "2026/11/25"]


def test_a_window_of_decades_lists_its_folders_not_its_hours() -> None:
    tree = Tree(["2026/11/25/09"])
    start = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    end = datetime.datetime(2050, 1, 1, tzinfo=datetime.UTC)
    assert list(hour_folders(tree.children, start, end)) == ["2026/11/25/09"]
    assert len(tree.listed) == 4
