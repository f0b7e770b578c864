"""Statistics: types as the analyzer infers them, exact moments, Deequ's KLL levels, merging."""
from __future__ import annotations

import json
import math
import random
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from chalicelib.monitor import sketches, statistics
from chalicelib.monitor.features import MAX_VALUE_CHARS, FeatureStats, bounded_text, classify
from chalicelib.monitor.statistics import STATE_VERSION, DatasetStatistics


def _stats(rows: list[dict[str, object]], chunk_rows: int = 64) -> dict[str, dict]:
    document = DatasetStatistics(chunk_rows=chunk_rows).add_all(rows).to_json()
    return {f["name"]: f for f in document["features"]}


@pytest.mark.parametrize(("value", "kind"), [
    ("12", "Integral"), ("-3", "Integral"), (7, "Integral"), ("3.5", "Fractional"),
    ("1e-3", "Fractional"), (2.0, "Fractional"), ("abc", "String"), (True, "String"),
    ("", "Unknown"), (None, "Unknown"), (float("nan"), "Unknown"), ("  ", "Unknown"),
    # past the doubles' range: missing, as NaN and infinity are (docs/MONITOR.md)
    (float("inf"), "Unknown"), (10**400, "Unknown"), (-(10**400), "Unknown"),
    ("1" * 400, "Unknown"), ("-" + "1" * 400, "Unknown"), ("1e999", "Unknown"),
    ("Infinity", "Unknown"), (10**300, "Integral"), ("1" * 300, "Integral"),
])
def test_classifies_values_as_the_analyzer_types_them(value: object, kind: str) -> None:
    assert classify(value)[0] == kind


def test_infers_each_features_type_and_counts_missing_values() -> None:
    rows = [{"i": str(n), "f": f"{n / 3:.3f}", "s": f"v{n % 3}", "u": ""} for n in range(100)]
    rows += [{"i": "", "f": "2.5"}]
    stats = _stats(rows)
    assert [stats[n]["inferred_type"] for n in "ifsu"] == \
        ["Integral", "Fractional", "String", "Unknown"]
    common = stats["i"]["numerical_statistics"]["common"]
    assert common == {"num_present": 100, "num_missing": 1}
    assert stats["s"]["string_statistics"]["common"] == {"num_present": 100, "num_missing": 1}


def test_one_string_makes_a_numeric_column_a_string_column() -> None:
    stats = _stats([{"x": str(n)} for n in range(50)] + [{"x": "n/a"}])
    assert stats["x"]["inferred_type"] == "String"
    assert stats["x"]["sagegate_type_counts"] == {"Integral": 50, "Fractional": 0, "String": 1}


def test_moments_are_exact_whatever_the_chunking() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(10, 2, 5000)
    for chunk in (1, 7, 4096):
        numerical = _stats([{"x": float(v)} for v in values], chunk)["x"]["numerical_statistics"]
        assert numerical["mean"] == pytest.approx(values.mean(), rel=1e-12)
        assert numerical["sum"] == pytest.approx(values.sum(), rel=1e-12)
        assert numerical["std_dev"] == pytest.approx(values.std(), rel=1e-9)
        assert (numerical["min"], numerical["max"]) == (values.min(), values.max())


def test_kll_levels_weigh_every_value_and_ten_buckets_count_them_all() -> None:
    rows = [{"x": float(v)} for v in np.random.default_rng(4).uniform(0, 1, 20000)]
    kll = _stats(rows)["x"]["numerical_statistics"]["distribution"]["kll"]
    weights = sum(len(level) * 2 ** h for h, level in enumerate(kll["sketch"]["data"]))
    assert weights == 20000
    assert len(kll["sketch"]["data"]) > 1  # 20,000 values do not fit level 0 of k=2048
    assert kll["sketch"]["parameters"] == {"c": 0.64, "k": 2048.0}
    assert len(kll["buckets"]) == 10
    assert sum(b["count"] for b in kll["buckets"]) == 20000  # integral weights: exact
    counts = [b["count"] for b in kll["buckets"]]
    assert max(counts) - min(counts) < 400  # uniform: about 2,000 each


def test_the_sketch_is_the_same_whatever_the_chunking() -> None:
    values = np.random.default_rng(8).normal(0, 1, 30_000)
    data = [_stats([{"x": float(v)} for v in values], chunk)["x"]["numerical_statistics"]
            ["distribution"]["kll"]["sketch"]["data"] for chunk in (1, 999, 4096)]
    assert data[0] == data[1] == data[2]
    assert data[0][0][-1] == values[-1]  # level 0 in arrival order: the last value last


def test_categorical_buckets_and_distinct_count() -> None:
    rows = [{"c": "abc"[n % 3] * (1 + n % 2)} for n in range(600)]
    strings = _stats(rows)["c"]["string_statistics"]
    assert strings["distinct_count"] == 6
    buckets = {b["value"]: b["count"] for b in strings["distribution"]["categorical"]["buckets"]}
    assert buckets == {"a": 100, "aa": 100, "b": 100, "bb": 100, "c": 100, "cc": 100}


def test_an_hour_merged_into_another_equals_the_two_hours_read_together() -> None:
    rng = random.Random(5)
    first = [{"x": rng.gauss(0, 1), "c": rng.choice("pq")} for _ in range(3000)]
    second = [{"x": rng.gauss(1, 1), "c": rng.choice("pqr"), "new": 1} for _ in range(2000)]
    merged = DatasetStatistics().add_all(first)
    merged.merge(DatasetStatistics().add_all(second))
    together = DatasetStatistics().add_all(first + second).to_json()
    day = merged.to_json()
    assert day["dataset"] == together["dataset"] == {"item_count": 5000}
    a, b = ({f["name"]: f for f in d["features"]} for d in (day, together))
    assert a["new"]["numerical_statistics"]["common"] == {"num_present": 2000,
                                                          "num_missing": 3000}
    for key in ("mean", "sum", "std_dev", "min", "max"):
        assert a["x"]["numerical_statistics"][key] == \
            pytest.approx(b["x"]["numerical_statistics"][key], rel=1e-9)
    assert a["c"]["string_statistics"]["distinct_count"] == 3
    distance = sketches.linf_distance(
        sketches.WeightedCdf(a["x"]["numerical_statistics"]["distribution"]["kll"]["sketch"]
                             ["data"]),
        sketches.WeightedCdf(b["x"]["numerical_statistics"]["distribution"]["kll"]["sketch"]
                             ["data"]))
    assert distance < 0.01


def test_state_round_trips_through_json_and_still_merges() -> None:
    stats = DatasetStatistics().add_all([{"x": n, "s": f"s{n % 4}"} for n in range(1000)])
    saved = json.loads(json.dumps(stats.to_state()))
    restored = DatasetStatistics.from_state(saved)
    restored.merge(DatasetStatistics().add_all([{"x": 5000}]))
    features = {f["name"]: f for f in restored.to_json()["features"]}
    assert restored.item_count == 1001
    assert features["x"]["numerical_statistics"]["max"] == 5000
    assert features["s"]["string_statistics"]["distinct_count"] == 4


def test_a_state_of_another_version_is_refused() -> None:
    saved = DatasetStatistics().add_all([{"x": n} for n in range(10)]).to_state()
    assert saved["version"] == STATE_VERSION == 3
    for old in (1, 2):  # 1: a DataSketches KLL; 2: no numeric distinct counter
        saved["version"] = old
        with pytest.raises(ValueError, match=f"version {old}"):
            DatasetStatistics.from_state(saved)


def test_memory_is_bounded_by_the_sketches_not_the_row_count() -> None:
    feature = FeatureStats("x")
    for start in range(0, 400_000, 4096):
        feature.add([float(v) for v in range(start, start + 4096)])
    assert feature.kll.n == 401_408
    # at most the capacities' sum, about k / (1 - c): 2,050 + 1,314 + 842 + ...
    assert feature.kll.num_retained < 3 * sketches.SKETCH_K


def test_integers_with_signs_and_blanks_are_integral_beside_fractions() -> None:
    feature = FeatureStats("x")
    feature.add(["1", "-2", " 3", "+4", "4.5", "1e3", "7"])
    assert (feature.integral, feature.fractional, feature.present) == (5, 2, 7)


def test_rows_whose_keys_change_are_refused_past_the_feature_limit() -> None:
    from chalicelib.monitor.statistics import FeatureLimitError

    rows = ({f"id-{i}": 1.0} for i in range(10**6))
    with pytest.raises(FeatureLimitError, match="more than 50 distinct features"):
        DatasetStatistics(max_features=50).add_all(rows)
    assert len(DatasetStatistics(max_features=50).add_all(
        {f"f{i % 50}": 1.0} for i in range(500)).features) == 50


def _categories(statistics: DatasetStatistics) -> dict[str, dict[str, int]]:
    return {f["name"]: {b["value"]: b["count"]
                        for b in f["string_statistics"]["distribution"]["categorical"]["buckets"]}
            for f in statistics.to_json()["features"]}


def test_a_merge_keeps_both_windows_categorical_counts() -> None:
    # few values: the frequent-items sketch counts them exactly, so the buckets of the merge
    # are the sums; "new" is only in the second window (merged into a feature made for it)
    first = DatasetStatistics().add_all([{"c": "p"}] * 30 + [{"c": "q"}] * 20)
    second = DatasetStatistics().add_all([{"c": "q"}] * 5 + [{"c": "r", "new": "s"}] * 7)
    first.merge(second)
    assert _categories(first) == {"c": {"p": 30, "q": 25, "r": 7}, "new": {"s": 7}}
    # and so after a round trip through the saved state (hours computed apart make a day)
    day = DatasetStatistics.from_state(json.loads(json.dumps(first.to_state())))
    day.merge(DatasetStatistics().add_all([{"c": "p", "new": "t"}]))
    assert _categories(day) == {"c": {"p": 31, "q": 25, "r": 7}, "new": {"s": 7, "t": 1}}


@pytest.mark.parametrize("chunk", [
    [10**400, 1, 2], [10**400, 1.5, 2], ["1" * 400, "1", "2"], ["1" * 400, "x", "1", "2"],
    [float("nan"), 1, 2], [float("-inf"), 1.5, "2"], ["nan", "1", "2"], [None, "1e999", 1, 2],
])
def test_numbers_no_double_holds_are_missing_whatever_the_chunk_holds(chunk: list[object]) -> None:
    feature = FeatureStats("x")
    feature.add(chunk)
    strings = sum(1 for v in chunk if v == "x")
    assert feature.present == 2 + strings
    assert (feature.moments.count, feature.moments.max) == (2, 2.0)


def test_moments_past_the_doubles_range_are_null_in_the_document_and_the_state() -> None:
    stats = DatasetStatistics().add_all([{"x": 1.5e308}, {"x": 1.6e308}, {"x": -1.0}])
    numbers = stats.to_json()["features"][0]["numerical_statistics"]
    assert (numbers["sum"], numbers["mean"], numbers["std_dev"]) == (None, None, None)
    assert (numbers["min"], numbers["max"]) == (-1.0, 1.6e308)
    bounds = [b["lower_bound"] for b in numbers["distribution"]["kll"]["buckets"]]
    assert bounds[0] == -1.0 and all(math.isfinite(b) for b in bounds)
    assert sum(b["count"] for b in numbers["distribution"]["kll"]["buckets"]) == 3
    state = json.dumps(stats.to_state(), allow_nan=False)  # strict JSON, as parts travel
    restored = DatasetStatistics.from_state(json.loads(state))
    restored.merge(DatasetStatistics().add_all([{"x": 2.0}]))
    numbers = restored.to_json()["features"][0]["numerical_statistics"]
    assert numbers["common"]["num_present"] == 4 and numbers["sum"] is None


def test_numeric_features_have_the_current_analyzers_completeness_and_distinct_count() -> None:
    """A 2026 analyzer run writes numerical_statistics.completeness and
    .approximate_num_distinct_values (CONTRACTS.md section 8)."""
    rows: list[dict[str, object]] = [{"i": n % 250, "f": n / 7, "s": "a"} for n in range(3000)]
    rows += [{"s": "b"}] * 1000  # i and f missing in a quarter of the records
    numbers = {name: f["numerical_statistics"] for name, f in _stats(rows).items() if name != "s"}
    for name, distinct in (("i", 250), ("f", 3000)):
        assert numbers[name]["completeness"] == 0.75
        assert numbers[name]["approximate_num_distinct_values"] == \
            pytest.approx(distinct, rel=0.02)
    assert "completeness" not in _stats(rows)["s"]["string_statistics"]


@pytest.mark.parametrize("distinct", [1, 7, 100, 1000, 5000, 20000, 100_000])
def test_the_numeric_distinct_count_is_within_the_sketchs_error(distinct: int) -> None:
    values = np.random.default_rng(distinct).normal(0, 1e6, distinct)
    feature = FeatureStats("x")
    for _repeat in range(2):  # each value twice: counted once
        for start in range(0, distinct, 4096):
            feature.add(values[start:start + 4096].tolist())
    tolerance = 0.03 if distinct <= 1000 else 0.05  # linear counting, then 3 sigma of 1.6 %
    assert feature.distinct_number_count() == pytest.approx(distinct, rel=tolerance, abs=0.5)


def test_the_numeric_distinct_count_merges_and_survives_the_state() -> None:
    first = DatasetStatistics().add_all([{"x": float(n)} for n in range(600)])
    second = DatasetStatistics().add_all([{"x": float(n)} for n in range(300, 900)])
    second = DatasetStatistics.from_state(json.loads(json.dumps(second.to_state())))
    first.merge(second)
    numbers = first.to_json()["features"][0]["numerical_statistics"]
    assert numbers["approximate_num_distinct_values"] == pytest.approx(900, rel=0.01)
    assert numbers["completeness"] == 1.0
    assert FeatureStats("z").distinct_number_count() == 0
    zeros = FeatureStats("z")
    zeros.add([0.0, -0.0, 0, 1])  # -0.0 is 0.0
    assert zeros.distinct_number_count() == 2


def _long_rows(count: int, chars: int) -> Iterator[dict[str, object]]:
    """Rows of distinct long strings, made one at a time (as records are read)."""
    for index in range(count):
        yield {"text": f"{index:04d}" + "x" * chars, "n": index}


def test_long_strings_are_bounded_in_the_document_and_the_state() -> None:
    """30 records of distinct 8 MB strings wrote a 208 MB statistics.json."""
    stats = DatasetStatistics().add_all(_long_rows(30, 8 * 1024 * 1024))
    document = json.dumps(stats.to_json())
    state = json.dumps(stats.to_state())
    assert len(document) < 30 * 2 * MAX_VALUE_CHARS and len(state) < 30 * 2 * MAX_VALUE_CHARS
    text = stats.to_json()["features"][0]["string_statistics"]
    values = [bucket["value"] for bucket in text["distribution"]["categorical"]["buckets"]]
    assert len(set(values)) == 30 and text["distinct_count"] == 30  # still distinct
    assert all(len(value) == MAX_VALUE_CHARS and value.startswith("00") for value in values)
    assert text["common"] == {"num_present": 30, "num_missing": 0}


def test_a_chunk_never_holds_the_long_strings_it_is_given() -> None:
    """A preprocessor returning 50 MB strings reached 10 GB: the chunk kept every row's."""
    size = 16 * 1024 * 1024
    tracemalloc.start()
    try:
        stats = DatasetStatistics()
        for row in _long_rows(24, size):
            stats.add(row)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.item_count == 0  # all of them in one chunk, not yet flushed
    assert peak < 4 * size  # a row's string and its digest's bytes, not 24 strings


def test_a_chunk_of_long_values_is_flushed_before_its_rows_are_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statistics, "CHUNK_TEXT_CHARS", 100_000)
    stats = DatasetStatistics()
    for index in range(25):
        stats.add({f"c{column}": f"{index}-{column}-" + "v" * 990 for column in range(10)})
    assert stats.item_count == 22  # flushed after rows 11 and 22 (past 100,000 characters)


@pytest.mark.parametrize(("text", "kind", "kept"), [
    ("0" * 2000 + "7", "Integral", "7"), ("-" + "0" * 2000 + "7", "Integral", "-7"),
    ("1" * 2000, "Unknown", None), ("1." + "0" * 2000, "Fractional", "1.0"),
    (" " * 3000 + "short", "String", "short"), ("1" * 2000 + "x", "String", None),
])
def test_a_long_value_is_typed_as_its_whole_text_is(text: str, kind: str,
                                                    kept: str | None) -> None:
    bounded = bounded_text(text)
    assert classify(bounded)[0] == kind if bounded is not None else kind == "Unknown"
    if kept is not None or kind == "Unknown":
        assert bounded == kept
    else:
        assert bounded is not None and len(bounded) == MAX_VALUE_CHARS


@pytest.mark.parametrize(("value", "kind"), [
    # Python's float() reads these, Java's Double.parseDouble (Deequ's) does not: Strings
    ("1_000", "String"), ("-1_0.5", "String"), ("1e1_0", "String"),
    ("\u0661\u0662", "String"), ("\uff11\uff12", "String"), ("\u00b2", "String"),
    ("\u00a012", "String"), ("12\u2003", "String"),
    # read by both alike: a number (Java trims what is <= U+0020)
    ("1e3", "Fractional"), (" 12 ", "Integral"), ("\t-3.5\n", "Fractional"), (".5", "Fractional"),
    ("5.", "Fractional"), ("+7", "Integral"),
    # Java's type suffix and hex floats: Strings here (docs/MONITOR.md says why)
    ("1.5d", "String"), ("2f", "String"), ("0x1p3", "String"),
])
def test_a_text_is_a_number_only_as_javas_double_parsing_reads_one(value: str,
                                                                   kind: str) -> None:
    assert classify(value)[0] == kind
    # and in a chunk of numbers, the fast path of a feature's texts, alike
    feature = FeatureStats("x")
    feature.add(["1", "2.5", value])
    assert feature.strings == (kind == "String")


@pytest.mark.parametrize("blank", ["\u00a0", "\u2003", "\u3000"])
def test_a_long_text_is_trimmed_as_a_short_one_is_only_of_javas_blanks(blank: str) -> None:
    short, long = blank + "0.5", blank + "0." + "1" * (MAX_VALUE_CHARS + 100)
    assert classify(short)[0] == "String"  # Java does not trim a Unicode blank
    bounded = bounded_text(long)
    assert bounded is not None and bounded.startswith(blank)  # not stripped into a number
    assert classify(bounded)[0] == "String"
    # Java's own blanks (U+0000 to U+0020) are trimmed, long and short alike: both numbers
    trimmed = bounded_text("\t\x00 " + long[1:] + "\x1f")
    assert classify("\t\x00 0.5\x1f")[0] == "Fractional"
    assert trimmed is not None and classify(trimmed)[0] == "Fractional"
