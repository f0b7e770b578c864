"""KLL sketches as Model Monitor's ``statistics.json`` writes them, and the distances between them.

A numeric feature's distribution is an Apache DataSketches KLL sketch. ``statistics.json``
holds it as ``{"parameters": {"c": ..., "k": ...}, "data": [[...], [...], ...]}``: the
retained items of each level, level 0 first; an item of level ``h`` stands for ``2**h``
values. The distance between two such distributions is computed from those levels alone, so a
baseline written by Model Monitor's own analyzer (Deequ's KLL, same layout) compares with a
window written here.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# datasketches ships no type information: its classes are typed Any here, in one place.
datasketches: Any = importlib.import_module("datasketches")
kll_doubles_sketch: Any = datasketches.kll_doubles_sketch
frequent_strings_sketch: Any = datasketches.frequent_strings_sketch
hll_sketch: Any = datasketches.hll_sketch
hll_union: Any = datasketches.hll_union
NO_FALSE_NEGATIVES: Any = datasketches.frequent_items_error_type.NO_FALSE_NEGATIVES

SKETCH_K = 2048
"""Deequ's sketch size (``KLLParameters.sketchSize``): a normalized rank error near 0.1 %."""
SKETCH_C = 2.0 / 3.0
"""DataSketches' fixed capacity ratio between levels (Deequ's ``shrinkingFactor`` is 0.64)."""
NUM_BUCKETS = 10
"""Model Monitor materializes each distribution in 10 buckets (not configurable there)."""
KS_ALPHA = 0.05
"""The Robust method's significance level for the two-sample Kolmogorov-Smirnov test."""


def new_sketch() -> Any:
    """An empty sketch with sagegate's parameters."""
    return kll_doubles_sketch(SKETCH_K)


def levels(sketch: Any) -> list[list[float]]:
    """The sketch's retained items grouped by level (weight ``2**level``), level 0 first."""
    by_level: dict[int, list[float]] = {}
    for item, weight in sketch:
        by_level.setdefault(int(weight).bit_length() - 1, []).append(float(item))
    top = max(by_level, default=-1)
    return [sorted(by_level.get(level, [])) for level in range(top + 1)]


def sketch_json(sketch: Any) -> dict[str, Any]:
    """The ``sketch`` object of ``distribution.kll``."""
    return {"parameters": {"c": SKETCH_C, "k": float(sketch.k)}, "data": levels(sketch)}


class WeightedCdf:
    """The cumulative distribution a sketch's levels describe (each item weighs ``2**level``).

    Args:
        data: the ``sketch.data`` levels of ``statistics.json``.
    """

    def __init__(self, data: Sequence[Sequence[float]]) -> None:
        items = [np.asarray(level, dtype=np.float64) for level in data]
        weights = [np.full(len(level), 2.0 ** h) for h, level in enumerate(items)]
        values = np.concatenate(items) if items else np.empty(0)
        weight = np.concatenate(weights) if weights else np.empty(0)
        order = np.argsort(values, kind="stable")
        self.values = values[order]
        self._cumulative = np.cumsum(weight[order])
        self.n = float(self._cumulative[-1]) if self._cumulative.size else 0.0

    def __call__(self, points: np.ndarray) -> np.ndarray:
        """The fraction of values ``<= points``."""
        if not self.n:
            return np.zeros(points.shape)
        index = np.searchsorted(self.values, points, side="right")
        below = np.where(index > 0, self._cumulative[np.maximum(index - 1, 0)], 0.0)
        result: np.ndarray = below / self.n
        return result


def linf_distance(baseline: WeightedCdf, window: WeightedCdf) -> float:
    """The largest absolute difference of the two cumulative distributions (L-infinity)."""
    if not baseline.n or not window.n:
        return 0.0
    points = np.union1d(baseline.values, window.values)
    return float(np.max(np.abs(baseline(points) - window(points))))


def ks_critical(n: float, m: float, alpha: float = KS_ALPHA) -> float:
    """The two-sample KS test's critical distance for samples of ``n`` and ``m`` values."""
    if n <= 0 or m <= 0:
        return math.inf
    return math.sqrt(-math.log(alpha / 2.0) / 2.0) * math.sqrt((n + m) / (n * m))


def buckets(cdf: WeightedCdf, low: float, high: float,
            count: int = NUM_BUCKETS) -> list[dict[str, float]]:
    """``count`` equal-width buckets from ``low`` to ``high`` with the values each holds.

    As Deequ's ``BucketDistribution``: the last bucket includes ``high``.
    """
    if not cdf.n:
        return []
    edges = np.linspace(low, high, count + 1)
    cumulative = cdf(edges) * cdf.n
    cumulative[0] = cdf(np.array([np.nextafter(low, -np.inf)]))[0] * cdf.n
    counts = np.diff(cumulative)
    return [{"lower_bound": float(edges[i]), "upper_bound": float(edges[i + 1]),
             "count": float(round(counts[i], 6))} for i in range(count)]
