"""Model runners: the :class:`Model` protocol and its ONNX Runtime implementations.

:class:`OnnxModel` maps one image batch to one output (the image classifier);
:class:`OnnxGraph` runs any graph by its own signature (the tensor kind).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Model(Protocol):
    """Maps an input batch to an output batch (one row per input)."""

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Runs the model on ``batch`` and returns its output."""
        ...


LOG = logging.getLogger("emulator")
ONNX_DTYPES: dict[str, np.dtype] = {
    f"tensor({name})": np.dtype(dtype)
    for name, dtype in {
        "float": np.float32, "double": np.float64, "float16": np.float16, "bool": np.bool_,
        "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
        "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
        "string": np.object_,
    }.items()
}  # fmt: skip
"""The ONNX tensor types numpy holds (``tensor(string)`` as an object array of ``str``)."""


class ModelLoadError(RuntimeError):
    """A model file is missing or ONNX Runtime refused it."""


def default_threads() -> int:
    """Returns the intra-op threads a session gets by default: the cores, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


class OnnxModel:
    """One ONNX Runtime session; ``run()`` is thread-safe, so requests share it."""

    def __init__(self, session: Any) -> None:
        """Wraps a session whose first input takes the batch and first output answers."""
        self._session = session
        model_input = session.get_inputs()[0]
        self.input_name: str = model_input.name
        self.input_shape: tuple[object, ...] = tuple(model_input.shape)
        model_output = session.get_outputs()[0]
        self.output_name: str = model_output.name
        self.output_shape: tuple[object, ...] = tuple(model_output.shape)

    @classmethod
    def load(cls, path: Path, threads: int | None = None) -> OnnxModel:
        """Creates the session for an ONNX file and runs it once so that requests are warm.

        Args:
            path: the ``.onnx`` file.
            threads: intra-op threads; None for :func:`default_threads`.

        Returns:
            The loaded model.

        Raises:
            ModelLoadError: the file is missing or not a model ONNX Runtime can run.
        """
        model = cls(load_session(path, threads))
        model.warm_up()
        return model

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Runs the session on ``batch`` and returns its first output."""
        outputs = self._session.run([self.output_name], {self.input_name: batch})
        return np.asarray(outputs[0])

    def input_size(self) -> int | None:
        """Returns the square input size of an ``[N, 3, S, S]`` model, when fixed."""
        height = _fixed_dim(self.input_shape, 2)
        return height if height == _fixed_dim(self.input_shape, 3) else None

    def classes(self) -> int | None:
        """Returns the width of an ``[N, classes]`` output, when fixed."""
        return _fixed_dim(self.output_shape, 1)

    def warm_up(self) -> None:
        """Runs one zero batch, so that the first request pays no lazy initialisation."""
        size = self.input_size() or 224
        self.predict(np.zeros((1, 3, size, size), dtype=np.float32))


def load_session(path: Path, threads: int | None = None) -> Any:
    """Creates the ONNX Runtime session (CPU) for a model file.

    Args:
        path: the ``.onnx`` file.
        threads: intra-op threads; None for :func:`default_threads`.

    Returns:
        The ``onnxruntime.InferenceSession``.

    Raises:
        ModelLoadError: the file is missing or not a model ONNX Runtime can run.
    """
    if not path.is_file():
        raise ModelLoadError(f"model file not found: {path}")
    import onnxruntime as ort  # heavy: loaded only to serve

    options = _session_options(ort, threads or default_threads())
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as error:  # onnxruntime raises its own untyped exception classes
        raise ModelLoadError(f"ONNX Runtime cannot load {path}: {error}") from error


def _session_options(ort: Any, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle pool threads spin by default, taking a core from the client, `chalice local` and
    # the other requests that share this small machine: sleep instead (a little slower).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _fixed_dim(shape: tuple[object, ...], index: int) -> int | None:
    value = shape[index] if len(shape) > index else None
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a graph's signature, as onnxruntime reports it.

    Attributes:
        name: the tensor's name in the graph.
        type: the ONNX type string (``tensor(float)``, ``seq(map(int64,tensor(float)))``).
        dtype: the numpy dtype of a tensor type, None for types numpy does not hold.
        shape: one entry per axis, None for a free (symbolic or unknown) axis; None as a
            whole when even the rank is unknown.
    """

    name: str
    type: str
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None

    @classmethod
    def of(cls, node: Any) -> TensorSpec:
        """Reads an onnxruntime ``NodeArg`` (an item of ``get_inputs()``/``get_outputs()``)."""
        raw = node.shape
        shape = None
        if isinstance(raw, (list, tuple)):
            shape = tuple(dim if isinstance(dim, int) and dim >= 0 else None for dim in raw)
        return cls(str(node.name), str(node.type), ONNX_DTYPES.get(str(node.type)), shape)

    def shape_text(self) -> str:
        """The shape as ``(-1, 4)``: -1 for a free axis, ``(?)`` for an unknown rank."""
        if self.shape is None:
            return "(?)"
        dims = ["-1" if dim is None else str(dim) for dim in self.shape]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    def describe(self) -> str:
        """``features tensor(float) (-1, 4)``, for messages."""
        return f"{self.name} {self.type} {self.shape_text()}"


class OnnxGraph:
    """Any ONNX graph, run by its own signature; ``run()`` is thread-safe."""

    def __init__(self, session: Any) -> None:
        """Wraps a session and reads its signature.

        Raises:
            ModelLoadError: an input is not a tensor type numpy can hold.
        """
        self._session = session
        self.inputs = tuple(TensorSpec.of(node) for node in session.get_inputs())
        self.outputs = tuple(TensorSpec.of(node) for node in session.get_outputs())
        for spec in self.inputs:
            if spec.dtype is None:
                raise ModelLoadError(f"input {spec.name!r} has type {spec.type}, which the "
                                     "tensor kind cannot feed from JSON, CSV or .npy")  # fmt: skip
        if not self.inputs or not self.outputs:
            raise ModelLoadError("the graph has no inputs or no outputs")

    @classmethod
    def load(cls, path: Path, threads: int | None = None) -> OnnxGraph:
        """Creates the session for an ONNX file and runs it once on zeros when it can.

        Args:
            path: the ``.onnx`` file.
            threads: intra-op threads; None for :func:`default_threads`.

        Returns:
            The loaded graph.

        Raises:
            ModelLoadError: the file is missing, not a model ONNX Runtime can run, or has an
                input the tensor kind cannot feed.
        """
        graph = cls(load_session(path, threads))
        graph.warm_up()
        return graph

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        """Runs the graph; returns every output by name (numpy arrays for tensor outputs)."""
        values = self._session.run([spec.name for spec in self.outputs], feeds)
        return dict(zip((spec.name for spec in self.outputs), values, strict=True))

    def warm_up(self) -> None:
        """Runs one batch of zeros (free axes 1), so that the first request pays no lazy
        initialisation; a graph that refuses zeros is only logged, requests will tell."""
        feeds = {}
        for spec in self.inputs:
            shape = tuple(1 if dim is None else dim for dim in spec.shape or (1,))
            dtype = spec.dtype if spec.dtype is not None else np.float32
            feeds[spec.name] = np.zeros(shape, dtype=dtype) if dtype != np.object_ else (
                np.full(shape, "", dtype=object))  # fmt: skip
        try:
            self.run(feeds)
        except Exception as error:  # onnxruntime raises its own untyped exception classes
            LOG.info("warm-up on zeros failed (%s); the first request initialises", error)
