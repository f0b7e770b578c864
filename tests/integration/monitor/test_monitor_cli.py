"""``sagegate monitor baseline`` and ``check`` end to end: a training CSV, capture windows in
the layout sagegate writes (local and in S3 on moto's server), the public preprocessors of
tests/preprocessors run unchanged, the exit statuses, ``python -m sagegate.monitor``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen, schema

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
PREPROCESSORS = Path(__file__).resolve().parents[2] / "preprocessors"
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]


def _run(*argv: str) -> int:
    return cli.main(list(argv))


def _json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def _violations(folder: Path) -> list[tuple[str, str]]:
    document = _json(folder / "constraint_violations.json")
    return [(v["feature_name"], v["constraint_check_type"]) for v in document["violations"]]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mon")
    dataset = capturegen.training_csv(folder / "train.csv", 3000, header=False)
    assert _run("baseline", str(dataset), "-o", str(folder / "baseline")) == 0
    return folder / "baseline"


def test_a_baseline_from_a_csv_has_the_documented_schema(baseline: Path) -> None:
    statistics = _json(baseline / "statistics.json")
    schema.check_statistics(statistics)
    schema.check_constraints(_json(baseline / "constraints.json"))
    assert [f["name"] for f in statistics["features"]] == ["_c0", "_c1", "_c2", "_c3", "_c4"]
    assert statistics["dataset"]["item_count"] == 3000


def test_a_header_is_detected_or_named(tmp_path: Path) -> None:
    dataset = capturegen.training_csv(tmp_path / "train.csv", 200, header=True)
    assert _run("baseline", str(dataset), "-o", str(tmp_path / "detected")) == 0
    names = [f["name"] for f in _json(tmp_path / "detected" / "statistics.json")["features"]]
    assert names[:2] == ["label", "sepal_length"]
    assert _run("baseline", str(dataset), "--no-header", "-o", str(tmp_path / "none")) == 0
    forced = _json(tmp_path / "none" / "statistics.json")
    assert forced["features"][0]["name"] == "_c0"
    assert forced["features"][0]["inferred_type"] == "String"  # "label" is a value now


def test_a_window_like_the_training_data_passes(baseline: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 2000)
    out = tmp_path / "out"
    assert _run("check", str(captures), "--baseline", str(baseline), "-o", str(out),
                *WINDOW) == cli_shared.EXIT_OK
    schema.check_statistics(_json(out / "statistics.json"))
    schema.check_violations(_json(out / "constraint_violations.json"))
    assert _violations(out) == []
    assert (out / "report.html").is_file()
    assert "2000 record(s) read" in capsys.readouterr().err


def test_a_shifted_feature_reports_drift_for_it_alone(baseline: Path, tmp_path: Path) -> None:
    captures = capturegen.write_window(tmp_path / "iris",
                                       2000, capturegen.iris_like(shift={2: 1.0}))
    out = tmp_path / "out"
    status = _run("check", str(captures), "--baseline", str(baseline), "-o", str(out),
                  *WINDOW)
    assert status == cli_shared.EXIT_VIOLATIONS
    assert _violations(out) == [("_c3", "baseline_drift_check")]  # input column 2


def test_a_feature_missing_from_a_third_of_records_is_incomplete(baseline: Path,
                                                                 tmp_path: Path) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 1500, missing=(1, 3))
    out = tmp_path / "out"
    assert _run("check", str(captures), "--baseline", str(baseline), "-o", str(out),
                *WINDOW) == cli_shared.EXIT_VIOLATIONS
    assert _violations(out) == [("_c2", "completeness_check")]


def test_only_the_windows_hours_are_read(baseline: Path, tmp_path: Path) -> None:
    root = tmp_path / "iris"
    capturegen.write_window(root, 500)
    capturegen.write_window(root, 700, hour=capturegen.HOUR.replace(hour=10),
                            features=capturegen.iris_like(shift={0: 3.0}))
    out = tmp_path / "out"
    assert _run("check", str(root), "--baseline", str(baseline), "-o", str(out),
                *WINDOW) == 0
    assert _json(out / "statistics.json")["dataset"]["item_count"] == 500


def test_an_empty_window_checks_nothing_and_says_so(baseline: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 10)
    # its own status: a cron job must not read "nothing checked" as "no violations"
    assert _run("check", str(captures), "--baseline", str(baseline), "-o",
                str(tmp_path / "out"), "--start", "2026-11-24T00:00Z", "--end",
                "2026-11-24T01:00Z") == cli_shared.EXIT_EMPTY == 4
    assert "no records" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("handler", "rows"), [
    ("devguide_flatten_csv.py", 600), ("data_quality_logger.py", 600),
    ("json_tensor.py", 600)])
def test_public_preprocessors_run_unchanged(tmp_path: Path, handler: str, rows: int) -> None:
    encoding = "JSON" if handler == "json_tensor.py" else "CSV"
    captures = capturegen.write_window(tmp_path / "iris", rows, encoding=encoding)
    args = ["--preprocess-handler", str(PREPROCESSORS / handler), *WINDOW]
    assert _run("baseline", str(captures), "-o", str(tmp_path / "base"), *args) == 0
    assert _run("check", str(captures), "--baseline", str(tmp_path / "base"), "-o",
                str(tmp_path / "out"), *args) == 0
    statistics = _json(tmp_path / "out" / "statistics.json")
    assert statistics["dataset"]["item_count"] == rows
    schema.check_statistics(statistics)


def test_the_sampling_idiom_drops_records_and_shadow_records_are_skipped(
        tmp_path: Path) -> None:
    shadow = {"invocationSource": "ShadowExperiment"}
    captures = capturegen.write_window(tmp_path / "iris", 3000,
                                       metadata=lambda i: shadow if i % 2 else None)
    assert _run("baseline", str(captures), "-o", str(tmp_path / "base"), *WINDOW,
                "--preprocess-handler", str(PREPROCESSORS / "devguide_sampling.py")) == 0
    kept = _json(tmp_path / "base" / "statistics.json")["dataset"]["item_count"]
    assert 80 < kept < 230  # about one in ten of the 1,500 non-shadow records


def test_cache_hits_are_included_unless_excluded(baseline: Path, tmp_path: Path) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 900,
                                       metadata=lambda i: {"sagegateCacheHit": i % 3 == 0})
    for flag, expected in (([], 900), (["--exclude-cache-hits"], 600)):
        out = tmp_path / f"out{len(flag)}"
        _run("check", str(captures), "--baseline", str(baseline), "-o", str(out), *WINDOW,
             *flag)
        assert _json(out / "statistics.json")["dataset"]["item_count"] == expected


def test_a_failing_preprocessor_is_one_line_naming_file_and_record(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 10)
    status = _run("check", str(captures), "--baseline", str(baseline), "-o",
                  str(tmp_path / "out"), *WINDOW, "--preprocess-handler",
                  str(PREPROCESSORS / "introduction_event_data.py"))
    assert status == cli_shared.EXIT_USAGE
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "introduction_event_data.py: preprocess_handler failed on " in error
    assert ".jsonl:1: AttributeError: CapturedData has no attribute 'event_data'" in error


def test_the_postprocessing_script_runs_after_the_analysis(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 50)
    assert _run("check", str(captures), "--baseline", str(baseline), "-o",
                str(tmp_path / "out"), *WINDOW, "--postprocess-handler",
                str(PREPROCESSORS / "devguide_flatten_csv.py")) == 0
    printed = capsys.readouterr()  # run in a worker process: its print on stderr, prefixed
    assert "postprocess_handler ran" not in printed.out
    assert "postprocess_handler output: postprocess_handler ran" in printed.err.splitlines()


def test_usage_and_input_errors_exit_2(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("check", str(tmp_path), "--baseline", str(tmp_path / "none"), "-o",
                str(tmp_path / "out")) == cli_shared.EXIT_USAGE
    assert "statistics.json: no such file" in capsys.readouterr().err
    assert _run("baseline", str(tmp_path / "missing.csv"), "-o", str(tmp_path)) == 2
    dataset = capturegen.training_csv(tmp_path / "train.csv", 10, header=False)
    assert _run("baseline", str(dataset), "-o", str(tmp_path / "b"), *WINDOW) == 2
    assert "apply to capture folders" in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        _run("check")
    assert raised.value.code == 2


def test_a_check_of_an_s3_prefix_reads_the_same_window(
        baseline: Path, tmp_path: Path, moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    captures = capturegen.write_window(tmp_path / "iris", 800,
                                       capturegen.iris_like(shift={2: 1.0}))
    capturegen.write_window(tmp_path / "iris", 300, hour=capturegen.HOUR.replace(hour=8))
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="captures")
    for path in captures.rglob("*.jsonl"):
        s3.upload_file(str(path), "captures", f"datacapture/iris/{path.relative_to(captures)}")
    assert _run("check", "s3://no-such-bucket/iris", "--baseline", str(baseline), "-o",
                str(tmp_path / "none"), *WINDOW) == cli_shared.EXIT_USAGE
    out = tmp_path / "out"
    status = _run("check", "s3://captures/datacapture/iris", "--baseline", str(baseline),
                  "-o", str(out), *WINDOW)
    assert status == cli_shared.EXIT_VIOLATIONS
    assert _json(out / "statistics.json")["dataset"]["item_count"] == 800
    assert _violations(out) == [("_c3", "baseline_drift_check")]


def test_python_m_sagegate_monitor_runs_a_check(baseline: Path, tmp_path: Path) -> None:
    captures = capturegen.write_window(tmp_path / "iris", 300,
                                       capturegen.iris_like(shift={0: 2.0}))
    done = subprocess.run(
        [sys.executable, "-m", "sagegate.monitor", "check", str(captures), "--baseline",
         str(baseline), "-o", str(tmp_path / "out"), "--no-report", *WINDOW],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    assert "_c1: baseline_drift_check: Baseline drift distance" in done.stdout
    assert not (tmp_path / "out" / "report.html").exists()


def test_add_parser_declares_monitor_on_a_subparsers_object() -> None:
    import argparse

    top = argparse.ArgumentParser(prog="sagegate")
    cli.add_parser(top.add_subparsers(dest="command"))
    args = top.parse_args(["monitor", "baseline", "data.csv", "-o", "out", "--header"])
    assert (args.command, args.monitor_command, args.header) == ("monitor", "baseline", True)


def test_one_line_in_sagegate_cli_commands_wires_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from sagegate import cli as top

    monkeypatch.setitem(top.COMMANDS, "monitor", top.Command(
        "sagegate.monitor.cli", cli.HELP, "Develop"))
    dataset = capturegen.training_csv(tmp_path / "train.csv", 50, header=True)
    assert top.main(["monitor", "baseline", str(dataset), "-o", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "constraints.json").is_file()
