"""What ``GET /models`` and ``GET /models/{name}`` say about a model: enough to call it.

Each model is described by its pipeline, the content types its route reads, its signature,
its labels and, for one model, an example request body a client can copy: built from the
signature (``tensor``), the image contract (``image-classification``) or the ``example`` its
``model.json`` gives (the handler pipelines, whose request shape is the handler's business).
"""
from __future__ import annotations

from typing import Any

from chalicelib.inference.accepted import ACCEPTED
from chalicelib.registry.specs import DType, ModelSpec, Pipeline, TensorSpec

__all__ = ["ACCEPTED", "describe", "example_body"]


def describe(model: ModelSpec, example: bool = False, jobs: bool = True) -> dict[str, Any]:
    """A model's description (with ``example``: plus a request body to copy; ``jobs``: the
    stage serves jobs, so its ``jobs`` entry says how; without, it is null)."""
    document: dict[str, Any] = {
        "name": model.name,
        "pipeline": str(model.pipeline),
        "content_types": [str(kind) for kind in ACCEPTED[model.pipeline]],
        "signature": model.signature.to_dict(),
        "labels": len(model.labels) if model.labels is not None else 0,
        "default_k": model.default_k,
        "path": f"/models/{model.name}/predict",
        "jobs": {"backend": str(model.jobs.backend),
                 "max_upload_bytes": model.jobs.max_upload_bytes,
                 "path": f"/models/{model.name}/jobs"} if jobs else None,
    }
    if model.description:
        document["description"] = model.description
    if model.settings is not None:
        s = model.settings
        document["image"] = {
            "resize": {"mode": s.resize_mode, "shorter_side": s.resize_shorter_side,
                       "width": s.input_width, "height": s.input_height, "upscale": s.upscale},
            "passthrough": s.passthrough, "max_pixels": s.max_image_pixels,
        }
    if example:
        document["example"] = example_body(model)
    return document


def example_body(model: ModelSpec) -> Any:
    """A request body for the model (JSON), or None when the model.json gives none."""
    if model.example is not None:
        return model.example
    if model.pipeline == Pipeline.IMAGE_CLASSIFICATION:
        return {"image": "<base64 of a JPEG, PNG or WebP>", "k": model.default_k}
    if model.pipeline == Pipeline.TENSOR:
        if len(model.signature.inputs) == 1:
            return {"instances": [_sample(model.signature.inputs[0])]}
        return {"instances": [{spec.name: _sample(spec) for spec in model.signature.inputs}]}
    return None


def _sample(spec: TensorSpec) -> Any:
    """One instance of an input (its shape without the batch axis), filled with zeros."""
    value: Any = "text" if spec.dtype == DType.STRING else (
        0.0 if spec.dtype.startswith("float") else 0)
    for size in reversed(spec.shape[1:]):
        value = [value] * (size if size > 0 else 1)
    return value
