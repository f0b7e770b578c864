"""The local stack's child processes: how each is started, known to answer, and stopped.

``sagegate run``, the moto side, the integration tests and the benchmarks start the same
processes with these helpers: the emulator (its own launcher), ``chalice local`` through
:mod:`sagegate.local.chalice_local` (ready once its own child answers: the instance marker
:data:`INSTANCE_HEADER`), readiness, free ports, termination by PID, ``make run``'s stack for the
benchmarks, and memory readers.

Only the standard library (and the emulator's process helper, likewise) is imported here: the
``chalice local`` child imports this module for its marker.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from emulator.process import (
    EmulatorProcess,
    free_port,
    start_emulator,
    terminate,
)

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("app.py", "chalicelib", ".chalice")


def copy_project(root: Path, names: tuple[str, ...] = PROJECT_FILES,
                 project: Path = ROOT) -> None:
    """Copy sagegate's Chalice project (and other top-level ``names``) into ``root``, for a
    ``chalice local`` whose relative paths (``captures/``, ``samples/``) or registry are a run's
    own; caches and deployments left out. ``project``: another checkout's (a tree before a
    change, measured beside this one)."""
    import shutil

    for name in names:
        source = project / name
        if source.is_dir():
            shutil.copytree(source, root / name,
                            ignore=shutil.ignore_patterns("__pycache__", "deployments"))
        else:
            shutil.copy2(source, root / name)


DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
}
HOST = "127.0.0.1"
INSTANCE_ENV = "SAGEGATE_INSTANCE"
INSTANCE_HEADER = "X-Sagegate-Instance"
"""The header carrying that marker (see :mod:`sagegate.local.chalice_local`)."""
OVERRIDES_ENV = "SAGEGATE_LOCAL_ENV"
"""A JSON object of the variables a ``chalice local`` child sets over the stage's own (chalice
local applies the stage's last)."""
_POLL_SECONDS = 0.1


class ApiStartError(RuntimeError):
    """``chalice local`` exited or did not answer in time."""


class ApiProcess:
    """A running ``chalice local`` child; a context manager that stops it on exit."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, port: int,
                 instance: str = "") -> None:
        self.process = process
        self.host = host
        self.port = port
        self.instance = instance

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM the child (by its PID), then SIGKILL if it does not exit in time."""
        return terminate(self.process, timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def api_env(endpoint_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **DUMMY_AWS_ENV, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": endpoint_url}
    env.pop("AWS_PROFILE", None)
    env.update(extra or {})
    return env


def start_chalice_local(port: int, endpoint_url: str, *, project_dir: Path = ROOT,
                        stage: str | None = "local", host: str = HOST,
                        env: Mapping[str, str] | None = None, log: IO[bytes] | None = None,
                        timeout: float = 60.0, ready_path: str = "/health",
                        ready_status: int | None = 200,
                        overrides: Mapping[str, str] | None = None) -> ApiProcess:
    """Start ``chalice local`` (TCP_NODELAY, backlog 128, instance marker) for the app in
    ``project_dir`` and wait until this child itself answers ``ready_path``.

    Args:
        endpoint_url: the SageMaker runtime URL (the emulator's).
        env: extra variables (the stage's own still win: chalice local applies them over the
            process environment).
        ready_status: the status that means ready (None: any answer from this child).
        overrides: variables that win over the stage's own.

    Raises:
        ApiStartError: the child exited or never answered (it is then stopped).
    """
    instance = secrets.token_hex(8)
    command = [sys.executable, "-m", "sagegate.local.chalice_local", "local",
               *(("--stage", stage) if stage else ()),
               "--host", host, "--port", str(port), "--no-autoreload"]
    child_env = api_env(endpoint_url, {**(env or {}), INSTANCE_ENV: instance})
    if overrides:
        child_env.update({**overrides, OVERRIDES_ENV: json.dumps(dict(overrides))})
    # sagegate.local.chalice_local is found from any project directory
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, child_env.get("PYTHONPATH", "").split(os.pathsep))])
    process = subprocess.Popen(command, cwd=project_dir, env=child_env,
                               stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT if log else None)
    api = ApiProcess(process, host, port, instance)
    try:
        wait_until_serving(api, timeout, ready_path, ready_status)
    except BaseException:
        api.stop(timeout=2.0)
        raise
    return api


def start_api(port: int, endpoint_url: str, *, host: str = HOST, stage: str = "local",
              env: Mapping[str, str] | None = None, log: IO[bytes] | None = None,
              timeout: float = 60.0, overrides: Mapping[str, str] | None = None) -> ApiProcess:
    """Start sagegate under ``chalice local`` and wait until it answers ``/health`` (200) itself;
    arguments as :func:`start_chalice_local`.

    Raises:
        ApiStartError: the child exited or never answered (it is then stopped).
    """
    return start_chalice_local(port, endpoint_url, stage=stage, host=host, env=env, log=log,
                               timeout=timeout, overrides=overrides)


@contextlib.contextmanager
def quiet_stack(stage: str = "local") -> Iterator[tuple[ApiProcess, EmulatorProcess]]:
    """``make run``'s stack on free ports, output discarded, both stopped by their PIDs on the
    way out: what the benchmarks run against."""
    with open(os.devnull, "wb") as log, start_emulator(port=0) as emulator:
        api = start_api(free_port(HOST), emulator.url, host=HOST, stage=stage, log=log)
        try:
            yield api, emulator
        finally:
            api.stop()


def own_answer(api: ApiProcess, path: str = "/health") -> int | None:
    """The status of this child's answer to ``GET path``; None when nothing or another server
    answered (no marker)."""
    headers: Message
    try:
        with urllib.request.urlopen(api.url + path, timeout=2) as response:
            status, headers = response.status, response.headers
    except urllib.error.HTTPError as error:  # an answer all the same (403, 405 ...)
        status, headers = error.code, error.headers
        error.close()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    return int(status) if headers.get(INSTANCE_HEADER) == api.instance else None


def wait_until_serving(api: ApiProcess, timeout: float, path: str = "/health",
                       status: int | None = 200, what: str = "chalice local") -> None:
    """Wait until ``api``'s own child answers ``GET path`` (with ``status``, None: any).

    Raises:
        ApiStartError: the child exited first, or did not answer within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.process.poll() is not None:
            raise ApiStartError(f"{what} exited with code {api.process.returncode}")
        answered = own_answer(api, path)
        if (answered is not None and (status is None or answered == status)
                and api.process.poll() is None):
            return
        time.sleep(_POLL_SECONDS)
    raise ApiStartError(f"{what} did not answer {path} within {timeout:g} s")


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM") / 1024


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(f"no {field} in /proc/{pid}/status (has it exited?)")
