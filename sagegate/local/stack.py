"""``sagegate run``: the local stack, the SageMaker runtime emulator plus ``chalice local``, no
AWS account.

It checks the stage's settings and ports first (:mod:`sagegate.local.preflight`), starts the
processes with the helpers the tests and benchmarks use (:mod:`sagegate.local.processes`), and
while it runs restarts the emulator (the API answers 503 meanwhile) and moto's server if they die
(:mod:`sagegate.local.supervision`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from chalicelib.core.aws import S3_SCHEME
from chalicelib.core.config import Settings
from emulator.config import LLM, ConfigError, load_config
from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from emulator.process import EmulatorStartError, start_emulator
from sagegate.local.auth import API_KEY_ENV
from sagegate.local.aws import MotoStack, MotoStartError, emulator_env
from sagegate.local.preflight import (
    PORTS,
    Plan,
    StartError,
    preflight,
)
from sagegate.local.processes import ROOT, ApiProcess, ApiStartError, start_api
from sagegate.local.supervision import Child, Supervisor

SAMPLES = ROOT / "samples"
WARM_UP_TIMEOUT_S = 120.0
"""The longest ``sagegate run`` waits for the emulator's language models to load."""


def llm_endpoints(config_path: Path) -> list[str]:
    """The emulator's real-time endpoints that serve a language model (loaded on first use)."""
    try:
        config = load_config(config_path)
    except ConfigError:
        return []
    return [name for name, endpoint in config.endpoints.items()
            if endpoint.asynchronous is None
            and any(config.models[variant.model].kind == LLM for variant in endpoint.variants)]


def warm_up(emulator_url: str, endpoints: Sequence[str],
            timeout: float = WARM_UP_TIMEOUT_S) -> list[str]:
    """Ask each endpoint for one token, so its model is loaded before the first real request
    (SmolLM2's file takes seconds to read, more than an endpoint call may wait); the lines to
    say (a failure is said, not fatal: the first request loads the model then)."""
    said = []
    for name in endpoints:
        started = time.monotonic()
        request = urllib.request.Request(
            f"{emulator_url}/endpoints/{urllib.parse.quote(name, safe='')}/invocations",
            data=json.dumps({"inputs": "Hi", "parameters": {"max_new_tokens": 1}}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                answer.read()
        except (urllib.error.URLError, OSError) as error:
            said.append(f"sagegate: the language model of endpoint {name} did not load "
                        f"({error}); its first request loads it")
            continue
        said.append(f"sagegate: the language model of endpoint {name} is loaded "
                    f"({time.monotonic() - started:.1f} s)")
    return said


class WarmUp:
    """:func:`warm_up` on a thread, while chalice local starts."""

    def __init__(self, emulator_url: str, endpoints: Sequence[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(
            target=lambda: self.lines.extend(warm_up(emulator_url, endpoints)),
            name="llm-warm-up", daemon=True)
        self._thread.start()

    def wait(self) -> list[str]:
        """Its lines, once it is done (or the timeout passed)."""
        self._thread.join(WARM_UP_TIMEOUT_S + 5.0)
        return self.lines


def write_samples() -> dict[str, Path]:
    """Sample photos (scikit-image's public-domain data) and an iris row for the README's
    examples."""
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
    """The ready banner's line on data capture (``local_s3``: an ``s3://`` destination is moto's
    bucket)."""
    if settings.capture_mode == "off":
        return "data capture off"
    where = settings.capture_destination
    line = f"capturing {settings.capture_mode} of each prediction to {where}"
    if local_s3 and where.startswith(S3_SCHEME):
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
    """Block until Ctrl-C/SIGTERM (0), chalice local exits, or a supervised child cannot be kept
    running (1). A dead child is restarted meanwhile; the API stays up."""
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
               "when the run uses an AWS service: jobs, a cache table, captures to S3; its "
               "port is checked either way). Exit "
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
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="say ready without loading the emulator's language models first "
                             "(sooner; their first request then waits for the load, and may "
                             "time out)")
    return parser.parse_args(argv)


def _steps(plan: Plan, stage: str, warm_up: bool = True) -> Iterator[None]:
    """One line per start-up step, saying what it starts and how long it takes (a first run's are
    slow: the emulator loads its models, chalice local imports the app)."""
    lines = [f"moto's server (S3, SNS, SQS, DynamoDB, Firehose) on port {plan.moto_port}: "
             "a second or two"] if plan.moto_port else []
    lines += [f"the SageMaker emulator on port {plan.emulator_port}: loads its models, a few "
              "seconds" + (" (its language model loads meanwhile, up to half a minute)"
                           if warm_up else ""),
              f"chalice local, stage {stage!r}, on port {plan.api_port}: imports "
              "the app and warms it up, a few seconds"]
    for number, line in enumerate(lines, 1):
        _say(f"sagegate: [{number}/{len(lines)}] starting {line}")
        yield


def _run(args: argparse.Namespace) -> int:
    _say(f"sagegate: checking stage {args.stage!r}: its settings, ports and models")
    plan = preflight(args, os.environ)
    write_samples()
    steps = _steps(plan, args.stage, args.warm_up)
    supervisors: list[Supervisor[Any]] = []
    moto = MotoStack.for_plan(plan.moto_port, plan.settings, args.emulator_config, _say)
    try:
        if moto is not None:
            next(steps)
            supervisors.append(moto.supervisor)
            try:
                moto.supervisor.start()
            except MotoStartError as error:
                raise StartError(f"moto's server did not start: {error}") from None
        extra = moto.jobs.emulator_args() if moto is not None else []
        moto_url = plan.local_env.get("AWS_ENDPOINT_URL", "")
        emulator_supervisor = Supervisor(lambda: start_emulator(
            args.emulator_config, port=plan.emulator_port, echo_stderr=sys.stderr,
            extra_args=extra, env=emulator_env(moto_url)), _say)
        supervisors.append(emulator_supervisor)
        next(steps)
        try:
            emulator = emulator_supervisor.start()
        except EmulatorStartError as error:
            raise StartError(f"the emulator did not start: {error}") from None
        env = {**(moto.jobs.api_env() if moto is not None else {}),
               **({API_KEY_ENV: plan.api_key} if plan.api_key else {})}
        warming = WarmUp(emulator.url,
                         llm_endpoints(args.emulator_config) if args.warm_up else [])
        next(steps)
        try:
            api = start_api(plan.api_port, emulator.url, stage=args.stage, env=env,
                            overrides=plan.local_env)
        except ApiStartError as error:
            raise StartError(str(error)) from None
        try:
            for line in warming.wait():
                _say(line)
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
        0 after Ctrl-C/SIGTERM; 1 when a child could not be kept running; 2 when the stack cannot
            start, with one line saying why.
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
