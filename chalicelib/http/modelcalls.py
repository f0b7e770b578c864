"""The model routes' one serve path (``POST /predict``, ``POST /models/{name}/predict``): read
the request once, serve it through the model's pipeline (through the prediction cache when it
may), capture it, answer; whatever the model's kind.

The composition root's services are passed in (:class:`ServingParts`: this room does not
import it); the request and its log line come from the thread's
:class:`~chalicelib.http.exchange.Exchanges`.
"""
from __future__ import annotations

import time
from typing import Protocol

from chalicelib.cache.control import request_cache_control
from chalicelib.cache.prediction import CacheUse, PredictionCache
from chalicelib.calls import Served
from chalicelib.capture import Capturer
from chalicelib.core import media
from chalicelib.core.config import Settings
from chalicelib.core.errors import EndpointTimeoutError
from chalicelib.core.observability import RequestLog
from chalicelib.http.exchange import Exchanges, HttpAnswer
from chalicelib.inference.pipeline import StageTimer
from chalicelib.inference.serving import ServingPipeline
from chalicelib.kinds import kind_of
from chalicelib.registry.specs import ModelSpec

VARIANT_HEADER = "X-Amzn-Invoked-Production-Variant"
"""The production variant that answered a model request (SageMaker's own header name)."""
CACHE_HEADER = "X-Cache"
"""``hit``, ``miss`` or ``bypass``: whether the prediction cache answered."""


class ServingParts(Protocol):
    """What the serve path works with (the composition root's ``Services`` has these)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def cache(self) -> PredictionCache: ...

    @property
    def capturer(self) -> Capturer: ...

    def pipeline_for(self, model: ModelSpec) -> ServingPipeline: ...


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
    cache = cache_use(parts, exchanges, model)
    request_id = exchanges.request_id()
    try:
        with timer.stage("parse"):
            request = kind_of(model).read(exchanges.http_request(), model,
                                          max_body_bytes=settings.max_body_bytes)
        try:
            served = parts.pipeline_for(model).serve(request, request_id, timer, deadline,
                                                     cache=cache)
        except EndpointTimeoutError as error:
            raise EndpointTimeoutError(
                f"{error.message} If the model needs longer, run it as a job: POST "
                f"/models/{model.name}/jobs.", details=error.details) from None
        note_served(log, served)
        if served.invoked or served.cached:  # a cache hit is traffic too (CAPTURE_CACHE_HITS)
            with timer.stage("capture"):
                log.capture = parts.capturer.capture_served(
                    served, request_id, request.options.custom_attributes, deadline)
    finally:
        note_cache(log, cache, timer)  # an error answer's log line says it too
    return model_answer(served, timer, cache)


def cache_use(parts: ServingParts, exchanges: Exchanges, model: ModelSpec) -> CacheUse:
    """This request's use of the prediction cache: the client's ``Cache-Control`` and
    ``Pragma``, every line of them (:class:`chalicelib.cache.control.CacheControl`), unless
    the model is never cached."""
    request = exchanges.request()
    control = request_cache_control(
        request.headers, request.to_original_event().get("multiValueHeaders"))
    return parts.cache.request(control, enabled=model.cache, scope={"model": model.name})


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


def model_answer(served: Served, timer: StageTimer, cache: CacheUse) -> HttpAnswer:
    """The client's answer: the model's, with the request's stages as Server-Timing."""
    headers: dict[str, str | list[str]] = {"Server-Timing": server_timing(timer.durations),
                                           CACHE_HEADER: cache.status}
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
