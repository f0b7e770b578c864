"""What the deploy commands share: running external tools, errors, paths, options.

Where re-implementing a tool is unreasonable (pip, chalice, the AWS CLI's ``cloudformation``,
cfn-lint, checkov, uv) the commands build its command line and hand it to a :class:`Runner`;
:func:`run` is the real one, the tests pass a recorder and check the exact commands.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import CONFIG_PATH, DEPLOY_STAGES, ROOT, load_stage

BUILD = "build"
# `chalice package` insists on a region name; the template itself uses ${AWS::Region}.
PACKAGE_REGION = "us-east-1"


class DeployError(Exception):
    """A deploy command cannot go on; the message says why, and what to do about it. ``status``:
    2, called wrongly or for a stage that may not deploy; 1, a step failed."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Runner(Protocol):
    """Runs one external command, or raises :class:`DeployError` when it fails."""

    def __call__(self, command: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, capture: bool = False) -> str:
        """Run ``command`` (``env`` over the current environment; ``capture``: return its
        standard output)."""
        ...


def run(command: Sequence[str], *, env: Mapping[str, str] | None = None,
        cwd: Path | None = None, capture: bool = False) -> str:
    """The real :class:`Runner`: echo the command (as make did), run it, check its status."""
    shown = " ".join(f"{name}={value}" for name, value in (env or {}).items())
    print(f"+ {shown + ' ' if shown else ''}{display(command)}", flush=True)
    done = subprocess.run(list(command), env={**os.environ, **env} if env else None, cwd=cwd,
                          stdout=subprocess.PIPE if capture else None, text=True, check=False)
    if done.returncode != 0:
        raise DeployError(f"{Path(command[0]).name} exited with status {done.returncode}")
    return done.stdout if capture else ""


def display(command: Sequence[str]) -> str:
    prefix = f"{ROOT}{os.sep}"
    return shlex.join(part[len(prefix):] if part.startswith(prefix) else part
                      for part in command)


def tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def build_dir(root: Path) -> Path:
    return root / BUILD


def config_path(root: Path) -> Path:
    return CONFIG_PATH if root == ROOT else root / ".chalice" / "config.json"


def stage_for(name: str, root: Path = ROOT) -> Stage:
    """A deploy stage, resolved and checked.

    Raises:
        DeployError: (status 2) not a deploy stage, or one that may not deploy as configured.
    """
    if name not in DEPLOY_STAGES:
        raise DeployError(f"{name!r} is not a deploy stage: use one of "
                          f"{', '.join(DEPLOY_STAGES)}", status=2)
    try:
        return load_stage(name, config_path(root))
    except (KeyError, ValueError) as error:
        raise DeployError(str(error.args[0] if error.args else error), status=2) from None


def remove_bytecode(root: Path) -> None:
    for cache in sorted((root / "chalicelib").rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)


def add_stage_option(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument("--stage", choices=DEPLOY_STAGES, default=default,
                        required=default is None,
                        help=f"the stage to deploy ({', '.join(DEPLOY_STAGES)})"
                        + (f"; default {default}" if default else ""))


def guarded(action: Callable[[], object]) -> int:
    """Run a command's body; a :class:`DeployError` becomes one line on stderr and a status."""
    try:
        action()
    except DeployError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.status
    return 0
