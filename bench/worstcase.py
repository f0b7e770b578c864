"""The most preprocessing a crafted upload can cost: ``python -m bench.worstcase``.

Each input is built here (nothing stored) to be as expensive as sagegate's limits allow, or
just past them, and goes through the real :class:`~chalicelib.inference.pipeline.Predictor` with the
default settings against an in-memory endpoint that answers at once, so only sagegate's own
work is timed: the ``preprocess`` stage (probe, limits, decode, resize, encode), median of
three runs, on one OpenCV thread as on one Lambda vCPU. A benchmark: it prints, it asserts
nothing about time.
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np
from botocore.response import StreamingBody

from bench import table
from chalicelib.calls import CallOptions
from chalicelib.core.config import Settings
from chalicelib.core.errors import SagegateError
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.pipeline import Predictor
from chalicelib.inference.predictions import load_labels
from chalicelib.inference.timing import StageTimer
from scripts.crafted_images import scan_bomb

SIDE = 6320  # 6320 x 6320 = 39.9 MP, under MAX_IMAGE_PIXELS (40 MP)


class _InstantEndpoint:
    ANSWER = json.dumps([1.0 / 1000] * 1000).encode()

    def invoke_endpoint(self, **_: Any) -> dict[str, Any]:
        return {"Body": StreamingBody(io.BytesIO(self.ANSWER), len(self.ANSWER)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}

    def close(self) -> None:
        pass


def _flat_png(side: int) -> bytes:
    image = np.full((side, side, 3), 127, np.uint8)
    ok, encoded = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 9])
    assert ok
    return encoded.tobytes()


def _strip() -> bytes:
    ok, encoded = cv2.imencode(".jpg", np.full((1, 65500, 3), 128, np.uint8))
    assert ok
    return encoded.tobytes()


INPUTS: list[tuple[str, Callable[[], bytes]]] = [
    ("JPEG 39.9 MP colour, 64 scans (DC scan repeated)",
     lambda: scan_bomb(SIDE, 64, colour=True, repeat="dc")),
    ("JPEG 39.9 MP grey, 64 scans (AC scan repeated)", lambda: scan_bomb(SIDE, 64)),
    ("JPEG 39.9 MP grey, 15000 scans (the review's bomb)", lambda: scan_bomb(SIDE, 15000)),
    ("JPEG 640x480, 5000 scans (would pass through)", lambda: scan_bomb(640, 5000)),
    ("PNG 39.9 MP, flat (inflates 120 MB)", lambda: _flat_png(SIDE)),
    ("JPEG 65500x1 strip", _strip),
]


def measure(predictor: Predictor, data: bytes, runs: int) -> tuple[str, float]:
    """The outcome and the median preprocess milliseconds of ``runs`` predictions."""
    times, outcome = [], ""
    for _ in range(runs):
        timer = StageTimer()
        try:
            predictor.predict(data, CallOptions(k=1), "bench-worst", timer)
            outcome = "200"
        except SagegateError as error:
            outcome = f"{error.STATUS_CODE} {error.CODE}"
        times.append(timer.durations.get("preprocess", 0.0))
    return outcome, statistics.median(times)


def main(argv: Sequence[str] | None = None, prog: str = "python -m bench.worstcase") -> int:
    """Build each crafted input, time it, print the table."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    cv2.setNumThreads(1)
    settings = Settings.from_env({"ENDPOINT_NAME": "efficientnet-lite0"})
    predictor = Predictor(settings, EndpointClient(_InstantEndpoint()),  # type: ignore[arg-type]
                          load_labels(settings.labels))
    rows = []
    for name, make in INPUTS:
        data = make()
        outcome, ms = measure(predictor, data, args.runs)
        rows.append([name, table.human_bytes(len(data)), outcome, table.ms(ms)])
        print(f"  measured {name}", flush=True)
    print(table.section(f"Worst-case preprocessing per crafted upload (default limits: "
                        f"{settings.max_image_pixels} px, {settings.max_jpeg_scans} JPEG scans, "
                        f"aspect {settings.max_aspect_ratio:g}:1), median of {args.runs}"))
    print(table.render(["input", "bytes", "answer", "preprocess ms"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
