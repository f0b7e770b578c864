"""The local stack: the SageMaker runtime emulator plus ``chalice local``, no AWS account.

``sagegate run`` (``make run``) starts it; the integration tests and the benchmarks start the
same processes with the same helpers from this module: :func:`start_emulator` (the emulator's
own launcher, from :mod:`emulator.process`), :func:`start_api` / :func:`start_chalice_local`
(``chalice local`` through :mod:`sagegate.chalice_local`, ready once its own child answers),
:func:`free_port` and :func:`check_port_free`, :func:`terminate` (by PID), and the memory
readers :func:`rss_mb` / :func:`peak_rss_mb`. Only the standard library (and the emulator's
process helper, which is standard library only) is imported at module level.

Before starting anything, ``sagegate run`` checks the settings the stage gives sagegate and
that its ports are free; while it runs, it restarts the emulator if it dies (the API answers
503 meanwhile), and moto's server, the local S3, SNS and SQS of the jobs flow
(:mod:`sagegate.local_aws`), with :mod:`sagegate.supervision`.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
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
from email.message import Message
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, NamedTuple, Self

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.loading import MODELS_DIR, load_registry
from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from emulator.process import (
    EmulatorProcess,
    EmulatorStartError,
    free_port,
    start_emulator,
    terminate,
)
from sagegate.local_auth import API_KEY_ENV, UncheckableAuth, local_api_key
from sagegate.ports import describe_owner
from sagegate.supervision import (
    MAX_RESTARTS,
    RESTART_POLICY,
    STABLE_AFTER_S,
    Child,
    Supervisor,
    backoff,
)

__all__ = [
    "DEFAULT_EMULATOR_CONFIG",
    "DUMMY_AWS_ENV",
    "HOST",
    "INSTANCE_ENV",
    "INSTANCE_HEADER",
    "MAX_RESTARTS",
    "PORTS",
    "RESTART_POLICY",
    "ROOT",
    "STABLE_AFTER_S",
    "ApiProcess",
    "ApiStartError",
    "EmulatorProcess",
    "EmulatorStartError",
    "StartError",
    "Supervisor",
    "api_env",
    "backoff",
    "check_port_free",
    "check_settings",
    "free_port",
    "main",
    "own_answer",
    "peak_rss_mb",
    "read_port",
    "rss_mb",
    "serve",
    "stage_env",
    "start_api",
    "start_chalice_local",
    "start_emulator",
    "terminate",
    "wait_until_serving",
]

ROOT = Path(__file__).resolve().parent.parent
"""The repository: sagegate's Chalice project (``app.py``, ``.chalice/``)."""
SAMPLES = ROOT / "samples"
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
}
HOST = "127.0.0.1"
PORTS = {"API_PORT": 8000, "EMULATOR_PORT": 8080, "MOTO_PORT": 8070}
"""The port variables ``sagegate run`` reads, with their defaults."""
INSTANCE_ENV = "SAGEGATE_INSTANCE"
"""The variable giving a ``chalice local`` child the marker it puts in its answers."""
INSTANCE_HEADER = "X-Sagegate-Instance"
"""The header carrying that marker (see :mod:`sagegate.chalice_local`)."""
_POLL_SECONDS = 0.1


class ApiStartError(RuntimeError):
    """``chalice local`` exited or did not answer in time."""


class StartError(Exception):
    """``sagegate run`` cannot start; the message says why and what to change."""


# ---------------------------------------------------------------- processes

class ApiProcess:
    """A running ``chalice local`` (with TCP_NODELAY) child process; a context manager that
    stops it on exit."""

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

    @property
    def pid(self) -> int:
        """The child's process id."""
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
    """The environment ``chalice local`` needs to reach the emulator with boto3."""
    env = {**os.environ, **DUMMY_AWS_ENV, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": endpoint_url}
    env.pop("AWS_PROFILE", None)
    env.update(extra or {})
    return env


def start_chalice_local(port: int, endpoint_url: str, *, project_dir: Path = ROOT,
                        stage: str | None = "local", host: str = HOST,
                        env: Mapping[str, str] | None = None, log: IO[bytes] | None = None,
                        timeout: float = 60.0, ready_path: str = "/health",
                        ready_status: int | None = 200) -> ApiProcess:
    """Start ``chalice local`` (TCP_NODELAY, backlog 128, instance marker) for the Chalice app
    in ``project_dir`` and wait until this child itself answers ``ready_path``.

    Args:
        port: the port to listen on.
        endpoint_url: the SageMaker runtime URL (the emulator's).
        project_dir: the Chalice project (default: sagegate's).
        stage: the Chalice stage (None: chalice's default).
        host: the address to bind.
        env: extra environment variables for the process (the stage's own still win: chalice
            local applies them over the process environment).
        log: where the child's output goes (default: this process's stdout/stderr).
        timeout: seconds to wait for the answer.
        ready_path: the path to GET until it answers.
        ready_status: the status that means ready (None: any answer from this child).

    Raises:
        ApiStartError: the child exited or never answered (it is then stopped).
    """
    instance = secrets.token_hex(8)
    command = [sys.executable, "-m", "sagegate.chalice_local", "local",
               *(("--stage", stage) if stage else ()),
               "--host", host, "--port", str(port), "--no-autoreload"]
    child_env = api_env(endpoint_url, {**(env or {}), INSTANCE_ENV: instance})
    # sagegate.chalice_local is found from any project directory
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
              timeout: float = 60.0) -> ApiProcess:
    """Start sagegate under ``chalice local`` for ``stage`` and wait until it answers
    ``/health`` (200) itself. Arguments as :func:`start_chalice_local`.

    Raises:
        ApiStartError: the child exited or never answered (it is then stopped).
    """
    return start_chalice_local(port, endpoint_url, stage=stage, host=host, env=env, log=log,
                               timeout=timeout)


@contextlib.contextmanager
def quiet_stack(stage: str = "local") -> Iterator[tuple[ApiProcess, EmulatorProcess]]:
    """``make run``'s stack (the default emulator, chalice local for ``stage``) on free ports,
    its output discarded, both stopped by their PIDs on the way out: what the benchmarks run
    against."""
    with open(os.devnull, "wb") as log, start_emulator(port=0) as emulator:
        api = start_api(free_port(HOST), emulator.url, host=HOST, stage=stage, log=log)
        try:
            yield api, emulator
        finally:
            api.stop()


def own_answer(api: ApiProcess, path: str = "/health") -> int | None:
    """The status of this child's answer to ``GET path``; None when nothing answered or
    another server did (its answer lacks the child's marker)."""
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
        ApiStartError: the child (``what``, for the message) exited first, or did not answer
            within ``timeout`` seconds.
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
    """A process's resident memory now (VmRSS), in MB."""
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident memory so far (VmHWM), in MB."""
    return _status_kb(pid, "VmHWM") / 1024


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(f"no {field} in /proc/{pid}/status (has it exited?)")


# ---------------------------------------------------------------- preflight

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
        StartError: naming the port, its variable, the program listening on it (command and
            pid, when this user may see it) and how to pick another.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            reason = error.strerror
        else:
            return
    other = 9000 if port != 9000 else 9001
    owner = describe_owner(port)
    what = (f"is used by {owner}: stop it" if owner else
            f"is not available ({reason}; its program could not be named here: "
            f"`lsof -i :{port}` may): stop what uses it")
    raise StartError(f"port {port} on {host} ({name}) {what} or pick another port, "
                     f"e.g. make run {name}={other}")


def stage_env(stage: str, base: Mapping[str, str]) -> dict[str, str]:
    """The environment sagegate sees under ``chalice local --stage <stage>``: ``base``,
    overlaid with the stage's variables from ``.chalice/config.json`` (chalice local's order).

    Raises:
        StartError: the config has no such stage or cannot be read.
    """
    from sagegate.deploy.stages import load_stage

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

    try:
        return Settings.from_env(env)
    except ConfigurationError as error:
        raise StartError(f"bad setting: {error} (set in the environment or in stage "
                         f"{stage!r} of .chalice/config.json)") from None


def check_models(settings: Settings, env: Mapping[str, str],
                 root: Path | None = None) -> list[str]:
    """Load every registered model as the function will at start-up: each model.json, and
    each handler file its pipeline runs. Returns the model names.

    Raises:
        StartError: a model.json key or a handler file is wrong; the message names the file.
    """
    # Deferred: these bring numpy and the handler files' modules, which only starting the
    # local stack needs, not every sagegate command.
    from chalicelib.inference.predictions import load_labels
    from chalicelib.inference.userfiles.loader import load_handler

    try:
        registry = load_registry(settings, {**env, "ENDPOINT_NAME": settings.endpoint_name},
                                 root or MODELS_DIR, labels=load_labels(settings.labels))
        for model in registry.models.values():
            load_handler(model)
    except ConfigurationError as error:
        raise StartError(f"bad model: {error.message}") from None
    return registry.names()


# ---------------------------------------------------------------- sagegate run

def write_samples() -> dict[str, Path]:
    """Write sample photos (from scikit-image's public-domain data) and an iris row for
    the README's examples."""
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
    # a flower for the iris model (in cm; a file may hold a row per flower). One row, as the
    # README's curl examples send, so the monitoring example's traffic stays of one shape
    rows = SAMPLES / "iris.csv"
    if not rows.exists():
        rows.write_text("5.9,3.0,4.2,1.5\n")
    paths["iris"] = rows
    return paths


def describe_capture(settings: Settings, local_s3: bool = False) -> str:
    """One line on what data capture does, for the ready banner (``local_s3``: an ``s3://``
    destination is moto's server's bucket)."""
    if settings.capture_mode == "off":
        return "data capture off"
    where = settings.capture_destination
    line = f"capturing {settings.capture_mode} of each prediction to {where}"
    if local_s3 and where.startswith("s3://"):
        return line + " (on moto's server, in memory)"
    if "://" in where:
        return line
    cap = settings.capture_max_bytes
    if not cap:
        return line + " (no size cap: set CAPTURE_MAX_BYTES)"
    return line + (f" (at most {cap / 1e6:g} MB an endpoint, its oldest files dropped; "
                   "CAPTURE_MAX_BYTES)")


def _key_lines(api_key: str | None) -> list[str]:
    if not api_key:
        return []
    return [f"API key: {api_key}   (send it as x-api-key: the routes the stage protects "
            f"answer 403 without it; {API_KEY_ENV} sets it, else it is new each run)"]


def _banner(api: ApiProcess, emulator: Child, settings: Settings,
            api_key: str | None = None, jobs_line: str | None = None) -> str:
    key = f" -H 'x-api-key: {api_key}'" if api_key else ""
    return "\n".join([
        f"sagegate: ready on {api.url} (pid {api.pid}; endpoint "
        f"{settings.endpoint_name} on emulator {emulator.url}, pid {emulator.pid}); "
        f"{describe_capture(settings, local_s3=jobs_line is not None)}",
        *_key_lines(api_key),
        jobs_line or "jobs: off (the stage sets no JOBS_BUCKET)",
        f"web page: {api.url}/   models: {api.url}/models   API: {api.url}/openapi.yaml",
        "try:",
        f"  curl -s {api.url}/predict{key} -H 'Content-Type: image/jpeg' "
        "--data-binary @samples/cat.jpg",
        f"  curl -s '{api.url}/predict?k=3'{key} -H 'Content-Type: image/jpeg' "
        "--data-binary @samples/coffee.jpg",
        f"  curl -s {api.url}/models/iris/predict{key} -H 'Content-Type: application/json' "
        "-d '{\"instances\": [[5.1, 3.5, 1.4, 0.2]]}'",
        f"  .venv/bin/sagegate predict samples/ --url {api.url}"
        + (f" --api-key {api_key}" if api_key else ""),
        "Ctrl-C stops them all.",
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


def serve(api: ApiProcess, *supervisors: Supervisor[Any]) -> int:
    """Block until Ctrl-C/SIGTERM (0), chalice local exits, or a supervised child (the
    emulator, moto's server) cannot be kept running (1). A dead child is restarted meanwhile
    (by its supervisor); the API stays up."""
    with _stop_on_signals() as received:
        while not received:
            if api.process.poll() is not None:
                _say(f"sagegate: chalice local exited with code {api.process.returncode}")
                return 1
            if not all([supervisor.check() for supervisor in supervisors]):
                return 1
            time.sleep(0.2)
    return 0


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 1..65535, not {text!r}")
    return int(text)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Read the command line (argparse exits 2 with a usage message on bad arguments)."""
    parser = argparse.ArgumentParser(
        prog="sagegate run",
        description="Serve sagegate on this machine, no AWS account: the SageMaker runtime "
                    "emulator, moto's server (the S3, SNS and SQS of the jobs flow, the "
                    "stage's DynamoDB tables), then "
                    "`chalice local` for a stage with boto3 pointed at them. Checks the "
                    "stage's settings and the ports first; restarts the emulator or moto's "
                    "server if it dies; Ctrl-C stops them all.",
        epilog="Ports: an option beats API_PORT / EMULATOR_PORT / MOTO_PORT in the "
               f"environment, which beat the defaults ({PORTS['API_PORT']}, "
               f"{PORTS['EMULATOR_PORT']} and {PORTS['MOTO_PORT']}; moto's server runs only "
               "when the stage has jobs on). Exit "
               "codes: 0 after Ctrl-C, 1 when a child cannot be kept running, 2 when the "
               "stack cannot start (the one line on stderr says why).")
    parser.add_argument("--stage", default="local",
                        help="the Chalice stage of .chalice/config.json (default local)")
    parser.add_argument("--emulator-config", type=Path, default=DEFAULT_EMULATOR_CONFIG,
                        metavar="FILE",
                        help="the emulator's configuration (default emulator/config.json)")
    parser.add_argument("--api-port", type=_port, metavar="PORT",
                        help=f"chalice local's port (API_PORT, default {PORTS['API_PORT']})")
    parser.add_argument("--emulator-port", type=_port, metavar="PORT",
                        help="the emulator's port "
                             f"(EMULATOR_PORT, default {PORTS['EMULATOR_PORT']})")
    parser.add_argument("--moto-port", type=_port, metavar="PORT",
                        help="the port of moto's server, the local S3, SNS and SQS of the "
                             f"jobs flow (MOTO_PORT, default {PORTS['MOTO_PORT']})")
    return parser.parse_args(argv)


class Plan(NamedTuple):
    """What ``sagegate run`` starts, once every check has passed."""

    api_port: int
    emulator_port: int
    settings: Settings
    api_key: str | None
    """The key ``x-api-key`` must carry (a stage with API-key authentication), else None."""
    moto_port: int = 0
    """moto's server's port; 0 when the stage has jobs off (then no moto)."""
    jobs_env: Mapping[str, str] = {}
    """The jobs variables ``chalice local`` gets (bucket, topics, boto3's endpoints)."""
    redrive_period: int = 0
    """How often the event pump re-drives queued jobs (seconds; 0 with jobs off)."""


def check_auth(stage: str, env: Mapping[str, str]) -> str | None:
    """The stage's local API key (None: open), see :mod:`sagegate.local_auth`.

    Raises:
        StartError: the stage's authentication cannot be checked locally (IAM, Cognito) or
            its settings are wrong.
    """
    try:
        return local_api_key(stage, env)
    except UncheckableAuth as error:
        raise StartError(str(error)) from None
    except ConfigurationError as error:
        raise StartError(f"bad setting: {error} (stage {stage!r} of "
                         ".chalice/config.json)") from None


def preflight(args: argparse.Namespace, environ: Mapping[str, str]) -> Plan:
    """Every check that needs no child process: ports, then settings and authentication.

    Raises:
        StartError: the first problem found.
    """
    ports = {"API_PORT": args.api_port, "EMULATOR_PORT": args.emulator_port,
             "MOTO_PORT": args.moto_port}
    ports = {name: given or read_port(environ, name) for name, given in ports.items()}
    url = f"http://{HOST}:{ports['EMULATOR_PORT']}"
    jobs_env = _jobs_env(ports["MOTO_PORT"])
    env = stage_env(args.stage, api_env(url, jobs_env))
    settings = check_settings(args.stage, env)
    if not settings.jobs_enabled:
        ports["MOTO_PORT"], jobs_env = 0, {}
    _check_ports(ports)
    api_key = check_auth(args.stage, env)
    check_models(settings, env)
    period = check_redrive(args.stage, env) if settings.jobs_enabled else 0
    return Plan(ports["API_PORT"], ports["EMULATOR_PORT"], settings, api_key,
                ports["MOTO_PORT"], jobs_env, period)


def check_redrive(stage: str, env: Mapping[str, str]) -> int:
    """The re-drive's period (the event pump runs it), its settings checked as the scheduled
    function reads them.

    Raises:
        StartError: a ``JOB_REDRIVE_*`` variable has a bad value; the message names it.
    """
    from chalicelib.jobs.redrive import RedriveSettings

    try:
        return RedriveSettings.from_env(env).period_seconds
    except ConfigurationError as error:
        raise StartError(f"bad setting: {error} (set in the environment or in stage "
                         f"{stage!r} of .chalice/config.json)") from None


def _jobs_env(moto_port: int) -> dict[str, str]:
    from sagegate.local_aws import LocalJobs

    return LocalJobs(f"http://{HOST}:{moto_port}").settings_env()


def _check_ports(ports: Mapping[str, int]) -> None:
    used = {name: port for name, port in ports.items() if port}
    for (first, port), (second, other) in itertools.combinations(used.items(), 2):
        if port == other:
            raise StartError(f"{first} and {second} are both {port}: pick different ports")
    for name, port in used.items():
        check_port_free(port, name)


def _run(args: argparse.Namespace) -> int:
    from sagegate.local_aws import MotoStack, MotoStartError

    plan = preflight(args, os.environ)
    write_samples()
    supervisors: list[Supervisor[Any]] = []
    moto = MotoStack.for_plan(plan.moto_port, plan.settings, args.emulator_config, _say)
    try:
        if moto is not None:
            supervisors.append(moto.supervisor)
            try:
                moto.supervisor.start()
            except MotoStartError as error:
                raise StartError(f"moto's server did not start: {error}") from None
        extra = moto.jobs.emulator_args() if moto is not None else []
        emulator_supervisor = Supervisor(lambda: start_emulator(
            args.emulator_config, port=plan.emulator_port, echo_stderr=sys.stderr,
            extra_args=extra), _say)
        supervisors.append(emulator_supervisor)
        try:
            emulator = emulator_supervisor.start()
        except EmulatorStartError as error:
            raise StartError(f"the emulator did not start: {error}") from None
        env = {**(moto.jobs.api_env() if moto is not None else {}),
               **({API_KEY_ENV: plan.api_key} if plan.api_key else {})}
        try:
            api = start_api(plan.api_port, emulator.url, stage=args.stage, env=env)
        except ApiStartError as error:
            raise StartError(str(error)) from None
        try:
            _say(_banner(api, emulator, plan.settings, plan.api_key,
                         moto.describe(plan.redrive_period) if moto is not None else None))
            return serve(api, *supervisors)
        finally:
            api.stop()
    finally:
        for supervisor in reversed(supervisors):
            supervisor.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``sagegate run``: the emulator and the API in the foreground until Ctrl-C.

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
