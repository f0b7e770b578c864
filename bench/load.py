"""Part 3: load on the real local stack, 1 to 32 keep-alive clients, valid and invalid requests.

``make run``'s processes (the emulator, ``chalice local --stage local`` through
``sagegate.local.processes.start_api``) take a mix of requests from N clients, each with its own
keep-alive connection. Every answer is checked against its own request: its request id, its
status and error code, its ``k`` and its top-k classes (those a single client got for the same
body before the run). Reported per level: throughput, p50/p95/p99, resets, wrong answers, 5xx,
and chalice local's resident memory; beside it, the emulator alone (the same images straight
to it with boto3, same clients) in the same run: sagegate's share of what the endpoint can do.

``run_level`` is also the short form the integration tests run (``tests/integration/
test_load.py``); ``bench/load_report.py`` runs the levels, prints the table and plots.
"""
from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import cv2
import numpy as np

RESETS = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)
"""What a client counts as a dropped connection (reset, refused, closed mid-answer)."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One kind of request and the answer it must get."""

    name: str
    body: bytes = dataclasses.field(repr=False)
    content_type: str
    status: int = 200
    code: str = ""
    """The error ``Code`` expected (``""`` for a prediction)."""


@dataclasses.dataclass
class LevelResult:
    """What one level of concurrency gave."""

    clients: int
    requests: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    resets: int = 0
    server_errors: int = 0
    wrong: list[str] = dataclasses.field(default_factory=list)
    rss_mb: float = 0.0

    @property
    def throughput(self) -> float:
        """Answers per second."""
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        """Latency percentile ``q`` (0..100) in ms."""
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else 0.0


def _jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return bytes(buf.tobytes())


def _png(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return bytes(buf.tobytes())


def valid_cases() -> list[Case]:
    """Real photos (scikit-image's): small JPEGs (forwarded), a PNG and a 1080p JPEG (both
    decoded and resized by sagegate)."""
    from skimage import data

    coffee_1080p = cv2.resize(data.coffee(), (1920, 1080), interpolation=cv2.INTER_CUBIC)
    return [Case("chelsea.jpg", _jpeg(data.chelsea()), "image/jpeg"),
            Case("coffee.jpg", _jpeg(data.coffee()), "image/jpeg"),
            Case("astronaut.png", _png(data.astronaut()), "image/png"),
            Case("coffee-1080p.jpg", _jpeg(coffee_1080p), "image/jpeg")]


def invalid_cases() -> list[Case]:
    """Requests sagegate must refuse before calling the endpoint."""
    return [Case("garbage", b"\xff\xd8\xff\xe0 not really a jpeg", "image/jpeg", 400,
                 "InvalidImage"),
            Case("bad-json", b'{"image": ', "application/json", 400, "InvalidJSON"),
            Case("text", b"hello", "text/plain", 415, "UnsupportedMediaType")]


def mix(valid: Sequence[Case], invalid: Sequence[Case]) -> list[Case]:
    """Three valid requests for each invalid one, interleaved."""
    cases: list[Case] = []
    for index, case in enumerate(itertools.islice(itertools.cycle(valid), 3 * len(invalid))):
        cases.append(case)
        if index % 3 == 2:
            cases.append(invalid[index // 3])
    return cases


class Client:
    """One keep-alive connection to the API; reconnects after a dropped connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path: str, case: Case, request_id: str) -> tuple[int, dict[str, str], bytes]:
        """Sends one request and reads the whole answer."""
        self.conn.request("POST", path, body=case.body,
                          headers={"Content-Type": case.content_type,
                                   "X-Request-Id": request_id})
        response = self.conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()

    def reconnect(self) -> None:
        """Drops the connection; the next request opens a new one."""
        self.conn.close()

    def close(self) -> None:
        """Closes the connection."""
        self.conn.close()


def k_for(index: int) -> int:
    """The ``k`` asked for by request ``index``: 1 to 5 in turn."""
    return 1 + index % 5


def check(case: Case, k: int, request_id: str, answer: tuple[int, dict[str, str], bytes],
          expected: dict[str, list[int]]) -> str:
    """Why an answer is wrong for its own request, or ``""`` when it is right."""
    status, headers, body = answer
    if headers.get("X-Correlation-Id") != request_id:  # the client's id, echoed
        return f"{request_id}: answered for {headers.get('X-Correlation-Id')}"
    try:
        document = json.loads(body)
    except ValueError:
        return f"{request_id}: not JSON"
    if status != case.status or (case.code and document.get("Code") != case.code):
        return f"{request_id} {case.name}: {status} {document.get('Code', '')}"
    if case.code:
        return ""
    indices = [p["index"] for p in document["predictions"]]
    if indices != expected[case.name][:k]:
        return f"{request_id} {case.name}: top-{k} {indices} != {expected[case.name][:k]}"
    return ""


def calibrate(url: str, cases: Sequence[Case]) -> dict[str, list[int]]:
    """Each valid body's top-5 from a single client, before any load."""
    client = Client(url)
    try:
        expected = {}
        for case in cases:
            status, _, body = client.post("/predict?k=5", case, f"calibrate-{case.name}")
            if status != 200:
                raise RuntimeError(f"calibration of {case.name}: HTTP {status}: {body[:200]!r}")
            expected[case.name] = [p["index"] for p in json.loads(body)["predictions"]]
        return expected
    finally:
        client.close()


def run_level(url: str, cases: Sequence[Case], expected: dict[str, list[int]], clients: int,
              requests: int, rss: Callable[[], float] | None = None) -> LevelResult:
    """``requests`` requests from ``clients`` keep-alive clients, taken in turn from ``cases``.

    Args:
        url: the API's base URL.
        cases: the request mix (cycled).
        expected: the calibrated top-5 per valid case.
        clients: concurrent clients, one connection each.
        requests: total requests.
        rss: reads the server's resident memory in MB (after the level), if given.

    Returns:
        The level's figures; ``wrong`` lists each wrong answer.
    """
    result = LevelResult(clients)
    lock = threading.Lock()
    counter = itertools.count()

    def worker(worker_id: int) -> None:
        client = Client(url)
        try:
            while (index := next(counter)) < requests:
                _one(client, cases[index % len(cases)], index, f"load-{clients}-{index}")
        finally:
            client.close()

    def _one(client: Client, case: Case, index: int, request_id: str) -> None:
        k = k_for(index)
        started = time.perf_counter()
        try:
            answer = client.post(f"/predict?k={k}", case, request_id)
        except RESETS as error:
            client.reconnect()
            with lock:
                result.resets += 1
                result.wrong.append(f"{request_id}: {type(error).__name__}")
            return
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        reason = check(case, k, request_id, answer, expected)
        with lock:
            result.requests += 1
            result.latencies_ms.append(elapsed_ms)
            result.server_errors += answer[0] >= 500
            if reason:
                result.wrong.append(reason)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(worker, range(clients)))
    result.seconds = time.perf_counter() - started
    if rss is not None:
        result.rss_mb = rss()
    return result


def emulator_level(emulator_url: str, cases: Sequence[Case], clients: int,
                   requests: int) -> float:
    """The emulator alone: the same bodies straight to it with boto3; answers per second."""
    import boto3
    from botocore.config import Config

    client = boto3.client("sagemaker-runtime", endpoint_url=emulator_url,
                          region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing",
                          config=Config(retries={"total_max_attempts": 1},
                                        max_pool_connections=clients))
    counter = itertools.count()

    def worker(_: int) -> None:
        while (index := next(counter)) < requests:
            case = cases[index % len(cases)]
            answer = client.invoke_endpoint(EndpointName="efficientnet-lite0", Body=case.body,
                                            ContentType=case.content_type)
            answer["Body"].read()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(worker, range(clients)))
    return requests / (time.perf_counter() - started)
