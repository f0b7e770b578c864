"""One structured log line and one set of metrics per request (AWS Lambda Powertools).

The log line (Powertools Logger, JSON on stdout, which Lambda sends to CloudWatch Logs) holds
the request id, route, status, error code, image sizes in and out, endpoint, variant, the
latency of every stage and the capture outcome. It never holds image bytes, headers or
anything else a client sent verbatim. Metrics use CloudWatch Embedded Metric Format
(Powertools ``EphemeralMetrics``: one instance per request, so concurrent requests under
``chalice local`` never share a metric set); CloudWatch turns the EMF lines into metrics.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import sys
import threading
from typing import IO, Any, cast

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from chalicelib.core import environment
from chalicelib.core.config_names import POWERTOOLS_SERVICE_NAME, SERVICE

STAGE_METRICS = {"parse": "ParseLatency", "preprocess": "PreprocessLatency",
                 "endpoint": "EndpointLatency", "postprocess": "PostprocessLatency",
                 "model": "ModelLatency", "capture": "CaptureLatency", "cache": "CacheLatency"}
# the prediction cache's outcomes (the log line's "cache") and the metric each one counts
CACHE_METRICS = {"hit": "CacheHits", "miss": "CacheMisses"}
BUDGET_REJECTED = "rejected"  # the log line's ``budget`` of a request over its token budget


class Outcome(enum.StrEnum):
    """What happened to one inference's capture (logged and counted per request)."""

    OFF = "off"
    SAMPLED_OUT = "sampled-out"
    WRITTEN = "written"
    QUEUED = "queued"
    """Handed to the capture writer, stored after the response (its metrics count the rest)."""
    FAILED = "failed"
    DROPPED = "dropped"
    """Refused by a full capture writer (counted in ``CaptureDropped``)."""


class _CurrentStdout:
    """stdout as it is at each write (not as it was at import), so captured output works.

    One lock for every line sagegate writes: ``chalice local`` serves requests on threads,
    and a log line must never be torn by a metrics line written at the same moment. Each
    write flushes, so it has no ``flush`` of its own for the log handler to call again.
    """

    lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            written = sys.stdout.write(text)
            sys.stdout.flush()
            return written


_STDOUT = _CurrentStdout()
# Powertools reads POWERTOOLS_SERVICE_NAME (and the log level) itself; "sagegate" otherwise.
logger = Logger(service=environment.variables().get(POWERTOOLS_SERVICE_NAME) or SERVICE,
                stream=cast(IO[str], _STDOUT))


def _metrics() -> EphemeralMetrics:
    """A new metric set, named as the environment says now (not as it said at import):
    Powertools reads its own ``POWERTOOLS_METRICS_NAMESPACE`` and ``POWERTOOLS_SERVICE_NAME``
    as each set is made, as boto3 reads its own variables; "sagegate" when they are unset."""
    metrics = EphemeralMetrics()
    metrics.namespace = metrics.namespace or SERVICE
    metrics.service = metrics.service or SERVICE
    return metrics


@dataclasses.dataclass
class RequestLog:
    """What one request did; filled in as it is served, emitted once at the end."""

    request_id: str
    method: str
    route: str
    correlation_id: str | None = None
    """The client's own id (``X-Correlation-Id`` / ``X-Request-Id``), when it sent one."""
    model: str | None = None
    """The registered model served (model routes and /predict)."""
    arm: str | None = None
    """The experiment arm that served it (an ``experiment`` model; its metrics' ``arm``)."""
    job_id: str | None = None
    body_bytes: int = 0
    status: int = 0
    error_code: str | None = None
    image_in: dict[str, Any] | None = None
    image_out: dict[str, Any] | None = None
    endpoint: str | None = None
    variant: str | None = None
    attempts: int | None = None
    capture: str | None = None
    shadows: dict[str, int] | None = None
    """An experiment's shadow copies of the request: ``queued``, ``dropped``, ``skipped``."""
    cache: str | None = None
    """The prediction cache: ``hit``, ``miss`` or ``bypass`` (model routes and /predict)."""
    cache_tier: str | None = None
    cache_errors: int | None = None
    """Failures of the cache's table tier (each one fell through to the endpoint)."""
    cache_skipped_too_large: int | None = None
    """Answers not stored in the table: over DynamoDB's 400 KB item limit."""
    api_key_id: str | None = None
    """The caller's API key's id (API Gateway's ``apiKeyId``; never the key), where the stage
    uses keys (the OpenAI routes): their token counts are also metrics by model and key."""
    budget: str | None = None
    """The caller's token budget (the OpenAI routes, where the stage has budgets): ``reserved``
    or ``rejected`` (a 429)."""
    budget_errors: int | None = None
    """Failures of the budgets' table (each window that failed was not applied: fail open)."""
    budget_overrun: int | None = None
    """Tokens a request spent above its reservation (settled all the same; the metric
    ``BudgetOverrun`` counts such requests): a window may then pass its limit by that much."""
    prompt_tokens: int | None = None
    """A language model's (the OpenAI routes): its usage, and where each count came from."""
    completion_tokens: int | None = None
    usage_source: dict[str, str] | None = None
    finish_reason: str | None = None
    streamed: bool | None = None
    time_to_first_token_ms: float | None = None
    tokens_per_second: float | None = None
    stages_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    total_ms: float = 0.0

    def finish(self, status: int, body: Any, elapsed_ms: float) -> None:
        """Close the line with the answer (an error's ``Code``, from a JSON error body) and
        write it, with its metrics."""
        self.status = status
        if status >= 400 and isinstance(body, dict):
            self.error_code = str(body.get("Code", "")) or self.error_code
        self.total_ms = elapsed_ms
        values = dataclasses.asdict(self)
        values["stages_ms"] = {name: round(ms, 2) for name, ms in self.stages_ms.items()}
        values["total_ms"] = round(elapsed_ms, 2)
        write = logger.error if self.status >= 500 else logger.info
        write("request", extra={key: value for key, value in values.items()
                                if value not in (None, {}, "")})  # (empty keys left out)
        try:
            self._flush_metrics()
            if self.api_key_id and self.model:
                self._flush_key_usage(self.api_key_id, self.model)
        except Exception as error:  # metrics must never fail a request
            logger.warning("metrics not flushed: %s", type(error).__name__)

    def _flush_metrics(self) -> None:
        metrics = _metrics()
        metrics.add_dimension(name="route", value=self.route)
        for name, value in (("model", self.model), ("arm", self.arm)):
            if value:
                metrics.add_dimension(name=name, value=value)
        metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
        metrics.add_metric(name="Latency", unit=MetricUnit.Milliseconds, value=self.total_ms)
        for stage, ms in self.stages_ms.items():
            if stage in STAGE_METRICS:
                metrics.add_metric(name=STAGE_METRICS[stage], unit=MetricUnit.Milliseconds,
                                   value=ms)
        for metric_name, unit, amount in (  # (None: not this request's)
                ("BytesIn", MetricUnit.Bytes, self.body_bytes),
                ("BytesToEndpoint", MetricUnit.Bytes, (self.image_out or {}).get("bytes")),
                ("PromptTokens", MetricUnit.Count, self.prompt_tokens),
                ("CompletionTokens", MetricUnit.Count, self.completion_tokens),
                ("TimeToFirstToken", MetricUnit.Milliseconds, self.time_to_first_token_ms),
                ("TokensPerSecond", MetricUnit.CountPerSecond, self.tokens_per_second)):
            if amount is not None:
                metrics.add_metric(name=metric_name, unit=unit, value=amount)
        counts: dict[str | None, int | None] = {
            _CAPTURE_METRICS.get(self.capture or ""): 1,
            **{f"Shadow{outcome.capitalize()}": count
               for outcome, count in (self.shadows or {}).items()},
            CACHE_METRICS.get(self.cache or ""): 1,
            "CacheErrors": self.cache_errors,
            "CacheSkippedTooLarge": self.cache_skipped_too_large,
            "BudgetRejected": int(self.budget == BUDGET_REJECTED),
            "BudgetErrors": self.budget_errors,
            "BudgetOverrun": int(bool(self.budget_overrun))}
        for metric, count in counts.items():  # (None: no metric for that outcome)
            if metric and count:
                metrics.add_metric(name=metric, unit=MetricUnit.Count, value=count)
        _publish(metrics)
        if self.error_code:
            self._flush_error(self.error_code)

    def _flush_key_usage(self, key_id: str, model: str) -> None:
        """The request and its tokens by model and API key (a dimension set of its own, so
        the route's metrics keep theirs)."""
        usage = _metrics()
        usage.add_dimension(name="model", value=model)
        usage.add_dimension(name="api_key", value=key_id)
        usage.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
        for name, count in (("PromptTokens", self.prompt_tokens),
                            ("CompletionTokens", self.completion_tokens),
                            ("BudgetRejected", int(self.budget == BUDGET_REJECTED) or None),
                            ("BudgetOverrun", int(bool(self.budget_overrun)) or None)):
            if count is not None:
                usage.add_metric(name=name, unit=MetricUnit.Count, value=count)
        _publish(usage)

    def _flush_error(self, code: str) -> None:
        errors = _metrics()
        errors.add_dimension(name="route", value=self.route)
        errors.add_dimension(name="code", value=code)
        if self.arm:
            errors.add_dimension(name="arm", value=self.arm)
        errors.add_metric(name="Errors", unit=MetricUnit.Count, value=1)
        _publish(errors)


_CAPTURE_METRICS: dict[str, str] = {Outcome.WRITTEN: "CaptureRecords",
                                    Outcome.FAILED: "CaptureFailures",
                                    Outcome.QUEUED: "CaptureQueued"}
# (a queued record's end is counted by the writer: CaptureRecords or CaptureDropped)


def emit_count(name: str, value: int, **dimensions: str) -> None:
    """One count metric outside a request (the capture writer's), as an EMF line."""
    metrics = _metrics()
    for key, dimension in dimensions.items():
        metrics.add_dimension(name=key, value=dimension)
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    _publish(metrics)


def _publish(metrics: EphemeralMetrics) -> None:
    """Powertools' ``flush_metrics()``, but one whole line per write (it uses ``print``)."""
    if is_metrics_disabled():
        return
    _STDOUT.write(json.dumps(metrics.serialize_metric_set(), separators=(",", ":")) + "\n")
    metrics.clear_metrics()
