"""``sagegate chalice-deploy``: Path B, ``chalice deploy`` with the published layer (needs AWS).

1. refuses a stage without a layer ARN (``sagegate layer --bucket`` first);
2. renders the stage's IAM policy for the account and region;
3. deploys small stacks Chalice cannot make, so the function never finds them missing: the cache
   table (``CACHE_TABLE``), the token budgets' table (``TOKEN_BUDGET_TABLE``) and the capture
   stream (``capture_stream``);
4. creates ``/aws/lambda/sagegate-<stage>`` with the stage's retention: Chalice 1.34 gives
   ``log_retention_in_days`` to a ``...-api_handler`` group nothing writes to, and without its
   own group the function would need ``logs:CreateLogGroup`` and keep its logs forever; the
   monitor function's too, where its EMF metrics go;
5. ``chalice deploy --stage S`` (``.chalice/deployments`` removed if it fails); the monitor's
   asynchronous retries set to 0 (Chalice cannot: a failed hour would run twice more);
6. with ``"snapstart": true``: a version behind ``live``, the API pointed at it, since ``chalice
   deploy`` wires the API to ``$LATEST``;
7. with ``SAGEGATE_AUTH=api-key``: the usage plan and key as a small stack, for the API id
   Chalice recorded.

A stage with ``JOBS_BUCKET`` or ``MONITOR_ENGINE=stepfunctions`` is refused before anything runs:
only the SAM stack (Path A) makes their resources. The streaming function is Path A's only too,
but a stage with a language model still deploys: its completion routes stay on Chalice's
function, which answers a ``"stream": true`` request whole (:data:`NO_STREAMING` says so).
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
    stream_template,
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

NO_STREAMING = (
    "note: chalice deploy makes no streaming function: on stage {stage}, /v1/chat/completions and "
    "/v1/completions are served by {function} (Chalice's), which answers a \"stream\": true "
    "request whole, as one buffered body of server-sent events. Deploy with sagegate deploy "
    "--stage {stage} (Path A) for answers streamed as they are generated.")


def usage_plan_commands(stage: Stage, api_id: str, region: str, params: Sequence[str] = (),
                        aws_cli: str = "aws", root: Path = ROOT) -> list[list[str]]:
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
    return _table_commands(f"{stage.function_name}-cache",
                           check.cache_stack_path(stage.name, root), region, aws_cli, root)


def budget_commands(stage: Stage, region: str, aws_cli: str = "aws",
                    root: Path = ROOT) -> list[list[str]]:
    return _table_commands(f"{stage.function_name}-budgets",
                           check.budget_stack_path(stage.name, root), region, aws_cli, root)


def _table_commands(stack: str, template: Path, region: str, aws_cli: str,
                    root: Path) -> list[list[str]]:
    return [
        [aws_cli, "cloudformation", "deploy", "--region", region, "--stack-name", stack,
         "--template-file", str(template.relative_to(root)), "--no-fail-on-empty-changeset"],
        aws.describe_stack(aws_cli, region, stack),
    ]


def capture_stack_path(stage: str, root: Path = ROOT) -> Path:
    return build_dir(root) / f"capture-{stage}.json"


def capture_commands(stage: Stage, region: str, aws_cli: str = "aws",
                     root: Path = ROOT) -> list[list[str]]:
    """Deploy the capture-stream stack before ``chalice deploy`` (the first capture finds its
    stream). It holds an IAM role: ``CAPABILITY_IAM``."""
    stack = f"{stage.function_name}-capture"
    return [
        [aws_cli, "cloudformation", "deploy", "--region", region, "--stack-name", stack,
         "--template-file", str(capture_stack_path(stage.name, root).relative_to(root)),
         "--capabilities", "CAPABILITY_IAM", "--no-fail-on-empty-changeset"],
        aws.describe_stack(aws_cli, region, stack),
    ]


def stack_commands(stage: Stage, region: str, aws_cli: str = "aws",
                   root: Path = ROOT) -> list[list[str]]:
    commands = cache_commands(stage, region, aws_cli, root) if stage.cache_table else []
    if stage.budget_table:
        commands += budget_commands(stage, region, aws_cli, root)
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
    if stream_template.enabled(stage):
        print(NO_STREAMING.format(stage=stage.name, function=stage.function_name))
    policy.render_for_session(stage, session, account, root)
    check.write_stacks(stage, root)  # build/cache-, budgets-, usage-plan-<stage>.json
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
    parser = argparse.ArgumentParser(
        prog=prog, description="Deploy a stage with chalice deploy (Path B, needs AWS): the "
        "layer is the ARN sagegate layer recorded; renders the IAM policy, deploys the cache "
        "table stack (stages with CACHE_TABLE), the token budgets' table stack (with "
        "TOKEN_BUDGET_TABLE) and the capture stream stack (stages with capture_stream); "
        "no streaming function (Path A only: a stream: true request is answered whole); "
        "creates the log groups with their retention, runs chalice deploy, enables SnapStart "
        "and deploys the usage plan stack (api-key stages).")
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
