"""Capture part: what a request pays for data capture, inline and after the response, with a
sink that takes 50 ms (an S3 PutObject or Firehose call on AWS is tens of milliseconds).

In this process, side by side (ABBA, :func:`bench.timing.compare`): one ``capture_served`` of
an image inference (a 224x224 PNG sent, 1,000 probabilities answered) through

* **inline** (``CAPTURE_WRITER=inline``): the record built and stored before the response;
* **background** (``CAPTURE_WRITER=background``, the default): handed to the capture writer,
  which builds and stores it on its own thread after the response.

The figure is the wall time the request spends in its ``capture`` stage, median and p90. After
the timing, every record handed over must have been stored (the writer flushed): a record lost
fails the run. Then the objects a monitor reads per hour of traffic with each sink (the
directory sink: one file per process and hour; the S3 sink: one object per writer batch and
folder, at most one a record; Firehose: one object per buffer flush and partition), from the
counts the sinks made here.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from unittest import mock

import cv2
import numpy as np

from bench import table
from bench.report import Report
from bench.timing import Budget, compare, ratio
from chalicelib.calls import Answer, Served
from chalicelib.capture import Capturer
from chalicelib.capture.records import CaptureRecord

SINK_SECONDS = 0.050
"""What one sink call takes here (a PutObject or PutRecordBatch on AWS)."""
TARGET_BACKGROUND_MS = 1.0
"""The issue's target for the background path's median (today's inline: the sink's 50 ms)."""


class SlowSink:
    """A sink whose every call takes :data:`SINK_SECONDS`, counting calls and records."""

    def __init__(self) -> None:
        self.calls = 0
        self.records = 0

    def write(self, records: Sequence[CaptureRecord]) -> None:
        time.sleep(SINK_SECONDS)
        self.calls += 1
        self.records += len(records)

    def close(self) -> None:
        pass


def _served() -> Served:
    rng = np.random.default_rng(7)
    image = rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)
    scores = rng.random(1000)
    served = Served(Answer(b"{}", "application/json"), "efficientnet-lite0")
    served.sent = cv2.imencode(".png", image)[1].tobytes()
    served.sent_content_type = "image/png"
    served.received = json.dumps((scores / scores.sum()).tolist()).encode()
    served.received_content_type = "application/json"
    served.variant = "AllTraffic"
    served.invoked = True
    return served


def report(budget: Budget) -> Report:
    """Time both writers, check every record landed, print the table."""
    # the writer's EMF lines (one a batch) would interleave with the table
    with mock.patch.dict(os.environ, {"POWERTOOLS_METRICS_DISABLED": "true"}):
        return _report(budget)


def _report(budget: Budget) -> Report:
    out = Report()
    out.say(table.section(f"Capture: the request's capture stage with a {SINK_SECONDS * 1000:.0f}"
                          " ms sink, inline beside after the response"))
    served = _served()
    inline_sink, background_sink = SlowSink(), SlowSink()
    inline = Capturer("both", inline_sink)
    background = Capturer("both", background_sink).background()
    handed = 0

    def capture_inline() -> None:
        inline.capture_served(served, "bench", None, time.monotonic() + 5)

    def capture_background() -> None:
        nonlocal handed
        background.capture_served(served, "bench", None, time.monotonic() + 5)
        handed += 1

    ref, cand = compare(capture_inline, capture_background, budget)
    assert background.writer is not None
    flushed = background.flush(60)
    stored = background_sink.records
    rows = [["inline", table.ms(ref.wall), table.ms(_p90(ref.wall_ms)),
             str(inline_sink.records), str(inline_sink.calls)],
            ["background", table.ms(cand.wall), table.ms(_p90(cand.wall_ms)),
             str(stored), str(background_sink.calls)]]
    out.say(table.render(["writer", "median ms", "p90 ms", "records stored", "sink calls"],
                         rows))
    speedup = ratio(ref.wall, cand.wall)
    met = cand.wall < TARGET_BACKGROUND_MS
    out.say(f"  the request's capture stage: {table.times(speedup)} cheaper after the response; "
            f"target background median < {TARGET_BACKGROUND_MS:g} ms: {table.verdict(met)}")
    if not met:
        out.missed.append(f"capture: background median {cand.wall:.3f} ms, target "
                          f"< {TARGET_BACKGROUND_MS:g} ms")
    if not flushed or stored != handed or background.writer.dropped:
        out.failures.append(f"capture: {handed} records handed over, {stored} stored, "
                            f"{background.writer.dropped} dropped")
    else:
        out.say(f"  every record handed over was stored: {stored} in {background_sink.calls} "
                f"sink calls ({stored / max(1, background_sink.calls):.1f} a call)")
    out.say(*_objects_per_hour())
    return out


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0]


def _objects_per_hour(requests_per_second: float = 1000.0, buffer_seconds: float = 60.0,
                      partitions: int = 1) -> list[str]:
    """What the monitor lists and reads per hour of traffic with each sink."""
    hour = 3600
    per_record = int(requests_per_second * hour)
    firehose = int(hour / buffer_seconds) * partitions
    return ["", f"  objects the monitor reads per hour at {requests_per_second:,.0f} requests/s"
                " (one endpoint and variant):",
            f"    S3 sink: up to {per_record:,} (one object per writer batch and folder, at "
            f"most one a record); "
            f"Firehose: {firehose:,} (one a {buffer_seconds:.0f} s buffer flush and partition, "
            "unless 64 MiB fill first); directory: one file per process and hour"]
