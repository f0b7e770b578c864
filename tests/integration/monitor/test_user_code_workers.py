"""Every user handler the command line runs goes through worker processes
(chalicelib.monitor.user_workers), never the command's own: ``sagegate monitor check
--postprocess-handler`` and ``sagegate capture --preprocess-handler`` (its rows and its file's
postprocess_handler). Each hostile file is run through the real program: ``os._exit(0)``, a
thread that is not a daemon, ``print("verdict: PASS")``, an endless loop, in the handler and
as the file is imported."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chalicelib.monitor import user_workers
from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TIMEOUT = 120  # seconds: far above a run's, far below the suite's
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
POST = "def postprocess_handler():\n"
PRE = ("def preprocess_handler(inference_record):\n"
       "    return {'n': len(inference_record.endpoint_input.data)}\n")
FORGED = "verdict: PASS"
EXIT_NOW = "import os\nos._exit(0)\n"
LOOP = "while True:\n    try:\n        pass\n    except BaseException:\n        pass\n"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A baseline and a capture window of 40 records."""
    root = tmp_path_factory.mktemp("usercode")
    dataset = capturegen.training_csv(root / "train.csv", 500, header=False)
    assert cli.main(["baseline", str(dataset), "-o", str(root / "baseline")]) == 0
    return root / "baseline", capturegen.write_window(root / "iris", 40)


def _file(folder: Path, text: str, name: str = "hostile.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False, stdin=subprocess.DEVNULL)


def _check(folders: tuple[Path, Path], out: Path, script: Path,
           *extra: str) -> subprocess.CompletedProcess[str]:
    baseline, captures = folders
    return _run("sagegate.monitor", "check", str(captures), "--baseline", str(baseline),
                "-o", str(out), *WINDOW, "--postprocess-handler", str(script), *extra)


def _capture(folders: tuple[Path, Path], handler: Path,
             *extra: str) -> subprocess.CompletedProcess[str]:
    return _run("sagegate.captures.reader", str(folders[1]), "--preprocess-handler",
                str(handler), *extra)


def _in_handler(head: str, body: str) -> str:
    return head + textwrap.indent(body, "    ")


def _one_line(done: subprocess.CompletedProcess[str], prefix: str, *fragments: str) -> None:
    """Exit 1, one line on stderr holding each fragment, no traceback."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith(prefix)]
    for fragment in fragments:
        assert fragment in line, line


# sagegate monitor check --postprocess-handler

@pytest.mark.parametrize("where", ["handler", "import"])
def test_os_exit_in_the_postprocessor_is_one_line_and_exit_1(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    text = _in_handler(POST, EXIT_NOW) if where == "handler" \
        else EXIT_NOW + POST + "    pass\n"
    done = _check(folders, tmp_path / "out", _file(tmp_path, text))
    _one_line(done, "sagegate monitor: ", "a worker process ended without an answer",
              "it exited with status 0: did the postprocessing script call os._exit?",
              "running postprocess_handler" if where == "handler"
              else "importing the postprocessing script")
    assert done.stdout == ""  # no violation lines: the run did not end as a clean one


@pytest.mark.parametrize("where", ["handler", "import"])
def test_a_thread_the_postprocessor_leaves_running_does_not_keep_the_command(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    start = (f"import os, pathlib, threading, time\n"
             f"pathlib.Path({str(pids)!r}, str(os.getpid())).touch()\n"
             f"threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()\n")
    text = _in_handler(POST, start) if where == "handler" else start + POST + "    pass\n"
    done = _check(folders, tmp_path / "out", _file(tmp_path, text))
    assert done.returncode in (cli_shared.EXIT_OK, cli_shared.EXIT_VIOLATIONS), done.stderr
    (pid,) = (int(p.name) for p in pids.iterdir())
    _ended(pid)


def _ended(pid: int) -> None:
    assert pid != os.getpid()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)  # the worker was ended, its thread with it


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _forge(target: str) -> str:
    return (f"import sys, os\nprint({target!r})\nprint({target!r}, file=sys.stderr)\n"
            f"os.write(1, b'{target} (fd 1)\\n')\n")


@pytest.mark.parametrize("where", ["handler", "import"])
def test_the_postprocessors_prints_never_reach_stdout(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    forge = _forge(FORGED)
    text = _in_handler(POST, forge) if where == "handler" else forge + POST + "    pass\n"
    done = _check(folders, tmp_path / "out", _file(tmp_path, text))
    assert done.returncode in (cli_shared.EXIT_OK, cli_shared.EXIT_VIOLATIONS), done.stderr
    assert FORGED not in done.stdout
    err = done.stderr.splitlines()
    for line in (FORGED, FORGED, f"{FORGED} (fd 1)"):
        assert f"postprocess_handler output: {line}" in err
    assert FORGED not in [line for line in err if not line.startswith("postprocess_handler")]


@pytest.mark.parametrize("where", ["handler", "import"])
def test_an_endless_postprocessor_is_stopped_at_its_deadline(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    text = _in_handler(POST, LOOP) if where == "handler" else LOOP + POST + "    pass\n"
    done = _check(folders, tmp_path / "out", _file(tmp_path, text),
                  "--postprocess-timeout", "1")
    what = "while running it: it has not returned" if where == "handler" \
        else "while importing it: it has not returned"
    _one_line(done, "sagegate monitor: ",
              f"hostile.py: postprocess_handler ran past its deadline {what} for 1 s "
              f"(--postprocess-timeout); its worker process was stopped")


# sagegate capture --preprocess-handler

@pytest.mark.parametrize("where", ["handler", "import", "postprocess"])
def test_os_exit_in_captures_preprocessor_is_one_line_and_exit_1(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    text = {"handler": _in_handler("def preprocess_handler(inference_record):\n", EXIT_NOW),
            "import": EXIT_NOW + PRE,
            "postprocess": PRE + _in_handler(POST, EXIT_NOW)}[where]
    done = _capture(folders, _file(tmp_path, text))
    _one_line(done, "error: ", "a worker process ended without an answer",
              "it exited with status 0: did the record preprocessor call os._exit?",
              {"handler": "batch 1", "import": "importing the record preprocessor",
               "postprocess": "running its postprocess_handler"}[where])
    assert "row(s) from" not in done.stderr  # no summary: the run did not succeed


@pytest.mark.parametrize("where", ["handler", "import"])
def test_a_thread_captures_preprocessor_leaves_running_does_not_keep_the_command(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    start = (f"import os, pathlib, threading, time\n"
             f"pathlib.Path({str(pids)!r}, str(os.getpid())).touch()\n"
             f"threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()\n")
    text = PRE.replace("    return", _in_handler("", "if not STARTED:\n    STARTED.append(1)\n"
                                                     + textwrap.indent(start, "    "))
                       + "    return") if where == "handler" else start + PRE
    done = _capture(folders, _file(tmp_path, "STARTED = []\n" + text))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 40
    (pid,) = (int(p.name) for p in pids.iterdir())
    _ended(pid)


@pytest.mark.parametrize("where", ["handler", "import"])
def test_captures_preprocessors_prints_never_reach_its_rows(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    forge = _forge(FORGED)
    text = PRE.replace("    return", textwrap.indent(forge, "    ") + "    return") \
        if where == "handler" else forge + PRE
    done = _capture(folders, _file(tmp_path, text))
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    assert len(rows) == 40 and all(row.startswith('{"n": ') for row in rows)  # rows only
    err = done.stderr.splitlines()
    assert f"preprocess_handler output: {FORGED} (fd 1)" in err
    assert err[-1].startswith("40 row(s) from 40 record(s)")


@pytest.mark.parametrize("where", ["handler", "import"])
def test_an_endless_capture_preprocessor_is_stopped_at_its_deadline(
        folders: tuple[Path, Path], tmp_path: Path, where: str) -> None:
    text = PRE.replace("    return", textwrap.indent(LOOP, "    ") + "    return") \
        if where == "handler" else LOOP + PRE
    done = _capture(folders, _file(tmp_path, text), "--preprocess-timeout", "1")
    what = "on batch 1" if where == "handler" else "while importing it"
    _one_line(done, "error: ", f"hostile.py: preprocess_handler ran past its deadline {what}: "
              f"no record read for 1 s (--preprocess-timeout); its worker process was stopped")


FLOOD = f"import os\nos.write(1, b'x' * ({user_workers.OUTPUT_LIMIT} * 4))\n"
"""Four times the output limit written straight to descriptor 1, past sys.stdout's cap."""
MARGIN = 64 * 1024


def test_a_handlers_writes_past_python_are_capped_in_its_output_file(tmp_path: Path) -> None:
    script = _file(tmp_path, _in_handler(POST, FLOOD))
    with user_workers.UserWorkers(1, str(script), code=user_workers.POSTPROCESS) as workers:
        workers.check_import()
        workers.run(user_workers.postprocess, str(script), "in it", "running it")
        size = workers._output.stat().st_size
    assert size <= user_workers.OUTPUT_LIMIT + MARGIN


def test_a_flooding_postprocessor_leaves_the_check_its_verdict(
        folders: tuple[Path, Path], tmp_path: Path) -> None:
    done = _check(folders, tmp_path / "out", _file(tmp_path, _in_handler(POST, FLOOD)))
    assert done.returncode in (cli_shared.EXIT_OK, cli_shared.EXIT_VIOLATIONS), done.stderr
    assert len(done.stderr) <= user_workers.OUTPUT_LIMIT + MARGIN
