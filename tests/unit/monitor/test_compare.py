"""``sagegate monitor compare``'s comparison (chalicelib.monitor.compare): the distances are
the drift check's own, the top-1 answers and the pairs are counted as documented, each
threshold gates (and fails when its figure cannot be computed), latency percentiles and error
rates, and the report is one self-contained page."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chalicelib.monitor import (
    analysis,
    compare,
    compare_answers,
    compare_report,
    compare_sides,
    constraints,
    partial,
)
from chalicelib.monitor.records import RecordReader
from chalicelib.monitor.statistics import DatasetStatistics
from tests.unit.monitor import experimentgen

Records = list[dict[str, Any]]


def _read(records: Records, name: str, pairing: compare_sides.Pairing,
          preprocessed: bool = False, arm: str | None = None) -> compare_sides.SideRead:
    """One side read as the command reads it (B keeps shadow records; the observer sees
    each record kept)."""
    side = compare_sides.Side(name, pairing, output_columns=not preprocessed, arm=arm)
    reader = RecordReader(include_shadow=name == "b", observe=side)
    lines = [json.dumps(r) for r in records]
    result = partial.analyse_objects(reader, [(f"{name}.jsonl", lines)])
    return compare_sides.SideRead(name, side, result.statistics.to_json(), result.tally)


def _compare(a: Records, b: Records, **thresholds: Any) -> dict[str, Any]:
    pairing = compare_sides.Pairing()
    side_b = _read(b, "b", pairing)
    side_a = _read(a, "a", pairing)
    return compare.compare(side_a, side_b, pairing, compare.Thresholds(**thresholds), None)


def _rows(n: int, seed: int, shift: float = 0.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"x": f"{rng.gauss(shift, 1):.3f}", "n": str(rng.randint(0, 9)),
             "c": rng.choice(["red", "green", "blue"] + (["grey"] if shift else []))}
            for _ in range(n)]


@pytest.mark.parametrize("shift", [0.0, 0.3])
def test_each_distance_is_the_one_the_drift_check_computes(shift: float) -> None:
    first, second = _rows(3000, seed=1), _rows(1200, seed=2, shift=shift)
    base = DatasetStatistics().add_all(first).to_json()
    window = DatasetStatistics().add_all(second).to_json()
    checked = analysis.check(second, base, constraints.suggest(base), title="t")
    expected = {f.name: f.distance for f in checked.evaluation.features}
    features_b = {f["name"]: f for f in window["features"]}
    for feature in base["features"]:
        found = compare.column(feature["name"], feature, features_b[feature["name"]], None,
                               True, compare.Thresholds())
        assert found["distance"] == expected[feature["name"]]  # exactly, not nearly
        assert found["kind"] == ("categorical" if feature["name"] == "c" else "numeric")
    if shift:  # the shifted numbers and the new category are far apart, as the check says
        assert expected["x"] > 0.1 and expected["c"] > 0.1


def test_top1_reads_probability_vectors_batches_and_first_columns() -> None:
    def json_out(document: Any) -> dict[str, str]:
        return {"data": json.dumps(document), "encoding": "JSON"}

    top1 = compare_answers.top1
    assert top1(json_out([0.1, 0.7, 0.2])) == compare_answers.Top1("argmax", (1,))
    assert top1(json_out([[0.1, 0.9], [0.8, 0.2]])) == compare_answers.Top1("argmax", (1, 0))
    assert top1(json_out({"predictions": [[0.3, 0.3, 0.4]]})) == compare_answers.Top1(
        "argmax", (2,))
    assert top1(json_out([0.5, 0.5])) == compare_answers.Top1("argmax", (0,))  # a tie: the first
    # TF Serving scalars, objects, labels: each instance's first output value
    assert top1(json_out({"predictions": [0.3, 0.8]})) == compare_answers.Top1("first_column",
                                                                        (0.3, 0.8))
    assert top1(json_out({"label": "cat", "score": 0.9})) == compare_answers.Top1("first_column",
                                                                           ("cat",))
    assert top1(json_out([{"label": "dog"}])) == compare_answers.Top1("first_column", ("dog",))
    assert top1(json_out([True, 0.2])) == compare_answers.Top1("first_column", ("true",))
    assert top1({"data": "1,0.93\n0.0,0.2\n", "encoding": "CSV"}) == compare_answers.Top1(
        "first_column", (1.0, 0.0))  # numbers as numbers: "1" equals "1.0"
    for nothing in ({"data": "aGk=", "encoding": "BASE64"}, json_out([]),
                    json_out({"predictions": []}), {"data": "[1,", "encoding": "JSON"}, None):
        assert top1(nothing) is None


@pytest.mark.parametrize("output", [
    {"data": "0.93", "encoding": "CSV"}, {"data": "0.1,0.9\r\n", "encoding": "CSV"},
    {"data": "", "encoding": "CSV"}, {"data": "1,2\n3,4", "encoding": "CSV"},
    {"data": '"a,b",c', "encoding": "CSV"},
    *({"data": json.dumps(document), "encoding": "JSON"} for document in (
        {"predictions": [[0.1, 0.2, 0.7]]}, {"predictions": [[0.1], [0.2, 0.8], []]},
        {"predictions": [0.3, None, "cat", True]}, {"predictions": []},
        {"predictions": [[0.1, [0.2]]]}, {"predictions": [0.3, [0.4]]},
        {"predictions": [[1]], "model": "v2"}, [0.2, 0.8], [], [[0.1, 0.9]], 0.7,
        {"label": "cat", "scores": [0.9, 0.1]}, [{"a": 1}]))])
def test_output_columns_are_named_as_the_flattening_names_them(output: dict[str, str]) -> None:
    from chalicelib.monitor.flattening import flatten_record

    expected: dict[str, None] = {}
    for row in flatten_record({"captureData": {"endpointOutput": output}}):
        expected.update(dict.fromkeys(row))
    side = compare_sides.Side("a", compare_sides.Pairing())
    side({"captureData": {"endpointOutput": output}, "eventMetadata": {}})
    assert list(side.outputs) == list(expected)


def _pair(index: int, answer: list[float] | None, shadow: bool = False,
          error: bool = False, latency: float | None = 10.0,
          key: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"inferenceId": key or f"r{index}"}
    if shadow:
        meta["invocationSource"] = "ShadowExperiment"
        meta["sagegateArm"] = "shadow"
    if error:
        meta["sagegateError"] = {"Code": "ModelError", "Message": "500"}
    if latency is not None:
        meta["sagegateLatencyMs"] = latency
    return experimentgen.record([1.0, 2.0, 3.0, 4.0], None if error else answer,
                                experimentgen.HOUR, meta)


def test_pairs_are_counted_by_inference_id() -> None:
    a = [_pair(i, [0.9, 0.1]) for i in range(10)]
    b = [_pair(i, [0.2, 0.8] if i < 2 else [0.6, 0.4], shadow=True) for i in range(8)]
    b[7] = _pair(7, None, shadow=True, error=True)
    b.append(_pair(3, [0.1, 0.9], shadow=True))  # an id seen already: not paired again
    b.append(_pair(99, [0.1, 0.9], shadow=True))  # no A record has it
    agreement = _compare(a, b)["agreement"]
    assert agreement == {
        "key": "eventMetadata.inferenceId", "pairs": 8, "compared": 7, "agreed": 5,
        "agreement": 5 / 7, "note": "", "by": {"argmax": 7, "first_column": 0, "mixed": 0},
        "with_error": 1, "not_comparable": 0, "undefined": 0, "beyond_cap_b": 0,
        "unpaired_a": 2, "unpaired_b": 1,
        "duplicate_ids_b": 1, "disagreements": [{"a": 0, "b": 1, "count": 2}]}


def test_a_batch_pair_agrees_only_when_every_instance_does() -> None:
    def batch(index: int, answers: list[list[float]], shadow: bool = False) -> dict[str, Any]:
        record = _pair(index, [0.0], shadow=shadow)
        record["captureData"]["endpointOutput"]["data"] = json.dumps({"predictions": answers})
        return record

    a = [batch(i, [[0.9, 0.1], [0.2, 0.8]]) for i in range(4)]
    b = [batch(0, [[0.7, 0.3], [0.1, 0.9]], True), batch(1, [[0.7, 0.3], [0.6, 0.4]], True),
         batch(2, [[0.1, 0.9], [0.6, 0.4]], True), batch(3, [[0.1, 0.9], [0.6, 0.4]], True)]
    agreement = _compare(a, b)["agreement"]
    assert (agreement["compared"], agreement["agreed"]) == (4, 1)
    assert agreement["disagreements"] == [{"a": [0, 1], "b": [1, 0], "count": 2},
                                          {"a": [0, 1], "b": [0, 0], "count": 1}]


def test_two_independent_arms_have_no_agreement() -> None:
    a = [_pair(i, [0.9, 0.1], key=f"a{i}") for i in range(5)]
    b = [_pair(i, [0.9, 0.1], key=f"b{i}") for i in range(5)]
    document = _compare(a, b, min_agreement=0.5)
    assert document["agreement"]["agreement"] is None
    assert document["agreement"]["unpaired_a"] == 5
    assert document["agreement"]["unpaired_b"] == 5
    assert document["agreement"]["note"].startswith("n/a: no record of B has")
    assert document["verdict"]["failed"] == ["min_agreement"]  # not passed on nothing
    assert "cannot be checked" in document["verdict"]["reasons"][0]


def test_error_rates_come_from_error_records_only() -> None:
    a = [_pair(i, [0.9, 0.1]) for i in range(50)]
    b = [_pair(i, [0.9, 0.1], shadow=True, error=i % 10 == 0) for i in range(50)]
    document = _compare(a, b, max_error_rate=0.1)
    assert document["a"]["errors"]["rate"] is None  # a primary's failures are not captured
    assert document["a"]["errors"]["note"] == compare_sides.PRIMARY_ERRORS_NOTE
    assert document["b"]["errors"] == {"count": 5, "records": 50, "rate": 0.1, "note": "",
                                       "codes": {"ModelError": 5}}
    assert not document["verdict"]["worse"]  # 10 % is not above 10 %
    assert document["b"]["rows"] == 45  # a failed call's record is not in the distributions
    assert _compare(a, b, max_error_rate=0.09)["verdict"]["failed"] == ["max_error_rate"]
    clean = [_pair(i, [0.9, 0.1], shadow=True) for i in range(50)]
    assert _compare(a, clean)["b"]["errors"]["rate"] == 0.0  # a shadow's records say it
    two_arms = _compare(a, [_pair(i, [0.9, 0.1], key=f"b{i}") for i in range(5)],
                        max_error_rate=0.5)
    assert two_arms["b"]["errors"]["rate"] is None
    assert two_arms["verdict"]["failed"] == ["max_error_rate"]


def test_latency_percentiles_and_their_ratio_gate() -> None:
    rng = random.Random(4)
    fast = [round(rng.uniform(5, 50), 3) for _ in range(300)]
    slow = [round(value * 1.5, 3) for value in fast]
    a = [_pair(i, [0.9, 0.1], latency=v) for i, v in enumerate(fast)]
    b = [_pair(i, [0.9, 0.1], shadow=True, latency=v) for i, v in enumerate(slow)]
    b.append(_pair(300, [0.9, 0.1], shadow=True, latency=None))  # no latency: not counted
    document = _compare(a, b, max_latency_ratio=1.4)
    for p in (50, 90, 99):
        assert document["a"]["latency_ms"][f"p{p}"] == float(np.percentile(fast, p))
        assert document["b"]["latency_ms"][f"p{p}"] == float(np.percentile(slow, p))
        assert document["latency_ratio"][f"p{p}"] == pytest.approx(1.5, rel=1e-3)
    assert document["b"]["latency_ms"]["count"] == 300
    assert len(document["verdict"]["reasons"]) == 3  # p50, p90 and p99, one a line
    assert not _compare(a, b, max_latency_ratio=1.6)["verdict"]["worse"]
    none = _compare(a, [_pair(i, [0.9, 0.1], shadow=True, latency=None) for i in range(9)],
                    max_latency_ratio=2.0)
    assert none["b"]["latency_ms"]["p50"] is None
    assert none["verdict"]["failed"] == ["max_latency_ratio"]


def _probability_records(n: int, seed: int, shift: float = 0.0, shadow: bool = False,
                         input_shift: float = 0.0) -> Records:
    rng = random.Random(seed)
    records = []
    for index in range(n):
        p = min(max(rng.gauss(0.6 + shift, 0.1), 0.0), 1.0)
        meta: dict[str, Any] = {"inferenceId": f"r{index}"}
        if shadow:
            meta["invocationSource"] = "ShadowExperiment"
        features = [round(rng.gauss(input_shift, 1), 3), 1.0, 2.0, 3.0]
        records.append(experimentgen.record(features, [round(p, 4), round(1 - p, 4)],
                                            experimentgen.HOUR, meta))
    return records


def test_max_distance_gates_the_output_columns_only() -> None:
    a = _probability_records(2000, seed=1)
    b = _probability_records(2000, seed=2, shadow=True, input_shift=1.0)  # inputs moved
    document = _compare(a, b, max_distance=0.1)
    assert document["columns_gated"] == "output"
    outputs = [c["name"] for c in document["columns"] if c["output"]]
    assert outputs == ["prediction0", "prediction1"]  # listed first
    feature0 = next(c for c in document["columns"] if c["name"] == "feature0")
    assert feature0["distance"] > 0.3 and feature0["gated"] is False
    assert feature0["beyond"] is None
    assert not document["verdict"]["worse"]
    moved = _compare(a, _probability_records(2000, seed=2, shift=0.1, shadow=True),
                     max_distance=0.1)
    assert moved["verdict"]["failed"] == ["max_distance"]
    assert [r.split(":")[0] for r in moved["verdict"]["reasons"]] == ["prediction0",
                                                                       "prediction1"]


def test_robust_needs_the_ks_critical_distance_too_and_simple_does_not() -> None:
    a = _probability_records(60, seed=1)
    b = _probability_records(60, seed=3, shift=0.05, shadow=True)
    robust = _compare(a, b, max_distance=0.05)
    column = robust["columns"][0]
    assert column["name"] == "prediction0"
    assert 0.05 < column["distance"] < column["critical"]  # beyond X, within the noise
    assert column["beyond"] is False and not robust["verdict"]["worse"]
    simple = _compare(a, b, max_distance=0.05, comparison_method="Simple")
    assert simple["columns"][0]["beyond"] is True
    assert "max_distance" in simple["verdict"]["failed"]


def test_an_output_column_on_one_side_only_fails_the_distance_gate() -> None:
    a = [_pair(i, [0.9, 0.1]) for i in range(20)]
    b = [_pair(i, [0.9, 0.1, 0.0], shadow=True) for i in range(20)]
    document = _compare(a, b, max_distance=0.5)
    assert document["only_b"] == [{"name": "prediction2", "output": True}]
    assert document["verdict"]["reasons"] == [
        "prediction2: an output column A does not have: --max-distance cannot be checked"]


def test_without_thresholds_there_is_no_verdict_and_nothing_fails() -> None:
    a = _probability_records(200, seed=1)
    b = _probability_records(200, seed=2, shift=0.3, shadow=True)
    document = _compare(a, b)
    assert document["verdict"] == {"worse": False, "exit_status": 0, "checked": [],
                                   "failed": [], "reasons": [], "nothing_compared": False,
                                   "column_reasons": 0}
    assert document["thresholds"] == {"max_distance": None, "min_agreement": None,
                                      "max_error_rate": None, "max_latency_ratio": None,
                                      "comparison_method": "Robust"}
    assert compare.lines(document)[-1] == "verdict: no threshold given (exit 0)"


def test_with_a_preprocessor_every_column_is_gated() -> None:
    pairing = compare_sides.Pairing()
    b = _read(_probability_records(300, seed=2, shadow=True, input_shift=1.0), "b", pairing,
              preprocessed=True)
    a = _read(_probability_records(300, seed=1), "a", pairing, preprocessed=True)
    document = compare.compare(a, b, pairing, compare.Thresholds(max_distance=0.2), None,
                               preprocessed=True)
    assert document["columns_gated"] == "all"
    assert {c["output"] for c in document["columns"]} == {None}
    assert document["verdict"]["failed"] == ["max_distance"]  # feature0 moved
    assert document["verdict"]["reasons"][0].startswith("feature0: distance")


def test_an_arm_is_chosen_where_two_experiments_share_an_endpoints_folder() -> None:
    def of_arm(record: dict[str, Any], arm: str | None) -> dict[str, Any]:
        if arm is not None:
            record["eventMetadata"]["sagegateArm"] = arm
        return record

    # A's folder: the shadow test's primary and another test's arm; B's: its shadow and an arm
    a = [of_arm(_pair(i, [0.9, 0.1]), "primary") for i in range(6)] + \
        [of_arm(_pair(i, [0.1, 0.9], key=f"ab{i}"), "float") for i in range(4)] + \
        [_pair(i, [0.1, 0.9], key=f"none{i}") for i in range(2)]
    b = [of_arm(_pair(i, [0.9, 0.1], shadow=True), "shadow-int8") for i in range(6)] + \
        [of_arm(_pair(i, [0.1, 0.9], key=f"int8-{i}"), "int8") for i in range(3)]
    pairing = compare_sides.Pairing()
    side_b = _read(b, "b", pairing, arm="shadow-int8")
    side_a = _read(a, "a", pairing, arm="primary")
    document = compare.compare(side_a, side_b, pairing,
                               compare.Thresholds(max_error_rate=0.0), None)
    assert (document["a"]["records"], document["a"]["rows"]) == (6, 6)
    assert (document["a"]["arm"], document["a"]["other_arms"]) == ("primary", 6)
    assert (document["b"]["records"], document["b"]["other_arms"]) == (6, 3)
    assert document["a"]["arms"] == {"primary": 6} and document["b"]["arms"] == {
        "shadow-int8": 6}
    agreement = document["agreement"]
    assert (agreement["compared"], agreement["agreed"]) == (6, 6)
    assert (agreement["unpaired_a"], agreement["unpaired_b"]) == (0, 0)
    assert document["b"]["errors"]["rate"] == 0.0  # every record kept is a shadow's
    assert not document["verdict"]["worse"]
    assert "(arm primary; 6 other record(s) left out)" in compare.lines(document)[0]
    every = _compare(a, b, max_error_rate=0.0)  # without arms: a mix, no error rate
    assert every["b"]["errors"]["rate"] is None and every["verdict"]["worse"]


def test_a_shadow_side_is_kept_and_the_primary_side_skips_shadows() -> None:
    records = _probability_records(10, seed=1, shadow=True)
    pairing = compare_sides.Pairing()
    b = _read(records, "b", pairing)
    a = _read(records, "a", pairing)
    assert (b.side.records, b.tally.rows, b.tally.shadow) == (10, 10, 0)
    assert (a.side.records, a.tally.rows, a.tally.shadow) == (0, 0, 10)


def test_the_document_is_strict_json_and_the_report_is_self_contained(
        tmp_path: Path) -> None:
    experiment = experimentgen.experiment(tmp_path, 400, disagree_every=5, error_every=50)
    pairing = compare_sides.Pairing()
    b = _read(experiment.shadow.records, "b", pairing)
    a = _read(experiment.primary.records, "a", pairing)
    document = compare.compare(a, b, pairing, compare.Thresholds(
        max_distance=0.1, min_agreement=0.9, max_error_rate=0.05, max_latency_ratio=1.5),
        None)
    assert document["agreement"]["compared"] == experiment.compared
    assert document["agreement"]["agreed"] == experiment.agreed
    assert document["verdict"]["failed"] == ["min_agreement"]
    json.loads(analysis.dumps(document))  # no NaN, no infinity
    page = compare_report.render(document, a.statistics, b.statistics)
    assert "WORSE" in page and "below --min-agreement 90.00%" in page
    for forbidden in ("<script", "style=", "<link", "http://", "https://", "@import", "url("):
        assert forbidden not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert len(re.findall(r'<svg class="chart"', page)) == len(document["columns"])


def _base64_side(n: int, shadow: bool, latency: bool = True, ids: bool = True) -> Records:
    """Records whose input and output are BASE64 (an image model's bytes): nothing to
    flatten, no answer to read."""
    records = []
    for index in range(n):
        record = _pair(index, [0.9, 0.1], shadow=shadow, latency=10.0 if latency else None,
                       key=None if ids else f"{'b' if shadow else 'a'}{index}")
        for key in ("endpointInput", "endpointOutput"):
            record["captureData"][key].update(data="aGVsbG8=", encoding="BASE64")
        records.append(record)
    return records


def test_max_distance_fails_when_no_column_was_compared() -> None:
    a, b = _base64_side(20, shadow=False), _base64_side(20, shadow=True)
    document = _compare(a, b, max_distance=0.1)
    assert document["columns"] == []
    assert document["verdict"]["failed"] == ["max_distance"]  # not "within every threshold"
    assert document["verdict"]["reasons"] == [
        "no column compared (0 row(s) in A, 0 in B): --max-distance cannot be checked"]
    assert document["verdict"]["exit_status"] == 3  # the pairs' latencies were compared
    assert compare.lines(document)[-2].startswith("verdict: B is worse than A by 1 reason")


def test_a_preprocessor_dropping_every_record_fails_max_distance() -> None:
    pairing = compare_sides.Pairing()
    sides = {}
    for name, shadow in (("b", True), ("a", False)):
        side = compare_sides.Side(name, pairing, output_columns=False)
        reader = RecordReader(lambda _record, _where: None, include_shadow=name == "b",
                              observe=side)
        lines = [json.dumps(r) for r in _probability_records(50, seed=1, shadow=shadow)]
        result = partial.analyse_objects(reader, [(f"{name}.jsonl", lines)])
        sides[name] = compare_sides.SideRead(name, side, result.statistics.to_json(), result.tally)
    document = compare.compare(sides["a"], sides["b"], pairing,
                               compare.Thresholds(max_distance=0.1), None, preprocessed=True)
    assert (document["a"]["rows"], document["b"]["rows"]) == (0, 0)
    assert document["verdict"]["failed"] == ["max_distance"]
    assert document["verdict"]["worse"]


def test_nothing_compared_at_all_is_exit_4_whatever_the_thresholds() -> None:
    a = _base64_side(10, shadow=False, latency=False, ids=False)
    b = _base64_side(10, shadow=False, latency=False, ids=False)
    for thresholds in ({}, {"max_distance": 0.1},
                       {"max_distance": 0.1, "min_agreement": 0.9, "max_latency_ratio": 2.0}):
        document = _compare(a, b, **thresholds)
        verdict = document["verdict"]
        assert verdict["nothing_compared"] and verdict["exit_status"] == 4, thresholds
        assert not verdict["worse"]
        printed = compare.lines(document)
        verdict_line = next(line for line in printed if line.startswith("verdict:"))
        assert verdict_line == f"verdict: nothing compared: {compare.NOTHING_COMPARED} (exit 4)"
        assert len(verdict["reasons"]) == len(printed) - printed.index(verdict_line) - 1
    page = compare_report.render(document, {}, {})
    assert "nothing compared" in page and "NOTHING" in page


def _columns_document(distances: list[float], gated: bool = True) -> dict[str, Any]:
    """A document of many columns (an image classifier's), for the printed lines."""
    columns = [{"name": f"prediction{i}", "output": True, "kind": "numeric", "distance": d,
                "method": "Simple", "critical": None, "gated": gated, "beyond": False,
                "note": ""} for i, d in enumerate(distances)]
    return {"columns": columns}


def test_the_distances_printed_say_what_a_distance_is_and_count_the_ties_left_out() -> None:
    distances = [1.0] * 105 + [0.5] * 895
    random.Random(1).shuffle(distances)
    printed = compare._distance_lines(_columns_document(distances)["columns"])
    assert printed[0] == compare.DISTANCE_HEADER
    assert "0 (the same) to 1 (apart)" in printed[0]
    assert len(printed) == 1 + compare.PRINTED_COLUMNS + 1
    assert all(line.endswith(": 1 (Simple)") for line in printed[1:-1])
    assert printed[-1].startswith("... and 980 more column(s): 85 more at distance 1, "
                                  "895 smaller (the 20 above")
    few = compare._distance_lines(_columns_document([0.3, 0.2])["columns"])
    assert few == [compare.DISTANCE_HEADER, "distance prediction0 (output): 0.3 (Simple)",
                   "distance prediction1 (output): 0.2 (Simple)"]
    assert compare._distance_lines([]) == []


def test_the_columns_left_out_count_larger_ungated_and_missing_distances() -> None:
    gated = _columns_document([0.4] * 25)["columns"]
    inputs = _columns_document([0.9] * 3 + [0.1] * 2, gated=False)["columns"]
    missing = _columns_document([0.0])["columns"]
    missing[0].update(distance=None, note="n/a: no values on a side")
    printed = compare._distance_lines(gated + inputs + missing)
    assert printed[-1].startswith("... and 11 more column(s): 5 more at distance 0.4, "
                                  "2 smaller, 3 larger, not gated, 1 without a distance (")


def test_a_zero_ms_latency_of_a_gives_no_ratio_and_fails_the_latency_gate() -> None:
    a = [_pair(i, [0.9, 0.1], latency=0.0) for i in range(20)]
    b = [_pair(i, [0.9, 0.1], shadow=True, latency=5.0) for i in range(20)]
    document = _compare(a, b, max_latency_ratio=2.0)  # no ZeroDivisionError
    assert document["latency_ratio"] == {"p50": None, "p90": None, "p99": None}
    assert document["verdict"]["failed"] == ["max_latency_ratio"]
    assert document["verdict"]["reasons"][0] == (
        "latency p50: n/a (A 0 ms, B 5 ms: no ratio to A's 0 ms): "
        "--max-latency-ratio cannot be checked")
    slow = [_pair(i, [0.9, 0.1], latency=5.0) for i in range(20)]
    fast = _compare(slow, [_pair(i, [0.9, 0.1], shadow=True, latency=0.0) for i in range(20)],
                    max_latency_ratio=1.0)
    assert fast["latency_ratio"]["p50"] == 0.0  # B at 0 ms over A's 5: a ratio of 0
    assert not fast["verdict"]["worse"]
    json.loads(analysis.dumps(document))


def _agreeing(agreed: int, of: int) -> tuple[Records, Records]:
    a = [_pair(i, [0.9, 0.1]) for i in range(of)]
    b = [_pair(i, [0.9, 0.1] if i < agreed else [0.1, 0.9], shadow=True) for i in range(of)]
    return a, b


@pytest.mark.parametrize(("agreed", "worse"), [(9, False), (10, False), (8, True)])
def test_agreement_fails_only_below_min_agreement(agreed: int, worse: bool) -> None:
    document = _compare(*_agreeing(agreed, 10), min_agreement=0.9)
    assert document["verdict"]["worse"] is worse
    if worse:
        assert document["verdict"]["reasons"] == [
            "agreement 80.00% (8 of 10 pairs) is below --min-agreement 90.00%"]


@pytest.mark.parametrize(("errors", "worse"), [(1, False), (0, False), (2, True)])
def test_the_error_rate_fails_only_above_max_error_rate(errors: int, worse: bool) -> None:
    a = [_pair(i, [0.9, 0.1]) for i in range(10)]
    b = [_pair(i, [0.9, 0.1], shadow=True, error=i < errors) for i in range(10)]
    document = _compare(a, b, max_error_rate=0.1)
    assert document["verdict"]["worse"] is worse
    if worse:
        assert document["verdict"]["reasons"] == [
            "B's error rate 20.00% (2 of 10 records) is above --max-error-rate 10.00%"]


@pytest.mark.parametrize(("factor", "worse"), [(2.0, False), (0.5, False), (2.5, True)])
def test_latency_fails_only_above_max_latency_ratio(factor: float, worse: bool) -> None:
    a = [_pair(i, [0.9, 0.1], latency=10.0) for i in range(10)]
    b = [_pair(i, [0.9, 0.1], shadow=True, latency=10.0 * factor) for i in range(10)]
    document = _compare(a, b, max_latency_ratio=2.0)
    assert document["verdict"]["worse"] is worse
    if worse:
        assert document["verdict"]["reasons"] == [
            f"latency p{p}: B's 25 ms is 2.5 times A's 10 ms, above --max-latency-ratio 2"
            for p in (50, 90, 99)]


def test_a_distance_at_max_distance_is_within_and_past_it_is_beyond() -> None:
    a = [_pair(i, [0.9, 0.1]) for i in range(10)]
    b = [_pair(i, [0.9, 0.1] if i < 8 else [0.7, 0.3], shadow=True) for i in range(10)]
    at = _compare(a, b, max_distance=0.2, comparison_method="Simple")
    assert {c["name"]: c["distance"] for c in at["columns"] if c["output"]} == {
        "prediction0": pytest.approx(0.2), "prediction1": pytest.approx(0.2)}
    assert not at["verdict"]["worse"]
    past = _compare(a, b, max_distance=0.19, comparison_method="Simple")
    assert past["verdict"]["reasons"] == [
        f"prediction{i}: distance 0.2 (Simple) is above --max-distance 0.19" for i in (0, 1)]


def test_each_failed_threshold_is_one_reason_in_the_thresholds_order() -> None:
    a = [_pair(i, [0.9, 0.1], latency=10.0) for i in range(10)]
    b = [_pair(i, [0.1, 0.9], shadow=True, latency=30.0, error=i == 0) for i in range(10)]
    document = _compare(a, b, max_distance=0.5, min_agreement=0.5, max_error_rate=0.05,
                        max_latency_ratio=2.0, comparison_method="Simple")
    verdict = document["verdict"]
    assert verdict["checked"] == ["max_distance", "min_agreement", "max_error_rate",
                                  "max_latency_ratio"]
    assert verdict["failed"] == verdict["checked"]
    assert verdict["reasons"] == [
        "prediction0: distance 1 (Simple) is above --max-distance 0.5",
        "prediction1: distance 1 (Simple) is above --max-distance 0.5",
        "agreement 0.00% (0 of 9 pairs) is below --min-agreement 50.00%",
        "B's error rate 10.00% (1 of 10 records) is above --max-error-rate 5.00%",
        "latency p50: B's 30 ms is 3 times A's 10 ms, above --max-latency-ratio 2",
        "latency p90: B's 30 ms is 3 times A's 10 ms, above --max-latency-ratio 2",
        "latency p99: B's 30 ms is 3 times A's 10 ms, above --max-latency-ratio 2"]
    printed = compare.lines(document)
    assert printed[-8] == "verdict: B is worse than A by 7 reason(s) (exit 3)"
    assert printed[-7:] == [f"worse: {reason}" for reason in verdict["reasons"]]


def test_a_side_read_in_a_worker_comes_back_with_its_pairing() -> None:
    import pickle

    pairing = compare_sides.Pairing()
    b = [_pair(i, [0.9, 0.1], shadow=True, error=i == 0) for i in range(4)]
    side_b = pickle.loads(pickle.dumps(_read(b, "b", pairing).side))  # as from a worker
    assert side_b.pairing is not pairing
    a = [_pair(i, [0.9, 0.1]) for i in range(4)]
    side_a = compare_sides.Side("a", side_b.pairing)
    for record in a:
        side_a(record)
    agreement = side_b.pairing.document()
    assert (agreement["pairs"], agreement["with_error"], agreement["compared"]) == (4, 1, 3)
    assert pickle.loads(pickle.dumps(compare_sides.FAILED)) is compare_sides.FAILED


def test_the_report_puts_the_failed_figures_first_and_names_classes() -> None:
    a = [_pair(i, [0.9, 0.1, 0.0]) for i in range(10)]
    b = [_pair(i, [0.1, 0.9, 0.0] if i < 5 else [0.9, 0.1, 0.0], shadow=True, latency=30.0)
         for i in range(10)]
    document = _compare(a, b, min_agreement=0.9, max_latency_ratio=2.0)
    assert document["verdict"]["failed"] == ["min_agreement", "max_latency_ratio"]
    page = compare_report.render(document, {}, {}, ["cat", "dog", "fox"])
    order = [page.index(f'<h2 id="{anchor}"') for anchor in
             ("verdict", "agreement", "latency", "thresholds", "columns", "errors")]
    assert order == sorted(order)
    contents = re.findall(r'<a href="#([a-z-]+)">', page)
    assert contents == ["verdict", "agreement", "latency", "thresholds", "columns", "errors"]
    assert "<td>cat (0)</td><td>dog (1)</td>" in page
    assert "prediction1 (dog)" in page and "prediction2 (fox)" in page
    plain = compare_report.render(document, {}, {})
    assert "<td>0</td><td>1</td>" in plain and "prediction1 (" not in plain


def test_the_worse_lines_of_failed_columns_are_capped_as_the_distances_are() -> None:
    rng = random.Random(3)
    wide = compare.PRINTED_COLUMNS + 25
    a = [_pair(i, [rng.uniform(0.0, 0.4) for _ in range(wide)]) for i in range(40)]
    b = [_pair(i, [rng.uniform(0.6, 1.0) for _ in range(wide)], shadow=True)
         for i in range(40)]
    document = _compare(a, b, max_distance=0.5, min_agreement=1.0,
                        comparison_method="Simple")
    reasons = document["verdict"]["reasons"]
    assert len(reasons) >= wide + 1  # compare.json keeps every reason
    printed = compare.lines(document)
    worse = [line for line in printed if line.startswith("worse: ")]
    columns = [line for line in worse if "--max-distance" in line]
    assert columns[:compare.PRINTED_COLUMNS] == [
        f"worse: {reason}" for reason in reasons[:compare.PRINTED_COLUMNS]]
    assert len(columns) == compare.PRINTED_COLUMNS + 1
    assert columns[-1] == (
        f"worse: ... and {wide - compare.PRINTED_COLUMNS} more column(s) failing "
        f"--max-distance ({wide - compare.PRINTED_COLUMNS} above it, 0 not checkable; "
        f"compare.json's verdict has every reason)")
    assert worse[-1].startswith("worse: agreement ")  # the other thresholds' reasons stay
    narrow = compare.PRINTED_COLUMNS
    few = _compare([_pair(i, [0.1] * narrow) for i in range(10)],
                   [_pair(i, [0.9] * narrow, shadow=True) for i in range(10)],
                   max_distance=0.5, comparison_method="Simple")
    assert [line for line in compare.lines(few) if line.startswith("worse: ")] == \
        [f"worse: {reason}" for reason in few["verdict"]["reasons"]]  # at the cap: all
    assert few["verdict"]["column_reasons"] == narrow


def test_a_nan_answer_is_an_undefined_top1_counted_apart_never_a_disagreement() -> None:
    nan = float("nan")
    a = [_pair(i, [0.9, 0.1]) for i in range(6)]
    b = [_pair(i, [0.8, 0.2], shadow=True) for i in range(6)]
    a[0] = _pair(0, [nan, 0.1])  # json.dumps writes NaN, json.loads reads it
    b[1] = _pair(1, [0.3, nan], shadow=True)
    a[2], b[2] = _pair(2, [nan, nan]), _pair(2, [nan, nan], shadow=True)
    agreement = _compare(a, b, min_agreement=1.0)["agreement"]
    assert agreement["pairs"] == 6
    assert agreement["undefined"] == 3  # either side's top-1 undefined: not compared
    assert (agreement["compared"], agreement["agreed"]) == (3, 3)
    assert agreement["disagreements"] == []
    assert "3 with an undefined answer (NaN)" in compare._agreement_line(agreement)
    output = {"encoding": "JSON", "data": "[NaN, 0.5]"}
    assert compare_answers.top1(output) == compare_answers.UNDEFINED


def test_pairing_keeps_a_small_number_per_waiting_b_record_and_a_documented_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pairing = compare_sides.Pairing()
    answer = compare_answers.Top1("argmax", (3,))
    for i in range(1000):
        pairing.add_b(f"id-{i}", compare_answers.Top1("argmax", (3,)))  # a new object each time
    assert len({id(entry) for entry in pairing._entries}) == 1  # one answer kept once
    assert all(type(code) is int for code in pairing._waiting.values())
    long_key = "k" * 100_000
    pairing.add_b(long_key, answer)
    assert max(map(len, pairing._waiting)) <= compare_sides.MAX_KEY_CHARS
    pairing.match_a(long_key, answer)
    assert (pairing.pairs, pairing.agreed) == (1, 1)
    monkeypatch.setattr(compare_sides, "MAX_WAITING", 1005)
    capped = compare_sides.Pairing()
    for i in range(1010):
        capped.add_b(f"id-{i}", answer)
    for i in range(1010):
        capped.match_a(f"id-{i}", answer)
    document = capped.document()
    assert document["beyond_cap_b"] == 5  # not kept: counted, never silently lost
    assert document["pairs"] == 1005 and document["unpaired_a"] == 5
    assert document["unpaired_b"] == 5
