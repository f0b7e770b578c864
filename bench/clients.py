"""Clients part: what shrinking on the client (``sagegate.client``) saves, end to end.

``make run``'s stack (the emulator's real EfficientNet-Lite0, ``chalice local --stage local``)
on free ports, started with :mod:`sagegate.local.processes` as part 2 starts it. Two tables:

* **Encodings**: the scikit-image photos of the integration tests, enlarged as the ``photos``
  fixture enlarges them (bicubic, JPEG quality 90), at 640x480, 1920x1080 and 4032x3024; each
  sent as it is and shrunk by the client in each candidate encoding (and, for comparison, the
  JPEG at quality 90 the client does not offer). Per encoding: bytes sent, the worst absolute
  deviation of the top-5 probabilities from the original's answer through sagegate, and the
  top-1 changes. Nothing here varies from run to run.
* **Transfer**: phone-like photos (``bench/images.py``: with sensor-like noise) at the same
  sizes: bytes uploaded, the client's CPU for the shrink (``time.process_time``, median), the
  server's time (wall time to the last byte of the answer on 127.0.0.1, median, keep-alive),
  and the modelled end-to-end time over a 10 and a 50 Mbit/s uplink: client CPU + bytes x 8 /
  bandwidth + server time, original against shrunk, with the ratio.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable, Iterator

import cv2
import numpy as np

from bench import images, table
from bench.report import Report
from bench.timing import Budget
from sagegate.client import Client
from sagegate.client.fidelity import FIDELITY_BOUND, probability_vector, top5_deviation
from sagegate.client.shrinking import Encoding, ShrinkRule, content_type_of, shrink
from sagegate.client.transfer import Upload
from sagegate.local.processes import quiet_stack

STAGE = "local"
PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")
SIZES = ((640, 480), (1920, 1080), (4032, 3024))
UPLINKS_MBIT = (10, 50)
Q90 = "jpeg q90 4:2:0"
CANDIDATES: tuple[str, ...] = (*(str(e) for e in Encoding), Q90)
TRANSFER_ENCODINGS = (str(Encoding.WEBP), str(Encoding.PNG))


def fixture_photo(name: str, width: int, height: int) -> bytes:
    """A photo as the integration tests' ``photos`` fixture enlarges one: stretched to the
    size bicubically, JPEG quality 90."""
    from skimage import data  # deferred: only this part needs scikit-image

    bgr = cv2.cvtColor(getattr(data, name)(), cv2.COLOR_RGB2BGR)
    ok, buffer = cv2.imencode(".jpg", cv2.resize(bgr, (width, height),
                                                 interpolation=cv2.INTER_CUBIC),
                              [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return bytes(buffer.tobytes())


def shrunk_as(data: bytes, rule: ShrinkRule, candidate: str) -> tuple[bytes, str]:
    """The client's upload in one candidate encoding (``Q90``: the same shrink, JPEG q90)."""
    if candidate != Q90:
        return shrink(data, rule, candidate)
    body, content_type = shrink(data, rule, Encoding.PNG)
    if body == data:
        return body, content_type
    image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    ok, buffer = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return bytes(buffer.tobytes()), "image/jpeg"


@dataclasses.dataclass
class Figures:
    """One candidate encoding over every input of one size."""

    sent: list[int] = dataclasses.field(default_factory=list)
    original: list[int] = dataclasses.field(default_factory=list)
    deviations: list[float] = dataclasses.field(default_factory=list)
    cpu_ms: list[float] = dataclasses.field(default_factory=list)
    flips: int = 0
    passed_through: int = 0

    def cells(self, size: str, candidate: str) -> list[str]:
        """The table row."""
        worst = max(self.deviations)
        return [size, candidate, f"{len(self.sent)}",
                table.human_bytes(int(statistics.median(self.original))),
                table.human_bytes(int(statistics.median(self.sent))),
                f"{self.passed_through}", table.ms(statistics.median(self.cpu_ms)),
                f"{worst:.4f}", f"{self.flips}",
                "yes" if worst <= FIDELITY_BOUND and not self.flips else "NO"]


ENCODING_HEADERS = ["size", "encoding", "photos", "original (median)", "sent (median)",
                    "sent as is", "client cpu ms", "worst top-5 dev", "top-1 changed",
                    "faithful"]


def encodings_table(client: Client, rule: ShrinkRule) -> tuple[str, dict[str, Figures]]:
    """Measure every candidate on every fixture photo and size; the table, and the figures
    over all sizes per candidate."""
    rows, overall = [], {candidate: Figures() for candidate in CANDIDATES}
    for width, height in SIZES:
        figures = {candidate: Figures() for candidate in CANDIDATES}
        for name in PHOTOS:
            data = fixture_photo(name, width, height)
            original = probability_vector(
                client.send(Upload(data, "image/jpeg", len(data)), 1000))
            for candidate in CANDIDATES:
                start = time.process_time()
                body, content_type = shrunk_as(data, rule, candidate)
                cpu_ms = (time.process_time() - start) * 1000.0
                answer = probability_vector(
                    client.send(Upload(body, content_type, len(data)), 1000))
                for bucket in (figures[candidate], overall[candidate]):
                    bucket.sent.append(len(body))
                    bucket.original.append(len(data))
                    bucket.cpu_ms.append(cpu_ms)
                    bucket.deviations.append(top5_deviation(original, answer))
                    bucket.flips += int(np.argmax(answer) != np.argmax(original))
                    bucket.passed_through += int(body == data)
        rows += [figures[c].cells(f"{width}x{height}", c) for c in CANDIDATES]
    return table.render(ENCODING_HEADERS, rows, left=2), overall


@dataclasses.dataclass(frozen=True)
class Transfer:
    """One phone-like photo: the original and the client's shrunk upload, timed."""

    image: images.BenchImage
    encoding: str
    shrunk: Upload
    shrink_cpu_ms: float
    server_original_ms: float
    server_shrunk_ms: float

    def modelled_ms(self, mbit: float, shrunk: bool) -> float:
        """Client CPU + upload over ``mbit`` Mbit/s + the server's time."""
        if shrunk:
            return (self.shrink_cpu_ms + len(self.shrunk.data) * 8 / (mbit * 1000)
                    + self.server_shrunk_ms)
        return len(self.image.data) * 8 / (mbit * 1000) + self.server_original_ms

    def cells(self) -> list[str]:
        """The table row."""
        cells = [self.image.name, self.encoding, table.human_bytes(len(self.image.data)),
                 f"{table.human_bytes(len(self.shrunk.data))} {_kind(self.shrunk)}",
                 table.times(len(self.image.data) / len(self.shrunk.data)),
                 table.ms(self.shrink_cpu_ms), table.ms(self.server_original_ms),
                 table.ms(self.server_shrunk_ms)]
        for mbit in UPLINKS_MBIT:
            original, shrunk = self.modelled_ms(mbit, False), self.modelled_ms(mbit, True)
            cells += [table.ms(original), table.ms(shrunk), table.times(original / shrunk)]
        return cells


def _kind(upload: Upload) -> str:
    return upload.content_type.split("/")[-1] if upload.shrunk else "(original)"


TRANSFER_HEADERS = ["input", "encoding", "original", "sent shrunk", "bytes ratio", "shrink cpu ms",
                    "server ms orig", "server ms shrunk",
                    *(f"{label} {mbit} Mbit/s" for mbit in UPLINKS_MBIT
                      for label in ("orig", "shrunk", "ratio"))]


def _median_ms(call: Callable[[], object], reps: int, clock: Callable[[], float]) -> float:
    samples = []
    for _ in range(reps):
        start = clock()
        call()
        samples.append((clock() - start) * 1000.0)
    return statistics.median(samples)


def _wall_ms(client: Client, upload: Upload) -> float:
    start = time.perf_counter()
    client.send(upload)
    return (time.perf_counter() - start) * 1000.0


def measure_transfer(client: Client, image: images.BenchImage, rule: ShrinkRule,
                     budget: Budget) -> list[Transfer]:
    """Time the shrink in each lossless encoding (CPU), and the original's and each shrunk
    upload's answers (wall, in turn, the order rotating each round, after a warm-up)."""
    original = Upload(image.data, content_type_of(image.data), len(image.data))
    uploads: dict[str, Upload] = {}
    cpu: dict[str, float] = {}
    for encoding in TRANSFER_ENCODINGS:
        uploads[encoding] = Upload(*shrink(image.data, rule, encoding), len(image.data))
        cpu[encoding] = _median_ms(functools.partial(shrink, image.data, rule, encoding),
                                   max(budget.min_reps, 3), time.process_time)
    order = [("original", original), *uploads.items()]
    for _ in range(budget.warmup):
        for _name, upload in order:
            client.send(upload)
    times: dict[str, list[float]] = {name: [] for name, _ in order}
    for round_ in range(budget.min_reps):
        turn = round_ % len(order)
        for name, upload in order[turn:] + order[:turn]:
            times[name].append(_wall_ms(client, upload))
    server_original = statistics.median(times["original"])
    return [Transfer(image, encoding, uploads[encoding], cpu[encoding], server_original,
                     statistics.median(times[encoding])) for encoding in TRANSFER_ENCODINGS]


@contextlib.contextmanager
def running_client() -> Iterator[Client]:
    """``make run``'s stack on free ports and a client of it, stopped (by PID) on the way
    out."""
    with quiet_stack(STAGE) as (api, _), Client(api.url, timeout=60) as client:
        yield client


def choose(overall: dict[str, Figures]) -> str:
    """The smallest offered encoding that is faithful on every input."""
    faithful = [c for c in CANDIDATES if c != Q90 and not overall[c].flips
                and max(overall[c].deviations) <= FIDELITY_BOUND]
    return min(faithful, key=lambda c: sum(overall[c].sent)) if faithful else "none"


def report(budget: Budget) -> Report:
    """Run the part and print both tables."""
    out = Report()
    out.say(table.section("Clients - shrinking on the client (sagegate.client) against "
                          "sending the original"),
            "  make run's stack (real EfficientNet-Lite0). Encodings: the test photos "
            f"({', '.join(PHOTOS)}),", "  deviation = worst |top-5 probability - the "
            f"original's through sagegate|; faithful: <= {FIDELITY_BOUND} and the same top-1.",
            "")
    with running_client() as client:
        rule = client.rule()
        assert rule is not None, "the default model takes no images"
        encodings, overall = encodings_table(client, rule)
        out.say(encodings, "", f"  default encoding: {client.encoding}; smallest faithful "
                f"encoding on these photos: {choose(overall)}", "",
                "  Transfer (phone-like photos, bench/images.py): ms are medians; modelled = "
                "client shrink CPU + bytes x 8 / uplink + server ms", "")
        rows = [row for image in images.build(images.E2E_INPUTS)
                for row in measure_transfer(client, image, rule, budget)]
    out.say(table.render(TRANSFER_HEADERS, [row.cells() for row in rows], left=1))
    for row in rows:
        if row.shrunk.shrunk and len(row.shrunk.data) >= len(row.image.data):
            out.failures.append(f"clients {row.image.name}: the shrunk upload is not smaller")
    return out
