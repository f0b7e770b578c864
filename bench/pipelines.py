"""Pipelines part: the front-end's CPU per request for each non-image model, endpoint stubbed.

For every model of the real registry whose pipeline is ``tensor``, ``cortex`` or
``sagemaker-tfs``, two callers are timed side by side on the same in-memory
``sagemaker-runtime`` client (a real ``botocore.response.StreamingBody`` holding a fixed TF
Serving answer of the model's shape), each through a real :class:`EndpointClient`:

* sagegate: the model's pipeline (its kind's) serving the client's own body, the whole path (reading
  and coercing the body or running the user's handler file, the TF Serving body, the endpoint
  call, reading the answer, labels and top-k, the answer's JSON);
* the reference: ``EndpointClient.invoke`` of the TF Serving body built once beforehand (what a
  client that already speaks TF Serving sends) and ``json.loads`` of the answer.

The difference is what sagegate adds per request; the reference is a floor, not a competitor.
"""
from __future__ import annotations

import dataclasses
import gc
import io
import json
import statistics
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from botocore.response import StreamingBody

from bench import table
from bench.report import Report
from bench.timing import Budget, Budgets, Samples, compare
from chalicelib.calls import Call, CallOptions, ModelRequest, Served
from chalicelib.core.config import Settings
from chalicelib.inference.endpoint import EndpointClient, Invocation
from chalicelib.inference.serving import ModelServer, ServingPipeline
from chalicelib.inference.timing import StageTimer
from chalicelib.kinds import kind_of
from chalicelib.kinds.base import Parts
from chalicelib.registry.kinds import Pipeline
from chalicelib.registry.loading import Registry, load_registry
from chalicelib.registry.specs import ModelSpec

ENDPOINT_NAME = "efficientnet-lite0"
REQUEST_ID = "bench-id"
PIPELINES = (Pipeline.TENSOR, Pipeline.CORTEX, Pipeline.SAGEMAKER_TFS)
IRIS_ROW = [5.1, 3.5, 1.4, 0.2]
IRIS_BATCH = 64
SENTIMENT_TEXT = "I loved this film, the acting was superb"
SENTIMENT_SCORE = 0.93
INCLUDES = {
    Pipeline.TENSOR: "coerce rows, TFS body, call, arrays, top-k labels, JSON",
    Pipeline.CORTEX: "pre_inference, coerce, TFS body, call, post_inference, JSON",
    Pipeline.SAGEMAKER_TFS: "session, Context, input_handler (tokenizer), call, output_handler",
}
REFERENCE_INCLUDES = "Invocation, EndpointClient.invoke, json.loads"
HEADERS = ["model (pipeline)", "request", "what sagegate's side includes", "reps", "sagegate µs",
           "p90", "ref µs", "p90", "overhead µs", "sagegate/ref", "to endpoint"]


def iris_rows(count: int, seed: int = 3) -> list[list[float]]:
    """``count`` plausible iris measurements (centimetres, one decimal), seeded."""
    rng = np.random.default_rng(seed)
    means, spreads = np.array([5.8, 3.1, 3.8, 1.2]), np.array([0.8, 0.4, 1.8, 0.8])
    rows = np.clip(rng.normal(means, spreads, (count, 4)), 0.1, None).round(1)
    return [[float(value) for value in row] for row in rows]


def tfs_body(instances: list[Any]) -> bytes:
    """TF Serving's row-format predict body, written by hand as a client would."""
    return json.dumps({"signature_name": "serving_default", "instances": instances},
                      separators=(",", ":")).encode()


def tfs_answer(rows: int, width: int, seed: int = 11) -> bytes:
    """A TF Serving answer: one row of ``width`` scores per instance (a softmax when
    ``width`` > 1, the sentiment probability when 1), written as TF Serving writes float32."""
    if width == 1:
        return json.dumps({"predictions": [[SENTIMENT_SCORE]] * rows}).encode()
    rng = np.random.default_rng(seed)
    scores = rng.dirichlet(np.full(width, 0.3), rows).astype(np.float32)
    return json.dumps({"predictions": [[float(f"{p:.7g}") for p in row]
                                       for row in scores]}).encode()


@dataclasses.dataclass(frozen=True)
class Case:
    """One request to one model, and the endpoint's fixed answer to it.

    Attributes:
        request: a short description of the request (``1 row``, ``64 rows``...).
        body: the client's body to sagegate (JSON).
        rows: how many instances it holds.
        reference_body: the TF Serving body the reference sends; None: sagegate's own, taken
            from a first call (for a handler the reference would have to re-implement, such as
            a tokenizer).
    """

    request: str
    body: bytes
    rows: int
    reference_body: bytes | None


def cases(model: ModelSpec) -> list[Case]:
    """The requests timed for ``model``: realistic ones for the bundled models, the model's
    ``example`` for any other."""
    def case(request: str, body: Any, rows: int, reference: bytes | None) -> Case:
        return Case(request, json.dumps(body).encode(), rows, reference)

    if model.name == "iris":
        batch = iris_rows(IRIS_BATCH)
        return [case("1 row", {"instances": [IRIS_ROW]}, 1, tfs_body([IRIS_ROW])),
                case(f"{IRIS_BATCH} rows", {"instances": batch}, IRIS_BATCH, tfs_body(batch))]
    if model.name == "iris-cortex":
        names = ("sepal_length", "sepal_width", "petal_length", "petal_width")
        return [case("1 sample", dict(zip(names, IRIS_ROW, strict=True)), 1,
                     tfs_body([IRIS_ROW]))]
    if model.name == "sentiment":
        return [case("1 text", {"text": SENTIMENT_TEXT}, 1, None)]
    return [] if model.example is None else [case("its example", model.example, 1, None)]


class AnsweringRuntime:
    """An in-memory ``sagemaker-runtime`` client answering every call with the same body."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        """Answer like ``InvokeEndpoint``, with a fresh stream each time."""
        return {"Body": StreamingBody(io.BytesIO(self.answer), len(self.answer)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


def _no_sleep(_: float) -> None:
    """The endpoint never fails here, so nothing is retried; a retry would not wait."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table."""

    model: ModelSpec
    case: Case
    sagegate: Samples
    reference: Samples
    sent: str

    def cells(self) -> list[str]:
        """The formatted table cells."""
        ours, ref = self.sagegate.cpu, self.reference.cpu
        return [f"{self.model.name} ({self.model.pipeline})", self.case.request,
                INCLUDES[Pipeline(self.model.pipeline)], str(len(self.sagegate.cpu_ms)), us(ours),
                us(p90(self.sagegate.cpu_ms)), us(ref), us(p90(self.reference.cpu_ms)),
                us(ours - ref), table.times(ours / ref if ref > 0 else float("inf")), self.sent]


def us(milliseconds: float) -> str:
    """Milliseconds as microseconds, precision to suit their size."""
    value = milliseconds * 1000.0
    return f"{value:.1f}" if abs(value) < 10 else f"{value:.0f}"


def p90(values: list[float]) -> float:
    """The 90th percentile."""
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def _check(model: ModelSpec, case: Case, served: Served, reference_body: bytes,
           answer: bytes) -> list[str]:
    """Why sagegate and the reference do not ask and read the same thing (nothing if they do)."""
    problems = []
    if json.loads(served.sent) != json.loads(reference_body):
        problems.append(f"sagegate sent {served.sent[:80]!r}, the reference sends "
                        f"{reference_body[:80]!r}")
    if served.received != answer:
        problems.append("sagegate did not read the endpoint's answer")
    document = json.loads(served.answer.body)
    if model.pipeline == Pipeline.TENSOR and len(document.get("predictions", [])) != case.rows:
        problems.append(f"{len(document.get('predictions', []))} labelled rows for "
                        f"{case.rows} instances")
    return [f"pipelines {model.name} {case.request}: {problem}" for problem in problems]


def measure(model: ModelSpec, case: Case, budget: Budget) -> tuple[Row, list[str]]:
    """Time one request through both callers; also return any disagreement between them."""
    answer = tfs_answer(case.rows, model.signature.outputs[0].shape[-1]
                        if model.signature.outputs else 1)
    endpoint = EndpointClient(cast(Any, AnsweringRuntime(answer)), sleep=_no_sleep)
    server = ModelServer(endpoint)
    kind = kind_of(model)
    kind.load(model, server)
    pipeline: ServingPipeline = kind.pipeline(model, Parts(endpoint, server))
    request = ModelRequest(Call(case.body, "application/json"), CallOptions())

    def sagegate() -> Served:
        return pipeline.serve(request, REQUEST_ID, StageTimer())

    first = sagegate()
    reference_body = case.reference_body or first.sent

    def reference() -> Any:
        result = endpoint.invoke(Invocation(
            endpoint_name=model.endpoint, body=reference_body, content_type=model.content_type,
            accept=model.accept))
        return json.loads(result.body)

    gc.collect()
    ref, ours = compare(reference, sagegate, budget)
    sent = f"{table.human_bytes(len(reference_body))} / {table.human_bytes(len(first.sent))}"
    return (Row(model, case, ours, ref, sent),
            _check(model, case, first, reference_body, answer))


def load_models() -> Registry:
    """The real registry, as the default deployment builds it."""
    return load_registry(Settings(endpoint_name=ENDPOINT_NAME), {"ENDPOINT_NAME": ENDPOINT_NAME})


def report(budgets: Budgets, models: Callable[[], Registry] = load_models) -> Report:
    """Run the part and print its table."""
    out = Report()
    out.say(table.section("Pipelines - front-end CPU per request, non-image models "
                          "(endpoint stubbed)"),
            "  sagegate = ModelServer.serve on the client's JSON body; reference = "
            "EndpointClient.invoke", "  of the TF Serving body built beforehand, plus "
            "json.loads of the answer. Same in-memory", "  endpoint and answer on both sides. "
            "µs = time.process_time per request (median, p90);", "  overhead = sagegate - "
            "reference; sagegate/ref = times the bare call's CPU (lower is better);",
            "  to endpoint = bytes sent, reference / sagegate.", "")
    registry = models()
    rows: list[Row] = []
    skipped = []
    for name in registry.names():
        model = registry.get(name)
        if model.pipeline not in PIPELINES:
            continue
        if not cases(model):
            skipped.append(name)
        for case in cases(model):
            row, problems = measure(model, case, budgets.parse)
            rows.append(row)
            out.failures.extend(problems)
    out.say(table.render(HEADERS, [row.cells() for row in rows], left=3),
            "", f"  reference, every row: {REFERENCE_INCLUDES}.")
    if skipped:
        out.say(f"  not timed (no example body in model.json): {', '.join(skipped)}")
    for failure in out.failures:
        out.say(f"  DIFFERENT: {failure}")
    return out
