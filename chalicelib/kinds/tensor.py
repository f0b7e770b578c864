"""The ``tensor`` kind: a body of tensors (TF Serving's JSON, CSV, JSON lines, NumPy...) read
and coerced to the model's signature, sent as TF Serving's REST body, its outputs answered by
name and, when the first is one score per label, as the top-k labelled classes. Its halves run
apart around an asynchronous endpoint (:class:`TensorModel`)."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from chalicelib.calls import Answer, Call, CallOptions, Invoke, InvokeResult, ModelRequest, Served
from chalicelib.core.media import MediaType
from chalicelib.inference import predictions, tensors
from chalicelib.inference.serving import HandledModel
from chalicelib.inference.timing import StageTimer
from chalicelib.kinds.base import BodyKind, Parts, preprocess_now
from chalicelib.registry.specs import DType, ModelSpec, TensorSpec

ACCEPTED = tuple(str(kind) for kind in tensors.READABLE_TYPES)


def run(model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
        request_id: str) -> Answer:
    """One request: its rows read against the signature, sent as TF Serving's body, the
    outputs answered."""
    arrays = tensors.read_tensors(call.body, call.content_type, model.signature)
    result = invoke(tensors.tfs_request(arrays, model.signature), MediaType.JSON, MediaType.JSON)
    return tensor_answer(model, result, options, request_id)


def tensor_input(model: ModelSpec, call: Call) -> bytes:
    """What :func:`run` sends, for the pipeline's first half alone.

    Raises:
        SagegateError: (a 4xx subclass) the body does not fit the model's signature.
    """
    return tensors.tfs_request(tensors.read_tensors(call.body, call.content_type,
                                                    model.signature), model.signature)


def tensor_answer(model: ModelSpec, result: InvokeResult, options: CallOptions,
                  request_id: str) -> Answer:
    """The route's answer to TF Serving's: each output by name and, when the first is one
    score per label, its top-k labelled classes per row.

    Raises:
        InvalidEndpointResponseError: the body is not the outputs the signature declares.
    """
    outputs = tensors.tfs_outputs(result.body, model.signature)
    names = [spec.name for spec in model.signature.outputs] or ["predictions"]
    document: dict[str, Any] = {
        "model": model.name,
        "outputs": {name: tensors.to_json(array) for name, array in zip(names, outputs,
                                                                        strict=False)}}
    scores, labels = outputs[0], model.labels
    if labels is not None and scores.ndim == 2 and scores.shape[1] == len(labels) \
            and scores.dtype.kind in "fiu":
        k = options.k or model.default_k
        document["predictions"] = [
            [{"index": i, "label": labels[i], "probability": float(row[i])}
             for i in predictions.top_k(row, k).tolist()] for row in scores.astype(np.float64)]
    document.update(endpoint=model.endpoint, variant=result.variant, request_id=request_id)
    return Answer.json(document)


@dataclasses.dataclass(frozen=True)
class TensorModel(HandledModel):
    """A tensor model's pipeline, whose halves also run apart
    (:class:`~chalicelib.inference.serving.SplitPipeline`)."""

    def preprocess(self, request: ModelRequest, timer: StageTimer,
                   deadline: float | None = None) -> Call:
        """What the endpoint would be sent."""
        with timer.stage("preprocess"):
            return Call(tensor_input(self.model, request.call), MediaType.JSON, MediaType.JSON)

    def postprocess(self, request: ModelRequest, result: InvokeResult, request_id: str,
                    sent: bytes = b"") -> Served:
        """The answer :meth:`serve` gives for the endpoint's ``result``."""
        served = Served(Answer(b"", ""), self.model.endpoint)
        served.record(sent, MediaType.JSON, result)
        served.answer = tensor_answer(self.model, result, request.options, request_id)
        served.invoked = True
        served.original, served.original_content_type = request.call.body, \
            request.call.content_type
        return served


class TensorKind(BodyKind):
    """See the module."""

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    preflight = staticmethod(preprocess_now)

    def pipeline(self, model: ModelSpec, parts: Parts) -> TensorModel:
        return TensorModel(parts.server, model, run)

    def example(self, model: ModelSpec) -> Any:
        inputs = model.signature.inputs
        if len(inputs) == 1:
            return {"instances": [_sample(inputs[0])]}
        return {"instances": [{spec.name: _sample(spec) for spec in inputs}]}


def _sample(spec: TensorSpec) -> Any:
    """One instance of an input (its shape without the batch axis), filled with zeros."""
    value: Any = "text" if spec.dtype == DType.STRING else (
        0.0 if spec.dtype.startswith("float") else 0)
    for size in reversed(spec.shape[1:]):
        value = [value] * (size if size > 0 else 1)
    return value


KIND = TensorKind()
