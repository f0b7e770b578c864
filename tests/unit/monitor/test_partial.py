"""A window analysed in parts (chalicelib.monitor.partial): parts merged in order give one
pass's statistics (exact counts, first-seen order, categorical counts; moments to the last bits;
the KLL sketch within its error), and a part's state survives its JSON bytes."""
from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from chalicelib.monitor import sketches
from chalicelib.monitor.partial import (
    PartialAnalysis,
    analyse_objects,
    analyse_rows,
    merge_in_order,
)
from chalicelib.monitor.records import RecordReader, Tally
from chalicelib.monitor.statistics import DatasetStatistics, FeatureLimitError

RANK_ERROR = 0.005
"""The KLL sketch's rank error allowed, as a fraction of the values: the sketch (k 2,048)
shows about 0.0002 to 0.0008 here, one pass or merged; a part lost or counted twice moves the
trending feature's distribution by far more."""
MOMENTS_REL = 1e-9
"""Sum, mean and standard deviation: merged by Chan's formulas, one pass by the same formulas
at other chunk boundaries, so equal but for rounding (about 1e-16 relative here); a record
lost or doubled moves them by 1e-4 or more."""


def _rows(count: int, seed: int = 5) -> list[dict[str, Any]]:
    """Rows whose features differ in type and presence: ``x`` trends (its distribution is
    where the rows are), ``c`` is a category, ``late`` appears after the first fifth, ``sparse``
    in one row of three, ``mixed`` is a number or a numeric string."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        row: dict[str, Any] = {"x": index / 50 + rng.gauss(0, 2),
                               "n": rng.randint(-5, 40),
                               "c": rng.choice(["red", "green", "blue", "cyan"]),
                               "mixed": rng.choice([1, "2", 3.5, "4.25"])}
        if index > count // 5:
            row["late"] = rng.random()
        if index % 3 == 0:
            row["sparse"] = rng.choice(["a", "b"])
        rows.append(row)
    return rows


def _cuts(rows: list[dict[str, Any]], sizes: list[int]) -> list[list[dict[str, Any]]]:
    parts, start = [], 0
    for size in sizes:
        parts.append(rows[start:start + size])
        start += size
    parts.append(rows[start:])
    return parts


def _features(statistics: DatasetStatistics) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in statistics.to_json()["features"]}


def assert_same_statistics(one: dict[str, Any], merged: dict[str, Any],
                           values: dict[str, list[float]] | None = None) -> None:
    """``merged`` (parts) has ``one``'s (one pass) statistics: the item count, the features in
    order, their types, counts, minimum and maximum, categorical counts and distinct counts
    exactly; sum, mean and std_dev within :data:`MOMENTS_REL`; each sketch stands for exactly
    the present values, within :data:`RANK_ERROR` of ``values`` (the exact values, when given)
    and of one pass's sketch."""
    assert merged["dataset"] == one["dataset"]
    assert [f["name"] for f in merged["features"]] == [f["name"] for f in one["features"]]
    for mine, theirs in zip(merged["features"], one["features"], strict=True):
        name = mine["name"]
        assert mine["inferred_type"] == theirs["inferred_type"], name
        assert mine.get("sagegate_type_counts") == theirs.get("sagegate_type_counts"), name
        if "string_statistics" in theirs:
            assert mine["string_statistics"] == theirs["string_statistics"], name
            continue
        a, b = mine["numerical_statistics"], theirs["numerical_statistics"]
        assert a["common"] == b["common"], name
        assert (a["min"], a["max"]) == (b["min"], b["max"]), name
        for key in ("sum", "mean", "std_dev"):
            assert a[key] == pytest.approx(b[key], rel=MOMENTS_REL, abs=1e-12), (name, key)
        merged_cdf = sketches.WeightedCdf(a["distribution"]["kll"]["sketch"]["data"])
        one_cdf = sketches.WeightedCdf(b["distribution"]["kll"]["sketch"]["data"])
        assert merged_cdf.n == one_cdf.n == a["common"]["num_present"], name
        assert sketches.linf_distance(one_cdf, merged_cdf) <= 2 * RANK_ERROR, name
        if values is not None and name in values:
            exact = sketches.WeightedCdf([values[name]])
            assert sketches.linf_distance(exact, merged_cdf) <= RANK_ERROR, name
        bounds = [(x["lower_bound"], x["upper_bound"]) for x in a["distribution"]["kll"]
                  ["buckets"]]
        assert bounds == [(x["lower_bound"], x["upper_bound"]) for x in
                          b["distribution"]["kll"]["buckets"]], name
        # (Deequ's last bound, low + (high - low) * 10 / 10, may fall a bit short of the
        # maximum, which then is in no bucket: the counts need not add up to the values)
        counts = [x["count"] for x in a["distribution"]["kll"]["buckets"]]
        for mine_count, one_count in zip(counts, [x["count"] for x in
                                                  b["distribution"]["kll"]["buckets"]],
                                         strict=True):
            assert abs(mine_count - one_count) <= 2 * RANK_ERROR * merged_cdf.n, name


@pytest.mark.parametrize("sizes", [[1, 2, 7000], [4000], [3, 5000, 1, 1, 2000],
                                   [1500] * 7], ids=["tiny-first", "halves", "uneven", "eight"])
def test_parts_merged_in_order_are_one_pass(sizes: list[int]) -> None:
    rows = _rows(12_000)
    one = DatasetStatistics().add_all(rows).to_json()
    parts = [analyse_rows(part) for part in _cuts(rows, sizes)]
    merged = merge_in_order(PartialAnalysis.from_bytes(part.to_bytes()) for part in parts)
    document = merged.statistics.to_json()
    assert_same_statistics(one, document, {"x": [row["x"] for row in rows]})
    # the trending feature's merged sketch is near the truth, not only near one pass's
    names = [f["name"] for f in document["features"]]
    assert names == ["x", "n", "c", "mixed", "sparse", "late"]  # first seen, as one pass


def test_a_lost_part_is_seen() -> None:
    # the checks above can fail: merging all but one part breaks the counts and the sketch
    rows = _rows(12_000)
    one = DatasetStatistics().add_all(rows).to_json()
    parts = [analyse_rows(part) for part in _cuts(rows, [4000, 4000])]
    short = merge_in_order(parts[:2]).statistics.to_json()
    with pytest.raises(AssertionError):
        assert_same_statistics(one, short)
    short["dataset"] = one["dataset"]  # even with the count patched, the sketch tells
    x = {f["name"]: f for f in short["features"]}["x"]["numerical_statistics"]
    cdf = sketches.WeightedCdf(x["distribution"]["kll"]["sketch"]["data"])
    assert sketches.linf_distance(sketches.WeightedCdf([[r["x"] for r in rows]]), cdf) > 0.1


def test_a_state_is_strict_json_and_round_trips() -> None:
    rows = [{"s": "only strings", "x": None}, {"s": "b", "x": float("nan")}]
    part = analyse_rows(rows, Tally(records=2, rows=2, bad_lines=1, first_bad="f:3: not JSON",
                                    bad_objects=1, first_bad_object="g.jsonl.gz: damaged"))
    data = part.to_bytes()
    state = json.loads(data, parse_constant=lambda name: pytest.fail(f"{name} in a state"))
    assert state["kind"] == "sagegate-monitor-partial" and state["version"] == 2
    moments = {f["name"]: f["moments"] for f in state["statistics"]["features"]}
    assert moments["x"][4:] == [None, None]  # no numbers: no infinities in the JSON
    back = PartialAnalysis.from_bytes(data)
    assert back.to_state() == part.to_state()
    assert back.tally == part.tally
    assert math.isinf(back.statistics.features["x"].moments.min)


def test_a_state_of_another_kind_or_version_is_refused() -> None:
    state = analyse_rows([{"x": 1}]).to_state()
    for key, value in (("kind", "something-else"), ("version", 1)):
        with pytest.raises(ValueError, match="not a monitor part's state"):
            PartialAnalysis.from_state({**state, key: value})
    with pytest.raises(ValueError, match="tally"):
        PartialAnalysis.from_state({**state, "tally": {"records": 1}})


def test_tallies_add_and_the_first_bad_line_is_the_first_parts() -> None:
    first = Tally(records=3, rows=2, shadow=1)
    second = Tally(records=5, rows=4, bad_lines=1, first_bad="b.jsonl:2: not JSON")
    third = Tally(records=1, bad_lines=2, first_bad="c.jsonl:1: not JSON", outside_window=1,
                  bad_objects=1, first_bad_object="c.jsonl.gz: damaged")
    merged = merge_in_order(analyse_rows([], tally) for tally in (first, second, third))
    assert merged.tally == Tally(records=9, rows=6, shadow=1, bad_lines=3, outside_window=1,
                                 first_bad="b.jsonl:2: not JSON", bad_objects=1,
                                 first_bad_object="c.jsonl.gz: damaged")


def test_features_past_the_limit_are_refused_by_the_merge_as_by_one_pass() -> None:
    rows = [{"a": 1, "b": 2}, {"c": 3}, {"d": 4, "e": 5}]
    with pytest.raises(FeatureLimitError) as one:
        DatasetStatistics(max_features=4).add_all(rows)
    parts = [analyse_rows([row], max_features=4) for row in rows]  # each within the limit
    with pytest.raises(FeatureLimitError) as merged:
        merge_in_order(parts, max_features=4)
    assert str(merged.value) == str(one.value)


def test_objects_are_read_by_a_reader_and_counted() -> None:
    def line(value: float) -> str:
        return json.dumps({"captureData": {"endpointInput": {
            "observedContentType": "text/csv", "mode": "INPUT", "data": f"{value},x",
            "encoding": "CSV"}}, "eventMetadata": {"eventId": "e"}, "eventVersion": "0"})

    objects = [("a.jsonl", [line(1.0), "not json"]), ("b.jsonl", [line(2.0), "", line(3.5)])]
    part = analyse_objects(RecordReader(), objects)
    assert part.objects == 2
    assert part.tally == Tally(records=3, rows=3, bad_lines=1,
                               first_bad="a.jsonl:2: not JSON")
    features = _features(part.statistics)
    assert features["_c0"]["numerical_statistics"]["sum"] == 6.5
    assert features["_c1"]["string_statistics"]["common"]["num_present"] == 3
