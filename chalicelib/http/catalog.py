"""What ``GET /models`` and ``GET /models/{name}`` say about a model: enough to call it; and
what ``GET /health/details`` says of the configuration as loaded.

Each model is described by its pipeline, the content types its route reads, its signature,
its labels and, for one model, an example request body a client can copy: built from the
signature (``tensor``), the image contract (``image-classification``) or the ``example`` its
``model.json`` gives (the handler pipelines, whose request shape is the handler's business).
"""
from __future__ import annotations

from typing import Any

from chalicelib.core.config import Settings
from chalicelib.inference.predictions import load_labels
from chalicelib.kinds import kind_of
from chalicelib.registry.loading import Registry
from chalicelib.registry.specs import ModelSpec

__all__ = ["configuration", "describe", "describe_all", "example_body"]


def describe_all(registry: Registry, jobs: bool = True) -> dict[str, Any]:
    """``GET /models``: the default model's name and every model's description, by name."""
    return {"default": registry.default,
            "models": [describe(registry.models[name], jobs=jobs) for name in registry.names()]}


def describe(model: ModelSpec, example: bool = False, jobs: bool = True) -> dict[str, Any]:
    """A model's description (with ``example``: plus a request body to copy; ``jobs``: the
    stage serves jobs, so its ``jobs`` entry says how; without, it is null)."""
    kind = kind_of(model)
    document: dict[str, Any] = {
        "name": model.name,
        "pipeline": str(model.pipeline),
        "content_types": [str(media_type) for media_type in kind.accepts(model)],
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
    if model.experiment is not None:
        document["experiment"] = model.experiment.to_dict()
    document.update(kind.describe(model))
    if example:
        document["example"] = example_body(model)
    return document


def example_body(model: ModelSpec) -> Any:
    """A JSON request body for the model, or None when neither model.json nor its kind has one."""
    if model.example is not None:
        return model.example
    return kind_of(model).example(model)


def configuration(settings: Settings) -> dict[str, Any]:
    """``GET /health/details``: the endpoint, model input, resize rule and label count the
    settings describe."""
    labels = load_labels(settings.labels)
    return {
        "status": "ok",
        "endpoint": settings.endpoint_name,
        "model_input": {"width": settings.input_width, "height": settings.input_height},
        "resize": {"mode": settings.resize_mode, "shorter_side": settings.resize_shorter_side},
        "labels": len(labels) if labels is not None else 0,
    }
