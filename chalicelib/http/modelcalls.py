"""The model routes' one serve path (``POST /predict``, ``POST /models/{name}/predict``): read
the request once, serve it through the model's pipeline (through the prediction cache when it
may), capture it, answer; whatever the model's kind.

The composition root's services are passed in (:class:`ServingParts`: this room does not
import it); the request and its log line come from the thread's
:class:`~chalicelib.http.exchange.Exchanges`.
"""
from __future__ import annotations

import functools
import time
from typing import Protocol

from chalicelib.cache.control import request_cache_control
from chalicelib.cache.prediction import CacheUse, PredictionCache
from chalicelib.calls import ModelRequest, Served
from chalicelib.capture import Capturer
from chalicelib.core import media
from chalicelib.core.config import Settings
from chalicelib.core.errors import EndpointTimeoutError, SagegateError
from chalicelib.core.observability import RequestLog
from chalicelib.experiments import assign
from chalicelib.experiments.assign import on_target
from chalicelib.experiments.shadows import Shadows
from chalicelib.http.exchange import Exchanges, HttpAnswer
from chalicelib.inference.pipeline import StageTimer
from chalicelib.inference.serving import ServingPipeline
from chalicelib.kinds import kind_of
from chalicelib.registry.experiments import Arm, Shadow, Sticky
from chalicelib.registry.specs import ModelSpec

CAPTURE_SECONDS = 10.0
"""What a shadow's capture may take past its call's deadline (it runs after the answer)."""

VARIANT_HEADER = "X-Amzn-Invoked-Production-Variant"
"""The production variant that answered a model request (SageMaker's own header name)."""
CACHE_HEADER = "X-Cache"
"""``hit``, ``miss`` or ``bypass``: whether the prediction cache answered."""
ARM_HEADER = "X-Sagegate-Arm"
"""The experiment arm that served the request (an ``experiment`` model's answers)."""


class ServingParts(Protocol):
    """What the serve path works with (the composition root's ``Services`` has these)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def cache(self) -> PredictionCache: ...

    @property
    def capturer(self) -> Capturer: ...

    def pipeline_for(self, model: ModelSpec) -> ServingPipeline: ...

    def shadow_pipeline_for(self, model: ModelSpec, seconds: float) -> ServingPipeline: ...

    @property
    def shadows(self) -> Shadows: ...


def serve(parts: ServingParts, exchanges: Exchanges, model: ModelSpec) -> HttpAnswer:
    """Serve the thread's request to ``model``: its answer, with Server-Timing, the cache's
    outcome and the variant that answered.

    Raises:
        SagegateError: the request is refused, or the endpoint failed (a timeout names the
            model's job route, where a slow model has time).
    """
    # the request's time budget runs from here: preprocessing, the endpoint and the capture
    settings = parts.settings
    deadline = time.monotonic() + settings.request_budget_seconds
    timer = StageTimer()
    log = exchanges.log()
    log.model = model.name
    log.stages_ms = timer.durations  # the same dict: stages that ran are logged even on error
    request_id = exchanges.request_id()
    arm = _arm(model, exchanges)
    target = model if arm is None else on_target(model, arm)
    log.arm = arm.name if arm is not None else None
    cache = cache_use(parts, exchanges, model, arm)
    try:
        with timer.stage("parse"):
            # an experiment's request holds only the routing its client named; each target
            # (the arm here, a shadow later) adds its own
            request = kind_of(model).read(
                exchanges.http_request(), model if arm is None else assign.unrouted(model),
                max_body_bytes=settings.max_body_bytes)
        try:
            served = parts.pipeline_for(target).serve(
                request if arm is None else assign.routed(request, target), request_id, timer,
                deadline, cache=cache)
        except EndpointTimeoutError as error:
            raise EndpointTimeoutError(
                f"{error.message} If the model needs longer, run it as a job: POST "
                f"/models/{model.name}/jobs.", details=error.details) from None
        note_served(log, served)
        if served.invoked or served.cached:  # a cache hit is traffic too (CAPTURE_CACHE_HITS)
            with timer.stage("capture"):
                log.capture = parts.capturer.capture_served(
                    served, request_id, request.options.custom_attributes, deadline,
                    arm=log.arm, latency_ms=exchange_ms(timer) if arm is not None else None)
        if model.experiment is not None and model.experiment.shadows:
            log.shadows = shadow_copies(parts, model, request, request_id) or None
    finally:
        note_cache(log, cache, timer)  # an error answer's log line says it too
    return model_answer(served, timer, cache, log.arm)


def _arm(model: ModelSpec, exchanges: Exchanges) -> Arm | None:
    """The arm that serves this request (None: the model has no experiment)."""
    experiment = model.experiment
    if experiment is None:
        return None
    if experiment.sticky == Sticky.CALLER:
        key = exchanges.caller()
    elif experiment.sticky_header is not None:
        key = exchanges.request().headers.get(experiment.sticky_header) or None
    else:
        key = None
    return assign.choose(experiment, model.name, key)


def exchange_ms(timer: StageTimer) -> float | None:
    """The endpoint exchange's milliseconds (the image pipeline's ``endpoint`` stage; the
    others' ``model`` stage, their work around the call included)."""
    durations = timer.durations
    return durations.get("endpoint", durations.get("model"))


def shadow_copies(parts: ServingParts, model: ModelSpec, request: ModelRequest,
                  request_id: str) -> dict[str, int]:
    """Hand each sampled shadow its copy of the request, run after the answer; how many
    copies were queued, dropped (their target's queue full) or skipped (shadows off
    here)."""
    assert model.experiment is not None
    handed: dict[str, int] = {}
    for shadow in model.experiment.shadows:
        if assign.sampled(model.name, shadow.name, request_id, shadow.sample):
            outcome = parts.shadows.submit(
                shadow.route(), functools.partial(_shadow_call, parts, on_target(model, shadow),
                                                  shadow, request, request_id),
                timeout_seconds=shadow.timeout_seconds, size=len(request.call.body))
            handed[outcome] = handed.get(outcome, 0) + 1
    return handed


def _shadow_call(parts: ServingParts, target: ModelSpec, shadow: Shadow,
                 request: ModelRequest, request_id: str) -> None:
    """On the shadow pool's thread: the shadow's pipeline (built there the first time, off
    the caller's path), then its call."""
    run_shadow(parts.shadow_pipeline_for(target, shadow.timeout_seconds), parts.capturer,
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


def cache_use(parts: ServingParts, exchanges: Exchanges, model: ModelSpec,
              arm: Arm | None = None) -> CacheUse:
    """This request's use of the prediction cache: the client's ``Cache-Control`` and
    ``Pragma``, every line of them (:class:`chalicelib.cache.control.CacheControl`), unless
    the model is never cached; an experiment's arms never share an entry."""
    request = exchanges.request()
    control = request_cache_control(
        request.headers, request.to_original_event().get("multiValueHeaders"))
    scope = {"model": model.name} if arm is None else {"model": model.name, "arm": arm.name}
    return parts.cache.request(control, enabled=model.cache, scope=scope)


def note_cache(log: RequestLog, cache: CacheUse, timer: StageTimer) -> None:
    """The cache's outcome in the log line and, as the ``cache`` stage, Server-Timing."""
    log.cache, log.cache_tier = cache.status, cache.tier
    log.cache_errors = cache.errors or None
    log.cache_skipped_too_large = cache.skipped_too_large or None
    if cache.active:
        timer.durations["cache"] = cache.lookup_ms


def note_served(log: RequestLog, served: Served) -> None:
    """The endpoint exchange (and an image pipeline's sizes) in the log line."""
    log.endpoint, log.variant, log.attempts = served.endpoint, served.variant, served.attempts
    if served.image_in is not None:
        log.image_in = served.image_in
    if served.image_out is not None:
        log.image_out = served.image_out


def model_answer(served: Served, timer: StageTimer, cache: CacheUse,
                 arm: str | None = None) -> HttpAnswer:
    """The client's answer: the model's, with the request's stages as Server-Timing (and the
    experiment arm that served it)."""
    headers: dict[str, str | list[str]] = {"Server-Timing": server_timing(timer.durations),
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


def server_timing(durations: dict[str, float]) -> str:
    """A ``Server-Timing`` header's value: each stage and its milliseconds."""
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in durations.items())
