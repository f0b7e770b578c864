"""``sagegate monitor check/baseline --workers N`` end to end: the files of one worker, whatever
the window's spread over its files, a preprocessor loaded in each worker, the single pass's
errors in one line, Ctrl-C ending the workers.

The statistics are compared as tests/unit/monitor/test_partial.py says (exact counts, types,
minimum, maximum and categorical counts; sum, mean and std_dev within 1e-9 relative; each KLL
sketch within 0.5 % rank of one worker's and of the exact values). The violations files are
identical byte for byte where the window's features hold fewer than 2,050 values (the sketch
keeps them all, so the drift distances are exact); above that, the same violations, worded the
same but for a drift distance's digits.
"""
from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen
from tests.unit.monitor.test_partial import assert_same_statistics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
HOUR = capturegen.HOUR
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
Payload = Callable[[random.Random, int], dict[str, Any]]


def _json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def traffic(shift: float = 0.0) -> Payload:
    """JSON requests of mixed features: ``weight`` trends over the window (so its sketch shows
    which records it holds), ``size`` an integer, ``color`` a category (``purple`` only once
    shifted), ``sparse`` in one record of three, ``late`` from the 3,000th record on."""
    colors = ["red", "green", "blue"] + (["purple"] if shift else [])

    def payload(rng: random.Random, index: int) -> dict[str, Any]:
        body: dict[str, Any] = {"weight": round(index / 200 + shift + rng.gauss(0, 1), 3),
                                "size": rng.randint(1, 9), "color": rng.choice(colors)}
        if index % 3 == 0 or (not shift and index % 3 == 1):
            body["sparse"] = rng.random()
        if shift and index >= 3000:
            body["late"] = "yes"
        return body

    return payload


def write_files(root: Path, sizes: list[int], payload: Payload, seed: int = 3) -> Path:
    """An hour of JSON captures, ``sizes[i]`` records in file ``i`` (files in time order)."""
    rng = random.Random(seed)
    folder = root / "AllTraffic" / f"{HOUR:%Y/%m/%d/%H}"
    folder.mkdir(parents=True, exist_ok=True)
    total, index = sum(sizes), 0
    for number, size in enumerate(sizes):
        lines = []
        for _ in range(size):
            when = HOUR + datetime.timedelta(seconds=index * 3600 / total)
            lines.append(json.dumps({"captureData": {
                "endpointInput": {"observedContentType": "application/json", "mode": "INPUT",
                                  "data": json.dumps(payload(rng, index)), "encoding": "JSON"},
                "endpointOutput": {"observedContentType": "application/json",
                                   "mode": "OUTPUT", "encoding": "JSON",
                                   "data": json.dumps({"score": round(rng.random(), 4)})}},
                "eventMetadata": {"eventId": str(uuid.uuid4()),
                                  "inferenceTime": f"{when:%Y-%m-%dT%H:%M:%S}Z"},
                "eventVersion": "0"}))
            index += 1
        (folder / f"{number:02d}-{uuid.uuid4()}.jsonl").write_text("\n".join(lines) + "\n",
                                                                   encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("workers")
    captures = write_files(folder / "train", [2000, 2000], traffic())
    assert cli.main(["baseline", str(captures), "-o", str(folder / "baseline")]) == 0
    return folder / "baseline"


def _check(captures: Path | str, baseline: Path, out: Path, *more: str) -> int:
    return cli.main(["check", str(captures), "--baseline", str(baseline), "-o", str(out),
                     *WINDOW, *more])


def _violations(folder: Path) -> list[tuple[str, str, str]]:
    return [(v["feature_name"], v["constraint_check_type"],
             v["description"] if v["constraint_check_type"] != "baseline_drift_check" else "")
            for v in _json(folder / "constraint_violations.json")["violations"]]


@pytest.mark.parametrize("workers", ["2", "3"])
def test_a_window_spread_unevenly_over_its_files_gives_one_workers_statistics(
        baseline: Path, tmp_path: Path, workers: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    sizes = [1, 2, 2600, 5, 1, 1700, 3, 900, 40]  # 5,252 records: the sketches compact
    captures = write_files(tmp_path / "iris", sizes, traffic(shift=0.5))
    one, many = tmp_path / "one", tmp_path / f"w{workers}"
    assert _check(captures, baseline, one) == cli_shared.EXIT_VIOLATIONS
    summary_one = capsys.readouterr().err
    assert _check(captures, baseline, many, "--workers", workers) == cli_shared.EXIT_VIOLATIONS
    summary_many = capsys.readouterr().err
    assert f"in {workers} parts by {workers} worker processes" in summary_many
    assert "by worker processes" not in summary_one
    assert summary_many.split(" from ")[0] == summary_one.split(" from ")[0]  # the tally
    assert_same_statistics(_json(one / "statistics.json"), _json(many / "statistics.json"))
    assert _violations(many) == _violations(one)
    kinds = {kind for _feature, kind, _text in _violations(one)}
    assert {"extra_column_check", "categorical_values_check", "completeness_check",
            "baseline_drift_check"} <= kinds


def test_the_violations_files_are_identical_below_the_sketchs_first_compaction(
        baseline: Path, tmp_path: Path) -> None:
    captures = write_files(tmp_path / "iris", [700, 3, 1, 900, 400], traffic(shift=2.0))
    one, two = tmp_path / "one", tmp_path / "two"
    assert _check(captures, baseline, one) == cli_shared.EXIT_VIOLATIONS
    assert _check(captures, baseline, two, "--workers", "2") == cli_shared.EXIT_VIOLATIONS
    text = (one / "constraint_violations.json").read_text()
    assert (two / "constraint_violations.json").read_text() == text
    assert "baseline_drift_check" in text
    assert_same_statistics(_json(one / "statistics.json"), _json(two / "statistics.json"))


@pytest.mark.parametrize(("sizes", "workers", "parts"), [([300], "2", 0), ([10, 500, 7], "8", 3),
                                                         ([40, 60], "auto", 2)])
def test_fewer_files_than_workers(baseline: Path, tmp_path: Path, sizes: list[int],
                                  workers: str, parts: int,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    captures = write_files(tmp_path / "iris", sizes, traffic())
    assert _check(captures, baseline, tmp_path / "one") in (0, 3)
    capsys.readouterr()
    assert _check(captures, baseline, tmp_path / "many", "--workers", workers) in (0, 3)
    err = capsys.readouterr().err
    expected = min(parts, os.cpu_count() or 1) if workers == "auto" else parts
    if expected > 1:
        assert f"in {expected} parts by {expected} worker processes" in err
    else:  # one file (or one CPU): read here, in one pass
        assert "by worker processes" not in err
    assert_same_statistics(_json(tmp_path / "one" / "statistics.json"),
                           _json(tmp_path / "many" / "statistics.json"))
    assert _violations(tmp_path / "many") == _violations(tmp_path / "one")


PID_PREPROCESSOR = '''
import os
import pathlib
import time

SEEN = pathlib.Path({folder!r})
WORKERS = {workers}


def preprocess_handler(inference_record, logger):
    mark = SEEN / str(os.getpid())
    if not mark.exists():
        mark.touch()
        logger.info("preprocessing in %s", os.getpid())
        # a worker's first record waits for the other worker's: each takes a part
        deadline = time.monotonic() + 20
        while len(list(SEEN.iterdir())) < WORKERS and time.monotonic() < deadline:
            time.sleep(0.01)
    data = inference_record.endpoint_output.data.rstrip("\\n") + "," + \\
        inference_record.endpoint_input.data
    return {{f"f{{i}}": value for i, value in enumerate(data.split(","))}}
'''


@pytest.mark.parametrize("threads", [False, True], ids=["forked", "spawned"])
def test_a_preprocessor_is_loaded_in_each_worker(tmp_path: Path, threads: bool) -> None:
    # with a thread running workers start as fresh interpreters instead of forks: both
    # import the preprocessor themselves; without --workers, one worker runs it (the user's
    # code never runs in the command's own process)
    captures = capturegen.write_window(tmp_path / "iris", 3000, per_file=300)
    seen = {}
    for name, count in (("one", 1), ("two", 2)):
        seen[name] = tmp_path / f"pids-{name}"
        seen[name].mkdir()
        handler = tmp_path / f"pids_{name}.py"
        handler.write_text(PID_PREPROCESSOR.format(folder=str(seen[name]), workers=count),
                           encoding="utf-8")
        args = ["--preprocess-handler", str(handler), *WINDOW]
        if count > 1:
            args += ["--workers", str(count)]
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait, daemon=True)
        if threads:
            thread.start()
        try:
            assert cli.main(["baseline", str(captures), "-o", str(tmp_path / name),
                             *args]) == 0
        finally:
            stop.set()
    pids = {name: {int(p.name) for p in folder.iterdir()} for name, folder in seen.items()}
    assert len(pids["one"]) == 1 and len(pids["two"]) == 2
    assert os.getpid() not in pids["one"] | pids["two"]
    assert_same_statistics(_json(tmp_path / "one" / "statistics.json"),
                           _json(tmp_path / "two" / "statistics.json"))
    assert (tmp_path / "two" / "constraints.json").read_text() == \
        (tmp_path / "one" / "constraints.json").read_text()


def test_a_training_csv_is_cut_into_parts(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    dataset = capturegen.training_csv(tmp_path / "train.csv", 6000, header=True)
    # quotes, and line breaks inside quoted fields, all through the file: cut at records'
    # ends, never inside one (a number may end with a line break: still a number)
    lines = dataset.read_text(encoding="utf-8").splitlines()
    for index in range(1, len(lines), 97):
        label, rest = lines[index].split(",", 1)
        lines[index] = f'"{label}\n",{rest}'
    dataset.write_text("\n".join(lines) + '\n0.5,"5.1",3.3,"1.4\n",0.2\n', encoding="utf-8")
    assert cli.main(["baseline", str(dataset), "-o", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    assert cli.main(["baseline", str(dataset), "-o", str(tmp_path / "two"),
                     "--workers", "2"]) == 0
    assert "in 2 parts by 2 worker processes" in capsys.readouterr().err
    one = _json(tmp_path / "one" / "statistics.json")
    assert one["dataset"]["item_count"] == 6001
    assert [f["name"] for f in one["features"]][:2] == ["label", "sepal_length"]
    assert_same_statistics(one, _json(tmp_path / "two" / "statistics.json"))
    assert (tmp_path / "two" / "constraints.json").read_text() == \
        (tmp_path / "one" / "constraints.json").read_text()


FAILING = '''
FAIL = {scores!r}


def preprocess_handler(inference_record):
    if inference_record.endpoint_output.data in FAIL:
        raise ValueError("a score this high")
    return {{"x": inference_record.endpoint_output.data}}
'''


def _run_both(argv: list[str], tmp_path: Path,
              capsys: pytest.CaptureFixture[str]) -> tuple[tuple[int, str], tuple[int, str]]:
    outcomes = []
    for workers in ("1", "2"):
        status = cli.main([*argv, "-o", str(tmp_path / f"out{workers}"), "--workers", workers])
        outcomes.append((status, capsys.readouterr().err.strip()))
    return outcomes[0], outcomes[1]


def test_a_failing_preprocessor_in_a_worker_is_the_single_passs_line(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 2000, per_file=100)
    paths = sorted(captures.rglob("*.jsonl"))
    scores = [json.loads(line)["captureData"]["endpointOutput"]["data"]
              for path in paths for line in path.read_text().splitlines()]
    # the two parts are the first ten files and the last ten: the second part fails on one
    # of its first records, long before the first fails on one of its last; the first
    # part's error is the one the single pass stops on, so it is the one reported
    late = next(i for i in range(950, 1000) if scores.count(scores[i]) == 1)
    early = next(i for i in range(1000, 1050) if scores.count(scores[i]) == 1)
    handler = tmp_path / "failing.py"
    handler.write_text(FAILING.format(scores={scores[late], scores[early]}), encoding="utf-8")
    one, two = _run_both(["check", str(captures), "--baseline", str(baseline), *WINDOW,
                          "--preprocess-handler", str(handler)], tmp_path, capsys)
    assert one == two
    status, error = one
    assert status == cli_shared.EXIT_USAGE and len(error.splitlines()) == 1
    assert f"failing.py: preprocess_handler failed on {paths[late // 100]}:" \
        f"{late % 100 + 1}: ValueError: a score this high" in error


def test_a_bad_line_in_a_later_part_of_a_dataset_is_the_single_passs_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = capturegen.training_csv(tmp_path / "train.csv", 8000, header=False)
    lines = dataset.read_bytes().split(b"\n")
    lines[7000] = lines[7000].replace(b".", b"\xe9", 1)
    dataset.write_bytes(b"\n".join(lines))
    one, two = _run_both(["baseline", str(dataset)], tmp_path, capsys)
    assert one == two
    assert one[0] == cli_shared.EXIT_USAGE and "train.csv:7001: not UTF-8 text" in one[1]
    assert len(one[1].splitlines()) == 1


def test_too_many_features_across_parts_is_the_single_passs_line(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # each file's records have four columns, the two files' columns differ: only merged do
    # the features pass --max-columns 6, as one pass finds them
    def payload(rng: random.Random, index: int) -> dict[str, Any]:
        return {f"k{index // 100}-{n}": n for n in range(3)}

    captures = write_files(tmp_path / "iris", [100, 100], payload)
    one, two = _run_both(["check", str(captures), "--baseline", str(baseline), *WINDOW,
                          "--max-columns", "6"], tmp_path, capsys)
    assert one == two
    assert one[0] == cli_shared.EXIT_USAGE and "more than 6 distinct features" in one[1]


KILLER = '''
import os
import signal

PARENT = {parent}


def preprocess_handler(inference_record):
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return {{"x": 1}}
'''


def test_a_worker_killed_is_one_line_and_status_1(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 400, per_file=100)
    handler = tmp_path / "killer.py"
    handler.write_text(KILLER.format(parent=os.getpid()), encoding="utf-8")
    status = _check(captures, baseline, tmp_path / "out", "--workers", "2",
                    "--preprocess-handler", str(handler))
    error = capsys.readouterr().err.strip()
    assert status == cli_shared.EXIT_FAILED == 1
    assert error.splitlines() == [error] and "worker process ended without an answer" in error
    assert not (tmp_path / "out").exists()


SLOW = '''
import os
import pathlib
import time

SEEN = pathlib.Path({folder!r})


def preprocess_handler(inference_record):
    (SEEN / str(os.getpid())).touch()
    time.sleep(0.02)
    return {{"x": 1}}
'''


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has ended


@pytest.mark.parametrize("group", [False, True], ids=["command", "terminal"])
def test_ctrl_c_ends_the_workers(baseline: Path, tmp_path: Path, group: bool) -> None:
    # the command alone signalled, or its whole process group as a terminal's Ctrl-C is
    seen = tmp_path / "pids"
    seen.mkdir()
    handler = tmp_path / "slow.py"
    handler.write_text(SLOW.format(folder=str(seen)), encoding="utf-8")
    captures = capturegen.write_window(tmp_path / "iris", 3000, per_file=300)
    process = subprocess.Popen(
        [sys.executable, "-m", "sagegate.monitor", "check", str(captures), "--baseline",
         str(baseline), "-o", str(tmp_path / "out"), *WINDOW, "--workers", "2",
         "--preprocess-handler", str(handler)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(seen.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = [int(p.name) for p in seen.iterdir()]
        assert len(workers) == 2 and process.pid not in workers
        if group:
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == cli_shared.EXIT_INTERRUPTED
    assert err.strip().splitlines() == ["sagegate monitor: interrupted"]
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if _alive(pid)]
    assert not (tmp_path / "out").exists()


def test_an_s3_window_is_read_by_workers(baseline: Path, tmp_path: Path, moto_url: str,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    captures = write_files(tmp_path / "iris", [300, 5, 900, 20], traffic(shift=1.0))
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="workers")
    for path in captures.rglob("*.jsonl"):
        s3.upload_file(str(path), "workers", f"capture/iris/{path.relative_to(captures)}")
    source = "s3://workers/capture/iris"
    assert _check(source, baseline, tmp_path / "one") == cli_shared.EXIT_VIOLATIONS
    capsys.readouterr()
    # a thread runs here (moto's server): the workers are fresh interpreters, not forks
    assert _check(source, baseline, tmp_path / "two", "--workers", "2") == \
        cli_shared.EXIT_VIOLATIONS
    assert "in 2 parts by 2 worker processes" in capsys.readouterr().err
    assert_same_statistics(_json(tmp_path / "one" / "statistics.json"),
                           _json(tmp_path / "two" / "statistics.json"))
    assert (tmp_path / "two" / "constraint_violations.json").read_text() == \
        (tmp_path / "one" / "constraint_violations.json").read_text()
