"""Start the emulator as a child process and stop it cleanly (by its PID).

    with start_emulator("emulator/config.json") as emulator:
        client = boto3.client("sagemaker-runtime", endpoint_url=emulator.url, ...)

The emulator's own launcher: the local stack (``sagegate/local/processes.py``: ``sagegate run``,
the integration tests, the benchmarks) starts it through this module, which knows nothing of
sagegate. Only the standard library is imported here, so callers do not pay for numpy or
OpenCV.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from emulator import READY_PREFIX

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding the ``emulator`` package (put on the child's PYTHONPATH)."""
DEFAULT_CONFIG = Path(__file__).resolve().with_name("config.json")
DEFAULT_START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 50


class EmulatorStartError(RuntimeError):
    """The emulator exited or did not get ready in time; the message holds its stderr tail."""


def free_port(host: str = "127.0.0.1") -> int:
    """Returns a TCP port that was free on ``host`` a moment ago.

    Prefer ``start_emulator(port=0)``: the emulator then binds a free port itself and
    reports it, without the window in which another process could take this one.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class _Reader:
    """Drains one pipe of the child in a thread, keeping the last lines, so it never blocks."""

    def __init__(self, stream: IO[str], echo: IO[str] | None = None) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.ready_line: str | None = None
        self.ready = threading.Event()
        self._stream = stream
        self._echo = echo
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for line in self._stream:
            self.lines.append(line.rstrip("\n"))
            if self.ready_line is None and line.startswith(READY_PREFIX):
                self.ready_line = line.strip()
                self.ready.set()
            if self._echo is not None:
                self._echo.write(line)
                self._echo.flush()
        self.ready.set()  # end of output: the child has exited

    def close(self, timeout: float) -> None:
        """Waits for the end of the output (the child has exited), then closes the pipe."""
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._stream.close()

    def tail(self) -> str:
        """Returns the last lines read."""
        return "\n".join(self.lines)


class EmulatorProcess:
    """A running emulator child process; a context manager that stops it on exit."""

    def __init__(
        self, process: subprocess.Popen[str], host: str, port: int, readers: Sequence[_Reader]
    ) -> None:
        """Wraps a started process listening on ``host:port`` and its pipe readers."""
        self.process = process
        self.host = host
        self.port = port
        self._readers = tuple(readers)

    @property
    def url(self) -> str:
        """The base URL to give boto3 as ``endpoint_url``."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def stderr_tail(self) -> str:
        """Returns the last lines the emulator logged (one line per request)."""
        return self._readers[-1].tail()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Sends SIGTERM to the child (by PID), waits, then kills it if it must.

        Args:
            timeout: seconds to wait after SIGTERM before SIGKILL.

        Returns:
            The exit code (0 after a clean shutdown; negative for a signal).
        """
        returncode = terminate(self.process, timeout)
        for reader in self._readers:
            reader.close(timeout=2.0)
        return returncode

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def terminate(process: subprocess.Popen[Any], timeout: float) -> int:
    """SIGTERM a child this process started (by its PID), then SIGKILL if it has not exited
    within ``timeout`` seconds; returns its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def _command(config: Path, host: str, port: int, python: str, extra: Sequence[str]) -> list[str]:
    return [python, "-m", "emulator", "--config", str(config), "--host", host,
            "--port", str(port), *extra]  # fmt: skip


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    child = dict(os.environ if env is None else env)
    paths = [str(PACKAGE_ROOT), *filter(None, child.get("PYTHONPATH", "").split(os.pathsep))]
    child["PYTHONPATH"] = os.pathsep.join(paths)
    child["PYTHONUNBUFFERED"] = "1"
    return child


def start_emulator(
    config_path: str | os.PathLike[str] = DEFAULT_CONFIG,
    port: int = 0,
    *,
    host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_START_TIMEOUT_S,
    echo_stderr: IO[str] | None = None,
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
) -> EmulatorProcess:
    """Starts ``python -m emulator`` and waits until it prints its ready line.

    Args:
        config_path: the configuration file.
        port: the port to listen on; 0 lets the emulator pick a free one (no race).
        host: the address to bind.
        env: the child's environment (default: this process's); PYTHONPATH is extended.
        timeout: seconds to wait for the ready line (models load first).
        echo_stderr: where to copy the child's log lines as they come (default: keep only
            the last lines, see :meth:`EmulatorProcess.stderr_tail`).
        python: the interpreter to run.
        extra_args: more command-line arguments (``["--seed", "7"]``).

    Returns:
        The running emulator; stop it with ``.stop()`` or a ``with`` block.

    Raises:
        EmulatorStartError: the child exited or was not ready in time (it is then stopped).
    """
    command = _command(Path(config_path).resolve(), host, port, python, extra_args)
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=_child_env(env),
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr = _Reader(process.stdout), _Reader(process.stderr, echo_stderr)
    emulator = EmulatorProcess(process, host, port, (stdout, stderr))
    try:
        stdout.ready.wait(timeout)
        if stdout.ready_line is None:
            raise EmulatorStartError(_start_failure(emulator, timeout))
        emulator.port = int(stdout.ready_line.rsplit(":", 1)[1])
    except BaseException:
        emulator.stop(timeout=2.0)
        raise
    return emulator


def _start_failure(emulator: EmulatorProcess, timeout: float) -> str:
    exited = emulator.process.poll() is not None
    code = emulator.stop(timeout=2.0)
    what = f"exited with code {code}" if exited else f"was not ready within {timeout:g} s"
    return f"emulator {what}; stderr:\n{emulator.stderr_tail()}"
