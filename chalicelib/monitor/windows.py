"""Monitoring windows: which hour folders (``<variant>/yyyy/mm/dd/hh/``) a window reads.

A window is ``[start, end)`` in UTC; a capture file belongs to the hour of its folder, so the
files of a window are those of the hours it covers, found by listing each hour's folder rather
than the whole capture history.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterator

HOUR = datetime.timedelta(hours=1)


class WindowError(ValueError):
    """A window's bounds are unreadable or empty."""


def parse_time(text: str) -> datetime.datetime:
    """An ISO 8601 time; one without a zone is UTC.

    Raises:
        WindowError: not an ISO 8601 time.
    """
    try:
        value = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise WindowError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-25T14:00Z)") \
            from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC)


def floor_hour(moment: datetime.datetime) -> datetime.datetime:
    """The start of the hour holding ``moment``."""
    return moment.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)


def window(start: str | None, end: str | None,
           now: datetime.datetime | None = None) -> tuple[datetime.datetime, datetime.datetime]:
    """The window ``[start, end)``: by default the last full hour before ``now``.

    Raises:
        WindowError: unreadable bounds, or ``start`` not before ``end``.
    """
    current = now or datetime.datetime.now(datetime.UTC)
    last = parse_time(end) if end else floor_hour(current)
    first = parse_time(start) if start else last - HOUR
    if first >= last:
        raise WindowError(f"the window's start ({first:%Y-%m-%dT%H:%MZ}) is not before its "
                          f"end ({last:%Y-%m-%dT%H:%MZ})")
    return first, last


def hours(start: datetime.datetime, end: datetime.datetime) -> Iterator[datetime.datetime]:
    """The hours whose folders hold a window's files (any hour that overlaps it)."""
    hour = floor_hour(start)
    while hour < end:
        yield hour
        hour += HOUR


def hour_folder(hour: datetime.datetime) -> str:
    """``yyyy/mm/dd/hh``."""
    return f"{hour:%Y/%m/%d/%H}"
