"""The `sagegate` console script: every command listed, dispatched lazily, with its own help."""
from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagegate import cli

ROOT = Path(__file__).resolve().parents[2]
# The make targets that are aliases of a command, and the command each runs.
MAKE_ALIASES = {"run": "run", "browser": "browser", "bench": "bench",
                "bench-coldstart": "bench-coldstart", "bench-worstcase": "bench-worstcase",
                "layer": "layer", "layer-zip": "layer",
                "package": "package", "deploy": "deploy", "chalice-deploy": "chalice-deploy",
                "policy": "policy", "deploy-check": "check", "lock": "lock"}
# Modules that are not sagegate's own and still name themselves `python -m ...` in usage.


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main([name, "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ")
    assert out.startswith(f"usage: sagegate {name} ")


def test_the_top_level_help_lists_every_command_with_its_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    for name, command in cli.COMMANDS.items():
        line = next((line for line in out.splitlines() if line.split()[:1] == [name]), None)
        assert line is not None, f"{name} not listed"
        assert " ".join(command.help.split()[:4]) in " ".join(line.split()), line


def test_every_make_alias_runs_a_listed_command() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target, command in MAKE_ALIASES.items():
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert f"$(SAGEGATE) {command}" in recipe, target
        assert command in cli.COMMANDS


@pytest.mark.parametrize("argv", [[], ["no-such-command"]])
def test_no_or_an_unknown_command_is_a_usage_error(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == 2
    assert "usage: sagegate" in capsys.readouterr().err


@pytest.fixture
def fake_commands(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[object, ...]]]:
    """Two commands in throw-away modules: one takes ``prog``, one reads ``sys.argv[0]``."""
    calls: list[tuple[object, ...]] = []
    with_prog = types.ModuleType("fake_with_prog")
    without = types.ModuleType("fake_without_prog")

    def main_with_prog(argv: list[str], prog: str | None = None) -> int:
        calls.append(("with", argv, prog))
        return 3

    def main_without(argv: list[str]) -> int:
        calls.append(("without", argv, sys.argv[0]))
        return 4

    with_prog.main = main_with_prog  # type: ignore[attr-defined]
    without.main = main_without  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_with_prog", with_prog)
    monkeypatch.setitem(sys.modules, "fake_without_prog", without)
    monkeypatch.setitem(cli.COMMANDS, "one", cli.Command("fake_with_prog", "one", "Test"))
    monkeypatch.setitem(cli.COMMANDS, "two", cli.Command("fake_without_prog", "two", "Test"))
    yield calls


def test_a_command_gets_the_rest_of_the_line_its_name_and_gives_its_status(
        fake_commands: list[tuple[object, ...]]) -> None:
    argv0 = sys.argv[0]
    assert cli.main(["one", "--stage", "dev", "x"]) == 3
    assert cli.main(["two", "--help-me"]) == 4
    assert fake_commands == [("with", ["--stage", "dev", "x"], "sagegate one"),
                             ("without", ["--help-me"], "sagegate two")]
    assert sys.argv[0] == argv0


def test_commands_are_imported_only_when_they_run() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from sagegate import cli; cli.parser(); "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in "
         "('emulator', 'bench', 'chalicelib', 'chalice', 'cv2', 'boto3') "
         "or m.startswith('sagegate.')))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "['sagegate.cli']"


def installed_script() -> Path:
    script = Path(sys.executable).parent / "sagegate"
    assert script.exists(), "the sagegate console script is missing: make venv installs it"
    return script


def test_the_installed_console_script_runs_from_any_directory(tmp_path: Path) -> None:
    script = installed_script()
    done = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert all(name in done.stdout for name in cli.COMMANDS)
    # the project's packages import from elsewhere: the stage is read through chalicelib
    done = subprocess.run([str(script), "stage", "prod", "--key", "auth"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "api-key\n"), done.stderr
    done = subprocess.run([str(script), "emulator", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: sagegate emulator" in done.stdout, done.stderr
