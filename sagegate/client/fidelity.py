"""The fidelity promise, measured one way everywhere: an answer sent one way against the
answer to the original has the same top-1, and its top-5 probabilities within
:data:`FIDELITY_BOUND` (the fidelity tests, the CLI's and the page's shrinking, the bench).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

FIDELITY_BOUND = 0.03
"""How far a top-5 probability may move from what sending the original would have given."""


def probability_vector(answer: Mapping[str, Any], classes: int = 1000) -> np.ndarray:
    """An image answer's ``predictions`` (asked with ``k`` >= ``classes``) as one vector."""
    vector = np.zeros(classes)
    for prediction in answer["predictions"]:
        vector[prediction["index"]] = prediction["probability"]
    return vector


def top5_deviation(reference: np.ndarray, other: np.ndarray) -> float:
    top5 = np.argsort(-reference, kind="stable")[:5]
    return float(np.abs(other[top5] - reference[top5]).max())
