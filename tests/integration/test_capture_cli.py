"""The capture reader as users run it (``sagegate capture``, a real process) and the
capture directory's size cap on a real file system.

Every refusal is one ``error: ...`` line and a non-zero exit code, never a traceback; the
directory sink with ``CAPTURE_MAX_BYTES`` stays under its cap, dropping the oldest files.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chalicelib.capture.records import Exchange, build_record
from chalicelib.capture.sinks import DirectorySink
from emulator.process import free_port
from sagegate.captures.reader import read_records
from sagegate.captures.rows import inference_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
PROBABILITIES = b"[" + b", ".join(b"0.001" for _ in range(1000)) + b"]"


def captures(tmp_path: Path, count: int = 3) -> Path:
    root = tmp_path / "captures"
    sink = DirectorySink(root)
    for index in range(count):
        exchange = Exchange("efficientnet-lite0", "AllTraffic", f"req-{index}", b"\x89PNG",
                            "application/x-image", PROBABILITIES, "application/json")
        sink.write([build_record(exchange, "both")])
    return root


READER = [sys.executable, "-m", "sagegate.cli", "capture"]
"""``sagegate capture`` as a process of its own."""


def run_reader(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*READER, *args], cwd=ROOT, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=60, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], code: int, *says: str) -> None:
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    for text in says:
        assert text in last


def test_reads_what_the_sink_wrote(tmp_path: Path) -> None:
    result = run_reader(str(captures(tmp_path)), "--top-k", "1")

    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 3
    assert "3 record(s)" in result.stderr


def test_a_source_that_does_not_exist_is_an_error_not_zero_records(tmp_path: Path) -> None:
    assert_refused(run_reader(str(tmp_path / "nowhere")), 2, "nowhere", "no such file")


def test_unknown_labels_are_named(tmp_path: Path) -> None:
    assert_refused(run_reader(str(captures(tmp_path)), "--labels", "bogus"), 2,
                   "--labels 'bogus'")


@pytest.mark.parametrize("k", ["0", "-3", "many"])
def test_top_k_must_be_a_positive_whole_number(tmp_path: Path, k: str) -> None:
    assert_refused(run_reader(str(captures(tmp_path)), "--top-k", k), 2, "--top-k")


def test_a_missing_handler_file_is_named(tmp_path: Path) -> None:
    result = run_reader(str(captures(tmp_path)), "--preprocess-handler", "no_such_handler.py")

    assert_refused(result, 2, "no_such_handler.py", "no such file")


@pytest.mark.parametrize(
    ("source", "says"),
    [("import nonexistent_module_xyz\n", "ModuleNotFoundError"),
     ("x = 1\n", "has no preprocess_handler"),
     ("def preprocess_handler(record):\n    return 42\n", "returned int"),
     ("def preprocess_handler(record):\n    raise KeyError('boom')\n", "KeyError")],
    ids=["import-fails", "no-handler", "returns-int", "raises"],
)
def test_a_broken_handler_is_reported_in_one_line(tmp_path: Path, source: str,
                                                  says: str) -> None:
    handler = tmp_path / "handler.py"
    handler.write_text(source)

    result = run_reader(str(captures(tmp_path)), "--preprocess-handler", str(handler))

    assert result.returncode in (1, 2)
    assert "Traceback" not in result.stderr
    assert says in result.stderr


def test_s3_without_credentials_is_one_line(tmp_path: Path) -> None:
    no_credentials = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
                      "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
                      "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                      "AWS_CONFIG_FILE": str(tmp_path / "none"),
                      "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1",
                      # loopback only, and nothing listens there
                      "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{free_port()}"}
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    result = subprocess.run([*READER, "s3://bucket/prefix"], cwd=ROOT,
                            env={**env, **no_credentials}, capture_output=True, text=True,
                            timeout=60, check=False)

    assert_refused(result, 1, "s3://bucket/prefix", "cannot read from S3")


def test_an_s3_uri_without_a_bucket_is_refused_before_any_call() -> None:
    assert_refused(run_reader("s3:///prefix"), 2, "no bucket")


def test_the_capture_directory_stays_under_its_cap_dropping_the_oldest(tmp_path: Path) -> None:
    cap = 1_000_000
    root = tmp_path / "captures"
    sink = DirectorySink(root, max_bytes=cap)
    written = 0
    for index in range(200):  # about 27 kB each: 5.4 MB in all
        exchange = Exchange("efficientnet-lite0", "AllTraffic", f"req-{index}", bytes(20_000),
                            "application/x-image", PROBABILITIES, "application/json")
        line = build_record(exchange, "both")
        sink.write([line])
        written += len(line.line)
        assert sum(path.stat().st_size for path in root.rglob("*.jsonl")) <= cap

    kept = [inference_id(r) for r in read_records(str(root))]
    assert written > 5 * cap
    assert "req-199" in kept and "req-0" not in kept  # the newest kept, the oldest dropped
    numbers = [int(rid.split("-")[1]) for rid in kept]
    assert numbers == list(range(numbers[0], 200))  # exactly the most recent ones, in order


def test_a_folder_of_several_endpoints_is_read_whole(tmp_path: Path) -> None:
    """The folder ``make run`` names, image and iris records side by side: one process reads
    them all, each endpoint with its own labels, and never stops part-way."""
    root = captures(tmp_path, 2)
    flower = Exchange("iris", "AllTraffic", "iris-0", b'{"instances": [[5.1, 3.5, 1.4, 0.2]]}',
                      "application/json", b'{"predictions": [[0.1, 0.2, 0.7]]}',
                      "application/json")
    DirectorySink(root).write([build_record(flower, "both")])

    result = run_reader(str(root), "--top-k", "1")

    assert result.returncode == 0, result.stderr
    labels = sorted(line.split('"top1_label": ')[1].split(",")[0]
                    for line in result.stdout.splitlines())
    assert labels == ['"tench"', '"tench"', '"virginica"']
    assert "3 row(s) from 3 record(s)" in result.stderr and "Traceback" not in result.stderr


def test_the_logger_form_runs_unchanged_in_a_process(tmp_path: Path) -> None:
    root = tmp_path / "captures"
    row = Exchange("churn", "AllTraffic", "c-0", b"132,25,113.2", "text/csv", b"0.01\n",
                   "text/csv; charset=utf-8")
    DirectorySink(root).write([build_record(row, "both")])

    result = run_reader(str(root), "--preprocess-handler",
                        str(ROOT / "tests" / "preprocessors" / "data_quality_logger.py"))

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '{"00": "132", "01": "25", "02": "113.2"}'
    assert "This is data input 132,25,113.2" in result.stderr
