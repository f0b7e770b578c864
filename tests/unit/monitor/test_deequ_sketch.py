"""Deequ's KLL sketch as ported: the port against a literal per-item port, and a real run.

The real run is Model Monitor's introduction example: the baseline of its training CSV, as a
2022 run printed it (``tests/fixtures/model_monitor_introduction/real_run.json``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chalicelib.monitor import analysis, sketches
from chalicelib.monitor.sketches import DeequKll, capacity
from sagegate.monitor.datasets import dataset_rows

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "model_monitor_introduction"
ROWS = 2333


class LiteralPort:
    """Deequ's ``QuantileNonSample`` + ``NonSampleCompactor`` line by line, one item at a time
    (Python lists for its ``ArrayBuffer``s): the reference the numpy port must equal."""

    def __init__(self, sketch_size: int = 2048, shrinking_factor: float = 0.64) -> None:
        self.sketch_size, self.shrinking_factor = sketch_size, shrinking_factor
        self.buffers: list[list[float]] = []
        self.num_of_compress: list[int] = []
        self.offset: list[int] = []
        self.actual = self.total = 0
        self.expand()

    def capacity(self, height: int) -> int:
        return 2 * (math.ceil(self.sketch_size * self.shrinking_factor ** height / 2) + 1)

    def expand(self) -> None:
        self.buffers.append([])
        self.num_of_compress.append(0)
        self.offset.append(0)
        self.total = sum(self.capacity(h) for h in range(len(self.buffers)))

    def update(self, item: float) -> None:
        self.buffers[0].append(item)
        self.actual += 1
        if self.actual > self.total:
            self.condense()

    def condense(self) -> None:
        for height in range(len(self.buffers)):
            if len(self.buffers[height]) >= self.capacity(height):
                if height + 1 >= len(self.buffers):
                    self.expand()
                self.buffers[height + 1].extend(self.compact(height))
                self.actual = sum(map(len, self.buffers))
                break

    def compact(self, height: int) -> list[float]:
        buffer = self.buffers[height]
        items = len(buffer)
        length = items - items % 2
        if self.num_of_compress[height] % 2 == 1:
            self.offset[height] = 1 - self.offset[height]
        # java.lang.Double.compare's order: -0.0 before 0.0
        ordered = sorted(buffer[:length], key=lambda x: (x, math.copysign(1.0, x)))
        output = ordered[self.offset[height]:length:2]
        self.buffers[height] = [buffer[items - 1]] if items % 2 else []
        self.num_of_compress[height] += 1
        return output

    def merge(self, that: LiteralPort) -> None:
        while len(self.buffers) < len(that.buffers):
            self.expand()
        for i in range(len(that.buffers)):
            self.buffers[i] = self.buffers[i] + that.buffers[i]
        self.actual = sum(map(len, self.buffers))
        while self.actual >= self.total:
            self.condense()


def _literal(values: np.ndarray, sketch_size: int = 2048) -> LiteralPort:
    port = LiteralPort(sketch_size)
    for value in values.tolist():
        port.update(value)
    return port


def _bulk(values: np.ndarray, chunks: list[int] | None = None,
          sketch_size: int = 2048) -> DeequKll:
    sketch = DeequKll(sketch_size)
    if chunks is None:
        sketch.update(values)
        return sketch
    start = 0
    for size in chunks:
        sketch.update(values[start:start + size])
        start += size
    sketch.update(values[start:])
    return sketch


def _same(sketch: DeequKll, port: LiteralPort) -> None:
    levels = [level.tolist() for level in sketch.levels]
    assert [len(level) for level in levels] == [len(b) for b in port.buffers]
    assert levels == port.buffers
    # bit for bit, signs of zeros included
    assert [[math.copysign(1.0, x) for x in level] for level in levels] == \
        [[math.copysign(1.0, x) for x in b] for b in port.buffers]
    assert sketch.compressions == port.num_of_compress
    assert sketch.offsets == port.offset


def test_capacities_are_deequs() -> None:
    # 2 * (ceil(1024 * 0.64**h) + 1), worked out by hand: 1024, 655.36, 419.43, 268.44, ...
    assert [capacity(h) for h in range(10)] == [2050, 1314, 842, 540, 346, 222, 144, 94, 60, 40]
    assert capacity(20) == 4
    sketch = DeequKll()
    sketch.update(np.arange(2050.0))
    assert (len(sketch.levels), sketch.compressions) == (1, [0])  # 2,050 items fit level 0
    sketch.update(np.array([2050.0]))  # the 2,051st goes past the capacity: one compaction
    assert [len(level) for level in sketch.levels] == [1, 1025]
    assert sketch.levels[0].tolist() == [2050.0]  # the odd last item stays, uncompacted


def test_offsets_alternate_deterministically_and_choose_the_kept_positions() -> None:
    sketch = DeequKll(sketch_size=8)  # level 0 holds 10 items
    offsets, seen = [], 0
    values = np.random.default_rng(1).permutation(200).astype(np.float64)
    for value in values:
        before = sketch.levels[0]
        sketch.update(np.array([value]))
        if sketch.compressions[0] > seen:
            seen = sketch.compressions[0]
            offsets.append(sketch.offsets[0])
            length = before.size + 1 - (before.size + 1) % 2
            ordered = np.sort(np.append(before, value)[:length])
            kept = ordered[offsets[-1]::2]
            assert sketch.levels[1][-kept.size:].tolist() == kept.tolist()
    assert offsets[:10] == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1]


def test_negative_zero_sorts_before_zero_as_in_java() -> None:
    sketch = DeequKll(sketch_size=2)  # level 0 holds 4 items; the 5th compacts
    sketch.update(np.array([0.0, 0.0, -0.0, 5.0, 1.0]))
    kept = sketch.levels[1]
    assert kept.tolist() == [0.0, 0.0]
    assert np.signbit(kept).tolist() == [True, False]  # -0.0, 0.0 out of [-0.0, 0.0, 0.0, 5.0]


@pytest.mark.parametrize("size", [0, 1, 2050, 2051, 2052, 4097, 10_000, 123_457])
def test_a_bulk_update_is_deequs_item_by_item_update(size: int) -> None:
    rng = np.random.default_rng(size)
    values = rng.normal(100, 15, size)
    ties = rng.random(size) < 0.3
    values[ties] = np.round(values[ties])  # equal values too
    port = _literal(values)
    _same(_bulk(values), port)
    chunks = rng.integers(1, 5000, size // 1000 + 1).tolist()
    _same(_bulk(values, chunks), port)


def test_a_small_sketch_with_many_levels_matches_too() -> None:
    values = np.random.default_rng(7).integers(-50, 50, 60_000).astype(np.float64)
    values[::97] = -0.0
    port = _literal(values, sketch_size=16)
    assert len(port.buffers) > 10
    _same(_bulk(values, [1, 2, 3, 1000, 17, 4096] * 5, sketch_size=16), port)


def test_merge_is_deequs_merge() -> None:
    rng = np.random.default_rng(11)
    for first, second in [(100, 50), (3000, 40_000), (40_000, 3000), (25_000, 25_000)]:
        a, b = rng.normal(0, 1, first), rng.normal(1, 2, second)
        mine, theirs = _bulk(a), _bulk(b)
        saved = theirs.to_state()
        port = _literal(a)
        port.merge(_literal(b))
        mine.merge(theirs)
        _same(mine, port)
        assert theirs.to_state() == saved  # the other sketch is left as it was
        assert mine.n == first + second


def test_merge_keeps_this_sketchs_compaction_counts_and_condenses_at_equality() -> None:
    mine, theirs = _bulk(np.arange(1025.0)), _bulk(np.arange(2051.0))
    assert theirs.compressions == [1, 0]
    mine.merge(theirs)
    # 1,025 + 1 + 1,025 items against 2,050 + 1,314 capacities: no compaction, and this
    # sketch's (expanded) compactors keep their counts of 0, as Deequ's merge does
    assert mine.compressions == [0, 0]
    assert [len(level) for level in mine.levels] == [1026, 1025]
    # 2,050 items against 2,050 capacity: Deequ's merge condenses at >=, its update at >
    full = _bulk(np.arange(1025.0))
    full.merge(_bulk(np.arange(1025.0)))
    assert full.compressions == [1, 0]
    assert full.num_retained == 1025
    port = _literal(np.arange(1025.0))
    port.merge(_literal(np.arange(1025.0)))
    _same(full, port)


def test_state_round_trips_and_the_restored_sketch_goes_on_identically() -> None:
    rng = np.random.default_rng(13)
    first, then = rng.normal(0, 1, 77_777), rng.normal(0, 1, 33_333)
    sketch = _bulk(first)
    restored = DeequKll.from_state(json.loads(json.dumps(sketch.to_state())))
    assert [level.tolist() for level in restored.levels] == \
        [level.tolist() for level in sketch.levels]
    assert (restored.compressions, restored.offsets) == (sketch.compressions, sketch.offsets)
    assert 1 in sketch.offsets and 0 in sketch.offsets  # both offsets are carried
    sketch.update(then)
    restored.update(then)
    _same(restored, _literal(np.concatenate((first, then))))
    assert restored.to_state() == sketch.to_state()


def test_a_saved_sketch_with_a_bad_offset_is_refused() -> None:
    state = _bulk(np.arange(5000.0)).to_state()
    state["compactors"][0]["offset"] = 2
    with pytest.raises(ValueError, match="offset"):
        DeequKll.from_state(state)


def test_buckets_count_half_open_intervals_and_close_the_last() -> None:
    cdf = sketches.WeightedCdf([[0.0, 1.0, 1.0, 2.0, 10.0], [5.0]])  # 5.0 weighs 2
    buckets = sketches.buckets(cdf, 0.0, 10.0)
    assert [b["count"] for b in buckets] == [1.0, 2.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0]
    assert buckets[2] == {"lower_bound": 2.0, "upper_bound": 3.0, "count": 1.0}
    assert all(isinstance(b["count"], float) for b in buckets)
    # Deequ's bounds, not numpy.linspace's: from 1 to 243 its 10th bound is 218.8
    assert sketches.bucket_bounds(1.0, 243.0)[9] == 218.8
    assert np.linspace(1.0, 243.0, 11)[9] != 218.8


# ---- a real Model Monitor run ---------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURE / "real_run.json").read_text())
    return document["baseline"]


@pytest.fixture(scope="module")
def ours() -> dict[str, dict[str, Any]]:
    rows = dataset_rows(str(FIXTURE / "training-dataset-with-header.csv"), header=True)
    statistics = json.loads(analysis.baseline(rows)[analysis.STATISTICS])
    assert statistics["dataset"]["item_count"] == ROWS
    return {feature["name"]: feature for feature in statistics["features"]}


@pytest.fixture(scope="module")
def columns() -> dict[str, np.ndarray]:
    path = FIXTURE / "training-dataset-with-header.csv"
    header = path.read_text().splitlines()[0].split(",")
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    assert table.shape == (ROWS, 70)
    return {name: table[:, i] for i, name in enumerate(header)}


def test_the_sketches_start_as_the_real_runs(real_run: dict[str, Any],
                                             ours: dict[str, dict[str, Any]]) -> None:
    assert len(real_run["features_shown"]) == 10
    for shown in real_run["features_shown"]:
        sketch = ours[shown["name"]]["numerical_statistics"]["distribution"]["kll"]["sketch"]
        start = shown["sketch_level0_starts_with"]
        assert sketch["data"][0][:len(start)] == start, shown["name"]
        assert sketch["parameters"] == {"c": shown["kll_c"], "k": shown["kll_k"]}
        assert sketch["parameters"] == {"c": 0.64, "k": 2048.0}


def test_the_moments_and_the_first_bucket_are_the_real_runs(
        real_run: dict[str, Any], ours: dict[str, dict[str, Any]]) -> None:
    for shown in real_run["features_shown"]:
        feature = ours[shown["name"]]
        assert feature["inferred_type"] == shown["inferred_type"]
        numbers = feature["numerical_statistics"]
        assert numbers["common"] == {"num_present": shown["num_present"],
                                     "num_missing": shown["num_missing"]}
        assert round(numbers["mean"], 6) == shown["mean_6dp"], shown["name"]
        assert round(numbers["std_dev"], 6) == shown["std_dev_6dp"], shown["name"]
        # the notebook's table prints floats to 6 decimals: Day Mins' 420,468.4 is a double
        # sum of its values in row order (Spark's) of 420468.3999999996
        assert round(numbers["sum"], 6) == shown["sum"], shown["name"]
        assert (numbers["min"], numbers["max"]) == (shown["min"], shown["max"])
        first = numbers["distribution"]["kll"]["buckets"][0]
        assert first["lower_bound"] == shown["first_bucket_lower_bound"]
        # Deequ: start + (end - start) * i / 10.0; the table cuts the digits (60.37999...)
        assert first["upper_bound"] == shown["min"] + (shown["max"] - shown["min"]) * 1 / 10.0
        assert repr(first["upper_bound"]).startswith(shown["first_bucket_upper_bound_shown"])


def test_every_features_buckets_are_the_exact_counts_within_the_sketchs_error(
        ours: dict[str, dict[str, Any]], columns: dict[str, np.ndarray]) -> None:
    assert list(ours) == list(columns)
    for name, values in columns.items():
        kll = ours[name]["numerical_statistics"]["distribution"]["kll"]
        # 2,333 values: level 0 was compacted once, at 2,051 items (its 2,050 first into
        # level 1's 1,025, the odd last one kept), then took the last 282 values
        assert [len(level) for level in kll["sketch"]["data"]] == [283, 1025], name
        counts = [b["count"] for b in kll["buckets"]]
        assert sum(counts) == ROWS, name
        exact = []
        for i, bucket in enumerate(kll["buckets"]):
            low, high = bucket["lower_bound"], bucket["upper_bound"]
            inside = (values >= low) & ((values <= high) if i == 9 else (values < high))
            exact.append(float(inside.sum()))
        # The one compaction kept every other item of 2,050 sorted ones at weight 2, starting
        # with the first (offset 0): any rank it estimates is the true one or one above, so a
        # count (the difference of two such ranks) is within 1 of the true count.
        assert np.max(np.abs(np.subtract(counts, exact))) <= 1.0, (name, counts, exact)
