"""``sagegate monitor`` on bad input, run as the user runs it (a subprocess, with a time limit,
so a hang fails its test, not the suite): bad baseline documents, dataset files that are not
what they say (binary, an over-long field, nesting past any reader, FIFOs), record
preprocessors that misbehave (bad rows, KeyboardInterrupt, sys.exit), a folder above the
endpoints', empty and unreadable windows. Each is one line on stderr, ``sagegate monitor:
...``, naming the file (and line), the documented exit status, and never a traceback."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
TIMEOUT = 60  # seconds: far above a run's, far below the suite's
Document = dict[str, Any]


def _monitor(*argv: str, env: dict[str, str] | None = None,
             timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sagegate.monitor", *argv],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL, env=env)


def _refused(done: subprocess.CompletedProcess[str], *fragments: str,
             status: int = cli_shared.EXIT_USAGE) -> str:
    """Assert the run exited ``status`` with one line on stderr holding every fragment."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert done.returncode == status, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("sagegate monitor: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bad")
    dataset = capturegen.training_csv(folder / "train.csv", 1000, header=False)
    assert cli.main(["baseline", str(dataset), "-o", str(folder / "baseline")]) == 0
    return folder / "baseline"


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return capturegen.write_window(tmp_path_factory.mktemp("caps") / "iris", 40)


def _load(path: Path) -> Document:
    document: Document = json.loads(path.read_text(encoding="utf-8"))
    return document


# --- baseline documents ------------------------------------------------------------------

def _override(key: str, value: Any) -> Callable[[Document], Any]:
    def edit(document: Document) -> Any:
        document["features"][1]["monitoringConfigOverrides"] = {key: value}
        return document

    return edit


def _global(key: str, value: Any) -> Callable[[Document], Any]:
    def edit(document: Document) -> Any:
        document["monitoring_config"]["distribution_constraints"][key] = value
        return document

    return edit


def _sketch(edit: Callable[[Document], None]) -> Callable[[Document], Any]:
    def edited(document: Document) -> Any:
        edit(document["features"][2]["numerical_statistics"]["distribution"]["kll"]["sketch"])
        return document

    return edited


def _feature(index: int, value: Any) -> Callable[[Document], Any]:
    def edit(document: Document) -> Any:
        document["features"][index] = value
        return document

    return edit


DEEP = "[" * 200_000 + "]" * 200_000
BAD_CONSTRAINTS = [
    (lambda d: None, "constraints.json: null is not an object"),
    (lambda d: [d], "constraints.json: a list is not an object"),
    (lambda d: {**d, "features": "_c0"}, 'constraints.json: features: "_c0" is not a list'),
    (_feature(3, 7), "constraints.json: features[3]: 7 is not an object"),
    (_feature(3, {"inferred_type": "Fractional"}), 'constraints.json: features[3]: has no "name"'),
    (_feature(3, {"name": 3}), "constraints.json: features[3].name: 3 is not a string"),
    (_feature(3, {"name": "_c1"}), 'features[3].name: "_c1" repeats features[1]'),
    (_override("comparison_threshold", "abc"), 'constraints.json: features[1].'
     'monitoringConfigOverrides.comparison_threshold: "abc" is not a number'),
    (_override("comparison_threshold", -0.5), "comparison_threshold: -0.5 is not a threshold"),
    (_override("datatype_check_threshold", 1.5), "datatype_check_threshold: 1.5 is not a "
     "fraction from 0 to 1"),
    (_override("evaluate_constraints", False), "evaluate_constraints: false is not "
     '"Enabled" or "Disabled"'),
    (_global("comparison_threshold", float("nan")), "monitoring_config.distribution_"
     "constraints.comparison_threshold: NaN is not a finite number"),
    (_global("categorical_comparison_threshold", True), "true is not a number"),
    (_global("comparison_method", "Robustish"), '"Robustish" is not "Simple" or "Robust"'),
    (lambda d: {**d, "monitoring_config": "on"}, 'monitoring_config: "on" is not an object'),
    (lambda d: {**d, "monitoring_config": {"distribution_constraints": []}},
     "monitoring_config.distribution_constraints: a list is not an object"),
    (lambda d: DEEP, "constraints.json: nested too deep"),
]
BAD_STATISTICS = [
    (lambda d: {**d, "features": {"_c0": {}}}, "statistics.json: features: an object is not "
     "a list"),
    (_feature(0, "_c0"), 'statistics.json: features[0]: "_c0" is not an object'),
    (_sketch(lambda s: s.update(data=[1.0, 2.0])), "statistics.json: features[2]."
     "numerical_statistics.distribution.kll.sketch.data[0]: 1.0 is not a list of numbers"),
    (_sketch(lambda s: s.update(data=[[1.0, "x"]])), "sketch.data[0][1]: \"x\" is not a "
     "finite number"),
    (_sketch(lambda s: s.update(data="1,2")), 'sketch.data: "1,2" is not a list'),
    (_sketch(lambda s: s.update(data=[[1.0]] * 2000)), "sketch.data: 2000 levels"),
    (_sketch(lambda s: s.pop("parameters")), 'kll.sketch: has no "parameters"'),
    (_sketch(lambda s: s["parameters"].update(k="2048")), 'parameters.k: "2048" is not a '
     "number"),
    (lambda d: DEEP, "statistics.json: nested too deep"),
]


@pytest.mark.parametrize(("name", "edit", "message"),
                         [("constraints.json", *case) for case in BAD_CONSTRAINTS]
                         + [("statistics.json", *case) for case in BAD_STATISTICS])
def test_a_bad_baseline_document_is_one_line_naming_its_bad_part(
        baseline: Path, captures: Path, tmp_path: Path, name: str,
        edit: Callable[[Document], Any], message: str) -> None:
    folder = tmp_path / "baseline"
    shutil.copytree(baseline, folder)
    edited = edit(_load(baseline / name))
    text = edited if isinstance(edited, str) else json.dumps(edited)
    (folder / name).write_text(text, encoding="utf-8")
    done = _monitor("check", str(captures), "--baseline", str(folder), "-o",
                    str(tmp_path / "out"), *WINDOW)
    _refused(done, f"{folder / name}: ", message)
    assert not (tmp_path / "out").exists()


def test_a_fifo_in_the_baseline_folder_is_refused_not_waited_on(
        baseline: Path, captures: Path, tmp_path: Path) -> None:
    folder = tmp_path / "baseline"
    shutil.copytree(baseline, folder)
    (folder / "constraints.json").unlink()
    os.mkfifo(folder / "constraints.json")
    done = _monitor("check", str(captures), "--baseline", str(folder), "-o",
                    str(tmp_path / "out"), *WINDOW)
    _refused(done, "constraints.json: a FIFO (named pipe), not a regular file")


# --- dataset files -----------------------------------------------------------------------

def _binary(path: Path) -> str:
    path.write_bytes(bytes(range(256)) * 64)
    if path.suffix == ".jsonl":  # line 1 is bytes 0 to 10: ASCII, not JSON
        return ":1: not JSON"
    return ":2: not UTF-8 text (byte 118 of the line)"  # 0x80, the 118th byte after 0x0a


def _long_field(path: Path) -> str:
    path.write_text("1,2,3\n4,5,6\n7," + "x" * 140_000 + ",9\n", encoding="utf-8")
    return ":3: a field longer than 131,072 characters"


def _open_quote(path: Path) -> str:
    rows = "".join(f"{i},{i + 1}\n" for i in range(10))
    path.write_text(rows + '10,"' + "y" * 1000 + "\n" + "z" * 1000 * 200, encoding="utf-8")
    return ":12: a field longer than 131,072 characters: not a training dataset's value (a " \
        "quote left open"


def _deep_jsonl(path: Path) -> str:
    path.write_text('{"a": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    return ":2: JSON nested too deep to read"


def _deep_object_jsonl(path: Path) -> str:
    # parses (the decoder reads some thousands deep) but nests past the flattener's recursion
    path.write_text('{"a": 1}\n' + '{"a":' * 2000 + "1" + "}" * 2000 + "\n",
                    encoding="utf-8")
    return ":2: JSON nested too deep to read"


def _not_json(path: Path) -> str:
    path.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    return ":2: not JSON"


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return ": a FIFO (named pipe), not a regular file"


def _wide_csv(path: Path) -> str:
    path.write_text(",".join(["1"] * 1001) + "\n", encoding="utf-8")
    return ":1: 1,001 columns, over the limit of 1,000 (--max-columns)"


def _wide_jsonl(path: Path) -> str:
    path.write_text(json.dumps({f"k{i}": i for i in range(1001)}) + "\n", encoding="utf-8")
    return ":1: 1,001 columns, over the limit of 1,000"


def _long_line(path: Path) -> str:
    with path.open("wb") as file:
        file.write(b"1,2\n")
        file.write(b"0" * (17 * 1024 * 1024))
    return ":2: a line longer than 16 MiB"


@pytest.mark.parametrize(("name", "make"), [
    ("binary.csv", _binary), ("binary.jsonl", _binary), ("long.csv", _long_field),
    ("quote.csv", _open_quote), ("deep.jsonl", _deep_jsonl),
    ("deep2.jsonl", _deep_object_jsonl), ("bad.jsonl", _not_json), ("x.jsonl", _fifo),
    ("x.csv", _fifo), ("wide.csv", _wide_csv), ("wide.jsonl", _wide_jsonl),
    ("zeros.csv", _long_line)])
def test_a_bad_dataset_file_is_one_line_naming_the_file_and_line(
        tmp_path: Path, name: str, make: Callable[[Path], str]) -> None:
    path = tmp_path / name
    message = make(path)
    done = _monitor("baseline", str(path), "-o", str(tmp_path / "out"))
    _refused(done, f"{path}{message}")
    assert not (tmp_path / "out").exists()


def test_max_columns_is_the_users_to_set(tmp_path: Path) -> None:
    dataset = capturegen.training_csv(tmp_path / "train.csv", 20, header=False)
    _refused(_monitor("baseline", str(dataset), "-o", str(tmp_path / "out"),
                      "--max-columns", "4"), f"{dataset}:1: 5 columns, over the limit of 4")
    done = _monitor("baseline", str(dataset), "-o", str(tmp_path / "out"), "--max-columns", "5")
    assert done.returncode == 0, done.stderr
    assert _monitor("baseline", str(dataset), "-o", str(tmp_path / "out"),
                    "--max-columns", "0").returncode == cli_shared.EXIT_USAGE


def _capture_root(tmp_path: Path, records: int = 40) -> tuple[Path, Path]:
    root = capturegen.write_window(tmp_path / "iris", records)
    return root, root / "AllTraffic" / "2026" / "11" / "25" / "09"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.parametrize("window", [True, False])
def test_a_capture_folder_holding_a_jsonl_that_is_not_a_file_is_refused(
        baseline: Path, tmp_path: Path, kind: str, window: bool) -> None:
    root, hour = _capture_root(tmp_path)
    odd = hour / "x.jsonl"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.mkdir()
    bounds = WINDOW if window else []
    expected = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    _refused(_monitor("baseline", str(root), "-o", str(tmp_path / "out"), *bounds),
             f"{odd}: {expected}, not a regular file")
    _refused(_monitor("check", str(root), "--baseline", str(baseline), "-o",
                      str(tmp_path / "out"), *WINDOW), f"{odd}: {expected}")


# --- record preprocessors ----------------------------------------------------------------

BAD_ROW = "returned a bad row for the record on"
HANDLERS = {
    "object": ("return object()", "returned object, not a dict, for the record on",
               "a row is a dict of features"),
    "text": ('return "a,b"', "returned str, not a dict, for the record on",
             "a row is a dict of features"),
    "value_object": ('return {"a": 1, "b": object()}', BAD_ROW,
                     'the value of "b" is object'),
    "value_bytes": ('return {"a": b"1"}', BAD_ROW, 'the value of "a" is bytes'),
    "value_set": ('return {"a": {1}}', BAD_ROW, 'the value of "a" is a set'),
    "value_dict": ('return {"a": {"b": 1}}', BAD_ROW,
                   'the value of "a" is a dict: a feature is one value'),
    "value_list": ('return {"a": [1, 2]}', BAD_ROW,
                   'the value of "a" is a list'),
    "key_tuple": ('return {("a",): 1}', BAD_ROW, "a key is tuple, not a string"),
    "keyboard": ("raise KeyboardInterrupt", "failed on",
                 "KeyboardInterrupt raised by the handler's code"),
    "exit0": ("import sys; sys.exit(0)", "failed on", "it called sys.exit(0)"),
    "exit3": ("raise SystemExit(3)", "failed on", "it called sys.exit(3)"),
    "multiline": ('raise ValueError("one\\ntwo")', "failed on", "ValueError: one two"),
    "bad_bool": ("class Odd:\n        def __bool__(self): raise SystemExit(0)\n    "
                 "return Odd()", "returned Odd, not a dict, for the record on", "a row is a"),
}


def _handler(folder: Path, body: str, name: str = "handler.py") -> Path:
    path = folder / name
    path.write_text(f"def preprocess_handler(inference_record):\n    {body}\n",
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(HANDLERS))
@pytest.mark.parametrize("command", ["baseline", "check"])
def test_a_misbehaving_preprocessor_is_one_line_naming_file_and_record(
        baseline: Path, captures: Path, tmp_path: Path, case: str, command: str) -> None:
    body, verb, detail = HANDLERS[case]
    handler = _handler(tmp_path, body)
    base = ["--baseline", str(baseline)] if command == "check" else []
    done = _monitor(command, str(captures), *base, "-o", str(tmp_path / "out"), *WINDOW,
                    "--preprocess-handler", str(handler))
    line = _refused(done, f"sagegate monitor: handler.py: preprocess_handler {verb} ",
                    ".jsonl:1: ", detail)
    assert str(captures) in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("body", "detail"), [
    ("raise KeyboardInterrupt", "KeyboardInterrupt raised by the handler's code"),
    ("import sys; sys.exit(0)", "it called sys.exit(0)"),
    ("raise SystemExit(3)", "it called sys.exit(3)")])
def test_a_misbehaving_postprocessor_is_one_line(baseline: Path, captures: Path,
                                                 tmp_path: Path, body: str,
                                                 detail: str) -> None:
    script = tmp_path / "post.py"
    script.write_text(f"def postprocess_handler():\n    {body}\n", encoding="utf-8")
    done = _monitor("check", str(captures), "--baseline", str(baseline), "-o",
                    str(tmp_path / "out"), *WINDOW, "--postprocess-handler", str(script))
    assert "Traceback" not in done.stderr
    assert done.returncode == cli_shared.EXIT_USAGE, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("sagegate monitor")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"sagegate monitor: post.py: postprocess_handler failed: "
                                f"{detail}"), errors


def test_a_preprocessor_exiting_as_it_is_imported_is_one_line(
        captures: Path, tmp_path: Path) -> None:
    handler = tmp_path / "handler.py"
    handler.write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    _refused(_monitor("baseline", str(captures), "-o", str(tmp_path / "out"),
                      "--preprocess-handler", str(handler)),
             f"{handler}: importing it failed: it called sys.exit(0)")


def test_the_users_ctrl_c_stops_the_run_with_one_line(baseline: Path, captures: Path,
                                                      tmp_path: Path) -> None:
    started = tmp_path / "started"
    handler = tmp_path / "slow.py"
    handler.write_text(textwrap.dedent(f"""\
        import pathlib, time

        def preprocess_handler(inference_record):
            pathlib.Path({str(started)!r}).touch()
            time.sleep(60)
        """), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "sagegate.monitor", "check", str(captures), "--baseline",
         str(baseline), "-o", str(tmp_path / "out"), *WINDOW, "--preprocess-handler",
         str(handler)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not started.exists():
            assert time.monotonic() < deadline and process.poll() is None, "never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # while the handler runs: the user's, not its own
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        process.kill()
        process.wait(timeout=TIMEOUT)
    assert "Traceback" not in out + err
    assert process.returncode == cli_shared.EXIT_INTERRUPTED == 130, err
    assert err.splitlines() == ["sagegate monitor: interrupted"]


def test_a_preprocessors_log_lines_are_printed_with_its_prefix(baseline: Path, captures: Path,
                                                              tmp_path: Path) -> None:
    handler = tmp_path / "logging_handler.py"
    handler.write_text(textwrap.dedent("""\
        def preprocess_handler(inference_record, logger):
            logger.info("read %s", inference_record.event_metadata.event_id[:0] + "one")
            logger.warning("careful")
            values = inference_record.endpoint_input.data.split(",")
            return {f"_c{i + 1}": v for i, v in enumerate(values)}
        """), encoding="utf-8")
    done = _monitor("check", str(captures), "--baseline", str(baseline), "-o",
                    str(tmp_path / "out"), *WINDOW, "--preprocess-handler", str(handler))
    assert done.returncode in (cli_shared.EXIT_OK, cli_shared.EXIT_VIOLATIONS), done.stderr
    lines = done.stderr.splitlines()
    assert lines.count("preprocess_handler INFO: read one") == 40
    assert lines.count("preprocess_handler WARNING: careful") == 40
    assert "Traceback" not in done.stderr


# --- what is checked: the endpoint's folder, a window with records -----------------------

def _endpoints(root: Path) -> Path:
    for name in ("iris", "penguins"):
        capturegen.write_window(root / name, 20)
    return root


@pytest.mark.parametrize("command", ["check", "baseline"])
def test_a_folder_above_the_endpoints_is_refused_naming_them(baseline: Path, tmp_path: Path,
                                                             command: str) -> None:
    root = _endpoints(tmp_path / "captures")
    base = ["--baseline", str(baseline)] if command == "check" else []
    done = _monitor(command, str(root), *base, "-o", str(tmp_path / "out"), *WINDOW)
    _refused(done, f"{root}: a folder above the endpoints' capture folders (iris, penguins)",
             f"e.g. sagegate monitor {command} {root}/iris ...")
    # the endpoint's folder and the variant's are checked
    for folder in (root / "iris", root / "iris" / "AllTraffic"):
        done = _monitor("check", str(folder), "--baseline", str(baseline), "-o",
                        str(tmp_path / "out"), *WINDOW)
        assert done.returncode == cli_shared.EXIT_OK, done.stderr


def test_an_s3_prefix_above_the_endpoints_is_refused(baseline: Path, tmp_path: Path,
                                                     moto_url: str) -> None:
    env = {**os.environ, "AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    root = _endpoints(tmp_path / "captures")
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    s3.create_bucket(Bucket="above")
    for path in root.rglob("*.jsonl"):
        s3.upload_file(str(path), "above", f"datacapture/{path.relative_to(root)}")
    for bounds in (WINDOW, ["--start", "2020-01-01T00:00Z", "--end", "2030-01-01T00:00Z"]):
        done = _monitor("check", "s3://above/datacapture", "--baseline", str(baseline), "-o",
                        str(tmp_path / "out"), *bounds, env=env)
        _refused(done, "s3://above/datacapture: a folder above the endpoints' capture folders "
                 "(iris, penguins)", "e.g. sagegate monitor check s3://above/datacapture/iris")
    done = _monitor("check", "s3://above/datacapture/iris/", "--baseline", str(baseline),
                    "-o", str(tmp_path / "out"), *WINDOW, env=env)
    assert done.returncode == cli_shared.EXIT_OK, done.stderr


def test_an_empty_window_is_exit_4_not_a_clean_check(baseline: Path, captures: Path,
                                                     tmp_path: Path) -> None:
    done = _monitor("check", str(captures), "--baseline", str(baseline), "-o",
                    str(tmp_path / "out"), "--start", "2026-11-25T11:00Z", "--end",
                    "2026-11-25T12:00Z")
    assert "Traceback" not in done.stderr
    assert done.returncode == cli_shared.EXIT_EMPTY == 4, done.stderr
    assert done.stderr.splitlines() == [
        f"note: no records in {captures} from 2026-11-25T11:00Z to 2026-11-25T12:00Z (0 "
        f"record(s) read, 0 row(s)): nothing checked, no files written"]
    assert not (tmp_path / "out").exists()
    # a baseline of an empty source stays a usage error
    _refused(_monitor("baseline", str(captures), "-o", str(tmp_path / "out"), "--start",
                      "2026-11-25T11:00Z", "--end", "2026-11-25T12:00Z"),
             f"{captures}: no rows to make a baseline of")


@pytest.mark.parametrize("bounds", [
    ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T09:00Z"],
    ["--start", "2026-11-25T10:00Z", "--end", "2026-11-25T09:00Z"]])
def test_an_empty_or_reversed_window_is_refused(baseline: Path, captures: Path,
                                                tmp_path: Path, bounds: list[str]) -> None:
    _refused(_monitor("check", str(captures), "--baseline", str(baseline), "-o",
                      str(tmp_path / "out"), *bounds), "is not before its end")
    # a baseline of a capture window reads its bounds the same way
    start, end = bounds[1], bounds[3]
    _refused(_monitor("baseline", str(captures), "-o", str(tmp_path / "out"), *bounds),
             f"the window's start ({start}) is not before its end ({end})")
    assert not (tmp_path / "out").exists()


def test_a_window_of_only_bad_lines_is_refused_naming_the_first(baseline: Path,
                                                                tmp_path: Path) -> None:
    root, hour = _capture_root(tmp_path, 0)
    bad = hour / "bad.jsonl"
    bad.write_bytes(b"\n" + b"not json\n" + bytes(range(128, 256)) + b"\n" + b"[1, 2]\n")
    _refused(_monitor("check", str(root), "--baseline", str(baseline), "-o",
                      str(tmp_path / "out"), *WINDOW),
             f"{root}: no readable record: 3 bad line(s) skipped, the first {bad}:2: not JSON")


def test_bad_lines_among_good_ones_are_counted_and_the_first_named(
        baseline: Path, tmp_path: Path) -> None:
    root, hour = _capture_root(tmp_path, 30)
    bad = hour / "bad.jsonl"
    bad.write_text('{"captureData": {}}\n' + "[" * 100_000 + "\n", encoding="utf-8")
    done = _monitor("check", str(root), "--baseline", str(baseline), "-o",
                    str(tmp_path / "out"), *WINDOW)
    assert done.returncode == cli_shared.EXIT_OK, done.stderr
    assert f"1 bad line(s) skipped (the first {bad}:2: nested too deep to read)" in done.stderr


def test_the_summary_gives_the_window_as_asked_and_what_it_left_out(
        baseline: Path, tmp_path: Path) -> None:
    root = capturegen.write_window(tmp_path / "iris", 600)
    done = _monitor("check", str(root), "--baseline", str(baseline), "-o",
                    str(tmp_path / "out"), "--start", "2026-11-25T09:50Z", "--end",
                    "2026-11-25T09:59:30Z")
    assert done.returncode in (cli_shared.EXIT_OK, cli_shared.EXIT_VIOLATIONS), done.stderr
    summary = done.stderr.splitlines()[-1]
    assert "from 2026-11-25T09:50Z to 2026-11-25T09:59:30Z" in summary
    # 600 records over the hour: one each 6 s; [09:50, 09:59:30) holds 95 of them
    assert "600 record(s) read, 95 row(s), 505 outside the window" in summary
    assert json.loads((tmp_path / "out" / "statistics.json").read_text(
        encoding="utf-8"))["dataset"]["item_count"] == 95


def test_records_without_a_time_are_counted_not_checked(baseline: Path, tmp_path: Path) -> None:
    root, hour = _capture_root(tmp_path, 30)
    lines = []
    for when in ("", "yesterday", None):
        untimed = capturegen.record([5.0, 3.0, 4.0, 1.0], 0.5, capturegen.HOUR)
        if when is None:
            del untimed["eventMetadata"]["inferenceTime"]
        else:
            untimed["eventMetadata"]["inferenceTime"] = when
        lines.append(json.dumps(untimed))
    (hour / "untimed.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = _monitor("check", str(root), "--baseline", str(baseline), "-o",
                    str(tmp_path / "out"), *WINDOW)
    assert done.returncode in (cli_shared.EXIT_OK, cli_shared.EXIT_VIOLATIONS), done.stderr
    assert "33 record(s) read, 30 row(s), 3 without a readable eventMetadata.inferenceTime" \
        in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_output_file_that_is_not_a_file_is_refused_not_waited_on(
        captures: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    odd = out / "statistics.json"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.mkdir()
    expected = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    _refused(_monitor("baseline", str(captures), "-o", str(out)),
             f"{odd}: {expected}, not a regular file")
