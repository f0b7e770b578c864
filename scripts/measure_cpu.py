"""Size the Lambda function: CPU time and peak memory of one prediction on a 12 MP photo.

Lambda gives a function CPU in proportion to its memory (1,769 MB = one full vCPU), so the
memory setting is chosen from what the pipeline costs in CPU, not only from what it holds.
This runs the real :class:`~chalicelib.inference.pipeline.Predictor` (decode, resize, PNG encode,
top-k) against an in-memory endpoint that answers at once, so only sagegate's own work is
counted::

    .venv/bin/python -m scripts.measure_cpu            # 12 MP JPEG, OpenCV on one thread
    .venv/bin/python -m scripts.measure_cpu --noise 8     # a camera-sized file (~5 MB)
    .venv/bin/python -m scripts.measure_cpu --threads 0 --requests 50

It prints process CPU milliseconds per request (what Lambda's CPU share has to cover), wall
milliseconds, and the process's peak resident memory. Run it in a fresh interpreter: peak
memory is per process.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import resource
import statistics
import sys
import time
from typing import Any

_NUM_CLASSES = 1000


class _InstantEndpoint:
    """A sagemaker-runtime client double that answers every call with the same body."""

    def __init__(self) -> None:
        probabilities = [1.0 / _NUM_CLASSES] * _NUM_CLASSES
        self._body = json.dumps(probabilities).encode()

    def invoke_endpoint(self, **_: Any) -> dict[str, Any]:
        from botocore.response import StreamingBody

        return {"Body": StreamingBody(io.BytesIO(self._body), len(self._body)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


def photo(width: int, height: int, noise: float = 0.0, fmt: str = "jpeg") -> bytes:
    """A real photo (scikit-image's chelsea) upscaled to ``width`` x ``height``, encoded.

    An upscaled photo is smoother than a camera's and compresses far better; ``noise`` (the
    standard deviation of added Gaussian noise, in 8-bit levels) brings back a camera's
    grain and with it a camera's file size and decode cost.
    """
    import cv2
    import numpy as np
    from skimage import data

    rgb = cv2.resize(data.chelsea(), (width, height), interpolation=cv2.INTER_CUBIC)
    if noise:
        grain = np.random.default_rng(0).normal(0.0, noise, rgb.shape)
        rgb = np.clip(rgb + grain, 0, 255).astype(np.uint8)
    params = [cv2.IMWRITE_JPEG_QUALITY, 90] if fmt == "jpeg" else []
    ok, buf = cv2.imencode(f".{fmt}", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params)
    assert ok
    return bytes(buf.tobytes())


def measure(image: bytes, requests: int) -> tuple[list[float], list[float]]:
    """Run ``requests`` predictions; return CPU and wall milliseconds for each."""
    from chalicelib.calls import CallOptions
    from chalicelib.core.config import Settings
    from chalicelib.inference.endpoint import EndpointClient
    from chalicelib.inference.pipeline import Predictor
    from chalicelib.inference.predictions import load_labels

    settings = Settings.from_env({"ENDPOINT_NAME": "efficientnet-lite0"})
    client = EndpointClient(_InstantEndpoint())  # type: ignore[arg-type]
    predictor = Predictor(settings, client, load_labels(settings.labels))
    options = CallOptions(k=5)
    predictor.predict(image, options, "warm-up")
    cpu, wall = [], []
    for index in range(requests):
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        predictor.predict(image, options, f"r{index}")
        cpu.append((time.process_time() - cpu_start) * 1000.0)
        wall.append((time.perf_counter() - wall_start) * 1000.0)
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    """Print CPU ms, wall ms and peak RSS for predictions on one large image."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=4032)
    parser.add_argument("--height", type=int, default=3024)
    parser.add_argument("--noise", type=float, default=0.0,
                        help="Gaussian grain (8-bit levels): 8 gives a camera-like 12 MP file")
    parser.add_argument("--format", choices=("jpeg", "png"), default="jpeg",
                        help="png: no reduced decode, the full image is held in memory")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1,
                        help="OpenCV threads (1 = one vCPU, as at 1,769 MB; 0 = OpenCV's default)")
    args = parser.parse_args(argv)
    import cv2

    if args.threads:
        cv2.setNumThreads(args.threads)
    # made in a child process, so its float arrays do not count in this one's peak memory
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        image = pool.submit(photo, args.width, args.height, args.noise, args.format).result()
    cpu, wall = measure(image, args.requests)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"image: {args.width}x{args.height} {args.format.upper()}, {len(image) / 1e6:.2f} MB; "
          f"OpenCV threads: {cv2.getNumThreads()}; requests: {args.requests}")
    print(f"CPU ms/request: median {statistics.median(cpu):.1f}, max {max(cpu):.1f}")
    print(f"wall ms/request: median {statistics.median(wall):.1f}, max {max(wall):.1f}")
    print(f"peak RSS of this process: {peak_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
