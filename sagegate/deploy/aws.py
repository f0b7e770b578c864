"""The AWS calls the deploy commands make themselves, through clients the caller passes.

Simple calls go through boto3 (tested with botocore's Stubber): the region and account,
uploading and publishing the layer, the function's log group and its retention. The
CloudFormation deploys and ``chalice deploy`` are external commands (:mod:`sagegate.deploy.shell`).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from chalicelib import awsclients
from chalicelib.core.aws import DEPLOY
from sagegate.deploy import templates
from sagegate.deploy.shell import DeployError, config_path
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import ROOT, record_layer

LAYER_DESCRIPTION = "numpy, OpenCV and the other compiled dependencies"


def session(region: str | None = None) -> awsclients.Clients:
    """The deploy's clients (:data:`chalicelib.core.aws.DEPLOY`) in ``region``, else AWS_REGION,
    else boto3's own lookup.

    Raises:
        DeployError: (status 2) no region anywhere.
    """
    chosen = (region or "").strip() or os.environ.get("AWS_REGION", "").strip() or None
    made = awsclients.Clients(DEPLOY, region=chosen)
    if not made.region_name:
        raise DeployError("no AWS region: pass --region (make ... REGION=), set AWS_REGION "
                          "or configure the AWS CLI", status=2)
    return made


def account_of(sts: Any) -> str:
    return str(sts.get_caller_identity()["Account"])


def layer_key(stage: Stage, archive: Path) -> str:
    """Named by its content, so an unchanged zip is reused."""
    digest = hashlib.md5(archive.read_bytes(), usedforsecurity=False).hexdigest()[:12]
    return f"sagegate/{stage.name}/layer-{digest}.zip"


def publish_layer(stage: Stage, archive: Path, bucket: str, s3: Any, lambda_client: Any,
                  root: Path = ROOT) -> str:
    """Upload the layer zip, publish it as a layer version, record it as the stage's layer;
    return its ARN."""
    key = layer_key(stage, archive)
    with open(archive, "rb") as body:
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    print(f"uploaded {archive.name} to s3://{bucket}/{key}")
    published = lambda_client.publish_layer_version(
        LayerName=f"{stage.function_name}-dependencies", Description=LAYER_DESCRIPTION,
        Content={"S3Bucket": bucket, "S3Key": key},
        CompatibleRuntimes=[stage.python_version], CompatibleArchitectures=[stage.architecture])
    arn = str(published["LayerVersionArn"])
    record_layer(stage.name, arn, config_path(root))
    return arn


def log_group(stage: Stage) -> str:
    return f"/aws/lambda/{stage.function_name}"


def log_groups(stage: Stage) -> list[str]:
    """The API's log group and, on a monitored stage, the monitor's (where its metrics are
    printed)."""
    groups = [log_group(stage)]
    if stage.monitor is not None and not stage.monitor.fanned_out:  # (fanned out: Path A)
        groups.append(f"/aws/lambda/{stage.monitor_function_name}")
    return groups


def ensure_log_groups(logs: Any, stage: Stage) -> list[str]:
    """:func:`ensure_log_group` for each: no function's role may create its own group, so a
    missing one would leave its logs, and the monitor's EMF metrics, unwritten."""
    return [ensure_log_group(logs, stage, group) for group in log_groups(stage)]


def ensure_log_group(logs: Any, stage: Stage, group: str | None = None) -> str:
    """Create a log group of the stage (default: the API function's) if missing, with the stage's
    retention (Chalice 1.34 gives it to ``...-api_handler``'s group, not the function's)."""
    group = group or log_group(stage)
    try:
        logs.create_log_group(logGroupName=group)
        print(f"created log group {group}")
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    if stage.log_retention_in_days:
        logs.put_retention_policy(logGroupName=group,
                                  retentionInDays=stage.log_retention_in_days)
        print(f"{group}: retention {stage.log_retention_in_days} days")
    return group


def disable_monitor_retries(lambda_client: Any, stage: Stage) -> str | None:
    """No asynchronous retry of the scheduled monitor (``chalice deploy`` cannot set it): a
    failed or timed-out run would fail the same way twice more. The function's name, None without
    the monitor."""
    if stage.monitor is None or stage.monitor.fanned_out:
        return None
    name = stage.monitor_function_name
    lambda_client.put_function_event_invoke_config(
        FunctionName=name, MaximumRetryAttempts=templates.MONITOR_RETRY_ATTEMPTS)
    print(f"{name}: asynchronous retries {templates.MONITOR_RETRY_ATTEMPTS}")
    return name


def check_bucket(bucket: str | None, command: str) -> str:
    """The ``--bucket`` value, or a usage error naming the make variable.

    Raises:
        DeployError: (status 2) no bucket.
    """
    if not (bucket or "").strip():
        raise DeployError(f"{command} needs an S3 bucket: --bucket NAME "
                          f"(make {command} STAGE=... BUCKET=...)", status=2)
    return str(bucket).strip()


def parameter(text: str) -> str:
    import argparse

    name, sep, _ = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected Name=Value, not {text!r}")
    return text


def add_aws_options(parser: Any, params: bool = True) -> None:
    parser.add_argument("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION "
                                         "or the AWS configuration)")
    parser.add_argument("--account", help="12-digit account id for the IAM policy (default: "
                                          "the credentials', from STS)")
    parser.add_argument("--aws", default="aws", metavar="CLI",
                        help="the AWS CLI to run (default: aws)")
    if params:
        parser.add_argument("--param", dest="params", action="append", default=[],
                            type=parameter, metavar="NAME=VALUE",
                            help="a stack parameter, e.g. UsagePlanRateLimit=20 (repeatable; "
                                 "make PARAMS=\"A=1 B=2\")")


def describe_stack(aws_cli: str, region: str, stack: str) -> list[str]:
    return [aws_cli, "cloudformation", "describe-stacks", "--region", region, "--stack-name",
            stack, "--query", "Stacks[0].Outputs", "--output", "table"]
