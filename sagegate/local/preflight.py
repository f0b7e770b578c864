"""``sagegate run``'s checks before anything starts (:func:`preflight`): the ports (each a
port number, free, no two the same), the settings the stage gives sagegate, its local API key,
every registered model loaded as the function will, and the jobs' re-drive settings. The first
problem found is a :class:`StartError` whose one line says what to change;
:mod:`sagegate.local.stack` starts the stack on the :class:`Plan` they make.
"""
from __future__ import annotations

import argparse
import itertools
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from chalicelib.core.config import Settings
from chalicelib.core.config_names import FIREHOSE_SCHEME
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.loading import MODELS_DIR, load_registry
from sagegate.local.auth import UncheckableAuth, local_api_key
from sagegate.local.aws import (
    LocalJobs,
    MotoStartError,
    arn_of,
    emulator_topics,
    local_aws_env,
    moto_needed,
)
from sagegate.local.ports import describe_owner
from sagegate.local.processes import HOST, api_env

if TYPE_CHECKING:
    from sagegate.deploy.stage import Stage

__all__ = ["PORTS", "Plan", "StartError", "check_auth", "check_models", "check_port_free",
           "check_redrive", "check_settings", "local_overrides", "preflight", "read_port",
           "stage_env"]

PORTS = {"API_PORT": 8000, "EMULATOR_PORT": 8080, "MOTO_PORT": 8070}
"""The port variables ``sagegate run`` reads, with their defaults."""
LOCAL_CAPTURE_BUCKET = "sagegate-local-captures"
"""Where a local run captures a ``firehose://`` destination the stage declares no
``capture_stream`` for, on moto's server."""


class StartError(Exception):
    """``sagegate run`` cannot start; the message says why and what to change."""


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
    """Fail early and clearly when something listens on ``host:port``: bind as the servers do
    (SO_REUSEADDR, so TIME_WAIT connections are no obstacle) and let go.

    Raises:
        StartError: naming the port, its variable, the program listening (command and pid, when
            visible) and how to pick another.
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


def stage_env(stage: str, base: Mapping[str, str],
              emulator_config: Path | None = None) -> dict[str, str]:
    """The environment under ``sagegate run --stage``: ``base``, overlaid with the stage's
    variables (chalice local's order), then :func:`local_overrides` (applied after the stage's).

    Raises:
        StartError: no such stage or unreadable config, or the emulator's asynchronous endpoints
            notify topics no one stage can subscribe.
    """
    env = {**base, **_load_stage(stage).env}
    return {**env, **local_overrides(stage, env, emulator_config)}


def _load_stage(stage: str) -> Stage:
    from sagegate.deploy.stages import load_stage

    try:
        return load_stage(stage)
    except (KeyError, OSError, ValueError) as error:
        raise StartError(f"cannot read stage {stage!r} of .chalice/config.json: "
                         f"{error}") from None


def local_overrides(stage: str, env: Mapping[str, str],
                    emulator_config: Path | None = None) -> dict[str, str]:
    """What a local run sets over the stage's variables, so nothing addresses AWS and data is
    filed where the stage's contract says, on moto:

    * a ``firehose://`` capture destination captures through the S3 sink to where the stream
      delivers (``capture_stream``, else ``s3://sagegate-local-captures/<stream>``): moto's
      Firehose writes one object per call under its prefix taken literally (no ``!{...}``), so
      the monitor's layout would not be there;
    * the jobs' topics become the ones the emulator's asynchronous endpoints notify (on AWS the
      endpoint is configured with the stage's), so notifications reach the job functions.

    Raises:
        StartError: the endpoints notify more than one pair of topics and none is the stage's.
    """
    overrides: dict[str, str] = {}
    destination = env.get("CAPTURE_DESTINATION", "").strip()
    if destination.startswith(FIREHOSE_SCHEME):
        stream = _load_stage(stage).capture_stream.strip()
        overrides["CAPTURE_DESTINATION"] = stream or (
            f"s3://{LOCAL_CAPTURE_BUCKET}/{destination.removeprefix(FIREHOSE_SCHEME)}")
    if emulator_config is not None and env.get("JOBS_BUCKET", "").strip():
        overrides.update(_topics(stage, env, emulator_config))
    return overrides


def _topics(stage: str, env: Mapping[str, str], emulator_config: Path) -> dict[str, str]:
    try:
        notified = emulator_topics(emulator_config)
    except MotoStartError as error:
        raise StartError(f"cannot read the emulator's configuration: {error}") from None
    subscribed = (arn_of(env.get("JOBS_SUCCESS_TOPIC", "").strip()),
                  arn_of(env.get("JOBS_ERROR_TOPIC", "").strip()))
    if not notified or subscribed in notified:
        return {}
    if len(notified) > 1:
        raise StartError(f"the emulator's asynchronous endpoints notify {len(notified)} "
                         f"different pairs of topics and stage {stage!r} subscribes another: "
                         f"give every asynchronous endpoint of {emulator_config} one "
                         "success_topic and one error_topic")
    success, failure = next(iter(notified))
    return {"JOBS_SUCCESS_TOPIC": success, "JOBS_ERROR_TOPIC": failure}


def check_settings(stage: str, env: Mapping[str, str]) -> Settings:
    """Validate the settings exactly as sagegate will read them.

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
    """Load every registered model as the function will at start-up (each model.json and handler
    file); returns the names.

    Raises:
        StartError: a model.json key or a handler file is wrong; the message names the file.
    """
    # Deferred: these bring numpy and the handler files' modules, which only starting the
    # local stack needs, not every sagegate command.
    from chalicelib.inference.predictions import load_labels
    from chalicelib.inference.serving import ModelServer
    from chalicelib.kinds import kind_of

    try:
        registry = load_registry(settings, {**env, "ENDPOINT_NAME": settings.endpoint_name},
                                 root or MODELS_DIR, labels=load_labels(settings.labels))
        handlers = ModelServer(cast(Any, None))  # loads the handler files; calls no endpoint
        for model in registry.models.values():
            kind_of(model).load(model, handlers)
    except ConfigurationError as error:
        raise StartError(f"bad model: {error.message}") from None
    return registry.names()


class Plan(NamedTuple):
    """What ``sagegate run`` starts, once every check has passed."""

    api_port: int
    emulator_port: int
    settings: Settings
    api_key: str | None
    """The key ``x-api-key`` must carry, else None."""
    moto_port: int = 0
    """0 when the run uses no AWS service (no moto; the port is still checked free, every AWS
    client pointing there)."""
    jobs_env: Mapping[str, str] = {}
    redrive_period: int = 0
    """Seconds; 0 with jobs off."""
    local_env: Mapping[str, str] = {}
    """What ``chalice local`` sets over the stage's own (:func:`local_overrides`, every AWS
    endpoint)."""


def check_auth(stage: str, env: Mapping[str, str]) -> str | None:
    """The stage's local API key (None: open), see :mod:`sagegate.local.auth`.

    Raises:
        StartError: the stage's authentication cannot be checked locally (IAM, Cognito) or its
            settings are wrong.
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
    moto_url = f"http://{HOST}:{ports['MOTO_PORT']}"
    jobs_env = _jobs_env(moto_url)
    staged = {**api_env(url, jobs_env), **_load_stage(args.stage).env}
    # Every AWS client of chalice local points here, whatever the stage says: moto's server
    # (a run that uses no AWS service has none running, so an unexpected AWS call fails on
    # 127.0.0.1, at a port checked free) or the emulator
    local_env = {**local_overrides(args.stage, staged, args.emulator_config),
                 **local_aws_env(moto_url), "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url}
    env = {**staged, **local_env}
    settings = check_settings(args.stage, env)
    if not settings.jobs_enabled:
        jobs_env = {}
    _check_ports(ports)  # moto's too, started or not: the clients point there
    api_key = check_auth(args.stage, env)
    check_models(settings, env)
    period = check_redrive(args.stage, env) if settings.jobs_enabled else 0
    moto_port = ports["MOTO_PORT"] if moto_needed(settings) else 0
    return Plan(ports["API_PORT"], ports["EMULATOR_PORT"], settings, api_key,
                moto_port, jobs_env, period, local_env)


def check_redrive(stage: str, env: Mapping[str, str]) -> int:
    """The re-drive's period, its settings checked as the scheduled function reads them.

    Raises:
        StartError: a ``JOB_REDRIVE_*`` variable has a bad value; the message names it.
    """
    from chalicelib.jobs.redrive import RedriveSettings

    try:
        return RedriveSettings.from_env(env).period_seconds
    except ConfigurationError as error:
        raise StartError(f"bad setting: {error} (set in the environment or in stage "
                         f"{stage!r} of .chalice/config.json)") from None


def _jobs_env(moto_url: str) -> dict[str, str]:
    return LocalJobs(moto_url).settings_env()


def _check_ports(ports: Mapping[str, int]) -> None:
    used = {name: port for name, port in ports.items() if port}
    for (first, port), (second, other) in itertools.combinations(used.items(), 2):
        if port == other:
            raise StartError(f"{first} and {second} are both {port}: pick different ports")
    for name, port in used.items():
        check_port_free(port, name)
