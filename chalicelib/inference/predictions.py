"""Pure functions: parse what an endpoint answered, pick the top-k, attach labels.

Parsing never evaluates code (``orjson``, not ``eval``/``ast``); the three shapes image
classifiers answer with are accepted. Top-k is ordered by probability descending, ties broken
by the lower class index, so the result is deterministic.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from chalicelib.core.errors import ConfigurationError, InvalidEndpointResponseError
from chalicelib.registry.labels import read_labels

LABELS_DIR = Path(__file__).resolve().parent.parent / "labels"


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One class of the top-k: ``index`` is its position in the label file (0-based), ``label``
    its name, or the index as text when no label file is configured."""

    index: int
    label: str
    probability: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape clients receive."""
        return {"index": self.index, "label": self.label, "probability": self.probability}


def parse_probabilities(body: bytes, expected: int | None = None) -> np.ndarray:
    """Parse an image classifier's response body into a 1-D float64 array.

    Accepted shapes: a JSON array ``[p0, p1, ...]`` (SageMaker built-in), ``{"prediction":
    [...]}`` (``application/jsonlines``) and ``{"predictions": [[...]]}`` (TF Serving).
    ``expected`` is the label file's class count, if any.

    Raises:
        InvalidEndpointResponseError: not one of those shapes, non-finite values, or a class
            count that disagrees with ``expected``.
    """
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidEndpointResponseError("The endpoint's response is not valid JSON.") from None
    values = _unwrap(document)
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidEndpointResponseError(
            "The endpoint's response is not an array of numbers.") from None
    if array.ndim != 1 or array.size == 0:
        raise InvalidEndpointResponseError(
            "The endpoint's response is not a flat, non-empty array.")
    if not np.isfinite(array).all():
        raise InvalidEndpointResponseError("The endpoint's response holds non-finite values.")
    if expected is not None and array.size != expected:
        raise InvalidEndpointResponseError(
            f"The endpoint returned {array.size} classes; the label file has {expected}.")
    return array


def _unwrap(document: Any) -> Any:
    if isinstance(document, dict):
        if "prediction" in document:
            return document["prediction"]
        predictions = document.get("predictions")
        if isinstance(predictions, list) and len(predictions) == 1:
            return predictions[0]
        raise InvalidEndpointResponseError(
            'The endpoint\'s response has neither "prediction" nor a single "predictions" row.')
    return document


def top_k(probabilities: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, descending, ties broken by the lower index."""
    n = probabilities.size
    if k >= n:
        return np.argsort(-probabilities, kind="stable")
    threshold = np.partition(probabilities, n - k)[n - k]
    candidates = np.flatnonzero(probabilities >= threshold)
    order = np.argsort(-probabilities[candidates], kind="stable")
    return candidates[order[:k]]


def label_predictions(probabilities: np.ndarray, indices: np.ndarray,
                      labels: Sequence[str] | None) -> list[Prediction]:
    """Attach labels to the chosen indices."""
    return [
        Prediction(int(i), labels[i] if labels is not None else str(int(i)),
                   float(probabilities[i]))
        for i in indices.tolist()
    ]


def load_labels(name: str) -> tuple[str, ...] | None:
    """The class names of a label file shipped in ``chalicelib/labels`` (one a line; each file
    read once), in index order; ``name`` may omit ``.txt``, and empty means None (no labels).

    Raises:
        ConfigurationError: the file does not exist, cannot be read or is empty.
    """
    if not name:
        return None
    path = LABELS_DIR / (name if name.endswith(".txt") else name + ".txt")
    if not path.is_file():
        raise ConfigurationError(
            f"LABELS names {path.name}, which is not in chalicelib/labels")
    return read_labels(path, f"LABELS file {path.name}")
