"""Model Monitor record preprocessors as users write them (tests/preprocessors/), run
unchanged by ``sagegate capture --preprocess-handler`` over records sagegate's sink writes,
called as the analyzer calls them: the record's attributes, both signatures, shadow records
skipped before the handler, ``[]`` dropping a record, and one-line failures."""
from __future__ import annotations

import csv
import datetime
import json
import logging
import random
from pathlib import Path

import pytest

from chalicelib.capture.records import Exchange, build_record
from chalicelib.capture.sinks import DirectorySink
from chalicelib.monitor.captured_data import CapturedData
from chalicelib.monitor.preprocessing import Preprocessor
from sagegate.captures import reader

HANDLERS = Path(__file__).resolve().parents[1] / "preprocessors"
WHEN = datetime.datetime(2026, 11, 23, 9, 5, 7, tzinfo=datetime.UTC)


def csv_exchange(i: int, test_traffic: str | None = "false") -> Exchange:
    attributes = None if test_traffic is None else json.dumps({"testIndicator": test_traffic})
    return Exchange("churn", "AllTraffic", f"c{i}", f"{i},25,113.2".encode(), "text/csv",
                    b"0.93\n" if i % 2 else b"0.0107\n", "text/csv; charset=utf-8",
                    custom_attributes=attributes)


def iris_exchange(i: int) -> Exchange:
    return Exchange("iris", "AllTraffic", f"r{i}",
                    json.dumps({"instances": [[5.1, 3.5, 1.4, i / 10]]}).encode(),
                    "application/json", b'{"predictions": [[0.97, 0.02, 0.01]]}',
                    "application/json")


def write(root: Path, *exchanges: Exchange) -> Path:
    DirectorySink(root).write([build_record(e, "both", now=WHEN) for e in exchanges])
    return root


def run(source: Path, handler: str, out: Path, *extra: str) -> int:
    return reader.main([str(source), "--format", "csv", "-o", str(out),
                        "--preprocess-handler", str(HANDLERS / handler), *extra])


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as rows:
        return list(csv.DictReader(rows))


def test_the_developer_guide_csv_flattener_runs_unchanged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path / "captures", *(csv_exchange(i) for i in range(3)))
    assert run(source, "devguide_flatten_csv.py", tmp_path / "rows.csv") == 0
    rows = read_csv(tmp_path / "rows.csv")
    assert [list(row.values()) for row in rows] == [
        ["0.0107", "0", "25", "113.2"], ["0.93", "1", "25", "113.2"],
        ["0.0107", "2", "25", "113.2"]]
    assert next(iter(rows[0])) == "0" * 20
    captured = capsys.readouterr()
    assert captured.out == ""  # the handler's print is its worker's: on stderr, prefixed
    assert "preprocess_handler output: postprocess_handler ran" in captured.err.splitlines()
    assert "3 row(s) from 3 record(s)" in captured.err


@pytest.mark.parametrize("run_number", [1, 2])  # the second run logs to its own stderr too
def test_the_logger_form_gets_the_analyzers_logger(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], run_number: int) -> None:
    source = write(tmp_path / "captures", csv_exchange(run_number))
    assert run(source, "data_quality_logger.py", tmp_path / "rows.csv") == 0
    assert read_csv(tmp_path / "rows.csv") == [{"00": str(run_number), "01": "25",
                                                "02": "113.2"}]
    err = capsys.readouterr().err
    assert f"preprocess_handler INFO: This is data input {run_number},25,113.2" in err


def test_the_sampling_idiom_drops_records_with_an_empty_list(tmp_path: Path) -> None:
    source = write(tmp_path / "captures", *(csv_exchange(i) for i in range(60)))
    random.seed(18)
    kept = sum(random.random() <= 0.1 for _ in range(60))
    # the handler runs in a worker process: seeded there, as the sample is imported
    seeded = tmp_path / "seeded_sampling.py"
    seeded.write_text(f"import random, runpy\nrandom.seed(18)\nglobals().update(runpy.run_path("
                      f"{str(HANDLERS / 'devguide_sampling.py')!r}))\n", encoding="utf-8")
    assert run(source, str(seeded), tmp_path / "rows.csv") == 0
    rows = read_csv(tmp_path / "rows.csv")
    assert 0 < kept < 60 and len(rows) == kept


def test_the_test_traffic_filter_reads_custom_attributes(tmp_path: Path) -> None:
    source = write(tmp_path / "captures", csv_exchange(1), csv_exchange(2, "true"),
                   csv_exchange(3, None), csv_exchange(4))
    assert run(source, "churn_test_traffic_filter.py", tmp_path / "rows.csv") == 0
    rows = read_csv(tmp_path / "rows.csv")
    assert [list(row.values()) for row in rows] == [["1", "1", "25", "113.2"],
                                                    ["0", "4", "25", "113.2"]]


def test_a_json_tensor_preprocessor_runs_over_tensor_captures(tmp_path: Path) -> None:
    source = write(tmp_path / "captures", *(iris_exchange(i) for i in range(2)))
    assert run(source, "json_tensor.py", tmp_path / "rows.csv") == 0
    rows = read_csv(tmp_path / "rows.csv")
    assert [row["feature0000000003"] for row in rows] == ["0.0", "0.1"]
    assert rows[0]["prediction0"] == "0.97" and rows[1]["request_id"] == "r1"
    assert rows[0]["event_time"] == "2026-11-23T09:05:07Z" and rows[0]["event_id"]


def test_an_attribute_the_record_lacks_is_one_line_naming_what_it_has(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path / "captures", iris_exchange(0))
    assert run(source, "introduction_event_data.py", tmp_path / "rows.csv") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "introduction_event_data.py: preprocess_handler failed on " in err
    assert ".jsonl:1: AttributeError: CapturedData has no attribute 'event_data'" in err
    for name in ("event_metadata", "endpoint_input", "endpoint_output", "event_version",
                 "event_dict"):
        assert name in err


def test_shadow_records_are_skipped_before_the_handler(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path / "captures", csv_exchange(1))
    shadow = json.loads(build_record(csv_exchange(2), "both", now=WHEN).line)
    shadow["eventMetadata"]["invocationSource"] = "ShadowExperiment"
    (tmp_path / "captures" / "shadow.jsonl").write_text(json.dumps(shadow) + "\n")
    assert run(source, "devguide_flatten_csv.py", tmp_path / "rows.csv") == 0
    assert [row["00000000000000000001"] for row in read_csv(tmp_path / "rows.csv")] == ["1"]
    assert "1 shadow record(s) skipped" in capsys.readouterr().err


def test_the_record_has_the_analyzers_attributes(tmp_path: Path) -> None:
    write(tmp_path, csv_exchange(5))
    (record,) = reader.read_records(str(tmp_path))
    meta = record.event_metadata
    assert meta is not None and record.endpoint_input and record.endpoint_output
    assert meta.event_time == "2026-11-23T09:05:07Z" and meta.event_id
    assert meta.custom_attribute == ['{"testIndicator": "false"}']
    side = record.endpoint_input
    assert (side.encoding, side.data, side.observedContentType, side.mode) == \
        ("CSV", "5,25,113.2", "text/csv", "INPUT")
    assert record.event_version == "0" and record.event_dict["eventMetadata"]["inferenceId"] \
        == "c5"
    assert record.ground_truth is None and record.batch_transform_output is None
    assert "mode" not in record.as_dict()["captureData"]["endpointInput"]  # as the analyzer's
    with pytest.raises(AttributeError, match="it has event_id, event_time, custom_attribute"):
        _ = meta.inference_id  # type: ignore[attr-defined]


def test_only_a_parameter_named_logger_gets_the_logger(tmp_path: Path) -> None:
    seen: list[object] = []
    handler = tmp_path / "h.py"
    handler.write_text("def preprocess_handler(inference_record, log=None):\n"
                       "    SEEN.append(log)\n    return {'a': 1}\n")
    preprocessor = Preprocessor(handler, logging.getLogger("x"))
    preprocessor.module.SEEN = seen
    record = CapturedData(json.loads(build_record(csv_exchange(1), "both").line))
    assert preprocessor(record, "here") == {"a": 1} and seen == [None]


@pytest.mark.parametrize(("source", "code", "says"), [
    ("def preprocess_handler(r):\n    raise KeyError('boom')\n", 1,
     "h.py: preprocess_handler failed on "),
    ("def preprocess_handler(r):\n    return 42\n", 1, "returned int, not a dict, for "),
    ("def preprocess_handler(r):\n    return {}\ndef postprocess_handler():\n    1 / 0\n", 1,
     "h.py: postprocess_handler failed: ZeroDivisionError"),
], ids=["raises", "returns-int", "postprocess-raises"])
def test_a_failing_handler_is_one_line_naming_the_file_and_record(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, code: int,
        says: str) -> None:
    write(tmp_path / "captures", csv_exchange(1))
    (tmp_path / "h.py").write_text(source)
    assert reader.main([str(tmp_path / "captures"), "--preprocess-handler",
                        str(tmp_path / "h.py")]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and says in err
    if "postprocess" not in says:
        assert ".jsonl:1" in err


def test_rows_are_written_as_strict_json_lines_a_number_no_double_holds_as_null() -> None:
    """NaN and the infinities have no JSON of their own (the monitor reads them as missing):
    ``sagegate capture --format jsonl`` writes them null, never a ``NaN`` literal."""
    import io

    out = io.StringIO()
    rows: list[dict[str, object]] = [
        {"a": 1.5, "b": "x"}, {"a": float("nan"), "b": float("inf"), "c": -float("inf"),
                               "d": 10**400}]
    assert reader.write_rows(out, rows, "jsonl") == 2

    def refuse(name: str) -> object:
        raise AssertionError(f"not strict JSON: {name}")

    written = [json.loads(line, parse_constant=refuse) for line in out.getvalue().splitlines()]
    assert written == [{"a": 1.5, "b": "x"}, {"a": None, "b": None, "c": None, "d": 10**400}]


def test_a_line_past_the_bound_is_one_error_line_never_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``.jsonl`` lines are bounded as the monitor bounds them (MAX_LINE_BYTES)."""
    from chalicelib.monitor import capture_format

    root = write(tmp_path / "captures", iris_exchange(1))
    (capture,) = root.rglob("*.jsonl")
    capture.write_bytes(capture.read_bytes() + b'{"pad": "' + b"p" * 10_000 + b'"}\n')
    monkeypatch.setattr(capture_format, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(capture_format, "READ_BYTES", 1024)
    assert reader.main([str(root), "-o", str(tmp_path / "rows.jsonl")]) == 2
    (line,) = capsys.readouterr().err.splitlines()[-1:]
    assert line.startswith("error: ") and "a line longer than" in line
