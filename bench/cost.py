"""The cost per million requests by Lambda architecture, for the image, tensor and LLM routes.

Each route is timed through ``make run``'s stack (the emulator's real models behind ``chalice
local``, the local stage's data capture into a scratch directory): the median wall time from the
request to the last byte of the answer is taken as Lambda's billed duration (rounded up to the
millisecond, as Lambda bills), waiting for the endpoint included, as Lambda bills it. Per million
requests::

    duration x memory x the architecture's price per GB-second      (Lambda compute)
    + Lambda's requests + API Gateway's REST requests
    + the capture record, in Firehose's 5 KB steps, x the price per GB ingested
    + streamed bytes past Lambda's free 6 MB (the LLM route; none at these sizes)

Memory is the prod stage's ``lambda_memory_size`` (the streaming function's for the LLM route).
arm64's duration is taken to be the x86_64 duration measured here: this machine has no Graviton
CPU (qemu's emulation, which ``sagegate arm64-check`` uses, says nothing of Graviton's speed),
and most of each route's time is the endpoint's, which the function's CPU does not change. The
prices are :mod:`bench.prices`'.
"""
from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import math
import os
import statistics
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

from bench import images, llm, prices, table
from bench.report import Report
from emulator.process import free_port, start_emulator
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import load_stage
from sagegate.local.processes import HOST, ApiProcess, start_api

STAGE = "prod"
STREAM_FUNCTION = "stream"  # the streaming function's key in the stage's lambda_functions
IRIS_ROW = [6.7, 3.0, 5.2, 2.3]
LLM_TOKENS = 8
CAPTURE_WAIT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Usage:
    """What one request of a route uses: billed milliseconds, configured MB, capture record and
    streamed bytes."""

    route: str
    billed_ms: int
    memory_mb: int
    capture_bytes: int
    streamed_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class Cost:
    """USD per million requests of one route on one architecture, by charge."""

    compute: float
    requests: float
    gateway: float
    capture: float
    streamed: float

    @property
    def total(self) -> float:
        return self.compute + self.requests + self.gateway + self.capture + self.streamed


def billed_ms(seconds: float) -> int:
    """Lambda bills duration in 1 ms steps, rounded up."""
    return max(1, math.ceil(seconds * 1000 - 1e-9))


def capture_billed_bytes(record_bytes: int) -> int:
    """Firehose bills each record in 5 KB steps (none when nothing is captured)."""
    step = prices.FIREHOSE_RECORD_STEP
    return math.ceil(record_bytes / step) * step


def per_million(usage: Usage, architecture: str) -> Cost:
    """The cost of a million requests of ``usage`` on ``architecture`` (x86_64 or arm64)."""
    million = 1_000_000
    gb_seconds = usage.billed_ms / 1000 * usage.memory_mb / 1024
    streamed = max(0, usage.streamed_bytes - prices.LAMBDA_STREAM_FREE_BYTES)
    return Cost(
        compute=gb_seconds * prices.LAMBDA_GB_SECOND[architecture] * million,
        requests=prices.LAMBDA_REQUEST * million,
        gateway=prices.API_GATEWAY_REST_REQUEST * million,
        capture=capture_billed_bytes(usage.capture_bytes) / prices.GB
        * prices.FIREHOSE_INGESTED_GB * million,
        streamed=streamed / prices.GB * prices.LAMBDA_STREAMED_GB * million)


def memories(stage: Stage) -> tuple[int, int]:
    """The API function's MB and the streaming function's (its own, else the API's)."""
    api = stage.lambda_memory_size or 128  # Chalice's default
    stream = (stage.lambda_functions.get(STREAM_FUNCTION) or {}).get("lambda_memory_size")
    return api, int(stream or api)


@dataclasses.dataclass(frozen=True)
class Route:
    """One route's request, and the endpoint whose capture records it writes."""

    name: str
    path: str
    body: bytes
    content_type: str
    endpoint: str
    streamed: bool = False


def routes() -> list[Route]:
    photo = images.make("chelsea", 1920, 1080).data
    return [
        Route("image (JPEG 1920x1080, /predict)", "/predict", photo, "image/jpeg",
              "efficientnet-lite0"),
        Route("tensor (iris, /models/iris/predict)", "/models/iris/predict",
              json.dumps({"instances": [IRIS_ROW]}).encode(), "application/json", "iris"),
        Route(f"LLM ({LLM_TOKENS} tokens streamed, /v1/chat/completions)",
              "/v1/chat/completions", llm.openai_body(LLM_TOKENS), "application/json",
              llm.ENDPOINT, streamed=True),
    ]


@contextlib.contextmanager
def timed(api: ApiProcess, route: Route) -> Iterator[Callable[[], tuple[float, int]]]:
    """A call of ``route`` on one keep-alive connection, closed on leaving: seconds to the
    answer's last byte and the answer's size."""
    parts = urllib.parse.urlsplit(api.url)
    connection = http.client.HTTPConnection(parts.hostname or HOST, parts.port, timeout=120)

    def call() -> tuple[float, int]:
        started = time.perf_counter()
        connection.request("POST", route.path, body=route.body,
                           headers={"Content-Type": route.content_type,
                                    "Cache-Control": "no-cache"})
        response = connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"{route.path} answered {response.status}: {body[:300]!r}")
        return elapsed, len(body)

    try:
        yield call
    finally:
        connection.close()


def capture_sizes(directory: Path, expected: dict[str, int]) -> dict[str, int]:
    """Mean bytes of a capture record per endpoint, once each has ``expected`` records (the
    capture is written after the answer), or what is there after a few seconds."""
    deadline = time.monotonic() + CAPTURE_WAIT_S
    while True:
        found = {}
        for endpoint in expected:
            files = [path for path in (directory / endpoint).rglob("*") if path.is_file()]
            data = b"".join(path.read_bytes() for path in files)
            lines = [line for line in data.splitlines() if line.strip()]
            found[endpoint] = (len(lines), sum(len(line) + 1 for line in lines))
        if all(found[name][0] >= count for name, count in expected.items()) \
                or time.monotonic() > deadline:
            return {name: size // count if count else 0 for name, (count, size) in found.items()}
        time.sleep(0.2)


def measure(rounds: int) -> list[Usage]:
    """Each route's median billed duration, record size and answer size on the local stack."""
    api_mb, stream_mb = memories(load_stage(STAGE))
    chosen = routes()
    with tempfile.TemporaryDirectory() as scratch, open(os.devnull, "wb") as log, \
            start_emulator(port=0) as emulator:
        api = start_api(free_port(HOST), emulator.url, host=HOST, stage="local", log=log,
                        overrides={"CAPTURE_DESTINATION": scratch})
        try:
            llm.load_model(api)
            found = {}
            for route in chosen:
                with timed(api, route) as call:
                    call()  # warm: the route's pipeline and connection
                    found[route.name] = [call() for _ in range(rounds)]
            records = capture_sizes(Path(scratch), {route.endpoint: rounds + 1
                                                    for route in chosen})
        finally:
            api.stop()
    return [Usage(route.name, billed_ms(statistics.median(s for s, _ in found[route.name])),
                  stream_mb if route.streamed else api_mb, records[route.endpoint],
                  max(size for _, size in found[route.name]) if route.streamed else 0)
            for route in chosen]


def cost_table(usages: list[Usage]) -> str:
    """The table: per route and architecture, each charge per million requests, and the
    arm64/x86_64 ratio of the totals."""
    rows = []
    for usage in usages:
        x86, arm = per_million(usage, "x86_64"), per_million(usage, "arm64")
        for name, cost in (("x86_64", x86), ("arm64", arm)):
            rows.append([usage.route if name == "x86_64" else "", name,
                         f"{usage.billed_ms} ms x {usage.memory_mb} MB",
                         f"${cost.compute:,.2f}", f"${cost.requests + cost.gateway:,.2f}",
                         f"${cost.capture:,.2f}", f"${cost.total:,.2f}",
                         "" if name == "x86_64" else f"{arm.total / x86.total:.3f}"])
    header = ["route", "arch", "billed", "Lambda compute", "requests + REST", "capture",
              "total / 1M", "arm64/x86"]
    return table.render(header, rows, left=2)


def report(quick: bool = False) -> Report:
    out = Report()
    rounds = 3 if quick else 15
    out.say(table.section(f"Cost per million requests by architecture ({prices.REGION}, prices "
                          f"of {prices.TAKEN}, bench/prices.py)"))
    usages = measure(rounds)
    out.say(cost_table(usages))
    records = ", ".join(f"{usage.route.split(' ')[0]} {usage.capture_bytes:,} B"
                        for usage in usages)
    out.say(f"  billed: median of {rounds} requests to the answer's last byte through make run's "
            "stack, endpoint time included; arm64's taken as x86_64's (no Graviton here)")
    out.say(f"  requests: Lambda ${prices.LAMBDA_REQUEST * 1e6:.2f} + API Gateway REST "
            f"${prices.API_GATEWAY_REST_REQUEST * 1e6:.2f}; capture records ({records}) in "
            f"{prices.FIREHOSE_RECORD_STEP // 1024} KB steps at "
            f"${prices.FIREHOSE_INGESTED_GB}/GB, as if the stage captured (dev does)")
    for left_out in prices.NOT_PRICED:
        out.say(f"  not priced: {left_out}")
    return out
