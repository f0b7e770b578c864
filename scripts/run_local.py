"""The local stack behind ``make run``: the emulator plus ``chalice local``, no AWS account.

``start_api`` is also what the integration tests use, so ``make run`` and the tests run the
same processes the same way. Before starting anything, ``make run`` checks the settings the
stage gives sagegate and that both ports are free; while it runs, it restarts the emulator
if it dies (the API answers 503 meanwhile).

    python -m scripts.run_local [--stage local] [--emulator-config FILE]
    (ports: API_PORT, EMULATOR_PORT)
"""
from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

from emulator.process import DEFAULT_CONFIG, terminate
from scripts.chalice_local import INSTANCE_ENV, INSTANCE_HEADER

if TYPE_CHECKING:
    from chalicelib.config import Settings
    from emulator.process import EmulatorProcess
    from emulator.supervisor import Supervisor

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
}
HOST = "127.0.0.1"
PORTS = {"API_PORT": 8000, "EMULATOR_PORT": 8080}
_POLL_SECONDS = 0.1


class ApiStartError(RuntimeError):
    """``chalice local`` exited or did not answer /health in time."""


class StartError(Exception):
    """``make run`` cannot start; the message says why and what to change."""


class ApiProcess:
    """A running ``chalice local`` (with TCP_NODELAY) child process."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, port: int,
                 instance: str = "") -> None:
        self.process = process
        self.host = host
        self.port = port
        self.instance = instance
        """The marker this child puts in ``X-Sagegate-Instance``."""

    @property
    def url(self) -> str:
        """Base URL of the API."""
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM the child (by its PID), then SIGKILL if it does not exit in time."""
        return terminate(self.process, timeout)


def api_env(endpoint_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment ``chalice local`` needs to reach the emulator with boto3."""
    env = {**os.environ, **DUMMY_AWS_ENV, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": endpoint_url}
    env.pop("AWS_PROFILE", None)
    env.update(extra or {})
    return env


def start_api(port: int, endpoint_url: str, *, host: str = HOST, stage: str = "local",
              env: Mapping[str, str] | None = None, log: IO[bytes] | None = None,
              timeout: float = 60.0) -> ApiProcess:
    """Start ``chalice local`` for ``stage`` and wait until it answers ``/health`` itself.

    Args:
        port: the port to listen on.
        endpoint_url: the SageMaker runtime URL (the emulator's).
        host: the address to bind.
        stage: the Chalice stage.
        env: extra environment variables for the process (the stage's own still win: chalice
            local applies them over the process environment).
        log: where the child's output goes (default: this process's stdout/stderr).
        timeout: seconds to wait for /health.

    Raises:
        ApiStartError: the child exited or never answered (it is then stopped).
    """
    instance = secrets.token_hex(8)
    command = [sys.executable, str(ROOT / "scripts" / "chalice_local.py"), "local",
               "--stage", stage, "--host", host, "--port", str(port), "--no-autoreload"]
    child_env = api_env(endpoint_url, {**(env or {}), INSTANCE_ENV: instance})
    process = subprocess.Popen(command, cwd=ROOT, env=child_env, stdin=subprocess.DEVNULL,
                               stdout=log, stderr=subprocess.STDOUT if log else None)
    api = ApiProcess(process, host, port, instance)
    try:
        _wait_healthy(api, timeout)
    except BaseException:
        api.stop(timeout=2.0)
        raise
    return api


def _answers_health(api: ApiProcess) -> bool:
    """Whether /health answers 200 from this child (another server on the port does not
    count: it lacks the child's marker)."""
    with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError), \
            urllib.request.urlopen(api.url + "/health", timeout=2) as response:
        return bool(response.status == 200
                    and response.headers.get(INSTANCE_HEADER) == api.instance)
    return False


def _wait_healthy(api: ApiProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.process.poll() is not None:
            raise ApiStartError(f"chalice local exited with code {api.process.returncode}")
        if _answers_health(api) and api.process.poll() is None:
            return
        time.sleep(_POLL_SECONDS)
    raise ApiStartError(f"chalice local did not answer /health within {timeout:g} s")


def read_port(environ: Mapping[str, str], name: str) -> int:
    """The port in ``API_PORT`` or ``EMULATOR_PORT`` (or its default).

    Raises:
        StartError: not a port number.
    """
    raw = environ.get(name, "").strip() or str(PORTS[name])
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise StartError(f"{name} must be a port number 1..65535, got {raw!r}")
    return int(raw)


def check_port_free(port: int, name: str, host: str = HOST) -> None:
    """Fails early, and clearly, when something already listens on ``host:port``.

    Binds as the servers do (SO_REUSEADDR, so connections lingering in TIME_WAIT are no
    obstacle) and lets go at once.

    Raises:
        StartError: naming the port, its variable and how to pick another.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            other = 9000 if port != 9000 else 9001
            raise StartError(
                f"port {port} on {host} ({name}) is not available ({error.strerror}): "
                f"stop what uses it or pick another port, e.g. make run {name}={other}"
            ) from None


def stage_env(stage: str, base: Mapping[str, str]) -> dict[str, str]:
    """The environment sagegate sees under ``chalice local --stage <stage>``: the process's,
    overlaid with the stage's variables from ``.chalice/config.json`` (chalice local's order).

    Raises:
        StartError: the config has no such stage or cannot be read.
    """
    from scripts.stage_config import load_stage

    try:
        return {**base, **load_stage(stage).env}
    except (KeyError, OSError, ValueError) as error:
        raise StartError(f"cannot read stage {stage!r} of .chalice/config.json: "
                         f"{error}") from None


def check_settings(stage: str, env: Mapping[str, str]) -> Settings:
    """Validates the settings exactly as sagegate will read them.

    Raises:
        StartError: a variable has a bad value; the message names it.
    """
    from chalicelib.config import Settings
    from chalicelib.errors import ConfigurationError

    try:
        return Settings.from_env(env)
    except ConfigurationError as error:
        raise StartError(f"bad setting: {error} (set in the environment or in stage "
                         f"{stage!r} of .chalice/config.json)") from None


def write_samples() -> dict[str, Path]:
    """Write sample photos (from scikit-image's public-domain data) for the curl examples."""
    import cv2
    from skimage import data

    SAMPLES.mkdir(exist_ok=True)
    paths = {}
    for name, image in (("cat", data.chelsea()), ("coffee", data.coffee())):
        path = SAMPLES / f"{name}.jpg"
        if not path.exists():
            cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR),
                        [cv2.IMWRITE_JPEG_QUALITY, 95])
        paths[name] = path
    return paths


def describe_capture(settings: Settings) -> str:
    """One line on what data capture does, for the ready banner."""
    if settings.capture_mode == "off":
        return "data capture off"
    where = settings.capture_destination
    line = f"capturing {settings.capture_mode} of each prediction to {where}"
    if "://" in where:
        return line
    cap = settings.capture_max_bytes
    if not cap:
        return line + " (no size cap: set CAPTURE_MAX_BYTES)"
    return line + f" (at most {cap / 1e6:g} MB, oldest files dropped; CAPTURE_MAX_BYTES)"


def _banner(api: ApiProcess, emulator: EmulatorProcess, settings: Settings) -> str:
    return "\n".join([
        f"sagegate: ready on {api.url} (pid {api.process.pid}; endpoint "
        f"{settings.endpoint_name} on emulator {emulator.url}, pid {emulator.pid}); "
        f"{describe_capture(settings)}",
        "try:",
        f"  curl -s {api.url}/predict -H 'Content-Type: image/jpeg' "
        "--data-binary @samples/cat.jpg",
        f"  curl -s '{api.url}/predict?k=3' -H 'Content-Type: image/jpeg' "
        "--data-binary @samples/coffee.jpg",
        f"  curl -s {api.url}/health",
        "Ctrl-C stops both.",
    ])


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[list[int]]:
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _say(line: str) -> None:
    print(line, flush=True)


def _serve(api: ApiProcess, supervisor: Supervisor) -> int:
    """Block until Ctrl-C/SIGTERM (0), chalice local exits, or the emulator cannot be kept
    running (1). A dead emulator is restarted meanwhile; the API stays up."""
    with _stop_on_signals() as received:
        while not received:
            if api.process.poll() is not None:
                _say(f"sagegate: chalice local exited with code {api.process.returncode}")
                return 1
            if not supervisor.check():
                return 1
            time.sleep(0.2)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Read the command line (ports come from API_PORT and EMULATOR_PORT)."""
    parser = argparse.ArgumentParser(prog="python -m scripts.run_local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", default="local", help="the Chalice stage (default local)")
    parser.add_argument("--emulator-config", type=Path, default=DEFAULT_CONFIG,
                        help="the emulator's configuration (default emulator/config.json)")
    return parser.parse_args(argv)


def preflight(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[int, int, Settings]:
    """Every check that needs no child process: ports, then settings.

    Returns:
        ``(api_port, emulator_port, settings)``.

    Raises:
        StartError: the first problem found.
    """
    api_port, emulator_port = read_port(environ, "API_PORT"), read_port(environ, "EMULATOR_PORT")
    if api_port == emulator_port:
        raise StartError(f"API_PORT and EMULATOR_PORT are both {api_port}: pick two ports")
    check_port_free(api_port, "API_PORT")
    check_port_free(emulator_port, "EMULATOR_PORT")
    url = f"http://{HOST}:{emulator_port}"
    settings = check_settings(args.stage, stage_env(args.stage, api_env(url)))
    return api_port, emulator_port, settings


def _run(args: argparse.Namespace) -> int:
    from emulator.process import EmulatorStartError, start_emulator
    from emulator.supervisor import Supervisor

    api_port, emulator_port, settings = preflight(args, os.environ)
    write_samples()
    supervisor = Supervisor(lambda: start_emulator(args.emulator_config, port=emulator_port,
                                                   echo_stderr=sys.stderr), _say)
    try:
        try:
            emulator = supervisor.start()
        except EmulatorStartError as error:
            raise StartError(f"the emulator did not start: {error}") from None
        try:
            api = start_api(api_port, emulator.url, stage=args.stage)
        except ApiStartError as error:
            raise StartError(str(error)) from None
        try:
            _say(_banner(api, emulator, settings))
            return _serve(api, supervisor)
        finally:
            api.stop()
    finally:
        supervisor.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator and the API in the foreground until Ctrl-C.

    Returns:
        0 after Ctrl-C/SIGTERM; 1 when a child could not be kept running; 2 when the stack
        cannot start (bad setting, port in use ...), with one line saying why.
    """
    args = parse_args(argv)
    # Until the stack serves, SIGTERM stops it as Ctrl-C does: children stopped, no traceback.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = _run(args)
    except StartError as error:
        print(f"sagegate: cannot start: {error}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("sagegate: interrupted while starting", file=sys.stderr, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    _say("sagegate: stopped")
    return code


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
