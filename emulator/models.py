"""Model runners: the :class:`Model` protocol and its ONNX Runtime implementation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Model(Protocol):
    """Maps an input batch to an output batch (one row per input)."""

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Runs the model on ``batch`` and returns its output."""
        ...


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
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        import onnxruntime as ort  # heavy: loaded only to serve

        options = _session_options(ort, threads or default_threads())
        try:
            session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own untyped exception classes
            raise ModelLoadError(f"ONNX Runtime cannot load {path}: {error}") from error
        model = cls(session)
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


def _session_options(ort: Any, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle pool threads spin by default, taking a core from the client, `chalice local` and
    # the other requests that share this small machine: sleep instead (about 1 ms slower).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _fixed_dim(shape: tuple[object, ...], index: int) -> int | None:
    value = shape[index] if len(shape) > index else None
    return value if isinstance(value, int) else None
