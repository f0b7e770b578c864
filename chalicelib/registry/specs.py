"""What a registered model is: its pipeline, its tensors' types and shapes, its settings.

Plain frozen dataclasses, built once by :mod:`chalicelib.registry.loading` from ``model.json``.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chalicelib.core.config import Settings


class Pipeline(enum.StrEnum):
    """How a model's requests are turned into endpoint calls and answers."""

    IMAGE_CLASSIFICATION = "image-classification"
    TENSOR = "tensor"
    SAGEMAKER_TFS = "sagemaker-tfs"
    CORTEX = "cortex"


HANDLER_FILES = {Pipeline.SAGEMAKER_TFS: "inference.py", Pipeline.CORTEX: "handler.py"}


class DType(enum.StrEnum):
    """The tensor element types a signature may declare (numpy's names)."""

    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    BOOL = "bool"
    STRING = "string"

    @property
    def onnx_type(self) -> str:
        """The ONNX type string (``tensor(float)``...), as Cortex's ONNX signature shows it."""
        return f"tensor({_ONNX_NAMES.get(self, self.value)})"


_ONNX_NAMES = {DType.FLOAT32: "float", DType.FLOAT64: "double", DType.FLOAT16: "float16"}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model's signature; -1 in ``shape`` is any length."""

    name: str
    dtype: DType
    shape: tuple[int, ...]

    def describe(self) -> str:
        """``float32 of shape (-1, 4)``."""
        shape = "(" + ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1
                                                                 else "") + ")"
        return f"{self.dtype} of shape {shape}"

    def to_dict(self) -> dict[str, Any]:
        """As ``model.json`` and ``GET /models`` write it."""
        return {"name": self.name, "dtype": str(self.dtype), "shape": list(self.shape)}


@dataclasses.dataclass(frozen=True)
class Signature:
    """A model's declared inputs and outputs, in order."""

    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As ``model.json`` and ``GET /models`` write it."""
        return {"inputs": [spec.to_dict() for spec in self.inputs],
                "outputs": [spec.to_dict() for spec in self.outputs]}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One registered model, validated.

    Attributes:
        name: the folder's name.
        folder: the folder.
        endpoint: the SageMaker endpoint name (``$VAR`` resolved).
        pipeline: how requests are handled.
        content_type, accept: what is sent to the endpoint and asked of it.
        signature: declared inputs and outputs (empty for image-classification).
        target_model, variant: default TargetModel / TargetVariant (a request may override).
        inference_component: default InferenceComponentName, for an endpoint that hosts
            inference components (a request may override).
        metadata: the user's dict, handed to Cortex handlers.
        default_k: top-k when a request does not say.
        labels: class names in index order, or None.
        settings: the image settings (image-classification): the flat variables, overridden
            by ``image`` in ``model.json``.
    """

    name: str
    folder: Path
    endpoint: str
    pipeline: Pipeline
    content_type: str
    accept: str
    signature: Signature
    target_model: str | None = None
    variant: str | None = None
    inference_component: str | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    default_k: int = 5
    labels: tuple[str, ...] | None = None
    settings: Settings | None = None
    description: str | None = None
    example: Any = None
    """A request body ``GET /models/{name}`` shows (model.json's ``example``)."""
    cache: bool = True
    """Whether the prediction cache may answer for this model (model.json's ``cache``)."""
    expose_handler_errors: bool = False
    """Whether a handler's exception type and message are in its 500 answer (model.json's
    ``expose_handler_errors``; off: the log alone has them)."""

    @property
    def handler_file(self) -> Path | None:
        """The user's handler file this pipeline runs, if any."""
        name = HANDLER_FILES.get(self.pipeline)
        return self.folder / name if name else None
