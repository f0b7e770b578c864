"""Proactive content negotiation on the ``Accept`` header, as RFC 9110 (section 12.5.1) says.

Each media range has a weight (``q``, 0 to 1, default 1; ``q=0`` means "not acceptable"); a
media type takes the weight of the most specific range that matches it (``image/png`` over
``image/*`` over ``*/*``). No Accept header means anything is acceptable; a range that does not
parse is ignored, and a header with no valid range at all counts as absent.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

_QVALUE = re.compile(r"^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)\Z")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]+\Z")
_MAX_RANGES = 64  # more is not a browser's header; the rest is ignored


@dataclasses.dataclass(frozen=True)
class MediaRange:
    """One element of an Accept header (``order``: its position, earlier wins a tie)."""

    type: str
    subtype: str
    q: float = 1.0
    order: int = 0

    def specificity(self, media_type: str) -> int | None:
        """2 for an exact match, 1 for ``type/*``, 0 for ``*/*``, None if no match."""
        main, _, sub = media_type.partition("/")
        if self.type == "*":
            return 0
        if self.type != main:
            return None
        if self.subtype == "*":
            return 1
        return 2 if self.subtype == sub else None


ANYTHING = (MediaRange("*", "*"),)


def parse_accept(header: str | None) -> tuple[MediaRange, ...]:
    """Parse an Accept header into media ranges (``*/*`` if absent, empty or unparsable)."""
    ranges = []
    for order, element in enumerate((header or "").split(",")[:_MAX_RANGES]):
        parsed = _media_range(element, order)
        if parsed is not None:
            ranges.append(parsed)
    return tuple(ranges) or ANYTHING


def _media_range(element: str, order: int) -> MediaRange | None:
    kind, *parameters = element.split(";")
    main, slash, sub = kind.strip().lower().partition("/")
    if not slash or not _TOKEN.match(main) or not _TOKEN.match(sub) or (
            main == "*" and sub != "*"):
        return None
    q = 1.0
    for parameter in parameters:
        name, _, value = parameter.strip().partition("=")
        if name.strip().lower() == "q":
            if not _QVALUE.match(value.strip()):
                return None
            q = float(value)
    return MediaRange(main, sub, q, order)


def quality(media_type: str, ranges: Sequence[MediaRange]) -> tuple[float, int, int]:
    """How acceptable ``media_type`` is: (q, specificity, -order) of its most specific range
    (q 0 when none matches)."""
    best: tuple[float, int, int] = (0.0, -1, 0)
    best_specificity = -1
    for media_range in ranges:
        specificity = media_range.specificity(media_type)
        if specificity is not None and specificity > best_specificity:
            best_specificity = specificity
            best = (media_range.q, specificity, -media_range.order)
    return best


def choose(offers: Sequence[str], ranges: Sequence[MediaRange]) -> str | None:
    """The offer the client prefers: highest q, then the more specific range, then the range
    listed first, then the earlier offer (``offers`` in the server's order of preference).
    None if every offer has q=0.
    """
    scored = [(quality(offer, ranges), -index, offer) for index, offer in enumerate(offers)]
    acceptable = [entry for entry in scored if entry[0][0] > 0]
    return max(acceptable)[2] if acceptable else None
