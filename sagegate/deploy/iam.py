"""IAM statements the deploy policies share (:mod:`sagegate.deploy.policy`, the API's and
the monitor's; :mod:`sagegate.deploy.jobs_policy`, the event functions')."""
from __future__ import annotations

import re
from typing import Any

from chalicelib.core.aws import S3_SCHEME, S3Uri
from chalicelib.core.config import Settings
from chalicelib.core.config_names import FIREHOSE_SCHEME
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.loading import load_registry
from chalicelib.registry.specs import ModelSpec
from sagegate.deploy.stage import Stage

_ACCOUNT_RE = re.compile(r"^[0-9]{12}\Z")
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]\Z")


def check_account_and_region(account: str, region: str) -> None:
    """Refuse what cannot be in an ARN.

    Raises:
        ValueError: a malformed account id or region.
    """
    if not _ACCOUNT_RE.match(account):
        raise ValueError(f"account must be 12 digits, not {account!r}")
    if not _REGION_RE.match(region):
        raise ValueError(f"not an AWS region: {region!r}")


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def models(stage: Stage) -> list[ModelSpec]:
    """The stage's registered models, read with the stage's settings.

    Raises:
        ValueError: the stage's settings or a model.json are invalid for it.
    """
    try:
        settings = Settings.from_env(stage.env)
        registry = load_registry(settings, stage.env)
    except ConfigurationError as error:
        raise ValueError(f"stage {stage.name!r}: {error.message}") from None
    return list(registry.models.values())


def llm_models(stage: Stage) -> list[ModelSpec]:
    """The stage's language models (their kind's ``llm``: OpenAI's routes serve them).

    Raises:
        ValueError: the stage's settings or a model.json are invalid for it.
    """
    return [model for model in models(stage) if model.kind.llm]


def allow(sid: str, actions: list[str], resource: str | list[str]) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource}


def log_statement(arn: str, account: str, region: str, function_name: str) -> dict[str, Any]:
    """Write the log streams of one function's own log group (created by the deployment)."""
    return allow("WriteOwnLogs", ["logs:CreateLogStream", "logs:PutLogEvents"],
                 f"{arn}:logs:{region}:{account}:log-group:/aws/lambda/{function_name}:*")


def capture_statement(env: dict[str, str], arn: str, account: str,
                      region: str) -> dict[str, Any] | None:
    """Data capture's write: S3 under ``CAPTURE_DESTINATION`` or its Firehose stream; None when
    off or to a directory."""
    if env.get("CAPTURE_MODE", "off") in ("", "off"):
        return None
    destination = env.get("CAPTURE_DESTINATION", "")
    if destination.startswith(S3_SCHEME):
        uri = S3Uri.parse(destination)
        objects = f"{uri.bucket}/{uri.prefix}/*" if uri.prefix else f"{uri.bucket}/*"
        return allow("WriteCaptures", ["s3:PutObject"], f"{arn}:s3:::{objects}")
    if destination.startswith(FIREHOSE_SCHEME):
        stream = destination[len(FIREHOSE_SCHEME):]
        return allow("WriteCaptures", ["firehose:PutRecordBatch"],
                     f"{arn}:firehose:{region}:{account}:deliverystream/{stream}")
    return None  # a local directory: nothing to grant (only meaningful off Lambda)
