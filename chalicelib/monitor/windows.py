"""Monitoring windows: which hour folders (``<variant>/yyyy/mm/dd/hh/``) a window reads.

A window is ``[start, end)`` in UTC. Its bounds are ISO 8601 times, ``now``, or ISO 8601
durations relative to now (``-PT1H``, ``-P1D``, ``-PT90M``), the form Model Monitor's schedules
give their analysis window in (``DataAnalysisStartTime``). A capture file belongs to its folder's
hour, so a window's files are those of the hours it covers, found by walking the year, month, day
and hour folders that exist, each pruned unless it overlaps (:func:`hour_folders`): a window of
years costs what its folders hold, not a probe per hour.
"""
from __future__ import annotations

import calendar
import datetime
import re
from collections.abc import Callable, Iterable, Iterator

HOUR = datetime.timedelta(hours=1)
NOW = "now"
# ISO 8601 durations in days and time units (weeks too); years and months have no fixed
# length, so they are refused rather than guessed
_DURATION = re.compile(r"^([+-]?)P(?!\Z)(?:(\d{1,9})W)?(?:(\d{1,9})D)?"
                       r"(?:T(?=\d)(?:(\d{1,9})H)?(?:(\d{1,9})M)?(?:(\d{1,9}(?:\.\d{1,9})?)S)?)?\Z",
                       re.IGNORECASE)
_FOLDER_WIDTHS = (4, 2, 2, 2)  # yyyy/mm/dd/hh


class WindowError(ValueError):
    """A window's bounds are unreadable or empty."""


def parse_time(text: str, now: datetime.datetime | None = None) -> datetime.datetime:
    """An ISO 8601 time (UTC without a zone), ``now``, or a duration relative to ``now``
    (default: the current time).

    Raises:
        WindowError: none of these.
    """
    text = text.strip()
    current = now or datetime.datetime.now(datetime.UTC)
    if text.lower() == NOW:
        return current.astimezone(datetime.UTC)
    offset = parse_duration(text)
    if offset is not None:
        try:
            return current.astimezone(datetime.UTC) + offset
        except OverflowError:
            raise WindowError(f"{text!r} reaches outside the calendar") from None
    try:
        value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WindowError(f"{text[:64]!r} is neither an ISO 8601 time (2026-11-25T14:00Z), "
                          f"nor a duration relative to now (-PT1H, -P1D), nor 'now'") \
            from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC)


def parse_duration(text: str) -> datetime.timedelta | None:
    """A signed ISO 8601 duration (``-PT1H``, ``P1DT2H30M``, ``-P2W``), or None when ``text`` is
    not one.

    Raises:
        WindowError: in years or months (no fixed length), or too long.
    """
    if re.match(r"^[+-]?P\d+[YM]", text, re.IGNORECASE):
        raise WindowError(f"{text[:64]!r}: years and months have no fixed length; give days "
                          f"(-P30D) or weeks (-P4W)")
    match = _DURATION.match(text)
    if match is None:
        return None
    sign, weeks, days, hours_, minutes, seconds = match.groups()
    try:
        offset = datetime.timedelta(weeks=int(weeks or 0), days=int(days or 0),
                                    hours=int(hours_ or 0), minutes=int(minutes or 0),
                                    seconds=float(seconds or 0))
    except OverflowError:
        raise WindowError(f"{text[:64]!r} is too long a duration") from None
    return -offset if sign == "-" else offset


def floor_hour(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC).replace(minute=0, second=0, microsecond=0)


def window(start: str | None, end: str | None,
           now: datetime.datetime | None = None) -> tuple[datetime.datetime, datetime.datetime]:
    """The window ``[start, end)``: by default the last full hour before ``now``.

    Raises:
        WindowError: unreadable bounds, or ``start`` not before ``end``.
    """
    current = now or datetime.datetime.now(datetime.UTC)
    last = parse_time(end, current) if end else floor_hour(current)
    try:
        first = parse_time(start, current) if start else last - HOUR
    except OverflowError:
        raise WindowError(f"the hour before {last:%Y-%m-%dT%H:%MZ} is outside the calendar: "
                          f"give the window's start") from None
    if first >= last:
        raise WindowError(f"the window's start ({first:%Y-%m-%dT%H:%MZ}) is not before its "
                          f"end ({last:%Y-%m-%dT%H:%MZ})")
    return first, last


def hours(start: datetime.datetime, end: datetime.datetime) -> Iterator[datetime.datetime]:
    """The hours whose folders hold a window's files."""
    hour = floor_hour(start)
    while hour < end:
        yield hour
        try:
            hour += HOUR
        except OverflowError:  # the calendar's last hour (9999-12-31T23) has no next
            return


def hour_folder(hour: datetime.datetime) -> str:
    return f"{hour:%Y/%m/%d/%H}"


def folder_span(parts: tuple[int, ...]) -> tuple[datetime.datetime, datetime.datetime]:
    """The time ``[first, last)`` a folder ``yyyy[/mm[/dd[/hh]]]`` (its numbers) covers.

    Raises:
        ValueError: not a date (month 13, hour 24). OverflowError: past the year 9999.
    """
    year, month, day, hour = (*parts, *(1, 1, 0)[len(parts) - 1:])  # the folder's first hour
    first = datetime.datetime(year, month, day, hour, tzinfo=datetime.UTC)
    if len(parts) == 1:
        return first, first.replace(year=parts[0] + 1)
    if len(parts) == 2:
        return first, first + datetime.timedelta(days=calendar.monthrange(*parts)[1])
    return first, first + (HOUR if len(parts) == 4 else datetime.timedelta(days=1))


def hour_folders(children: Callable[[str], Iterable[str]], start: datetime.datetime,
                 end: datetime.datetime) -> Iterator[str]:
    """The existing ``yyyy/mm/dd/hh`` folders overlapping ``[start, end)``, in order: each level
    listed with ``children(path)`` (``""``: the variant's own), only overlapping folders opened;
    names that are not a date's ignored."""
    yield from _walk(children, (), "", start, end)


def _walk(children: Callable[[str], Iterable[str]], parts: tuple[int, ...], path: str,
          start: datetime.datetime, end: datetime.datetime) -> Iterator[str]:
    width = _FOLDER_WIDTHS[len(parts)]
    for name in sorted(children(path)):
        if len(name) != width or not name.isdigit() or not name.isascii():
            continue
        here = (*parts, int(name))
        try:
            first, last = folder_span(here)
        except (ValueError, OverflowError):
            continue
        if first >= end or last <= start:
            continue
        child = f"{path}/{name}" if path else name
        if len(here) == len(_FOLDER_WIDTHS):
            yield child
        else:
            yield from _walk(children, here, child, start, end)
