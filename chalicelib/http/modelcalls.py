"""The model routes' one serve path (``POST /predict``, ``POST /models/{name}/predict``), read
top to bottom in :func:`serve`: route the request (which arm, which shadows: one decision), read
it with its model's kind, serve it through its target's pipeline (through the prediction cache
when it may), capture it, hand the shadows their copies, answer; whatever the model's kind.

What a model's requests are served with is settled once, when it is first served
(:class:`ModelRoute`, built by the composition root: this room does not import it); the
request, its log line and its id come from the thread's
:class:`~chalicelib.http.exchange.Exchanges`, read once.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping

from chalicelib.cache.prediction import CacheUse, PredictionCache, request_cache_control
from chalicelib.calls import ModelRequest, Served
from chalicelib.capture import Capturer
from chalicelib.core import media
from chalicelib.core.errors import EndpointTimeoutError, SagegateError
from chalicelib.core.observability import RequestLog
from chalicelib.experiments import assign
from chalicelib.experiments.shadows import Shadows
from chalicelib.http.exchange import (
    ARM_HEADER,
    CACHE_HEADER,
    EXPOSE_HEADERS,
    Exchange,
    Exchanges,
    HttpAnswer,
)
from chalicelib.inference.serving import ServingPipeline
from chalicelib.inference.timing import StageTimer
from chalicelib.kinds.base import PipelineKind
from chalicelib.registry.experiments import Shadow
from chalicelib.registry.specs import ModelSpec

CAPTURE_SECONDS = 10.0
"""What a shadow's capture may take past its call's deadline (it runs after the answer)."""

VARIANT_HEADER = "X-Amzn-Invoked-Production-Variant"
"""The production variant that answered a model request (SageMaker's own header name)."""
MODEL_EXPOSE_HEADERS = (*EXPOSE_HEADERS, VARIANT_HEADER, CACHE_HEADER, ARM_HEADER)

ShadowPipeline = Callable[[ModelSpec, float], ServingPipeline]
"""A shadow target's pipeline, whose endpoint client reads for at most the shadow's timeout."""


@dataclasses.dataclass(frozen=True)
class Target:
    """The model on one endpoint (an experiment arm's, or its own) and its pipeline."""

    model: ModelSpec
    pipeline: ServingPipeline


@dataclasses.dataclass(frozen=True)
class ModelRoute:
    """One model's serve path, settled when it is first served.

    Attributes:
        reads: the model its requests are read with (an experiment's, without its routing
            defaults: its options hold only what the client named, each target adds its own).
        target: None for an experiment, whose arms' targets are ``arms``.
        shadows: by shadow name, the target and its queue's key (what makes two the same model).
        budget_seconds: covers preprocessing, the endpoint and the capture.
        pool: None when the model has no shadows.
        sticky_header: the header whose value keeps a caller's arm (lower-cased), if any.
    """

    model: ModelSpec
    kind: PipelineKind
    reads: ModelSpec
    target: Target | None
    arms: Mapping[str, Target]
    shadows: Mapping[str, tuple[ModelSpec, tuple[str | None, ...]]]
    max_body_bytes: int
    budget_seconds: float
    cache: PredictionCache
    capturer: Capturer
    pool: Shadows | None
    shadow_pipeline: ShadowPipeline
    sticky_header: str | None = None


def serve(route: ModelRoute, exchanges: Exchanges) -> HttpAnswer:
    """Serve the thread's request to ``route``'s model.

    Raises:
        SagegateError: the request is refused, or the endpoint failed (a timeout names the
            model's job route, where a slow model has time).
    """
    # the request's time budget runs from here: preprocessing, the endpoint and the capture
    deadline = time.monotonic() + route.budget_seconds
    timer = StageTimer()
    exchange = exchanges.current()
    log, request_id, model = exchange.log, exchange.request_id, route.model
    log.model = model.name
    log.stages_ms = timer.durations  # the same dict: stages that ran are logged even on error
    routing = _routing(route, exchange)
    target = route.target if routing is None else route.arms[routing.arm.name]
    assert target is not None  # a model without an experiment has its own target
    log.arm = None if routing is None else routing.arm.name
    cache = cache_use(route, exchange, log.arm)
    try:
        start = timer.clock()
        try:
            request = route.kind.read(exchange.http_request(), route.reads,
                                      max_body_bytes=route.max_body_bytes)
        finally:
            timer.since("parse", start)
        served = _served(target, request if routing is None
                         else assign.routed(request, target.model), request_id, timer,
                         deadline, cache)
        log.endpoint, log.variant, log.attempts = served.endpoint, served.variant, \
            served.attempts
        log.image_in, log.image_out = served.image_in, served.image_out  # (an image's sizes)
        if served.usage is not None:  # (a language model's tokens, as its container counts)
            log.prompt_tokens, log.completion_tokens = served.usage.prompt_tokens, \
                served.usage.completion_tokens
            log.usage_source = served.usage.source
        if served.invoked or served.cached:  # a cache hit is traffic too (CAPTURE_CACHE_HITS)
            start = timer.clock()
            try:
                log.capture = route.capturer.capture_served(
                    served, request_id, request.options.custom_attributes, deadline,
                    arm=log.arm, latency_ms=None if routing is None else exchange_ms(timer))
            finally:
                timer.since("capture", start)
        if routing is not None and routing.shadows:
            log.shadows = shadow_copies(route, routing.shadows, request, request_id, log)
    finally:
        note_cache(log, cache, timer)  # an error answer's log line says it too
    return model_answer(served, timer, cache, log.arm)


def _routing(route: ModelRoute, exchange: Exchange) -> assign.Routing | None:
    """The request's arm and shadows (None: the model has no experiment), decided once."""
    experiment = route.model.experiment
    if experiment is None:
        return None
    return assign.decide(experiment, route.model.name, exchange.request_id,
                         caller=exchange.caller, headers=exchange.request.headers,
                         header=route.sticky_header)


def _served(target: Target, request: ModelRequest, request_id: str, timer: StageTimer,
            deadline: float, cache: CacheUse) -> Served:
    """The target's pipeline on the request; an endpoint timeout names the job route."""
    try:
        return target.pipeline.serve(request, request_id, timer, deadline, cache=cache)
    except EndpointTimeoutError as error:
        raise EndpointTimeoutError(
            f"{error.message} If the model needs longer, run it as a job: POST "
            f"/models/{target.model.name}/jobs.", details=error.details) from None


def exchange_ms(timer: StageTimer) -> float | None:
    """The endpoint exchange's ms: the image pipeline's ``endpoint`` stage; the others' ``model``
    stage (their work around the call included)."""
    durations = timer.durations
    return durations.get("endpoint", durations.get("model"))


def shadow_copies(route: ModelRoute, shadows: tuple[Shadow, ...], request: ModelRequest,
                  request_id: str, log: RequestLog) -> dict[str, int] | None:
    """Hand each sampled shadow its copy, run after the answer; how many were queued, dropped
    (their queue full) or skipped (shadows off here). An expired copy is counted with the
    request's metric dimensions."""
    assert route.pool is not None  # a model with shadows has their pool
    dimensions = {name: value for name, value in
                  (("route", log.route), ("model", log.model), ("arm", log.arm)) if value}
    handed: dict[str, int] = {}
    for shadow in shadows:
        target, queue = route.shadows[shadow.name]
        outcome = route.pool.submit(
            queue, functools.partial(_shadow_call, route, target, shadow, request, request_id),
            timeout_seconds=shadow.timeout_seconds, size=len(request.call.body),
            dimensions=dimensions)
        handed[outcome] = handed.get(outcome, 0) + 1
    return handed or None


def _shadow_call(route: ModelRoute, target: ModelSpec, shadow: Shadow,
                 request: ModelRequest, request_id: str) -> None:
    """On the shadow pool's thread: the shadow's pipeline (built there the first time, off
    the caller's path), then its call."""
    run_shadow(route.shadow_pipeline(target, shadow.timeout_seconds), route.capturer,
               target, shadow, assign.routed(request, target, client=False), request_id)


def run_shadow(pipeline: ServingPipeline, capturer: Capturer, target: ModelSpec,
               shadow: Shadow, request: ModelRequest, request_id: str) -> None:
    """One shadow call within its own timeout, captured as shadow traffic paired with the
    caller's request by its id (a failure as a record of its error)."""
    timer = StageTimer()
    started = time.monotonic()
    deadline = started + shadow.timeout_seconds
    try:
        served = pipeline.serve(request, request_id, timer, deadline, cache=None)
    except SagegateError as error:
        capturer.capture_shadow_failure(
            target.endpoint, target.variant, request_id, shadow.name, error.as_failure(),
            (time.monotonic() - started) * 1000.0)
        return
    capturer.capture_served(served, request_id, request.options.custom_attributes,
                            deadline + CAPTURE_SECONDS, arm=shadow.name,
                            latency_ms=exchange_ms(timer), shadow=True)


def cache_use(route: ModelRoute, exchange: Exchange, arm: str | None = None) -> CacheUse:
    """The client's ``Cache-Control`` and ``Pragma``, every line of them, unless the model is
    never cached; an experiment's arms never share an entry."""
    request = exchange.request
    control = request_cache_control(
        request.headers, request.to_original_event().get("multiValueHeaders"))
    name = route.model.name
    scope = {"model": name} if arm is None else {"model": name, "arm": arm}
    return route.cache.request(control, enabled=route.model.cache, scope=scope)


def note_cache(log: RequestLog, cache: CacheUse, timer: StageTimer) -> None:
    """The cache's outcome in the log line and Server-Timing."""
    log.cache, log.cache_tier = cache.status, cache.tier
    log.cache_errors = cache.errors or None
    log.cache_skipped_too_large = cache.skipped_too_large or None
    if cache.active:
        timer.durations["cache"] = cache.lookup_ms


def model_answer(served: Served, timer: StageTimer, cache: CacheUse,
                 arm: str | None = None) -> HttpAnswer:
    """The model's answer, with the request's stages as Server-Timing."""
    headers: dict[str, str | list[str]] = {"Server-Timing": timer.server_timing(),
                                           CACHE_HEADER: cache.status}
    if arm is not None:
        headers[ARM_HEADER] = arm
    if served.custom_attributes:
        headers["X-Custom-Attributes"] = served.custom_attributes
    headers["Content-Type"] = served.answer.content_type
    if served.variant and served.variant_header:
        headers[VARIANT_HEADER] = served.variant
    body: str | bytes = served.answer.body
    if not media.is_binary(served.answer.content_type):
        body = served.answer.body.decode("utf-8", errors="replace")
    return HttpAnswer(body, headers)
