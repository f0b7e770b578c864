"""``sagegate monitor compare`` end to end, on capture folders that follow the experiment
contract (tests/unit/monitor/experimentgen.py): a primary and its int8 shadow within the
thresholds (exit 0), a challenger that disagrees on 20 % (exit 3), two independent arms (no
pairs), a preprocessor, S3 on moto's server, an empty window (exit 4), bad input (exit 2),
and the real console script."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import experimentgen
from tests.unit.monitor.experimentgen import WINDOW

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
PREPROCESSORS = Path(__file__).resolve().parents[2] / "preprocessors"
GATES = ["--max-distance", "0.1", "--min-agreement", "0.9", "--max-error-rate", "0.05",
         "--max-latency-ratio", "1.5"]


def _run(*argv: str) -> int:
    return cli.main(list(argv))


def _json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


@pytest.fixture(scope="module")
def int8(tmp_path_factory: pytest.TempPathFactory) -> experimentgen.Experiment:
    """The primary and its int8 shadow: 1 % of its calls fail, its answers round to 1/255."""
    return experimentgen.experiment(tmp_path_factory.mktemp("int8"), 1500, error_every=100)


@pytest.fixture(scope="module")
def disagreeing(tmp_path_factory: pytest.TempPathFactory) -> experimentgen.Experiment:
    """A shadow whose top-1 answer differs on every fifth request."""
    return experimentgen.experiment(tmp_path_factory.mktemp("wide"), 1500, shadow="wide",
                                    disagree_every=5, error_every=100, latency_factor=1.1)


def test_an_int8_shadow_within_the_thresholds_exits_0(
        int8: experimentgen.Experiment, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    status = _run("compare", str(int8.primary.folder), str(int8.shadow.folder), "-o",
                  str(out), *WINDOW, *GATES)
    printed = capsys.readouterr().out.splitlines()
    assert status == cli_shared.EXIT_OK, printed
    assert sorted(p.name for p in out.iterdir()) == [
        "compare.html", "compare.json", "statistics_a.json", "statistics_b.json"]
    document = _json(out / "compare.json")
    agreement = document["agreement"]
    assert (agreement["pairs"], agreement["compared"], agreement["agreed"]) == (
        1500, int8.compared, int8.agreed)
    assert agreement["with_error"] == int8.shadow.errors == 15
    assert agreement["unpaired_a"] == agreement["unpaired_b"] == 0
    assert document["b"]["errors"]["rate"] == 15 / 1500
    assert document["a"]["errors"]["rate"] is None
    assert document["b"]["arms"] == {"int8": 1500}
    assert document["b"]["shadow_records"] == 1500
    for side, arm in (("a", int8.primary), ("b", int8.shadow)):
        for p in (50, 90, 99):
            assert document[side]["latency_ms"][f"p{p}"] == float(
                np.percentile(arm.latencies, p))
    assert [c["name"] for c in document["columns"] if c["output"]] == [
        "prediction0", "prediction1", "prediction2"]
    assert [c["name"] for c in document["columns"] if not c["output"]] == [
        "feature0", "feature1", "feature2", "feature3"]
    assert document["verdict"] == {
        "worse": False, "exit_status": 0, "failed": [], "reasons": [],
        "nothing_compared": False, "column_reasons": 0,
        "checked": ["max_distance", "min_agreement", "max_error_rate", "max_latency_ratio"]}
    assert printed[2].startswith(f"agreement: {100 * int8.agreed / int8.compared:.2f}% "
                                 f"({int8.agreed} of {int8.compared} compared pair(s) agree")
    assert any(line.startswith("distance prediction0 (output): ") for line in printed)
    assert printed[-1].startswith("verdict: B is within every threshold given")


def test_an_image_classifiers_int8_shadow_compares_its_1000_probabilities(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The emulator's efficientnet-lite0 and its int8 copy, as the front end captures them:
    an image in, 1000 probabilities out (1000 output columns, no input column)."""
    images = experimentgen.image_experiment(tmp_path, 240)
    out = tmp_path / "out"
    status = _run("compare", str(images.primary.folder), str(images.shadow.folder), "-o",
                  str(out), *WINDOW, "--min-agreement", "0.95")
    printed = capsys.readouterr().out.splitlines()
    document = _json(out / "compare.json")
    agreement = document["agreement"]
    assert (agreement["compared"], agreement["agreed"]) == (240, images.agreed)
    assert agreement["by"]["argmax"] == 240
    assert images.agreed < 0.95 * 240  # close top classes swap under the int8 noise
    assert status == cli_shared.EXIT_VIOLATIONS
    columns = document["columns"]
    assert len(columns) == 1000 and all(c["output"] for c in columns)
    assert columns[0]["name"] == "prediction0" and columns[-1]["name"] == "prediction999"
    distances = [line for line in printed if line.startswith("distance ")]
    assert len(distances) == 20  # the largest, not a thousand lines
    largest = max(c["distance"] for c in columns)
    assert distances[0].endswith(f"(output): {largest:.4g} (Robust, KS critical "
                                 f"{columns[0]['critical']:.4g})")
    assert printed[printed.index(distances[0]) - 1].startswith("distances, one a column: ")
    last = float(distances[-1].split(": ")[1].split(" ")[0])
    rest = sorted((c["distance"] for c in columns), reverse=True)[20:]
    ties = sum(f"{d:.4g}" == f"{last:.4g}" for d in rest)
    (remainder,) = [line for line in printed if line.startswith("... and 980 more column(s)")]
    assert remainder.startswith(f"... and 980 more column(s): "
                                f"{f'{ties} more at distance {last:.4g}, ' if ties else ''}"
                                f"{980 - ties} smaller (")
    page = (out / "compare.html").read_text(encoding="utf-8")
    assert page.count('<svg class="chart"') == 40
    start = page.index('<table class="other-columns"')
    other = page[start:page.index("</table>", start)]
    assert other.count("<tr>") == 1 + 960  # the head, then one short row each
    assert len(page) < 1_000_000


def test_a_challenger_that_disagrees_on_a_fifth_exits_3_with_its_reason(
        disagreeing: experimentgen.Experiment, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    status = _run("compare", str(disagreeing.primary.folder), str(disagreeing.shadow.folder),
                  "-o", str(tmp_path / "out"), *WINDOW, "--min-agreement", "0.9")
    printed = capsys.readouterr().out.splitlines()
    assert status == cli_shared.EXIT_VIOLATIONS
    document = _json(tmp_path / "out" / "compare.json")
    assert document["agreement"]["agreed"] == disagreeing.agreed
    # every fifth answer rotated: at least that fifth disagrees (int8 rounding may add a few)
    assert document["agreement"]["compared"] - document["agreement"]["agreed"] >= 1485 // 5
    assert document["verdict"]["failed"] == ["min_agreement"]
    share = 100 * disagreeing.agreed / disagreeing.compared
    reason = (f"agreement {share:.2f}% ({disagreeing.agreed} of {disagreeing.compared} pairs) "
              f"is below --min-agreement 90.00%")
    assert document["verdict"]["reasons"] == [reason]
    assert printed[-2:] == ["verdict: B is worse than A by 1 reason(s) (exit 3)",
                            f"worse: {reason}"]
    # the same traffic is within a looser agreement: the verdict moves with the threshold
    assert _run("compare", str(disagreeing.primary.folder), str(disagreeing.shadow.folder),
                "-o", str(tmp_path / "loose"), *WINDOW, "--min-agreement", "0.75") == 0


def test_every_failed_threshold_is_a_reason_of_its_own(
        disagreeing: experimentgen.Experiment, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    status = _run("compare", str(disagreeing.primary.folder), str(disagreeing.shadow.folder),
                  "-o", str(tmp_path / "out"), *WINDOW, "--max-distance", "0.05",
                  "--comparison-method", "Simple", "--min-agreement", "0.9",
                  "--max-error-rate", "0.005", "--max-latency-ratio", "1.05")
    assert status == cli_shared.EXIT_VIOLATIONS
    verdict = _json(tmp_path / "out" / "compare.json")["verdict"]
    assert verdict["failed"] == ["max_distance", "min_agreement", "max_error_rate",
                                 "max_latency_ratio"]
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if line.startswith("worse: ")] == [
        f"worse: {reason}" for reason in verdict["reasons"]]


def test_two_independent_arms_compare_distances_without_agreement(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    champion = experimentgen.independent_arm(tmp_path, "v1", 1200, seed=1)
    challenger = experimentgen.independent_arm(tmp_path, "v2", 1200, seed=2, shift=1.0,
                                               latency=30.0)
    args = [str(champion.folder), str(challenger.folder), *WINDOW]
    assert _run("compare", *args, "-o", str(tmp_path / "plain")) == cli_shared.EXIT_OK
    document = _json(tmp_path / "plain" / "compare.json")
    assert document["agreement"]["agreement"] is None
    assert (document["agreement"]["unpaired_a"], document["agreement"]["unpaired_b"]) == (
        1200, 1200)
    assert document["a"]["errors"]["rate"] is None and document["b"]["errors"]["rate"] is None
    assert "n/a: no record of B has an A record's inferenceId" in capsys.readouterr().out
    # the first feature moved by a standard deviation: so did the answers
    status = _run("compare", *args, "-o", str(tmp_path / "gated"), "--max-distance", "0.1",
                  "--max-latency-ratio", "1.2")
    assert status == cli_shared.EXIT_VIOLATIONS
    verdict = _json(tmp_path / "gated" / "compare.json")["verdict"]
    assert verdict["failed"] == ["max_distance", "max_latency_ratio"]
    # an agreement gate has no pairs to pass on: it fails rather than pass on nothing
    assert _run("compare", str(champion.folder), str(champion.folder), *WINDOW, "-o",
                str(tmp_path / "same"), "--min-agreement", "0.5") == cli_shared.EXIT_OK  # itself
    assert _run("compare", *args, "-o", str(tmp_path / "agree"),
                "--min-agreement", "0.5") == cli_shared.EXIT_VIOLATIONS


def test_a_preprocessor_makes_both_sides_rows_and_every_column_is_gated(
        int8: experimentgen.Experiment, tmp_path: Path) -> None:
    status = _run("compare", str(int8.primary.folder), str(int8.shadow.folder), "-o",
                  str(tmp_path / "out"), *WINDOW, "--preprocess-handler",
                  str(PREPROCESSORS / "json_tensor.py"), "--min-agreement", "0.9")
    assert status == cli_shared.EXIT_OK  # the failed calls' records never reach the handler
    document = _json(tmp_path / "out" / "compare.json")
    assert document["columns_gated"] == "all"
    names = {c["name"] for c in document["columns"]}
    assert {"feature0000000000", "prediction0", "request_id"} <= names
    request_id = next(c for c in document["columns"] if c["name"] == "request_id")
    assert request_id["kind"] == "categorical" and request_id["output"] is None
    assert document["agreement"]["agreed"] == int8.agreed  # from the records' outputs


def test_an_s3_prefix_on_either_side_reads_the_same(
        int8: experimentgen.Experiment, tmp_path: Path, moto_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="experiments")
    for path in int8.shadow.folder.rglob("*.jsonl"):
        s3.upload_file(str(path), "experiments",
                       f"captures/iris-int8/{path.relative_to(int8.shadow.folder)}")
    assert _run("compare", str(int8.primary.folder), "s3://experiments/captures/iris-int8",
                "-o", str(tmp_path / "s3"), *WINDOW) == cli_shared.EXIT_OK
    assert _run("compare", str(int8.primary.folder), str(int8.shadow.folder), "-o",
                str(tmp_path / "local"), *WINDOW) == cli_shared.EXIT_OK
    from_s3, local = (_json(tmp_path / name / "compare.json") for name in ("s3", "local"))
    for document in (from_s3, local):
        document["b"].pop("source")
    assert from_s3 == local


def test_an_empty_window_compares_nothing_and_exits_4(
        int8: experimentgen.Experiment, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    status = _run("compare", str(int8.primary.folder), str(int8.shadow.folder), "-o",
                  str(tmp_path / "out"), "--start", "2026-11-26T09:00Z", "--end",
                  "2026-11-26T10:00Z", *GATES)
    assert status == cli_shared.EXIT_EMPTY
    assert not (tmp_path / "out").exists()
    notes = capsys.readouterr().err.splitlines()
    assert [n.split(" (")[0] for n in notes] == ["note: no records in A", "note: no records in B"]
    # a primary's folder given as B and a shadow's as A: A's shadow records are skipped
    assert _run("compare", str(int8.shadow.folder), str(int8.primary.folder), "-o",
                str(tmp_path / "swapped"), *WINDOW) == cli_shared.EXIT_EMPTY
    assert "1500 shadow skipped" in capsys.readouterr().err


def test_an_arm_no_record_has_compares_nothing_and_says_so(
        int8: experimentgen.Experiment, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    status = _run("compare", str(int8.primary.folder), str(int8.shadow.folder), "-o",
                  str(tmp_path / "out"), *WINDOW, "--arm-b", "no-such-arm")
    assert status == cli_shared.EXIT_EMPTY
    (note,) = capsys.readouterr().err.splitlines()
    assert note.startswith("note: no records of arm 'no-such-arm' (1500 of other arms) in B")


def test_bad_input_is_one_line_and_exit_2(int8: experimentgen.Experiment, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    above = int8.primary.folder.parent
    cases = [
        ([str(tmp_path / "none"), str(int8.shadow.folder)], "none: no such folder"),
        ([str(above), str(int8.shadow.folder)], "a folder above the endpoints' capture "
         "folders"),
        ([str(int8.primary.folder), str(int8.shadow.folder), "--preprocess-handler",
          str(PREPROCESSORS / "introduction_event_data.py")],
         "preprocess_handler failed on "),
    ]
    for argv, message in cases:
        assert _run("compare", *argv, "-o", str(tmp_path / "out"), *WINDOW) == cli_shared.EXIT_USAGE
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and message in error, error
    broken = tmp_path / "broken" / "AllTraffic" / "2026" / "11" / "25" / "09"
    broken.mkdir(parents=True)
    (broken / "x.jsonl").write_text("not json\n", encoding="utf-8")
    assert _run("compare", str(int8.primary.folder), str(tmp_path / "broken"), "-o",
                str(tmp_path / "out"), *WINDOW) == cli_shared.EXIT_USAGE
    assert "no readable record" in capsys.readouterr().err
    for option, value in (("--min-agreement", "1.5"), ("--max-latency-ratio", "0"),
                          ("--max-distance", "nan")):
        with pytest.raises(SystemExit) as raised:
            _run("compare", "a", "b", "-o", "out", option, value)
        assert raised.value.code == cli_shared.EXIT_USAGE
    assert not (tmp_path / "out").exists()


def test_the_console_script_prints_the_verdict_and_exits_3(
        disagreeing: experimentgen.Experiment, tmp_path: Path) -> None:
    copy = tmp_path / "captures"
    shutil.copytree(disagreeing.primary.folder, copy / "iris")
    shutil.copytree(disagreeing.shadow.folder, copy / "iris-wide")
    done = subprocess.run(
        [sys.executable, "-m", "sagegate.monitor", "compare", str(copy / "iris"),
         str(copy / "iris-wide"), "-o", str(tmp_path / "out"), "--no-report",
         "--min-agreement", "0.9", *WINDOW],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    assert "worse: agreement " in done.stdout
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "compare.html").exists()
    assert (tmp_path / "out" / "compare.json").is_file()
