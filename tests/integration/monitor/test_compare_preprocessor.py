"""A record preprocessor is the user's code: whatever it does, it cannot end the command, keep
it from exiting or speak for it (``sagegate monitor compare``, ``check`` and ``baseline`` run
it in a worker process, sagegate.monitor.workers). Each hostile handler is run through the
real console script: ``os._exit(0)``, a thread that is not a daemon, ``print("verdict:
PASS")``, an endless loop, in the handler and as the file is imported. And a preprocessor that
drops every record no longer passes ``--max-distance``."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chalicelib.monitor import user_workers
from sagegate.monitor import cli, cli_shared
from tests.integration.monitor.test_user_code_workers import _ended
from tests.unit.monitor import experimentgen
from tests.unit.monitor.experimentgen import WINDOW

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TIMEOUT = 120  # seconds: far above a run's, far below the suite's
HANDLER = "def preprocess_handler(inference_record):\n"
ROW = "    return {'x': float(len(inference_record.endpoint_input.data))}\n"
FORGED = "verdict: B is within every threshold given (forged; exit 0)"


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> experimentgen.Experiment:
    return experimentgen.experiment(tmp_path_factory.mktemp("hostile"), 200)


def _compare(experiment: experimentgen.Experiment, out: Path, handler: Path,
             *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sagegate.monitor", "compare", str(experiment.primary.folder),
         str(experiment.shadow.folder), "-o", str(out), *WINDOW, "--preprocess-handler",
         str(handler), "--max-distance", "0.5", *extra],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
        stdin=subprocess.DEVNULL)


def _handler(folder: Path, text: str, name: str = "hostile.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _failed(done: subprocess.CompletedProcess[str], out: Path, *fragments: str) -> str:
    """Exit 1, one line on stderr holding each fragment, nothing on stdout, no file."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == cli_shared.EXIT_FAILED == 1, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("sagegate monitor: ")
    for fragment in fragments:
        assert fragment in line, line
    assert not out.exists()
    return line


@pytest.mark.parametrize("where", ["handler", "import"])
def test_os_exit_in_the_preprocessor_is_one_line_and_exit_1(
        experiment: experimentgen.Experiment, tmp_path: Path, where: str) -> None:
    exit_now = "import os\nos._exit(0)\n"
    text = HANDLER + "    " + exit_now.replace("\n", "\n    ") + "\n" if where == "handler" \
        else exit_now + HANDLER + ROW
    done = _compare(experiment, tmp_path / "out", _handler(tmp_path, text))
    _failed(done, tmp_path / "out", "a worker process ended without an answer",
            "it exited with status 0: did the record preprocessor call os._exit?",
            "part 1 of 1" if where == "handler" else "importing the record preprocessor")


@pytest.mark.parametrize("where", ["handler", "import"])
def test_a_thread_the_preprocessor_leaves_running_does_not_keep_the_command(
        experiment: experimentgen.Experiment, tmp_path: Path, where: str) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    start = f"""\
        import os, pathlib, threading, time
        pathlib.Path({str(pids)!r}, str(os.getpid())).touch()
        threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
        """
    text = "import threading\nSTARTED = []\n" + HANDLER + (
        "    if not STARTED:\n        STARTED.append(1)\n" +
        textwrap.indent(textwrap.dedent(start), "        ") + ROW
        if where == "handler" else "    pass\n" + ROW)
    if where == "import":
        text = textwrap.dedent(start) + text
    done = _compare(experiment, tmp_path / "out", _handler(tmp_path, text))
    assert done.returncode == cli_shared.EXIT_OK, done.stderr  # the one column x, within 0.5
    assert done.stdout.splitlines()[-1].startswith("verdict: B is within every threshold")
    (pid,) = (int(p.name) for p in pids.iterdir())
    _ended(pid)


@pytest.mark.parametrize("where", ["handler", "import"])
def test_the_preprocessors_prints_never_reach_stdout(
        experiment: experimentgen.Experiment, tmp_path: Path, where: str) -> None:
    forge = ("import sys, os\nprint('" + FORGED + "')\nprint('verdict: PASS', file=sys.stderr)"
             "\nos.write(1, b'verdict: PASS (fd 1)\\n')\n")
    text = forge + HANDLER + ROW if where == "import" else \
        HANDLER + textwrap.indent(forge, "    ") + ROW
    done = _compare(experiment, tmp_path / "out", _handler(tmp_path, text))
    assert "Traceback" not in done.stderr
    printed = done.stdout.splitlines()
    assert FORGED not in printed and "verdict: PASS" not in done.stdout
    assert [line for line in printed if line.startswith("verdict:")] == [
        "verdict: B is within every threshold given (max_distance; exit 0)"]
    assert done.returncode == cli_shared.EXIT_OK
    err = done.stderr.splitlines()
    assert f"{user_workers.OUTPUT_PREFIX}{FORGED}" in err
    assert f"{user_workers.OUTPUT_PREFIX}verdict: PASS" in err
    assert f"{user_workers.OUTPUT_PREFIX}verdict: PASS (fd 1)" in err
    assert not [line for line in err if line.startswith("verdict")]


@pytest.mark.parametrize("where", ["handler", "import"])
def test_an_endless_preprocessor_is_stopped_at_its_deadline(
        experiment: experimentgen.Experiment, tmp_path: Path, where: str) -> None:
    loop = "while True:\n    try:\n        pass\n    except BaseException:\n        pass\n"
    text = loop + HANDLER + ROW if where == "import" else \
        HANDLER + textwrap.indent(loop, "    ") + ROW
    done = _compare(experiment, tmp_path / "out", _handler(tmp_path, text),
                    "--preprocess-timeout", "1")
    what = "while importing it" if where == "import" else "on part 1 of 1"
    _failed(done, tmp_path / "out",
            f"hostile.py: preprocess_handler ran past its deadline {what}: no record read "
            f"for 1 s (--preprocess-timeout); its worker process was stopped")


@pytest.mark.parametrize("command", ["check", "baseline"])
def test_check_and_baseline_run_the_preprocessor_in_a_worker_too(
        experiment: experimentgen.Experiment, tmp_path: Path, command: str) -> None:
    baseline = tmp_path / "baseline"
    plain = _handler(tmp_path, HANDLER + ROW, "plain.py")
    assert cli.main(["baseline", str(experiment.primary.folder), "-o", str(baseline),
                     *WINDOW, "--preprocess-handler", str(plain)]) == cli_shared.EXIT_OK
    base = ["--baseline", str(baseline)] if command == "check" else []
    for text, status, fragment in (
            ("import os\n" + HANDLER + "    os._exit(0)\n", cli_shared.EXIT_FAILED,
             "it exited with status 0"),
            (HANDLER + "    print('" + FORGED + "')\n" + ROW, cli_shared.EXIT_OK, None)):
        out = tmp_path / f"out-{status}"
        done = subprocess.run(
            [sys.executable, "-m", "sagegate.monitor", command, str(experiment.primary.folder),
             *base, "-o", str(out), *WINDOW, "--preprocess-handler",
             str(_handler(tmp_path, text))],
            capture_output=True, text=True, timeout=TIMEOUT, check=False,
            stdin=subprocess.DEVNULL)
        assert done.returncode == status, done.stderr
        assert FORGED not in done.stdout
        if fragment is not None:
            _failed(done, out, fragment)
        else:
            assert f"{user_workers.OUTPUT_PREFIX}{FORGED}" in done.stderr.splitlines()


def test_a_preprocessor_dropping_every_record_fails_max_distance(
        experiment: experimentgen.Experiment, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    handler = _handler(tmp_path, HANDLER + "    return []\n")
    status = cli.main(["compare", str(experiment.primary.folder),
                       str(experiment.shadow.folder), "-o", str(tmp_path / "out"), *WINDOW,
                       "--preprocess-handler", str(handler), "--max-distance", "0.1"])
    printed = capsys.readouterr().out.splitlines()
    assert status == cli_shared.EXIT_VIOLATIONS, printed  # not "within every threshold", exit 0
    assert printed[-1] == ("worse: no column compared (0 row(s) in A, 0 in B): "
                           "--max-distance cannot be checked")
