"""The local stack behind ``make run``: the emulator plus ``chalice local``, no AWS account.

``start_api`` is also what the integration tests use, so ``make run`` and the tests run the
same processes the same way.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import IO

from emulator.process import terminate

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
}
_POLL_SECONDS = 0.1


class ApiStartError(RuntimeError):
    """``chalice local`` exited or did not answer /health in time."""


class ApiProcess:
    """A running ``chalice local`` (with TCP_NODELAY) child process."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, port: int) -> None:
        self.process = process
        self.host = host
        self.port = port

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


def start_api(port: int, endpoint_url: str, *, host: str = "127.0.0.1", stage: str = "local",
              env: Mapping[str, str] | None = None, log: IO[bytes] | None = None,
              timeout: float = 60.0) -> ApiProcess:
    """Start ``chalice local`` for ``stage`` and wait until ``/health`` answers 200.

    Args:
        port: the port to listen on.
        endpoint_url: the SageMaker runtime URL (the emulator's).
        host: the address to bind.
        stage: the Chalice stage.
        env: extra environment variables (overriding the stage's own for this process).
        log: where the child's output goes (default: this process's stdout/stderr).
        timeout: seconds to wait for /health.

    Raises:
        ApiStartError: the child exited or never answered (it is then stopped).
    """
    command = [sys.executable, str(ROOT / "scripts" / "chalice_local.py"), "local",
               "--stage", stage, "--host", host, "--port", str(port), "--no-autoreload"]
    process = subprocess.Popen(command, cwd=ROOT, env=api_env(endpoint_url, env),
                               stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT if log else None)
    api = ApiProcess(process, host, port)
    try:
        _wait_healthy(api, timeout)
    except BaseException:
        api.stop(timeout=2.0)
        raise
    return api


def _wait_healthy(api: ApiProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.process.poll() is not None:
            raise ApiStartError(f"chalice local exited with code {api.process.returncode}")
        with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError), \
                urllib.request.urlopen(api.url + "/health", timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(_POLL_SECONDS)
    raise ApiStartError(f"chalice local did not answer /health within {timeout:g} s")


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


def _banner(api: ApiProcess, emulator_url: str) -> str:
    return "\n".join([
        f"sagegate: ready on {api.url} (endpoint efficientnet-lite0 on emulator {emulator_url})",
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


def _wait_for_stop(api: ApiProcess, emulator: subprocess.Popen[str]) -> bool:
    """Block until Ctrl-C/SIGTERM (False) or until either child exits on its own (True)."""
    with _stop_on_signals() as received:
        while not received and api.process.poll() is None and emulator.poll() is None:
            time.sleep(0.2)
    return not received


def main() -> int:
    """Run the emulator and the API in the foreground until Ctrl-C or either one exits."""
    from emulator.process import start_emulator

    api_port = int(os.environ.get("API_PORT", "8000"))
    emulator_port = int(os.environ.get("EMULATOR_PORT", "8080"))
    write_samples()
    with start_emulator(port=emulator_port, echo_stderr=sys.stderr) as emulator:
        api = start_api(api_port, emulator.url)
        try:
            print(_banner(api, emulator.url), flush=True)
            failed = _wait_for_stop(api, emulator.process)
        finally:
            api.stop()
    print("sagegate: stopped", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
