"""Cache part: what a prediction cache hit saves, end to end, beside hashing the bytes alone.

``make run``'s stack (the emulator's real EfficientNet-Lite0, ``chalice local --stage local``,
whose cache is the in-process tier only: the stage sets no ``CACHE_TABLE``) on free ports,
started with :mod:`sagegate.local.processes` as parts 2 and clients start it. Phone-like photos
(``bench/images.py``: 640x480, 1920x1080 and 4032x3024 JPEGs). For each sample the photo gets
a fresh JPEG comment segment (``COM``, right after ``SOI``: the pixels, and so the endpoint's
work, are unchanged, but the bytes, which are the cache key, are new), and is posted to
``/predict`` twice over one keep-alive connection:

* **miss**: the first upload of those bytes (the endpoint is called);
* **hit**: the same bytes again (answered from the cache);
* **floor**: the same bytes with ``k=0``, which sagegate refuses (400) after reading the body
  and before hashing it: what ``chalice local`` and HTTP cost for that many bytes;
* **hash**: ``hashlib.sha256(body)`` (the cache key's hash) of those bytes in this process, alone.

Each figure is the wall time to the last byte of the answer (``time.perf_counter``), median and
p90 over the samples. The ``X-Cache`` answer header (``hit``, ``miss`` or ``bypass``) must say
``miss`` then ``hit``: any other answer is counted and reported as a mismatch (the timing is
kept). A hit whose predictions differ from its miss's fails the run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import json
import os
import statistics
import struct
import time
from collections.abc import Iterator
from typing import Any

from bench import images, table
from bench.report import Report
from bench.timing import Budget
from sagegate.local.processes import quiet_stack

HOST = "127.0.0.1"
STAGE = "local"
PATH = "/predict"
FLOOR_PATH = "/predict?k=0"  # refused (400) once the body is read, before any hashing
HEADER = "X-Cache"
HIT, MISS = "hit", "miss"
HASH_REPS = 9


def with_comment(jpeg: bytes, text: str) -> bytes:
    """``jpeg`` with a comment segment (``FF FE``, length, ``text``) right after its SOI
    marker: other bytes, the same pixels.

    Raises:
        ValueError: not a JPEG.
    """
    if jpeg[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG (no SOI marker)")
    payload = text.encode("ascii")
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def p90(values: list[float]) -> float:
    """The 90th percentile (inclusive method: a value between two samples)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def hash_ms(data: bytes, reps: int = HASH_REPS) -> float:
    """Median milliseconds of ``hashlib.sha256(data)``, the cache key's hash."""
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        hashlib.sha256(data).digest()
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples)


@dataclasses.dataclass(frozen=True)
class Answer:
    """One answer: wall milliseconds, status, the ``X-Cache`` header, the parsed body."""

    ms: float
    status: int
    cache: str
    body: dict[str, Any]


class Poster:
    """One keep-alive connection to sagegate's ``/predict``."""

    def __init__(self, port: int) -> None:
        self._connection = http.client.HTTPConnection(HOST, port, timeout=120)

    def post(self, body: bytes, path: str = PATH) -> Answer:
        """Post a JPEG; the answer, timed to its last byte."""
        start = time.perf_counter()
        self._connection.request("POST", path, body=body,
                                 headers={"Content-Type": "image/jpeg"})
        response = self._connection.getresponse()
        raw = response.read()
        elapsed = (time.perf_counter() - start) * 1000.0
        cache = (response.getheader(HEADER) or "").split(";")[0].strip().lower()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = {"raw": raw[:200].decode("latin-1")}
        return Answer(elapsed, response.status, cache, parsed)

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


@dataclasses.dataclass
class Row:
    """One input: every sample's times and the cache headers that did not match."""

    image: images.BenchImage
    miss_ms: list[float] = dataclasses.field(default_factory=list)
    hit_ms: list[float] = dataclasses.field(default_factory=list)
    floor_ms: list[float] = dataclasses.field(default_factory=list)
    hash_ms: list[float] = dataclasses.field(default_factory=list)
    mismatches: dict[str, int] = dataclasses.field(default_factory=dict)
    different_answers: int = 0

    def mismatch(self, expected: str, got: str) -> None:
        """Count an ``X-Cache`` answer other than ``expected``."""
        label = f"{expected} said {got or 'nothing'}"
        self.mismatches[label] = self.mismatches.get(label, 0) + 1

    def cells(self) -> list[str]:
        """The table row."""
        miss, hit = statistics.median(self.miss_ms), statistics.median(self.hit_ms)
        floor, hashed = statistics.median(self.floor_ms), statistics.median(self.hash_ms)
        return [self.image.name, self.image.size_label, str(len(self.hit_ms)),
                table.ms(miss), table.ms(p90(self.miss_ms)), table.ms(hit),
                table.ms(p90(self.hit_ms)), table.times(miss / hit), table.ms(floor),
                table.ms(hashed), table.ms(hit - floor),
                str(sum(self.mismatches.values()))]


HEADERS = ["input", "size", "samples", "miss ms", "miss p90", "hit ms", "hit p90",
           "miss/hit", "floor ms", "sha256 ms", "hit - floor", "X-Cache mismatches"]


def _predictions(answer: Answer) -> Any:
    return answer.body.get("predictions")


def measure(poster: Poster, image: images.BenchImage, budget: Budget, nonce: str) -> Row:
    """Miss, hit and floor for ``budget.min_reps`` fresh copies of ``image`` (after
    ``budget.warmup`` untimed ones), each copy hashed alone too."""
    row = Row(image)
    for sample in range(-budget.warmup, budget.min_reps):
        body = with_comment(image.data, f"sagegate bench cache {nonce} {sample}")
        miss = poster.post(body)
        hit = poster.post(body)
        floor = poster.post(body, FLOOR_PATH)
        for answer, expected in ((miss, 200), (hit, 200), (floor, 400)):
            if answer.status != expected:
                raise RuntimeError(f"{image.name}: answered {answer.status} where {expected} "
                                   f"was expected: {answer.body}")
        if sample < 0:
            continue
        row.miss_ms.append(miss.ms)
        row.hit_ms.append(hit.ms)
        row.floor_ms.append(floor.ms)
        row.hash_ms.append(hash_ms(body))
        if miss.cache != MISS:
            row.mismatch(MISS, miss.cache)
        if hit.cache != HIT:
            row.mismatch(HIT, hit.cache)
        row.different_answers += int(_predictions(hit) != _predictions(miss))
    return row


@contextlib.contextmanager
def running_poster() -> Iterator[Poster]:
    """``make run``'s stack on free ports and a connection to it, stopped (by PID) on the way
    out."""
    with quiet_stack(STAGE) as (api, _):
        poster = Poster(api.port)
        try:
            yield poster
        finally:
            poster.close()


def report(budget: Budget) -> Report:
    """Run the part and print its table."""
    out = Report()
    out.say(table.section("Cache - a prediction cache hit against a miss, end to end"),
            f"  make run's stack ('{STAGE}' stage: the in-process tier only), real "
            "EfficientNet-Lite0; each sample is a fresh copy of the photo (a new JPEG comment),",
            "  posted twice (miss, then hit) and once with k=0 (floor: refused after reading the "
            "body, before hashing it);", "  wall ms to the last byte over keep-alive on "
            f"{HOST}, median (and p90); sha256 = hashlib.sha256(bytes) alone (the key's hash),"
            " median.", "")
    nonce = os.urandom(6).hex()
    inputs = images.build(images.E2E_INPUTS)
    with running_poster() as poster:
        rows = [measure(poster, image, budget, nonce) for image in inputs]
    out.say(table.render(HEADERS, [row.cells() for row in rows], left=1))
    for row in rows:
        for label, count in sorted(row.mismatches.items()):
            out.say(f"  {row.image.name}: X-Cache mismatch: {label} ({count} of "
                    f"{len(row.hit_ms)})")
            out.missed.append(f"cache {row.image.name}: X-Cache {label} ({count}x)")
        if row.different_answers:
            out.failures.append(f"cache {row.image.name}: {row.different_answers} hit(s) "
                                "answered other predictions than their miss")
    return out
