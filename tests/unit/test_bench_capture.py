"""The capture part of the bench runs, and fails when a record handed over is not stored."""
from __future__ import annotations

import pytest

from bench import capture
from bench.timing import Budget

BUDGET = Budget(warmup=0, min_reps=3, max_reps=3, seconds=0.0)


def test_the_part_reports_both_writers_and_every_record_stored(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = capture.report(BUDGET)
    printed = capsys.readouterr().out
    assert not out.failures
    assert "inline" in printed and "background" in printed
    assert "every record handed over was stored: 3 in" in printed


def test_a_lost_record_fails_the_part(monkeypatch: pytest.MonkeyPatch) -> None:
    real = capture.SlowSink.write

    def loses_one(self: capture.SlowSink, records: list) -> None:  # type: ignore[type-arg]
        real(self, records[1:])

    monkeypatch.setattr(capture.SlowSink, "write", loses_one)
    monkeypatch.setattr(capture, "SINK_SECONDS", 0.001)
    assert capture.report(BUDGET).failures
