"""Part 1: front-end CPU per request, sagegate against the 2018 reference, endpoint stubbed.

Both sides get the same JSON body (``{"data": "<base64>", "topk": 3}``) and the same endpoint
answer: a real ``botocore.response.StreamingBody`` holding 1000 probabilities written the way
an endpoint writes them (``json.dumps`` of floats). What is timed is everything a front-end
does with its CPU: body parsing, base64, decode, resize, encode, reading and parsing the
endpoint's answer, top-k and the answer's dict.
"""
from __future__ import annotations

import base64
import dataclasses
import io
import json
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
from botocore.response import StreamingBody

from bench import reference, table
from bench.images import BenchImage
from bench.report import Report
from bench.timing import Budget, Budgets, Samples, compare, ratio
from chalicelib.calls import CallOptions
from chalicelib.core.config import Settings
from chalicelib.inference import predictions
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.pipeline import Predictor
from chalicelib.inference.timing import StageTimer
from chalicelib.reading.options import HttpRequest, read_predict

ENDPOINT_NAME = "efficientnet-lite0"
CLASSES = 1000
TOP_K = 3
# Targets: how many times less CPU sagegate should use, keyed by input name.
TARGETS = {"JPEG 640x480": 2.5, "JPEG 1920x1080": 3.5, "JPEG 4032x3024": 4.0}
PARSE_TARGET = 20.0
STAGES = ("request", "preprocess", "endpoint", "postprocess")


def endpoint_body(classes: int = CLASSES, seed: int = 7) -> bytes:
    """A softmax over ``classes`` written as the built-in classifier writes it.

    One class stands well clear of the rest, as for a photo the model recognises.
    """
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, classes)
    logits[281] += 9.0  # tabby cat
    probabilities = np.exp(logits - np.max(logits))
    probabilities /= probabilities.sum()
    return json.dumps([float(p) for p in probabilities]).encode()


def request_body(image: bytes, k: int = TOP_K) -> bytes:
    """The 2018 request shape, which sagegate also accepts."""
    return json.dumps({"data": base64.b64encode(image).decode("ascii"), "topk": k}).encode()


class FakeRuntime:
    """An in-memory ``sagemaker-runtime`` client: every call answers the same body."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self.last_payload_bytes = 0

    def invoke_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        """Answer like ``InvokeEndpoint``, with a fresh stream each time."""
        self.last_payload_bytes = len(kwargs["Body"])
        return {"Body": StreamingBody(io.BytesIO(self._body), len(self._body)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


class Sagegate:
    """sagegate's request path as ``app.predict`` runs it, minus Chalice's routing.

    Args:
        runtime: the (fake) ``sagemaker-runtime`` client.
        settings: the settings; the defaults for ``efficientnet-lite0`` when None.
    """

    def __init__(self, runtime: FakeRuntime, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env({"ENDPOINT_NAME": ENDPOINT_NAME})
        client = EndpointClient(cast(Any, runtime))
        self._predictor = Predictor(self.settings, client,
                                    predictions.load_labels(self.settings.labels))

    def handle(self, body: bytes, timer: StageTimer | None = None) -> dict[str, Any]:
        """One request: body in, the JSON answer's dict out."""
        timer = timer or StageTimer()
        with timer.stage("request"):
            asked = read_predict(HttpRequest(body, "application/json"),
                                 max_body_bytes=self.settings.max_body_bytes,
                                 default_k=self.settings.default_k)
        result = self._predictor.predict(asked.image, asked.options, "bench", timer)
        return result.to_dict("bench")

    def bytes_sent(self, image: bytes) -> int:
        """How many bytes sagegate sends the endpoint for ``image``."""
        options = CallOptions(k=self.settings.default_k)
        return self._predictor.predict(image, options, "bench").bytes_sent


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the part 1 table."""

    name: str
    size: str
    reference: Samples
    sagegate: Samples
    target: float | None
    sent: str = "-"

    @property
    def cpu_ratio(self) -> float:
        """How many times less CPU sagegate used."""
        return ratio(self.reference.cpu, self.sagegate.cpu)

    @property
    def met(self) -> bool | None:
        """Whether the target is met (None without a target)."""
        return None if self.target is None else self.cpu_ratio >= self.target

    def cells(self) -> list[str]:
        """The formatted table cells."""
        target = "-" if self.target is None else f">={self.target:g}x"
        met = "-" if self.met is None else table.verdict(self.met)
        return [self.name, self.size, str(len(self.sagegate.cpu_ms)),
                table.ms(self.reference.cpu), table.ms(self.sagegate.cpu),
                table.times(self.cpu_ratio),
                table.times(ratio(self.reference.wall, self.sagegate.wall)), target, met,
                self.sent]


HEADERS = ["input", "size", "reps", "2018 ref CPU ms", "sagegate CPU ms", "ratio",
           "wall ratio", "target", "met", "to endpoint: ref / sagegate"]


def _reference_timer(durations: dict[str, list[float]]) -> Callable[[str], Any]:
    @contextmanager
    def stage(name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        durations.setdefault(name, []).append((time.perf_counter() - start) * 1000.0)
    return stage


def reference_stages(body: bytes, client: FakeRuntime, reps: int) -> dict[str, float]:
    """Median wall milliseconds of each stage of the 2018 pipeline."""
    durations: dict[str, list[float]] = {}
    stage = _reference_timer(durations)
    for _ in range(reps):
        with stage("request"):
            image, k = reference.read_request(body)
        with stage("preprocess"):
            payload = reference.preprocess(image)
        with stage("endpoint"):
            text = reference.invoke(client, ENDPOINT_NAME, payload)
        with stage("postprocess"):
            probabilities = reference.parse_probabilities(text)
            reference.render(probabilities, reference.top_k(probabilities, k))
    return {name: statistics.median(values) for name, values in durations.items()}


def sagegate_stages(body: bytes, sagegate: Sagegate, reps: int) -> dict[str, float]:
    """Median wall milliseconds of each of sagegate's own ``Server-Timing`` stages."""
    durations: dict[str, list[float]] = {}
    for _ in range(reps):
        timer = StageTimer()
        sagegate.handle(body, timer)
        for name, value in timer.durations.items():
            durations.setdefault(name, []).append(value)
    return {name: statistics.median(values) for name, values in durations.items()}


def measure_image(image: BenchImage, sagegate: Sagegate, runtime: FakeRuntime,
                  budget: Budget) -> Row:
    """Time one input through both front-ends."""
    body = request_body(image.data)
    ref, cand = compare(lambda: reference.handle(body, runtime, ENDPOINT_NAME),
                        lambda: sagegate.handle(body), budget)
    sent = (f"{table.human_bytes(len(reference.preprocess(image.data)))} / "
            f"{table.human_bytes(sagegate.bytes_sent(image.data))}")
    return Row(image.name, image.size_label, ref, cand, TARGETS.get(image.name), sent)


def measure_parse(body: bytes, budget: Budget) -> tuple[Row, list[int], list[int]]:
    """Time parse + top-k alone; also return both sides' indices for the same body."""
    def ref() -> np.ndarray:
        return reference.top_k(reference.parse_probabilities(body.decode()), TOP_K)

    def cand() -> np.ndarray:
        return predictions.top_k(predictions.parse_probabilities(body, CLASSES), TOP_K)

    ref_samples, cand_samples = compare(ref, cand, budget)
    row = Row(f"parse + top-{TOP_K} of {CLASSES} classes", table.human_bytes(len(body)),
              ref_samples, cand_samples, PARSE_TARGET)
    return row, ref().tolist(), cand().tolist()


def stage_table(bodies: list[tuple[str, bytes]], sagegate: Sagegate, runtime: FakeRuntime,
                reps: int) -> str:
    """Median wall milliseconds per stage, both sides, one pair of rows per input."""
    rows = []
    for name, body in bodies:
        for side, stages in (("2018 ref", reference_stages(body, runtime, reps)),
                             ("sagegate", sagegate_stages(body, sagegate, reps))):
            values = [stages.get(stage, 0.0) for stage in STAGES]
            rows.append([name if side == "2018 ref" else "", side,
                         *(table.ms(v) for v in values), table.ms(sum(values))])
    return table.render(["input", "side", *STAGES, "total"], rows, left=2)


def report(inputs: list[BenchImage], budgets: Budgets) -> Report:
    """Run part 1 and print its tables."""
    out = Report()
    out.say(table.section("Part 1 - front-end CPU per request (endpoint stubbed)"),
            f"  Same JSON body ({{\"data\": <base64>, \"topk\": {TOP_K}}}) and same endpoint "
            f"answer ({CLASSES} floats) on both sides;",
            "  CPU = time.process_time (all threads), median per request; ratio = 2018 ref / "
            "sagegate, higher is better.", "")
    runtime = FakeRuntime(endpoint_body())
    sagegate = Sagegate(runtime)
    rows = [measure_image(image, sagegate, runtime, budgets.image) for image in inputs]
    parse_row, ref_top, our_top = measure_parse(endpoint_body(), budgets.parse)
    rows.append(parse_row)
    out.say(table.render(HEADERS, [row.cells() for row in rows], left=2))
    out.missed += [f"part 1 {row.name}: {table.times(row.cpu_ratio)} < {row.target:g}x"
                   for row in rows if row.met is False and row.target is not None]
    same = ref_top == our_top
    out.say("", f"  top-{TOP_K} indices for the same probabilities: 2018 ref {ref_top}, "
            f"sagegate {our_top} -> {'identical' if same else 'DIFFERENT'}")
    if not same:
        out.failures.append(f"part 1 top-{TOP_K} differs: {ref_top} vs {our_top}")
    bodies = [(image.name, request_body(image.data)) for image in inputs]
    out.say("", "  Where the time goes (wall ms, median; sagegate's own Server-Timing stages):",
            stage_table(bodies, sagegate, runtime, budgets.stage_reps))
    return out
