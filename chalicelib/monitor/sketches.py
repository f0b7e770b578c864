"""Deequ's KLL sketch, as Model Monitor's ``statistics.json`` writes it, and its distances.

A numeric feature's distribution is the sketch of Deequ, Model Monitor's analyzer: its
``QuantileNonSample`` (compactors of decreasing capacity) and ``NonSampleCompactor`` (sort, keep
every other item, an odd last item stays behind), ported item for item. Deequ's compactor is
deterministic (its random offset is commented out), so the same values in the same order give the
same sketch as a real Model Monitor run, bit for bit. ``statistics.json`` holds it as
``{"parameters": {"c": 0.64, "k": 2048.0}, "data": [[...], ...]}``: each compactor's buffer
unsorted, level 0 first; an item of level ``h`` stands for ``2**h`` values. Distances are
computed from those levels alone, so a baseline written by Model Monitor compares with a window
written here.

Strings keep Apache DataSketches' frequent-items and HyperLogLog sketches; numbers' distinct
count is a HyperLogLog updated with numpy (:class:`NumberDistinct`).
"""
from __future__ import annotations

import base64
import importlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# datasketches ships no type information: its classes are typed Any here, in one place.
datasketches: Any = importlib.import_module("datasketches")
frequent_strings_sketch: Any = datasketches.frequent_strings_sketch
hll_sketch: Any = datasketches.hll_sketch
hll_union: Any = datasketches.hll_union
NO_FALSE_NEGATIVES: Any = datasketches.frequent_items_error_type.NO_FALSE_NEGATIVES

SKETCH_K = 2048
"""Deequ's sketch size (Model Monitor's ``k``): level 0 holds up to 2,050 items."""
SKETCH_C = 0.64
"""Deequ's ``shrinkingFactor`` (Model Monitor's ``c``): level ``h`` holds about ``k * c**h``."""
NUM_BUCKETS = 10
"""Model Monitor materializes each distribution in 10 buckets (not configurable there)."""
KS_ALPHA = 0.05
"""The Robust method's significance level for the two-sample Kolmogorov-Smirnov test."""
_ITEM_DTYPE = np.dtype("<f8")  # Java's double; little-endian in the saved state


def capacity(height: int, sketch_size: int = SKETCH_K,
             shrinking_factor: float = SKETCH_C) -> int:
    """The capacity of the compactor at ``height`` (Deequ's ``QuantileNonSample.capacity``), in
    Deequ's order of operations. Java's ``Math.pow`` and Python's ``**`` may differ in the last
    bit, which cannot move the ceiling for k=2048, c=0.64: ``1024 * 0.64**h`` is exactly 1024 at
    h = 0, then at least 0.03 from an integer up to h = 26, then a small positive number (ceiling
    1) many bits above its last."""
    return 2 * (math.ceil(sketch_size * shrinking_factor ** height / 2) + 1)


class DeequKll:
    """Deequ's ``QuantileNonSample[Double]`` with its ``NonSampleCompactor`` levels
    (``sketch_size`` is ``k``, ``shrinking_factor`` ``c``)."""

    def __init__(self, sketch_size: int = SKETCH_K,
                 shrinking_factor: float = SKETCH_C) -> None:
        self.sketch_size = sketch_size
        self.shrinking_factor = shrinking_factor
        self._levels: list[np.ndarray] = []
        self._compressions: list[int] = []  # each compactor's numOfCompress
        self._offsets: list[int] = []  # each compactor's offset
        self._capacities: list[int] = []
        self._actual = 0  # compactorActualSize: the items held
        self._total = 0  # compactorTotalSize: the capacities' sum
        self._expand()  # Deequ's constructor makes level 0

    @property
    def levels(self) -> list[np.ndarray]:
        """Each compactor's buffer, level 0 first, in buffer order (read only)."""
        return [level.copy() for level in self._levels]

    @property
    def compressions(self) -> list[int]:
        """Each compactor's ``numOfCompress``."""
        return list(self._compressions)

    @property
    def offsets(self) -> list[int]:
        """Each compactor's ``offset`` (0: the even sorted positions were kept)."""
        return list(self._offsets)

    @property
    def n(self) -> int:
        """The number of values the sketch stands for (its items weighted ``2**level``)."""
        return sum(level.size << height for height, level in enumerate(self._levels))

    @property
    def num_retained(self) -> int:
        return self._actual

    def update(self, values: np.ndarray | Sequence[float]) -> None:
        """Add values in order: the same sketch as Deequ's ``update`` of each in turn. Deequ
        appends an item, then condenses once if the items outnumber the capacities, so values are
        appended in runs between condenses: a few ``numpy`` operations per condense."""
        array = np.asarray(values, dtype=np.float64).ravel()
        start = 0
        while start < array.size:
            # max(1, ...): if the items ever outnumbered the capacities, Deequ would still
            # append one item and condense
            take = min(max(self._total - self._actual + 1, 1), array.size - start)
            self._levels[0] = np.concatenate((self._levels[0], array[start:start + take]))
            self._actual += take
            start += take
            if self._actual > self._total:
                self._condense()

    def merge(self, other: DeequKll) -> None:
        """Fold another sketch into this one as Deequ's ``merge`` does: this one keeps its
        compactors' ``numOfCompress`` and offsets."""
        while len(self._levels) < len(other._levels):
            self._expand()
        for height, items in enumerate(other._levels):
            self._levels[height] = np.concatenate((self._levels[height], items))
        self._actual = self._count()
        while self._actual >= self._total:
            # Deequ loops on ``condense`` alone. While the items reach the capacities' sum, some
            # level reaches its capacity (pigeonhole) and compacting it drops items, so the loop
            # ends; the check only keeps a corrupt saved state from hanging the process.
            if not self._condense():
                break

    def _expand(self) -> None:
        height = len(self._levels)
        self._levels.append(np.empty(0, dtype=np.float64))
        self._compressions.append(0)
        self._offsets.append(0)
        self._capacities.append(capacity(height, self.sketch_size, self.shrinking_factor))
        self._total = sum(self._capacities)

    def _count(self) -> int:
        return sum(level.size for level in self._levels)

    def _condense(self) -> bool:
        """Compact the lowest level at capacity into the next; False if none is."""
        for height, level in enumerate(self._levels):
            if level.size >= self._capacities[height]:
                if height + 1 >= len(self._levels):
                    self._expand()
                output = self._compact(height)
                self._levels[height + 1] = np.concatenate((self._levels[height + 1], output))
                self._actual = self._count()
                return True
        return False

    def _compact(self, height: int) -> np.ndarray:
        """Deequ's ``NonSampleCompactor.compact``."""
        buffer = self._levels[height]
        length = buffer.size - buffer.size % 2
        if self._compressions[height] % 2 == 1:
            # Deequ's random offset on even compactions is commented out: it alternates 0, 1,
            # 1, 0, 0, 1, ... deterministically
            self._offsets[height] = 1 - self._offsets[height]
        ordered = _java_sorted(buffer[:length])
        self._levels[height] = buffer[length:].copy()  # the odd last item, unsorted
        self._compressions[height] += 1
        result: np.ndarray = ordered[self._offsets[height]::2]
        return result

    def to_state(self) -> dict[str, Any]:
        """Everything :meth:`from_state` needs, as JSON (items as base64 doubles, exact)."""
        return {"k": self.sketch_size, "c": self.shrinking_factor,
                "compactors": [
                    {"items": base64.b64encode(level.astype(_ITEM_DTYPE).tobytes()).decode(),
                     "compressions": compressions, "offset": offset}
                    for level, compressions, offset in zip(
                        self._levels, self._compressions, self._offsets, strict=True)]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> DeequKll:
        """The sketch :meth:`to_state` saved.

        Raises:
            ValueError: the state has no compactor or an offset other than 0 or 1.
        """
        sketch = cls(int(state["k"]), float(state["c"]))
        compactors = state["compactors"]
        if not compactors:
            raise ValueError("a saved sketch has at least one compactor")
        while len(sketch._levels) < len(compactors):
            sketch._expand()
        for height, saved in enumerate(compactors):
            offset = int(saved["offset"])
            if offset not in (0, 1):
                raise ValueError(f"compactor {height}: offset {offset} is not 0 or 1")
            items = np.frombuffer(base64.b64decode(saved["items"]), dtype=_ITEM_DTYPE)
            sketch._levels[height] = items.astype(np.float64)
            sketch._compressions[height] = int(saved["compressions"])
            sketch._offsets[height] = offset
        sketch._actual = sketch._count()
        return sketch


def _java_sorted(values: np.ndarray) -> np.ndarray:
    """``values`` sorted as Java's ``Double.compare``: -0.0 before 0.0. numpy orders the two
    zeros as equal, in no given order, and which lands on a kept position would show in the
    sketch. (NaN never reaches a sketch.)"""
    ordered = np.sort(values)
    first = int(np.searchsorted(ordered, 0.0, side="left"))
    last = int(np.searchsorted(ordered, 0.0, side="right"))
    if last > first:
        negative = int(np.signbit(ordered[first:last]).sum())
        ordered[first:first + negative] = -0.0
        ordered[first + negative:last] = 0.0
    return ordered


class NumberDistinct:
    """A HyperLogLog of doubles (``approximate_num_distinct_values``) updated a chunk at a time
    with numpy, where DataSketches' would take one Python call a value.

    Each double's bits are hashed (MurmurHash3's 64-bit finalizer; -0.0 counts as 0.0): the first
    ``lg_k`` bits pick a register, which keeps the longest run of leading zeros of the rest plus
    one; merged by their maximum. The estimate is linear counting while small (a few tenths of a
    percent), the harmonic mean beyond: within about ``1.04 / sqrt(2**lg_k)`` (1.6 % for 12).
    """

    def __init__(self, lg_k: int = 12) -> None:
        self.lg_k = lg_k
        self.registers = np.zeros(1 << lg_k, dtype=np.uint8)

    def update(self, values: np.ndarray) -> None:
        if not values.size:
            return
        lg_k = np.uint64(self.lg_k)
        hashed = (np.asarray(values, dtype=np.float64) + 0.0).view(np.uint64)
        for multiplier in _MIX:
            hashed ^= hashed >> _SHIFT
            hashed *= multiplier
        hashed ^= hashed >> _SHIFT
        index = hashed >> (np.uint64(64) - lg_k)
        # the bits after the index, then a 1 that ends the run: below 2**53, exact in a double
        rest = ((hashed << lg_k) >> (lg_k - np.uint64(1))) | np.uint64(1)
        length = np.frexp(rest.astype(np.float64))[1]
        np.maximum.at(self.registers, index, (66 - self.lg_k - length).astype(np.uint8))

    def merge(self, other: NumberDistinct) -> None:
        np.maximum(self.registers, other.registers, out=self.registers)

    def estimate(self) -> float:
        m = float(self.registers.size)
        zeros = int(np.count_nonzero(self.registers == 0))
        raw = 0.7213 / (1.0 + 1.079 / m) * m * m / float(
            np.ldexp(1.0, -self.registers.astype(np.int64)).sum())
        if raw <= 2.5 * m and zeros:
            return m * math.log(m / zeros)
        return raw

    def to_state(self) -> str:
        return base64.b64encode(self.registers.tobytes()).decode("ascii")

    @classmethod
    def from_state(cls, state: str, lg_k: int = 12) -> NumberDistinct:
        """The counter :meth:`to_state` saved.

        Raises:
            ValueError: not ``2**lg_k`` registers.
        """
        counter = cls(lg_k)
        registers = np.frombuffer(base64.b64decode(state), dtype=np.uint8)
        if registers.size != counter.registers.size:
            raise ValueError(f"a distinct counter of {registers.size} registers, not "
                             f"{counter.registers.size}")
        counter.registers = registers.copy()
        return counter


_MIX = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))
_SHIFT = np.uint64(33)


def new_sketch() -> DeequKll:
    return DeequKll()


def levels(sketch: DeequKll) -> list[list[float]]:
    """Each compactor's buffer as ``statistics.json`` writes it: level 0 first, unsorted."""
    return [level.tolist() for level in sketch.levels]


def sketch_json(sketch: DeequKll) -> dict[str, Any]:
    return {"parameters": {"c": sketch.shrinking_factor, "k": float(sketch.sketch_size)},
            "data": levels(sketch)}


class WeightedCdf:
    """The cumulative distribution of ``statistics.json``'s ``sketch.data`` levels (each item
    weighs ``2**level``)."""

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
            return np.zeros(np.shape(points))
        result: np.ndarray = self.rank(points) / self.n
        return result

    def rank(self, points: np.ndarray) -> np.ndarray:
        """Deequ's ``getRank`` of each point: the weight of the items ``<=`` it."""
        return self._below(np.searchsorted(self.values, points, side="right"))

    def rank_exclusive(self, points: np.ndarray) -> np.ndarray:
        """Deequ's ``getRankExclusive`` of each point: the weight of the items ``<`` it."""
        return self._below(np.searchsorted(self.values, points, side="left"))

    def _below(self, index: np.ndarray) -> np.ndarray:
        # integral weights: the sums are exact in doubles up to 2**53 values
        below: np.ndarray = np.where(index > 0, self._cumulative[np.maximum(index - 1, 0)], 0.0)
        return below


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


def bucket_bounds(low: float, high: float, count: int = NUM_BUCKETS) -> list[float]:
    """The ``count + 1`` bucket bounds from ``low`` to ``high``, as Deequ computes them.

    ``start + (end - start) * i / count`` in this order: Deequ's ``KLLSketch.computeMetricFrom``
    to the last bit (``numpy.linspace`` rounds differently: from 1 to 243, its tenth bound is
    218.79999999999998, Deequ's 218.8). A range near the doubles' own (``-1e308`` to ``1e308``),
    where ``(end - start) * i`` is infinite, is cut as ``start * (1 - t) + end * t`` instead.
    """
    if not math.isfinite((high - low) * count):
        return [low * (1.0 - i / count) + high * (i / count) for i in range(count + 1)]
    return [low + (high - low) * i / float(count) for i in range(count + 1)]


def buckets(cdf: WeightedCdf, low: float, high: float,
            count: int = NUM_BUCKETS) -> list[dict[str, float]]:
    """``count`` equal-width buckets from the feature's exact ``low`` to ``high`` with the weight
    each holds, as Deequ's ``BucketDistribution``: ``[lower, upper)``, the last ``[lower,
    upper]``."""
    if not cdf.n:
        return []
    bounds = np.array(bucket_bounds(low, high, count))
    exclusive = cdf.rank_exclusive(bounds)
    counts = np.diff(exclusive)
    counts[-1] = cdf.rank(bounds[-1:])[0] - exclusive[-2]
    return [{"lower_bound": float(bounds[i]), "upper_bound": float(bounds[i + 1]),
             "count": float(counts[i])} for i in range(count)]
