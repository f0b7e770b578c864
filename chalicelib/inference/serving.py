"""Serving a registered model: one request through its pipeline, whatever the pipeline.

:class:`ServingPipeline` is the one interface the route serves through. The image classifier
implements it in :class:`~chalicelib.inference.pipeline.Predictor`; the others (``tensor``,
``sagemaker-tfs``, ``cortex``) run here, each model as a :class:`HandledModel` on the shared
:class:`ModelServer`. Every pipeline gets the same endpoint client (retries, time budget,
errors), answers the same :class:`~chalicelib.calls.Served` record for logs and data capture,
and takes the same per-request options (:class:`~chalicelib.calls.CallOptions`).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Protocol

import numpy as np

from chalicelib.cache.keys import file_digest
from chalicelib.cache.prediction import CacheUse
from chalicelib.calls import Answer, Call, CallOptions, Invoke, InvokeResult, ModelRequest, Served
from chalicelib.core.errors import HandlerError, UnsupportedMediaTypeError
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import MediaType, bare
from chalicelib.inference import predictions, tensors, tfsrest
from chalicelib.inference.endpoint import EndpointClient, Invocation
from chalicelib.inference.pipeline import StageTimer
from chalicelib.inference.userfiles.failures import HANDLER_FAILED, bound_json_depth, request_scope
from chalicelib.registry.specs import ModelSpec, Pipeline

logger = logging.getLogger("sagegate.serving")


class ServingPipeline(Protocol):
    """What every pipeline is to the route: one request in, one answer out, as KServe's
    ``Model`` or the SageMaker inference toolkit's transformer (input -> predict -> output).

    The image pipeline (:class:`~chalicelib.inference.pipeline.Predictor`) and the others
    (:class:`HandledModel`: tensor, sagemaker-tfs, cortex) implement it.
    """

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """Serve one request: its answer, and the endpoint exchange behind it."""
        ...


class ModelServer:
    """Runs the ``tensor``, ``sagemaker-tfs`` and ``cortex`` pipelines on one endpoint client.

    Handler files are loaded once per model (:meth:`load`, at start-up) and kept.
    """

    def __init__(self, endpoint: EndpointClient) -> None:
        self._endpoint = endpoint
        self._handlers: dict[str, Any] = {}
        self._digests: dict[str, str] = {}  # the handler files' content, as loaded
        self._lock = threading.Lock()

    def load(self, model: ModelSpec) -> None:
        """Load (and check) the model's handler file, if its pipeline has one.

        Raises:
            ConfigurationError: the file does not load or lacks the contract's functions.
        """
        if model.handler_file is not None:
            self._handler(model)

    def _handler(self, model: ModelSpec) -> Any:
        # Deferred on purpose: the handler files' loader brings in http.server for the
        # context.rest_uri forwarder, 20 ms of a cold start (python -X importtime) that only a
        # deployment with a sagemaker-tfs or cortex model should pay.
        from chalicelib.inference.userfiles.loader import load_handler

        with self._lock:
            if model.name not in self._handlers:
                if model.handler_file is not None:
                    self._digests[model.name] = file_digest(model.handler_file)
                self._handlers[model.name] = load_handler(model)
            return self._handlers[model.name]

    def _key_fields(self, model: ModelSpec, options: CallOptions, content_type: str,
                    accept: str, cache: CacheUse) -> dict[str, Any]:
        """Besides the body sent, everything that changes the endpoint's answer, and the
        handler file that turns it into the client's (an edited one is a new key)."""
        if model.handler_file is not None:
            self._handler(model)  # its digest is taken as it is loaded
        return {**cache.scope, "endpoint": model.endpoint, "content_type": content_type,
                "accept": accept, "variant": options.variant or model.variant,
                "target_model": options.target_model or model.target_model,
                "inference_component": options.inference_component
                or model.inference_component,
                "custom_attributes": options.custom_attributes,
                "handler": self._digests.get(model.name)}

    def serve(self, model: ModelSpec, call: Call, options: CallOptions, request_id: str,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """Run one request through the model's pipeline.

        With ``cache``, every endpoint call the pipeline makes is looked up first: a cached
        answer goes to the tensor reader or the user's handler as the endpoint's would
        (``Served.invoked`` stays False when nothing reached the endpoint).

        Raises:
            SagegateError: (a subclass) the request does not fit the model, the handler
                refused it or failed, or the endpoint did.
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

        if model.pipeline == Pipeline.TENSOR:
            served.answer = self._tensor(model, call, options, invoke, served, request_id)
        elif model.pipeline in (Pipeline.SAGEMAKER_TFS, Pipeline.CORTEX):
            served.answer = self._user_code(model, call, invoke, request_id)
        else:
            raise ValueError(f"{model.pipeline} is served by the image pipeline")
        served.invoked = served.attempts > 0  # a cached answer is no inference
        served.cached = served.cached and not served.invoked
        served.original, served.original_content_type = call.body, call.content_type
        return served

    def _user_code(self, model: ModelSpec, call: Call, invoke: Invoke,
                   request_id: str) -> Answer:
        """The handler pipelines, their failures logged under the client's request id. The
        handlers translate what the user's code raises; a RecursionError or MemoryError that
        still escapes (sagegate reading what that code returned) is a HandlerError with its
        type in the log, never an unhandled 500."""
        try:
            with request_scope(request_id):
                if model.pipeline == Pipeline.SAGEMAKER_TFS:
                    return self._handler(model)(call, invoke, model)
                return Answer.json(self._handler(model)(_sample(call), invoke, model))
        except (RecursionError, MemoryError) as error:
            logger.error("models/%s: %s reading what its handler returned (request_id %s)",
                         model.name, type(error).__name__, request_id,
                         extra={"request_id": request_id})
            raise HandlerError(HANDLER_FAILED) from None

    def _tensor(self, model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
                served: Served, request_id: str) -> Answer:
        result = invoke(tensor_input(model, call), MediaType.JSON, MediaType.JSON)
        return tensor_answer(model, result.body, options, served.variant, request_id)


def tensor_input(model: ModelSpec, call: Call) -> bytes:
    """The tensor pipeline before the endpoint call: TF Serving's REST body for the request.

    Raises:
        SagegateError: (a 4xx subclass) the body does not fit the model's signature.
    """
    arrays = tensors.read_tensors(call.body, call.content_type, model.signature)
    return tfsrest.tfs_request(arrays, model.signature)


def tensor_answer(model: ModelSpec, body: bytes, options: CallOptions, variant: str | None,
                  request_id: str) -> Answer:
    """The tensor pipeline after the endpoint call: the route's answer to TF Serving's body.

    Raises:
        InvalidEndpointResponseError: the body is not the outputs the signature declares.
    """
    outputs = tfsrest.tfs_outputs(body, model.signature)
    names = [spec.name for spec in model.signature.outputs] or ["predictions"]
    document: dict[str, Any] = {
        "model": model.name,
        "outputs": {name: tfsrest.to_json(array) for name, array in zip(names, outputs,
                                                                        strict=False)}}
    labelled = _labelled(outputs[0], model.labels, options.k or model.default_k)
    if labelled is not None:
        document["predictions"] = labelled
    document.update(endpoint=model.endpoint, variant=variant, request_id=request_id)
    return Answer.json(document)


def _sample(call: Call) -> Any:
    """A Cortex handler's ``sample``: the parsed JSON body, its depth bounded first."""
    if bare(call.content_type) not in (MediaType.JSON, ""):
        raise UnsupportedMediaTypeError(
            f"Unsupported Content-Type {call.content_type[:64]!r}; this model reads "
            f"{MediaType.JSON}.")
    bound_json_depth(call.body)
    return load_json(call.body)


def _labelled(scores: np.ndarray, labels: tuple[str, ...] | None,
              k: int) -> list[list[dict[str, Any]]] | None:
    """Per row, the top-k labelled classes, when the first output is one score per label."""
    if labels is None or scores.ndim != 2 or scores.shape[1] != len(labels) \
            or scores.dtype.kind not in "fiu":
        return None
    rows = []
    for row in scores.astype(np.float64):
        indices = predictions.top_k(row, k)
        rows.append([p.to_dict() for p in predictions.label_predictions(row, indices, labels)])
    return rows


@dataclasses.dataclass(frozen=True)
class HandledModel:
    """One ``tensor``, ``sagemaker-tfs`` or ``cortex`` model as a :class:`ServingPipeline`.

    Attributes:
        server: the runner its pipeline shares with the others (handler files, endpoint).
        model: the model.
    """

    server: ModelServer
    model: ModelSpec

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """Serve one request through the model's pipeline, timed as the ``model`` stage.

        Raises:
            SagegateError: (a subclass) see :meth:`ModelServer.serve`.
        """
        with timer.stage("model"):
            return self.server.serve(self.model, request.call, request.options, request_id,
                                     deadline, cache=cache)

    def preprocess(self, request: ModelRequest, timer: StageTimer,
                   deadline: float | None = None) -> Call:
        """What the endpoint would be sent (a tensor model only: a handler runs around the
        call, so it cannot be split; the registry refuses ``async`` for those).

        Raises:
            SagegateError: (a 4xx subclass) the body does not fit the model's signature.
        """
        self._check_split()
        with timer.stage("preprocess"):
            return Call(tensor_input(self.model, request.call), MediaType.JSON, MediaType.JSON)

    def postprocess(self, request: ModelRequest, result: InvokeResult, request_id: str,
                    sent: bytes = b"") -> Served:
        """The answer :meth:`serve` gives for the endpoint's ``result`` (a tensor model only).

        Raises:
            InvalidEndpointResponseError: the body is not the outputs the signature declares.
        """
        self._check_split()
        served = Served(Answer(b"", ""), self.model.endpoint)
        served.record(sent, MediaType.JSON, result)
        served.answer = tensor_answer(self.model, result.body, request.options, result.variant,
                                      request_id)
        served.invoked = True
        served.original, served.original_content_type = request.call.body, \
            request.call.content_type
        return served

    def _check_split(self) -> None:
        if self.model.pipeline != Pipeline.TENSOR:
            raise ValueError(f"a {self.model.pipeline} model's pipeline cannot be split")


class SplitPipeline(ServingPipeline, Protocol):
    """A pipeline whose halves run apart, around an asynchronous endpoint: the image
    classifier and the tensor pipeline (:data:`~chalicelib.registry.specs.ASYNC_PIPELINES`)."""

    def preprocess(self, request: ModelRequest, timer: StageTimer,
                   deadline: float | None = None) -> Call:
        """What the endpoint is sent for ``request``."""
        ...

    def postprocess(self, request: ModelRequest, result: InvokeResult, request_id: str,
                    sent: bytes = b"") -> Served:
        """The route's answer to the endpoint's ``result``."""
        ...
