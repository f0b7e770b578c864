"""A deployed stage's settings, resolved from ``.chalice/config.json`` the way Chalice does.

The deploy helpers read the stage through Chalice's own :class:`chalice.config.Config`, so a
value set globally, per stage or per function resolves as in ``chalice deploy`` and ``chalice
package``. :func:`load_stage` makes the :class:`~sagegate.deploy.stage.Stage` and checks a deploy
stage (authentication, monitor, capture stream, jobs, shadows). The stages sagegate deploys are
:data:`DEPLOY_STAGES`, listed here and nowhere else::

    sagegate stage prod                  # every resolved setting of the stage
    sagegate stage prod --key auth       # one of them: api-key
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chalicelib.core.access import AuthMode
from chalicelib.registry.specs import ModelSpec
from sagegate.deploy.capture_template import check_capture_stream
from sagegate.deploy.iam import models
from sagegate.deploy.jobs import check_jobs
from sagegate.deploy.monitor_definition import check_monitor_fanout
from sagegate.deploy.runtime import ARCHITECTURES
from sagegate.deploy.stage import MONITOR_FANOUT_FUNCTIONS, MONITOR_FUNCTION, Stage

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = ROOT / ".chalice" / "config.json"
# The stages that go to AWS (every deploy command, `sagegate check`); the only list of them.
DEPLOY_STAGES = ("dev", "prod")
# DynamoDB's rule for table names (so no wildcard, no ARN separator, can reach the policy)
_TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{3,255}\Z")
_LAYER_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:[0-9]{12}:layer:[A-Za-z0-9_-]+:[0-9]+\Z")


def load_config(path: Path = CONFIG_PATH) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        config: dict[str, Any] = json.load(handle)
    return config


def load_stage(name: str, path: Path = CONFIG_PATH) -> Stage:
    """Resolve one stage of the config with Chalice's own lookup rules.

    Raises:
        KeyError: no such stage.
        ValueError: the stage would deploy an API nobody chose to leave open, has a bad
            ``snapstart`` switch, a ``CACHE_TABLE`` DynamoDB would refuse, or jobs that could not
            work.
    """
    from chalice.config import Config

    on_disk = load_config(path)
    if name not in on_disk.get("stages", {}):
        raise KeyError(f"{path.name} has no stage {name!r}")
    config = Config(chalice_stage=name, config_from_disk=on_disk,
                    default_params={"api_gateway_stage": "api"})
    stage = Stage(
        name=name, app_name=config.app_name, function_name=f"{config.app_name}-{name}",
        env=dict(config.environment_variables), xray=bool(config.xray_enabled),
        layers=tuple(config.layers or ()), python_version=config.lambda_python_version,
        api_gateway_stage=config.api_gateway_stage,
        log_retention_in_days=config.log_retention_in_days,
        snapstart=_snapstart(on_disk, name, config.lambda_python_version),
        open_api=config.environment_variables.get("SAGEGATE_OPEN_API", "").strip().lower()
        == "true",
        tags=dict(config.tags),
        capture_stream=_capture_stream(on_disk, name),
        lambda_functions=dict(on_disk["stages"][name].get("lambda_functions") or {}),
        lambda_memory_size=config.lambda_memory_size,
        architecture=_architecture(on_disk, name, config.lambda_architecture))
    if stage.cache_table and not _TABLE_NAME_RE.match(stage.cache_table):
        raise ValueError(f"stages.{name}: CACHE_TABLE {stage.cache_table!r} is not a DynamoDB "
                         "table name (3 to 255 of A-Z a-z 0-9 _ . -)")
    if name in DEPLOY_STAGES:
        check_access(stage)
        check_monitor(stage, on_disk)
        check_capture_stream(stage)
        check_jobs(stage, on_disk)
        check_shadows(stage, int(config.lambda_timeout))
    return stage


def _architecture(on_disk: dict[str, Any], stage: str, resolved: str) -> str:
    """The stage's ``lambda_architecture`` as Chalice resolved it (stage, then top level).

    Raises:
        ValueError: not one of Lambda's architectures, or set on one function: Chalice 1.34
            reads it per stage only (a function's own value would be ignored), and the stage's
            one layer is built for one architecture.
    """
    if resolved not in ARCHITECTURES:
        raise ValueError(f"stages.{stage}.lambda_architecture must be one of "
                         f"{', '.join(ARCHITECTURES)}, not {resolved!r}")
    functions = on_disk["stages"][stage].get("lambda_functions") or {}
    for function, settings in sorted(functions.items()):
        if "lambda_architecture" in (settings or {}):
            raise ValueError(f"stages.{stage}.lambda_functions.{function}.lambda_architecture: "
                             "set the architecture for the whole stage (Chalice reads it per "
                             "stage only, and the stage's layer is built for one)")
    return resolved


def _capture_stream(on_disk: dict[str, Any], stage: str) -> str:
    """The stage's ``capture_stream`` (stage value only: a stream is one stage's)."""
    value = on_disk["stages"][stage].get("capture_stream", "")
    if not isinstance(value, str):
        raise ValueError(f"stages.{stage}.capture_stream must be an s3://bucket/prefix "
                         f"string, not {value!r}")
    return value.strip()


def check_monitor(stage: Stage, on_disk: dict[str, Any]) -> None:
    """Refuse a monitored stage that cannot work or would run with the API's role.

    Raises:
        ValueError: the captures are not in S3, or the monitor function (each of the three,
            fanned out) has no ``iam_policy_file`` of its own (Chalice would run it with the
            API's role, which cannot read the captures or the baseline), or
            :func:`sagegate.deploy.monitor_template.check_monitor_fanout` refuses.
    """
    from chalicelib.monitor.deployed_settings import MonitorConfigError

    try:
        settings = stage.monitor
    except MonitorConfigError as error:
        raise ValueError(f"stages.{stage.name}: {error}") from None
    if settings is None:
        return
    functions = on_disk["stages"][stage.name].get("lambda_functions", {})
    for function in MONITOR_FANOUT_FUNCTIONS if settings.fanned_out else (MONITOR_FUNCTION,):
        wanted = f"policy-{stage.name}-{function}.json"
        named = functions.get(function, {}).get("iam_policy_file")
        if named != wanted:
            raise ValueError(f"stages.{stage.name} sets MONITOR_BASELINE: give {function} its "
                             f"own role with lambda_functions.{function}.iam_policy_file = "
                             f"{wanted!r} (sagegate policy renders it), not {named!r}")
    if settings.fanned_out:
        check_monitor_fanout(stage)


def deploy_stage(name: str, path: Path = CONFIG_PATH) -> Stage:
    """:func:`load_stage` for one of :data:`DEPLOY_STAGES`.

    Raises:
        ValueError: not a deploy stage, or :func:`check_access` refuses it.
    """
    if name not in DEPLOY_STAGES:
        raise ValueError(f"{name!r} is not a deploy stage: use one of {', '.join(DEPLOY_STAGES)}")
    return load_stage(name, path)


def check_shadows(stage: Stage, lambda_timeout: int,
                  registered: Sequence[ModelSpec] | None = None) -> None:
    """Refuse a shadow that could never finish: the API function's invocation, which waits for
    its shadows after the response, ends at ``lambda_timeout``.

    Raises:
        ValueError: a shadow's ``timeout_seconds`` is not below the function's timeout.
    """
    for model in models(stage) if registered is None else registered:
        shadows = model.experiment.shadows if model.experiment is not None else ()
        for index, shadow in enumerate(shadows):
            if shadow.timeout_seconds >= lambda_timeout:
                raise ValueError(
                    f"models/{model.name}/model.json: experiment.shadow[{index}]."
                    f"timeout_seconds ({shadow.timeout_seconds:g}) must be below stages."
                    f"{stage.name}'s lambda_timeout ({lambda_timeout}): the invocation that "
                    "waits for the shadow after the response ends first")


def check_access(stage: Stage) -> None:
    """Refuse a deployed stage whose authentication is implicit, or open without saying so.

    Raises:
        ValueError: ``SAGEGATE_AUTH`` missing or blank, or ``none`` without
            ``SAGEGATE_OPEN_API=true``.
    """
    where = f".chalice/config.json stages.{stage.name}"
    if not stage.auth:
        named = ", ".join(mode for mode in AuthMode if mode != AuthMode.NONE)
        raise ValueError(f"{where} sets no SAGEGATE_AUTH: a deployed stage must name its "
                         f"authentication ({named}, or {AuthMode.NONE} with "
                         "SAGEGATE_OPEN_API=true); an unset mode would deploy an open API")
    if stage.auth == AuthMode.NONE and not stage.open_api:
        raise ValueError(f"{where} has SAGEGATE_AUTH=none, which deploys /predict and /resize "
                         "to anyone: set SAGEGATE_OPEN_API=true in the stage too if that is "
                         "meant")


def _snapstart(on_disk: dict[str, Any], stage: str, runtime: str) -> bool:
    """The stage's ``snapstart`` switch (stage value, else top-level, else off).

    Raises:
        ValueError: not a boolean, or on for a runtime SnapStart does not support.
    """
    from sagegate.deploy.runtime import RUNTIMES

    value = on_disk["stages"][stage].get("snapstart", on_disk.get("snapstart", False))
    if not isinstance(value, bool):
        raise ValueError(f"stages.{stage}.snapstart must be true or false, not {value!r}")
    if value and not (runtime in RUNTIMES and RUNTIMES[runtime].snapstart):
        raise ValueError(f"stages.{stage}.snapstart: Lambda SnapStart does not support {runtime} "
                         "(Python 3.12 and later only)")
    return value


def record_layer(stage: str, arn: str, path: Path = CONFIG_PATH) -> None:
    """Make ``arn`` the stage's only layer in the config file.

    Raises:
        ValueError: not a Lambda layer version ARN. KeyError: no such stage.
    """
    if not _LAYER_ARN_RE.match(arn):
        raise ValueError(f"not a Lambda layer version ARN: {arn!r}")
    config = load_config(path)
    config["stages"][stage]["layers"] = [arn]
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def rest_api_id(stage: str, root: Path = ROOT) -> str:
    """The REST API that ``chalice deploy`` created for ``stage``.

    Raises:
        ValueError: the stage has not been deployed with ``chalice deploy``.
    """
    from chalice.config import Config

    config = load_config(root / ".chalice" / "config.json")
    deployed = Config(chalice_stage=stage, config_from_disk=config,
                      user_provided_params={"project_dir": str(root)}).deployed_resources(stage)
    try:
        return str(deployed.resource_values("rest_api")["rest_api_id"])
    except (KeyError, ValueError):
        raise ValueError(f"no REST API in .chalice/deployed/{stage}.json: "
                         f"run `chalice deploy --stage {stage}` first") from None


def terraform_config(stage: str, path: Path = CONFIG_PATH) -> dict[str, Any]:
    """The config without ``log_retention_in_days``, which Chalice 1.34 cannot write as Terraform
    (``UnsupportedFeatureError: LogGroup``): Terraform users manage the group."""
    config = load_config(path)
    config.pop("log_retention_in_days", None)
    config["stages"][stage].pop("log_retention_in_days", None)
    for function in config["stages"][stage].get("lambda_functions", {}).values():
        function.pop("log_retention_in_days", None)
    return config


KEYS = ("auth", "function-name", "endpoint-name", "layers", "python-version",
        "api-gateway-stage", "log-retention", "snapstart", "xray", "open-api", "cache-table",
        "capture-stream", "architecture")


def describe(stage: Stage) -> dict[str, str]:
    """The stage's resolved settings, by the names ``sagegate stage --key`` takes."""
    return {"auth": stage.auth, "function-name": stage.function_name,
            "endpoint-name": stage.env.get("ENDPOINT_NAME", ""),
            "layers": " ".join(stage.layers), "python-version": stage.python_version,
            "api-gateway-stage": stage.api_gateway_stage,
            "log-retention": str(stage.log_retention_in_days or ""),
            "snapstart": "true" if stage.snapstart else "false",
            "xray": "true" if stage.xray else "false",
            "open-api": "true" if stage.open_api else "false",
            "cache-table": stage.cache_table, "capture-stream": stage.capture_stream,
            "architecture": stage.architecture}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Show a stage's settings from .chalice/config.json, resolved "
        "as Chalice resolves them (global, then stage); deploy stages are also checked for "
        "explicit authentication.")
    parser.add_argument("stage", help="a stage of .chalice/config.json (deploy stages: "
                                      f"{', '.join(DEPLOY_STAGES)})")
    parser.add_argument("--key", choices=KEYS, help="print this value only")
    parser.add_argument("--env", action="store_true",
                        help="print the function's environment variables instead")
    args = parser.parse_args(argv)
    try:
        stage = load_stage(args.stage)
    except KeyError as error:
        parser.exit(2, f"error: {error.args[0]}\n")
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    if args.env:
        for name, value in sorted(stage.env.items()):
            print(f"{name}={value}")
    elif args.key:
        print(describe(stage)[args.key])
    else:
        for key, value in describe(stage).items():
            print(f"{key:<18} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
