"""How the next token is chosen: greedy at temperature 0, else seeded nucleus sampling."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from emulator.llm.errors import GenerationRefused

# Nucleus sampling sorts only the most likely tokens when they hold top_p of the mass (they
# nearly always do): a full sort of 49,152 probabilities each step costs ~3 ms.
NUCLEUS_CANDIDATES = 512
MAX_TEMPERATURE = 100.0
MAX_SEED = 2**64 - 1


@dataclasses.dataclass(frozen=True)
class Sampling:
    """A request's generation parameters (LMI's and TGI's names).

    Attributes:
        max_new_tokens: at most this many tokens are generated (the end token counts).
        temperature: 0 is greedy (the most likely token, always the same answer).
        top_p: sample from the smallest set of tokens holding this much probability.
        top_k: sample from the k most likely tokens only (None: all of them).
        seed: the same seed, prompt and parameters give the same tokens; None, a fresh one.
        stop: generation ends before the first of these strings; it is not returned (a list
            is taken, and kept as a tuple).
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop, list):  # as JSON gives it
            object.__setattr__(self, "stop", tuple(self.stop))
        _check_int("max_new_tokens", self.max_new_tokens, 1, None)
        _check_number("temperature", self.temperature, 0.0, MAX_TEMPERATURE)
        _check_number("top_p", self.top_p, 0.0, 1.0)
        if self.top_p == 0:
            raise GenerationRefused("top_p must be above 0 and at most 1, got 0", "top_p")
        if self.top_k is not None:
            _check_int("top_k", self.top_k, 1, None)
        if self.seed is not None:
            _check_int("seed", self.seed, 0, MAX_SEED)
        _check_stop(self.stop)


def _check_int(name: str, value: object, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GenerationRefused(f"{name} must be an integer, got {value!r}", name)
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise GenerationRefused(f"{name} must be {bound}, got {value}", name)


def _check_number(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GenerationRefused(f"{name} must be a number, got {value!r}", name)
    if not (math.isfinite(value) and low <= value <= high):
        raise GenerationRefused(f"{name} must be from {low:g} to {high:g}, got {value!r}",
                                name)


def _check_stop(stop: Sequence[object]) -> None:
    if isinstance(stop, str) or not isinstance(stop, tuple):
        raise GenerationRefused("stop must be a list of strings", "stop")
    for index, text in enumerate(stop):
        if not isinstance(text, str) or not text:
            raise GenerationRefused(f"stop[{index}] must be a non-empty string, got {text!r}",
                                    "stop")


class Sampler:
    """Chooses each next token of one generation, with its own random generator."""

    def __init__(self, sampling: Sampling) -> None:
        self._temperature = sampling.temperature
        self._top_p = sampling.top_p
        self._top_k = sampling.top_k
        self._random = np.random.default_rng(sampling.seed)

    def choose(self, logits: np.ndarray) -> tuple[int, float]:
        """The next token and its log-probability under the model (before temperature)."""
        shifted = logits - logits.max()
        log_total = float(np.log(np.exp(shifted).sum()))
        if self._temperature == 0:
            token = int(np.argmax(logits))
        else:
            token = self._sample(shifted / np.float32(self._temperature))
        return token, float(shifted[token]) - log_total

    def _sample(self, scaled: np.ndarray) -> int:
        probabilities = np.exp(scaled - scaled.max())
        probabilities /= probabilities.sum()
        candidates = _nucleus(probabilities, self._top_p, self._top_k)
        weights = probabilities[candidates]
        cumulative = np.cumsum(weights, dtype=np.float64)
        drawn = self._random.random() * cumulative[-1]
        index = int(np.searchsorted(cumulative, drawn, side="right"))
        return int(candidates[min(index, len(candidates) - 1)])


def _nucleus(probabilities: np.ndarray, top_p: float, top_k: int | None = None
             ) -> np.ndarray:
    """The most likely token ids, most likely first: the ``top_k`` most likely (all without
    it), then of those the fewest that hold ``top_p`` of their mass (HF's order)."""
    size = len(probabilities)
    k = size if top_k is None else min(top_k, size)
    if top_p >= 1 and k == size:
        return np.arange(size)
    order = _most_likely(probabilities, min(k, NUCLEUS_CANDIDATES))
    if len(order) < k and (k < size or probabilities[order].sum() < top_p):
        order = np.argsort(-probabilities, kind="stable")[:k]
    cumulative = np.cumsum(probabilities[order], dtype=np.float64)
    # the candidates' own mass when they are all the k tokens, else all of it (1)
    total = cumulative[-1] if len(order) == k else 1.0
    keep = int(np.searchsorted(cumulative, top_p * total, side="left")) + 1
    return order[:keep]


def _most_likely(probabilities: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` most likely token ids, most likely first."""
    top = np.argpartition(-probabilities, count - 1)[:count]
    return top[np.argsort(-probabilities[top], kind="stable")]
