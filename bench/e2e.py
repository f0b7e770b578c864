"""Part 2: end-to-end latency through ``chalice local`` and the emulator, both front-ends.

One emulator (the real EfficientNet-Lite0 model) serves both. sagegate runs as ``make run``
runs it (``sagegate.local.processes.start_api``, stage ``local``); the 2018 reference is
``bench/reference_app`` under the same launcher (``sagegate.local.processes.start_chalice_local``:
``chalice local`` with TCP_NODELAY).
A keep-alive client posts the same JSON body to each, alternately, and times each answer,
with ``Cache-Control: no-cache``: sagegate's prediction cache is measured by the cache part.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import http.client
import json
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from bench import frontend, table
from bench.images import BenchImage
from bench.report import Report
from bench.timing import Budget, ratio
from chalicelib.core.config import Settings
from chalicelib.inference.predictions import load_labels
from emulator.process import free_port, start_emulator
from sagegate.local.preflight import check_settings, stage_env
from sagegate.local.processes import ApiProcess, start_api, start_chalice_local

REFERENCE_APP = Path(__file__).resolve().parent / "reference_app"
HOST = "127.0.0.1"
STAGE = "local"
TARGET = 3.0
TARGET_INPUT = "JPEG 4032x3024"
START_TIMEOUT_S = 60.0


def stage_settings(stage: str = STAGE) -> Settings:
    """The settings ``chalice local --stage <stage>`` gives sagegate (``.chalice/config.json``)."""
    return check_settings(stage, stage_env(stage, {}))


def start_reference(port: int, endpoint_url: str, log: IO[bytes]) -> ApiProcess:
    """``chalice local`` for the 2018 reference app (its default stage), ready to answer:
    any answer to ``GET /`` (405 there) from this child means it serves."""
    return start_chalice_local(port, endpoint_url, project_dir=REFERENCE_APP, stage=None,
                               host=HOST, log=log, timeout=START_TIMEOUT_S, ready_path="/",
                               ready_status=None)


class Side:
    """One front-end behind a keep-alive connection."""

    def __init__(self, name: str, port: int, path: str) -> None:
        self.name = name
        self.path = path
        self._connection = http.client.HTTPConnection(HOST, port, timeout=120)
        self.server_timing: dict[str, list[float]] = {}

    def post(self, body: bytes) -> tuple[float, dict[str, Any]]:
        """Post ``body``; return the milliseconds to the last byte of the answer, and it.

        sagegate's ``Server-Timing`` stages are kept in :attr:`server_timing`.
        """
        start = time.perf_counter()
        # no-cache: sagegate's prediction cache would answer every repeat of the same body
        # (the stage's memory tier is on), and the figure would be a cache hit's, not the path's
        self._connection.request("POST", self.path, body=body,
                                 headers={"Content-Type": "application/json",
                                          "Cache-Control": "no-cache"})
        response = self._connection.getresponse()
        raw = response.read()
        elapsed = (time.perf_counter() - start) * 1000.0
        if response.status != 200:
            raise RuntimeError(f"{self.name} answered {response.status}: {raw[:300]!r}")
        self._keep_timing(response.getheader("Server-Timing", ""))
        return elapsed, json.loads(raw)

    def _keep_timing(self, header: str) -> None:
        for entry in filter(None, (part.strip() for part in header.split(","))):
            name, _, duration = entry.partition(";dur=")
            with contextlib.suppress(ValueError):
                self.server_timing.setdefault(name, []).append(float(duration))

    def timing_medians(self) -> dict[str, float]:
        """Median of each ``Server-Timing`` stage seen since the last call, then forget."""
        medians = {name: statistics.median(v) for name, v in self.server_timing.items()}
        self.server_timing = {}
        return medians

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


def sagegate_top1(answer: dict[str, Any]) -> int:
    """0-based class index of sagegate's first prediction."""
    return int(answer["predictions"][0]["index"])


def reference_top1(answer: dict[str, Any]) -> int:
    """0-based class index from the 2018 answer (a string of 1-based ``(id, p)`` tuples)."""
    return int(ast.literal_eval(answer["response"])[0][0]) - 1


@dataclasses.dataclass(frozen=True)
class Row:
    """One input's end-to-end result."""

    image: BenchImage
    reference_ms: list[float]
    sagegate_ms: list[float]
    reference_sent: int
    sagegate_sent: int
    reference_top1: int
    sagegate_top1: int
    sagegate_stages: dict[str, float]

    @property
    def speedup(self) -> float:
        """How many times lower sagegate's median latency is."""
        return ratio(statistics.median(self.reference_ms), statistics.median(self.sagegate_ms))

    @property
    def target(self) -> float | None:
        """The target ratio for this input, if any."""
        return TARGET if self.image.name == TARGET_INPUT else None

    def cells(self, labels: tuple[str, ...] | None) -> list[str]:
        """The formatted table cells."""
        target = "-" if self.target is None else f">={self.target:g}x"
        met = "-" if self.target is None else table.verdict(self.speedup >= self.target)
        return [self.image.name, self.image.size_label, str(len(self.sagegate_ms)),
                table.ms(statistics.median(self.reference_ms)),
                table.ms(statistics.median(self.sagegate_ms)), table.times(self.speedup),
                target, met,
                f"{table.human_bytes(self.reference_sent)} / "
                f"{table.human_bytes(self.sagegate_sent)}",
                _top1(self.reference_top1, self.sagegate_top1, labels)]


HEADERS = ["input", "size", "reps", "2018 ref ms", "sagegate ms", "ratio", "target", "met",
           "to endpoint: ref / sagegate", "top-1: ref / sagegate"]


def _top1(reference: int, sagegate: int, labels: tuple[str, ...] | None) -> str:
    if reference == sagegate:
        return f"{reference} / {sagegate} {_label(reference, labels)}"
    return f"{reference} {_label(reference, labels)} / {sagegate} {_label(sagegate, labels)}"


def _label(index: int, labels: tuple[str, ...] | None) -> str:
    name = labels[index] if labels is not None and 0 <= index < len(labels) else "?"
    return name.split(",")[0]


def measure(image: BenchImage, sides: tuple[Side, Side], budget: Budget,
            sagegate_sent: int) -> Row:
    """Post one input to both sides alternately (the side that goes first switches)."""
    reference, sagegate = sides
    body = frontend.request_body(image.data)
    for _ in range(budget.warmup):
        reference.post(body)
        sagegate.post(body)
    sagegate.timing_medians()  # forget the warm-up's
    times: dict[str, list[float]] = {reference.name: [], sagegate.name: []}
    answers: dict[str, dict[str, Any]] = {}
    for round_ in range(budget.max_reps):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            elapsed, answers[side.name] = side.post(body)
            times[side.name].append(elapsed)
    return Row(image, times[reference.name], times[sagegate.name], len(image.data),
               sagegate_sent, reference_top1(answers[reference.name]),
               sagegate_top1(answers[sagegate.name]), sagegate.timing_medians())


def stage_table(rows: list[Row]) -> str:
    """sagegate's own ``Server-Timing`` medians beside its end-to-end median."""
    names = list(dict.fromkeys(name for row in rows for name in row.sagegate_stages))
    lines = []
    for row in rows:
        stages = [row.sagegate_stages.get(name, 0.0) for name in names]
        total = statistics.median(row.sagegate_ms)
        lines.append([row.image.name, *(table.ms(v) for v in stages), table.ms(total),
                      table.ms(total - sum(stages))])
    return table.render(["input", *names, "end to end", "outside the view"], lines)


@contextlib.contextmanager
def running_stack() -> Iterator[tuple[Side, Side]]:
    """The emulator and both front-ends, stopped (by their PIDs) on the way out."""
    with open(os.devnull, "wb") as log, start_emulator(port=0) as emulator:
        sagegate_api = start_api(free_port(HOST), emulator.url, host=HOST, stage=STAGE,
                                 log=log)
        try:
            reference_api = start_reference(free_port(HOST), emulator.url, log)
            try:
                sides = (Side("2018 ref", reference_api.port, "/"),
                         Side("sagegate", sagegate_api.port, "/predict"))
                try:
                    yield sides
                finally:
                    for side in sides:
                        side.close()
            finally:
                reference_api.stop()
        finally:
            sagegate_api.stop()


def report(inputs: list[BenchImage], budget: Budget) -> Report:
    """Run part 2 and print its table."""
    out = Report()
    out.say(table.section("Part 2 - end to end: client -> chalice local -> emulator (real "
                          "model)"),
            "  Same JSON body to both, keep-alive, alternating; wall ms to the last byte, "
            "median; ratio = 2018 ref / sagegate.",
            "  Bytes to endpoint: the original upload for the 2018 ref; for sagegate, what its "
            "preprocessing makes",
            f"  with the '{STAGE}' stage settings of .chalice/config.json.", "")
    settings = stage_settings()
    sizer = frontend.Sagegate(frontend.FakeRuntime(frontend.endpoint_body()), settings)
    sent = {image.name: sizer.bytes_sent(image.data) for image in inputs}
    with running_stack() as sides:
        rows = [measure(image, sides, budget, sent[image.name]) for image in inputs]
    labels = load_labels(settings.labels)
    out.say(table.render(HEADERS, [row.cells(labels) for row in rows], left=2), "",
            "  sagegate's Server-Timing (median ms); 'outside the view' is chalice local, HTTP "
            "and the client:", stage_table(rows))
    for row in rows:
        if row.target is not None and row.speedup < row.target:
            out.missed.append(f"part 2 {row.image.name}: {table.times(row.speedup)} < "
                              f"{row.target:g}x")
        if row.reference_top1 != row.sagegate_top1:
            out.failures.append(f"part 2 {row.image.name}: top-1 differs "
                                f"({row.reference_top1} vs {row.sagegate_top1})")
    return out
