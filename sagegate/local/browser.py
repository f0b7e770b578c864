"""The Chromium the web page's tests drive: found on this machine, or installed the way it can.

``make test`` and ``make integration`` run ``sagegate browser`` before pytest, and
``tests/integration/test_web.py`` asks :func:`find_chromium` for the same executable, so the
tests never depend on a step only CI takes. First found wins: ``SAGEGATE_CHROMIUM`` (an error if
not an executable); Playwright's own Chromium; ``chromium``, ``chromium-browser`` or
``google-chrome`` on ``PATH``.

With none, it installs one: on Debian as root, Debian's package (``apt-get install -y chromium``,
non-interactive); elsewhere Playwright's build (into its cache in the user's home).
``--no-install`` (or a failed install) stops instead, with one line saying how.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

CHROMIUM_ENV = "SAGEGATE_CHROMIUM"
SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome")
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
APT_STEPS = (("apt-get", "update"), ("apt-get", "install", "-y", "chromium"))
PLAYWRIGHT_STEP = (sys.executable, "-m", "playwright", "install", "chromium")


class BrowserError(Exception):
    """No usable Chromium; the message is one line saying how to get one."""


@dataclasses.dataclass(frozen=True)
class Host:
    """What the search and the choice of installer depend on (injected by the tests).

    Attributes:
        playwright_path: where Playwright's own Chromium is (or would be); None without
            Playwright.
        debian: ``/etc/debian_version`` exists.
    """

    environ: Mapping[str, str]
    which: Callable[[str], str | None]
    is_executable: Callable[[str], bool]
    playwright_path: Callable[[], str | None]
    debian: bool
    root: bool

    @classmethod
    def this_machine(cls) -> Host:
        return cls(environ=os.environ, which=shutil.which, is_executable=_is_executable,
                   playwright_path=playwright_chromium, debian=Path("/etc/debian_version").exists(),
                   root=hasattr(os, "geteuid") and os.geteuid() == 0)


@dataclasses.dataclass(frozen=True)
class Step:

    argv: tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        return " ".join([*(f"{k}={v}" for k, v in self.env.items()), *self.argv])


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def playwright_chromium() -> str | None:
    """The path of Playwright's own Chromium (present or not); None without Playwright. It starts
    Playwright's driver, so not while a sync Playwright session is open in this thread."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        return None
    try:
        with sync_playwright() as playwright:
            return str(playwright.chromium.executable_path)
    except Error:
        return None


def find_chromium(host: Host | None = None) -> str | None:
    """The Chromium executable to drive, or None when this machine has none.

    Raises:
        BrowserError: ``SAGEGATE_CHROMIUM`` names something that is not an executable file.
    """
    host = host or Host.this_machine()
    named = host.environ.get(CHROMIUM_ENV, "").strip()
    if named:
        if not host.is_executable(named):
            raise BrowserError(f"{CHROMIUM_ENV}={named} is not an executable file: point it at "
                               "a Chromium or Chrome executable, or unset it")
        return named
    own = host.playwright_path()
    if own and host.is_executable(own):
        return own
    for name in SYSTEM_NAMES:
        found = host.which(name)
        if found:
            return found
    return None


def install_steps(host: Host) -> tuple[Step, ...]:
    if host.debian and host.root and host.which("apt-get"):
        return tuple(Step(argv, APT_ENV) for argv in APT_STEPS)
    return (Step(PLAYWRIGHT_STEP),)


def how_to_get_one(host: Host) -> str:
    if host.debian and not host.root:
        way = "sudo apt-get install chromium (or: .venv/bin/playwright install chromium)"
    elif host.debian:
        way = "apt-get install chromium"
    else:
        way = ".venv/bin/playwright install chromium"
    return f"install one with `{way}`, or set {CHROMIUM_ENV} to a Chromium executable"


def run_step(step: Step) -> int:
    try:
        return subprocess.run(step.argv, env={**os.environ, **step.env},
                              stdin=subprocess.DEVNULL, check=False).returncode
    except OSError:  # the command itself is missing
        return 127


def ensure_chromium(host: Host, install: bool = True,
                    run: Callable[[Step], int] = run_step,
                    say: Callable[[str], None] = print) -> str:
    """The Chromium to drive, installing one first when there is none and ``install`` allows.

    Raises:
        BrowserError: none found and none installed; one line saying how to get one.
    """
    found = find_chromium(host)
    if found:
        return found
    if not install:
        raise BrowserError(f"no Chromium found for the web page's tests: {how_to_get_one(host)}")
    for step in install_steps(host):
        say(f"sagegate: no Chromium found for the web page's tests; running: {step}")
        code = run(step)
        if code != 0:
            raise BrowserError(f"`{step}` failed (exit code {code}): {how_to_get_one(host)}")
    found = find_chromium(host)
    if not found:
        raise BrowserError(f"Chromium was installed but not found: {how_to_get_one(host)}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``sagegate browser``: 0 with the path printed; 1 when there is none, with one line on
    stderr saying how."""
    parser = argparse.ArgumentParser(
        prog="sagegate browser",
        description="Find the Chromium the web page's tests drive (make test runs this): "
                    f"{CHROMIUM_ENV}, Playwright's own, or {', '.join(SYSTEM_NAMES)} on PATH. "
                    "With none, install one: Debian's package (apt-get) when root on Debian, "
                    "else Playwright's (playwright install chromium).",
        epilog="Exit codes: 0 with the path printed, 1 when there is no Chromium (one line "
               "on stderr says how to get one).")
    parser.add_argument("--no-install", action="store_true",
                        help="only look; never install a browser")
    args = parser.parse_args(argv)
    try:
        path = ensure_chromium(Host.this_machine(), install=not args.no_install,
                               say=lambda line: print(line, flush=True))
    except BrowserError as error:
        print(f"sagegate: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"sagegate: Chromium for the web page's tests: {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
