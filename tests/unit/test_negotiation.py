"""Accept negotiation as RFC 9110 section 12.5.1 specifies it."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.reading.negotiation import ANYTHING, choose, parse_accept, quality

JSON, JPEG, PNG = "application/json", "image/jpeg", "image/png"


@pytest.mark.parametrize("accept,offers,expected", [
    (None, [JSON, JPEG], JSON),  # no header: anything, the server's first offer
    ("", [JSON, JPEG], JSON),
    ("*/*", [JSON, JPEG], JSON),
    ("image/jpeg;q=0, application/json", [JSON, JPEG], JSON),  # q=0: not acceptable
    ("image/jpeg;q=0, application/json", [JPEG, JSON], JSON),
    ("image/*", [JSON, JPEG], JPEG),  # a wildcard subtype
    ("image/*;q=0.5, application/json", [JSON, JPEG], JSON),  # the higher q wins
    ("image/*, application/json;q=0.4", [JSON, JPEG], JPEG),
    ("image/png, application/json", [JSON, PNG], PNG),  # equal q: listed first
    ("application/json, image/png", [JSON, PNG], JSON),
    ("image/*;q=0.9, image/png", [JSON, PNG], PNG),
    ("*/*;q=0.1, image/png;q=0", [JSON, PNG], JSON),  # the most specific range decides...
    ("image/*, image/png;q=0", [PNG, JPEG], JPEG),  # ...even against a broader one
    ("text/html", [JSON, JPEG], None),
    ("*/*;q=0", [JSON, JPEG], None),
    ("IMAGE/PNG", [JSON, PNG], PNG),  # media types are case-insensitive
    ("image/png ; q=1.0 , application/json;q=0.999", [JSON, PNG], PNG),
])
def test_choose_follows_rfc_9110(accept: str | None, offers: list[str],
                                 expected: str | None) -> None:
    assert choose(offers, parse_accept(accept)) == expected


@pytest.mark.parametrize("header", [",,,", "garbage", "*/png", "image/png;q=2", "image/png;q=x",
                                    "image/png;q=0.0001", ";q=1", "/"])
def test_unparsable_ranges_are_ignored_and_none_left_means_anything(header: str) -> None:
    assert parse_accept(header) == ANYTHING


def test_a_bad_range_does_not_hide_the_good_ones() -> None:
    assert [r.subtype for r in parse_accept("image/png;q=9, image/webp, */png")] == ["webp"]


def test_quality_takes_the_most_specific_match() -> None:
    ranges = parse_accept("*/*;q=0.1, image/*;q=0.5, image/png;q=0.8")
    assert quality(PNG, ranges)[0] == 0.8
    assert quality(JPEG, ranges)[0] == 0.5
    assert quality(JSON, ranges)[0] == 0.1
    assert quality(JSON, parse_accept("image/*"))[0] == 0


def test_a_huge_header_is_read_only_so_far() -> None:
    ranges = parse_accept("text/plain, " * 10_000 + "image/png")
    assert len(ranges) == 64 and choose([PNG], ranges) is None


@given(st.text(max_size=200), st.lists(st.sampled_from([JSON, JPEG, PNG, "image/webp"]),
                                       min_size=1, max_size=4, unique=True))
def test_choose_never_fails_and_picks_an_acceptable_offer(header: str, offers: list[str]) -> None:
    ranges = parse_accept(header)
    chosen = choose(offers, ranges)
    assert chosen is None or (chosen in offers and quality(chosen, ranges)[0] > 0)
