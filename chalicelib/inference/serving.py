"""Serving a registered model: one request through its pipeline, whatever the pipeline.

:class:`ServingPipeline` is the one interface the route serves through. The image classifier
implements it in :class:`~chalicelib.inference.pipeline.Predictor`; the other kinds
(:mod:`chalicelib.kinds`: ``tensor``, ``sagemaker-tfs``, ``cortex``) run here, each model as a
:class:`HandledModel` on the shared :class:`ModelServer`, with its kind's work. Every pipeline
gets the same endpoint client (retries, time budget, errors), answers the same
:class:`~chalicelib.calls.Served` record for logs and data capture, and takes the same
per-request options (:class:`~chalicelib.calls.CallOptions`).
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, Protocol

from chalicelib.cache.prediction import CacheUse, file_digest
from chalicelib.calls import Answer, Call, CallOptions, Invoke, InvokeResult, ModelRequest, Served
from chalicelib.inference.endpoint import EndpointClient, Invocation
from chalicelib.inference.timing import StageTimer
from chalicelib.registry.specs import ModelSpec


class ServingPipeline(Protocol):
    """What every pipeline is to the route: one request in, one answer out, as KServe's
    ``Model`` or the SageMaker inference toolkit's transformer (input -> predict -> output)."""

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """Serve one request: its answer, and the endpoint exchange behind it."""
        ...


Run = Callable[[ModelSpec, Call, CallOptions, Invoke, str], Answer]
"""A pipeline kind's work on one request: ``run(model, call, options, invoke, request_id)``,
calling the endpoint through ``invoke`` (as often as it needs), answering the client's answer
(see :mod:`chalicelib.kinds`)."""


class ModelServer:
    """Runs the pipelines of the kinds other than the image classifier on one endpoint client:
    each request's endpoint calls (through the prediction cache when asked), and the record
    of them for logs and data capture.

    Handler files are loaded once per model (:meth:`handler`, at start-up) and kept.
    """

    def __init__(self, endpoint: EndpointClient) -> None:
        self._endpoint = endpoint
        self._handlers: dict[str, Any] = {}
        self._digests: dict[str, str] = {}  # the handler files' content, as loaded
        self._lock = threading.Lock()

    def handler(self, model: ModelSpec, load: Callable[[ModelSpec], Any]) -> Any:
        """The model's handler file, loaded by ``load`` the first time and kept (its digest
        is in every cache key of the model: an edited file is a new key).

        Raises:
            ConfigurationError: the file does not load or lacks the contract's functions.
        """
        with self._lock:
            if model.name not in self._handlers:
                if model.handler_file is not None:
                    self._digests[model.name] = file_digest(model.handler_file)
                self._handlers[model.name] = load(model)
            return self._handlers[model.name]

    def _key_fields(self, model: ModelSpec, options: CallOptions, content_type: str,
                    accept: str, cache: CacheUse) -> dict[str, Any]:
        """Besides the body sent, everything that changes the endpoint's answer, and the
        handler file that turns it into the client's (an edited one is a new key)."""
        return {**cache.scope, "endpoint": model.endpoint, "content_type": content_type,
                "accept": accept, "variant": options.variant or model.variant,
                "target_model": options.target_model or model.target_model,
                "inference_component": options.inference_component
                or model.inference_component,
                "custom_attributes": options.custom_attributes,
                "handler": self._digests.get(model.name)}

    def serve(self, model: ModelSpec, run: Run, call: Call, options: CallOptions,
              request_id: str, deadline: float | None = None,
              cache: CacheUse | None = None) -> Served:
        """Run one request through ``run``, the model's kind's work.

        With ``cache``, every endpoint call the pipeline makes is looked up first: a cached
        answer goes to the tensor reader or the user's handler as the endpoint's would
        (``Served.invoked`` stays False when nothing reached the endpoint).

        Raises:
            SagegateError: (a subclass) the request does not fit the model, the handler refused
                it or failed, or the endpoint did.
        """
        served = Served(Answer(b"", ""), model.endpoint)

        def invoke(body: bytes, content_type: str, accept: str) -> InvokeResult:
            def call() -> InvokeResult:
                return self._endpoint.invoke(Invocation(
                    endpoint_name=model.endpoint, body=body, content_type=content_type,
                    accept=accept, target_variant=options.variant or model.variant,
                    target_model=options.target_model or model.target_model,
                    inference_component=options.inference_component
                    or model.inference_component,
                    custom_attributes=options.custom_attributes, inference_id=request_id[:64]),
                    deadline)

            if cache is None:
                result = call()
            else:
                result = cache.fetch(self._key_fields(model, options, content_type, accept,
                                                      cache), body, call, deadline)
            served.record(body, content_type, result)
            served.cached = cache is not None and result.attempts == 0  # the last call's
            return result

        served.answer = run(model, call, options, invoke, request_id)
        served.invoked = served.attempts > 0  # a cached answer is no inference
        served.cached = served.cached and not served.invoked
        served.original, served.original_content_type = call.body, call.content_type
        return served


@dataclasses.dataclass(frozen=True)
class HandledModel:
    """One model served by :class:`ModelServer` (shared with the others: handler files,
    endpoint) as a :class:`ServingPipeline`."""

    server: ModelServer
    model: ModelSpec
    run: Run

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """Serve one request through the model's pipeline, timed as the ``model`` stage (raises
        as :meth:`ModelServer.serve`)."""
        start = timer.clock()
        try:
            return self.server.serve(self.model, self.run, request.call, request.options,
                                     request_id, deadline, cache=cache)
        finally:
            timer.since("model", start)


class SplitPipeline(ServingPipeline, Protocol):
    """A pipeline whose halves run apart, around an asynchronous endpoint: the image
    classifier and the tensor pipeline (the kinds whose rules say ``splits``)."""

    def preprocess(self, request: ModelRequest, timer: StageTimer,
                   deadline: float | None = None) -> Call:
        """What the endpoint is sent for ``request``."""
        ...

    def postprocess(self, request: ModelRequest, result: InvokeResult, request_id: str,
                    sent: bytes = b"") -> Served:
        """The route's answer to the endpoint's ``result``."""
        ...
