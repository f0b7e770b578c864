"""``sagegate chalice-deploy``: Path B, ``chalice deploy`` with the published layer (needs AWS).

1. refuses a stage without a layer ARN (publish it first: ``sagegate layer --bucket``);
2. renders the stage's IAM policy for the account and region;
3. with ``CACHE_TABLE``: the cache table as a small stack, ``sagegate-<stage>-cache``
   (``build/cache-<stage>.json``, :func:`~sagegate.deploy.templates.cache_template`), since
   Chalice creates no DynamoDB table and the function should not find it missing;
   with ``capture_stream``: the capture stream, its role and log group as a small stack,
   ``sagegate-<stage>-capture`` (``build/capture-<stage>.json``,
   :func:`~sagegate.deploy.capture_template.capture_template`), so the first capture finds it;
4. creates the function's log group ``/aws/lambda/sagegate-<stage>`` with the stage's
   retention: Chalice 1.34 gives ``log_retention_in_days`` to a group named after
   ``...-api_handler``, which nothing writes to, and without its own group the function would
   need ``logs:CreateLogGroup`` and keep its logs forever; on a monitored stage
   (``MONITOR_BASELINE``) the monitor function's ``/aws/lambda/sagegate-<stage>-monitor``
   too, where its metrics (Embedded Metric Format lines) are written;
5. ``chalice deploy --stage S`` (``.chalice/deployments`` is removed if it fails); on a
   monitored stage, the monitor's asynchronous retries set to 0 (Chalice cannot set them;
   a failed or timed-out hour would otherwise run twice more);
6. with ``"snapstart": true``: a version behind the ``live`` alias, the API pointed at it
   (:mod:`sagegate.deploy.snapstart`), since ``chalice deploy`` wires the API to ``$LATEST``;
7. with ``SAGEGATE_AUTH=api-key``: the usage plan and key as a small stack,
   ``sagegate-<stage>-usage-plan``, for the API id Chalice recorded.

A stage that serves jobs (``JOBS_BUCKET``) is refused before anything runs: its bucket,
table, topics and dead-letter queue are made by the SAM stack (Path A), not by Chalice; so is
a stage whose monitor is a Step Functions state machine (``MONITOR_ENGINE=stepfunctions``:
:mod:`sagegate.deploy.monitor_template`).
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chalicelib.core.access import AuthMode
from sagegate.deploy import (
    aws,
    capture_template,
    check,
    jobs,
    monitor_template,
    package,
    policy,
    snapstart,
)
from sagegate.deploy.shell import (
    DeployError,
    Runner,
    add_stage_option,
    build_dir,
    guarded,
    remove_bytecode,
    run,
    stage_for,
    tool,
)
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import ROOT, rest_api_id


def usage_plan_commands(stage: Stage, api_id: str, region: str, params: Sequence[str] = (),
                        aws_cli: str = "aws", root: Path = ROOT) -> list[list[str]]:
    """Deploy the usage-plan stack for a chalice-deployed API, then print its outputs."""
    stack = f"{stage.function_name}-usage-plan"
    return [
        [aws_cli, "cloudformation", "deploy", "--region", region, "--stack-name", stack,
         "--template-file", str(check.usage_plan_path(stage.name, root).relative_to(root)),
         "--no-fail-on-empty-changeset", "--parameter-overrides", f"RestApiId={api_id}",
         *params],
        aws.describe_stack(aws_cli, region, stack),
    ]


def cache_commands(stage: Stage, region: str, aws_cli: str = "aws",
                   root: Path = ROOT) -> list[list[str]]:
    """Deploy the cache-table stack (before ``chalice deploy``), then print its outputs."""
    stack = f"{stage.function_name}-cache"
    return [
        [aws_cli, "cloudformation", "deploy", "--region", region, "--stack-name", stack,
         "--template-file", str(check.cache_stack_path(stage.name, root).relative_to(root)),
         "--no-fail-on-empty-changeset"],
        aws.describe_stack(aws_cli, region, stack),
    ]


def capture_stack_path(stage: str, root: Path = ROOT) -> Path:
    """``build/capture-<stage>.json``: the capture stream's stand-alone stack."""
    return build_dir(root) / f"capture-{stage}.json"


def capture_commands(stage: Stage, region: str, aws_cli: str = "aws",
                     root: Path = ROOT) -> list[list[str]]:
    """Deploy the capture-stream stack (before ``chalice deploy``: the first capture finds
    its stream), then print its outputs. The stack holds an IAM role: ``CAPABILITY_IAM``."""
    stack = f"{stage.function_name}-capture"
    return [
        [aws_cli, "cloudformation", "deploy", "--region", region, "--stack-name", stack,
         "--template-file", str(capture_stack_path(stage.name, root).relative_to(root)),
         "--capabilities", "CAPABILITY_IAM", "--no-fail-on-empty-changeset"],
        aws.describe_stack(aws_cli, region, stack),
    ]


def stack_commands(stage: Stage, region: str, aws_cli: str = "aws",
                   root: Path = ROOT) -> list[list[str]]:
    """The stand-alone stacks deployed before ``chalice deploy``: the cache table's and the
    capture stream's, for a stage that has them (the capture stack's file is written here)."""
    commands = cache_commands(stage, region, aws_cli, root) if stage.cache_table else []
    if capture_template.enabled(stage):
        path = capture_stack_path(stage.name, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(capture_template.capture_template(stage), indent=2) + "\n",
                        encoding="utf-8")
        commands += capture_commands(stage, region, aws_cli, root)
    return commands


def chalice_deploy(stage: Stage, session: Any, account: str | None = None,
                   params: Sequence[str] = (), aws_cli: str = "aws", root: Path = ROOT,
                   runner: Runner = run) -> None:
    """Deploy ``stage`` with ``chalice deploy`` and what Chalice leaves out.

    Raises:
        DeployError: (status 2) the stage serves jobs or has no layer; (1) a step failed.
    """
    if jobs.enabled(stage):
        raise DeployError(f"stages.{stage.name} serves jobs (JOBS_BUCKET): deploy it with "
                          f"sagegate deploy --stage {stage.name} (Path A), whose stack creates "
                          "the jobs bucket with its notification, the table, the topics and "
                          "the job functions' dead-letter queue; chalice deploy creates none "
                          "of them", status=2)
    if monitor_template.enabled(stage):
        raise DeployError(f"stages.{stage.name} runs its monitor as a Step Functions state "
                          f"machine (MONITOR_ENGINE=stepfunctions): deploy it with sagegate "
                          f"deploy --stage {stage.name} (Path A), whose stack creates the "
                          "state machine, its schedule and their roles; chalice deploy "
                          "creates none of them", status=2)
    if not stage.layers:
        raise DeployError(f"stages.{stage.name}.layers is empty: run sagegate layer --stage "
                          f"{stage.name} --bucket ... (make layer STAGE={stage.name} "
                          "BUCKET=...) first", status=2)
    policy.render_for_session(stage, session, account, root)
    check.write_stacks(stage, root)  # build/cache-<stage>.json, build/usage-plan-<stage>.json
    for command in stack_commands(stage, session.region_name, aws_cli, root):
        runner(command, cwd=root)
    aws.ensure_log_groups(session.client("logs"), stage)
    remove_bytecode(root)
    package.run_chalice([tool("chalice"), "deploy", "--stage", stage.name], project=root,
                        runner=runner, cwd=root, region=session.region_name)
    if stage.monitor is not None:
        aws.disable_monitor_retries(session.client("lambda"), stage)
    if stage.snapstart:
        print(snapstart.switch("enable", stage, session))
    if stage.auth == AuthMode.API_KEY:
        for command in usage_plan_commands(stage, rest_api_id(stage.name, root),
                                           session.region_name, params, aws_cli, root):
            runner(command, cwd=root)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``sagegate chalice-deploy``: ``chalice deploy`` of one stage and what it leaves out."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Deploy a stage with chalice deploy (Path B, needs AWS): the "
        "layer is the ARN sagegate layer recorded; renders the IAM policy, deploys the cache "
        "table stack (stages with CACHE_TABLE) and the capture stream stack (stages with "
        "capture_stream), creates the log groups with their retention, "
        "runs chalice deploy, enables SnapStart and deploys the usage plan stack (api-key "
        "stages).")
    add_stage_option(parser, default="prod")
    aws.add_aws_options(parser)
    args = parser.parse_args(argv)

    def body() -> None:
        stage = stage_for(args.stage)
        try:
            chalice_deploy(stage, aws.session(args.region), args.account, args.params,
                           args.aws)
        except ValueError as error:  # e.g. no REST API recorded by chalice deploy
            raise DeployError(str(error)) from None

    return guarded(body)
