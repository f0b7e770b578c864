"""The short form of ``bench/load.py`` on the integration stack: 8 then 16 keep-alive clients,
a few hundred requests (3 valid : 1 invalid), every answer checked against its own request.

Asserts correctness only: no dropped connection, no wrong answer, no 5xx, and chalice local's
resident memory flat between the two levels. Never time (figures come from ``python -m bench
--part load``).
"""
from __future__ import annotations

import functools

import pytest

from bench import load
from sagegate.local.processes import rss_mb
from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RSS_GROWTH_LIMIT_MB = 40.0
"""chalice local's growth from the end of the first level to the end of the last (threads,
pools and allocator arenas settle in the warm-up level)."""


def test_8_then_16_clients_get_every_answer_right_with_flat_memory(stack: Stack) -> None:
    valid = load.valid_cases()
    cases = load.mix(valid, load.invalid_cases())
    expected = load.calibrate(stack.api.url, valid)
    rss = functools.partial(rss_mb, stack.api.process.pid)

    warm = load.run_level(stack.api.url, cases, expected, 8, 96, rss)
    levels = [load.run_level(stack.api.url, cases, expected, clients, 160, rss)
              for clients in (8, 16)]

    for level in (warm, *levels):
        print(f"{level.clients} clients: {level.requests} answers, RSS {level.rss_mb:.0f} MB")
        assert level.requests == (96 if level is warm else 160)
        assert level.resets == 0
        assert level.wrong == []
        assert level.server_errors == 0
    assert levels[-1].rss_mb - warm.rss_mb < RSS_GROWTH_LIMIT_MB
