"""Finding or installing the web page tests' Chromium (:mod:`sagegate.local.browser`), on fake
hosts: nothing is installed and no browser is started here."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from sagegate.local import browser
from sagegate.local.browser import (
    APT_ENV,
    PLAYWRIGHT_STEP,
    BrowserError,
    Host,
    Step,
    ensure_chromium,
    find_chromium,
    install_steps,
)

PLAYWRIGHT_OWN = "/home/u/.cache/ms-playwright/chromium-1/chrome-linux/chrome"


def host(*, files: set[str] | None = None, path: Mapping[str, str] | None = None,
         environ: Mapping[str, str] | None = None, debian: bool = True,
         root: bool = True) -> Host:
    """A machine with these executable ``files`` and these commands on ``PATH``."""
    commands = dict(path or {})
    executables = set(files or ()) | set(commands.values())
    return Host(environ=environ or {}, which=commands.get,
                is_executable=executables.__contains__,
                playwright_path=lambda: PLAYWRIGHT_OWN, debian=debian, root=root)


# Paths on the fake host only: no test looks anything up on this machine.
BIN = "/fake-host/bin"
CHROMIUM = f"{BIN}/chromium"
APT = {"apt-get": f"{BIN}/apt-get"}


def test_the_named_executable_beats_every_other() -> None:
    found = host(files={"/fake-host/opt/chrome", PLAYWRIGHT_OWN}, path={"chromium": CHROMIUM},
                 environ={"SAGEGATE_CHROMIUM": "/fake-host/opt/chrome"})
    assert find_chromium(found) == "/fake-host/opt/chrome"


def test_a_named_executable_that_is_missing_is_one_clear_error() -> None:
    with pytest.raises(BrowserError,
                       match="SAGEGATE_CHROMIUM=/fake-host/opt/none is not an executable"):
        find_chromium(host(path={"chromium": CHROMIUM},
                           environ={"SAGEGATE_CHROMIUM": "/fake-host/opt/none"}))


def test_playwrights_own_chromium_beats_the_systems() -> None:
    assert find_chromium(host(files={PLAYWRIGHT_OWN},
                              path={"chromium": CHROMIUM})) == PLAYWRIGHT_OWN


def test_playwrights_chromium_not_yet_installed_is_skipped() -> None:
    assert find_chromium(host(path={"chromium": CHROMIUM})) == CHROMIUM


@pytest.mark.parametrize("name", ["chromium", "chromium-browser", "google-chrome"])
def test_a_system_browser_on_path_is_found(name: str) -> None:
    assert find_chromium(host(path={name: f"{BIN}/{name}"})) == f"{BIN}/{name}"


def test_without_playwright_the_system_browser_is_found() -> None:
    machine = dataclasses.replace(host(path={"chromium": CHROMIUM}),
                                  playwright_path=lambda: None)
    assert find_chromium(machine) == CHROMIUM


def test_no_browser_anywhere_is_none() -> None:
    assert find_chromium(host(path=APT)) is None


def test_debian_as_root_installs_debians_package() -> None:
    assert install_steps(host(path=APT)) == (
        Step(("apt-get", "update"), APT_ENV),
        Step(("apt-get", "install", "-y", "chromium"), APT_ENV))
    assert APT_ENV == {"DEBIAN_FRONTEND": "noninteractive"}


@pytest.mark.parametrize("machine", [
    host(path=APT, root=False),        # Debian, not root: apt-get would be refused
    host(path=APT, debian=False),      # another system
    host(path={}, debian=True),        # Debian without apt-get
])
def test_elsewhere_playwright_installs_its_own(machine: Host) -> None:
    assert install_steps(machine) == (Step(PLAYWRIGHT_STEP),)
    assert PLAYWRIGHT_STEP[1:] == ("-m", "playwright", "install", "chromium")


class Installer:
    """Records the steps run; the last one puts ``installs`` on the fake host's PATH."""

    def __init__(self, commands: dict[str, str], installs: dict[str, str],
                 code: int = 0) -> None:
        self.commands, self.installs, self.code = commands, installs, code
        self.ran: list[Step] = []

    def __call__(self, step: Step) -> int:
        self.ran.append(step)
        if self.code == 0:
            self.commands.update(self.installs)
        return self.code


def test_a_found_browser_installs_nothing() -> None:
    commands = {"chromium": CHROMIUM, **APT}
    installer = Installer(commands, {})
    assert ensure_chromium(host(path=commands), run=installer) == CHROMIUM
    assert installer.ran == []


def test_none_found_is_installed_then_found() -> None:
    commands = dict(APT)
    machine = dataclasses.replace(host(path=APT), which=commands.get,
                                  is_executable=lambda path: path in commands.values())
    installer = Installer(commands, {"chromium": CHROMIUM})
    said: list[str] = []
    assert ensure_chromium(machine, run=installer, say=said.append) == CHROMIUM
    assert [step.argv[:2] for step in installer.ran] == [("apt-get", "update"),
                                                         ("apt-get", "install")]
    assert "DEBIAN_FRONTEND=noninteractive apt-get install -y chromium" in said[-1]


def test_a_failed_install_stops_with_one_line_saying_how() -> None:
    installer = Installer(dict(APT), {}, code=100)
    with pytest.raises(BrowserError) as stopped:
        ensure_chromium(host(path=APT), run=installer, say=lambda line: None)
    message = str(stopped.value)
    assert "\n" not in message
    assert "apt-get update` failed (exit code 100)" in message
    assert "apt-get install chromium" in message and "SAGEGATE_CHROMIUM" in message
    assert len(installer.ran) == 1  # nothing after the failed step


def test_an_install_that_finds_nothing_stops_with_one_line() -> None:
    installer = Installer({}, {})
    with pytest.raises(BrowserError, match="installed but not found"):
        ensure_chromium(host(debian=False), run=installer, say=lambda line: None)
    assert installer.ran == [Step(PLAYWRIGHT_STEP)]


@pytest.mark.parametrize(("machine", "way"), [
    (host(path=APT), "`apt-get install chromium`"),
    (host(path=APT, root=False), "`sudo apt-get install chromium (or: .venv/bin/playwright "
                                 "install chromium)`"),
    (host(debian=False), "`.venv/bin/playwright install chromium`"),
])
def test_no_install_only_looks_and_says_how(machine: Host, way: str) -> None:
    installer = Installer({}, {})
    with pytest.raises(BrowserError) as stopped:
        ensure_chromium(machine, install=False, run=installer)
    assert installer.ran == []
    assert way in str(stopped.value)


def test_the_command_prints_the_path_or_one_line(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(Host, "this_machine", classmethod(lambda cls: host(path=APT)))
    assert browser.main(["--no-install"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sagegate: no Chromium found")
    monkeypatch.setattr(Host, "this_machine",
                        classmethod(lambda cls: host(path={"chromium": CHROMIUM})))
    assert browser.main([]) == 0
    assert capsys.readouterr().out.strip().endswith(": " + CHROMIUM)
