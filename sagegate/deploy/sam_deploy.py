"""``sagegate deploy``: Path A, one CloudFormation stack from the SAM package (needs AWS).

1. the stage's IAM policy is rendered for the account and region (:mod:`sagegate.deploy.policy`);
2. the stage is packaged as SAM (:mod:`sagegate.deploy.package`);
3. ``aws cloudformation package`` uploads ``deployment.zip`` and ``layer.zip`` to
   ``s3://BUCKET/sagegate/<stage>/`` and rewrites their paths (``packaged.json``);
4. ``aws cloudformation deploy`` creates or updates the stack ``sagegate-<stage>``
   (``--param`` values become ``--parameter-overrides``);
5. the stack's outputs are printed (``EndpointURL``, ``ApiKeyId``, ``UsagePlanId``).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sagegate.deploy import aws, package, policy
from sagegate.deploy.shell import Runner, add_stage_option, guarded, run, stage_for
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import ROOT


def stack_name(stage: Stage) -> str:
    return stage.function_name


def cloudformation_commands(stage: Stage, directory: Path, bucket: str, region: str,
                            params: Sequence[str] = (), aws_cli: str = "aws",
                            root: Path = ROOT) -> list[list[str]]:
    folder = directory.relative_to(root)
    overrides = ["--parameter-overrides", *params] if params else []
    return [
        [aws_cli, "cloudformation", "package", "--region", region,
         "--template-file", str(folder / "sam.json"), "--s3-bucket", bucket,
         "--s3-prefix", f"sagegate/{stage.name}", "--use-json",
         "--output-template-file", str(folder / "packaged.json")],
        [aws_cli, "cloudformation", "deploy", "--region", region,
         "--template-file", str(folder / "packaged.json"), "--stack-name", stack_name(stage),
         "--capabilities", "CAPABILITY_IAM", "--no-fail-on-empty-changeset", *overrides],
        aws.describe_stack(aws_cli, region, stack_name(stage)),
    ]


def deploy(stage: Stage, bucket: str, session: Any, account: str | None = None,
           params: Sequence[str] = (), aws_cli: str = "aws", root: Path = ROOT,
           runner: Runner = run) -> None:
    policy.render_for_session(stage, session, account, root)
    directory = package.package_sam(stage, root, runner)
    for command in cloudformation_commands(stage, directory, bucket, session.region_name,
                                           params, aws_cli, root):
        runner(command, cwd=root)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Deploy a stage as one CloudFormation stack, sagegate-<stage> "
        "(Path A, needs AWS): render the IAM policy, package (SAM), aws cloudformation "
        "package through the bucket, aws cloudformation deploy, print the outputs.")
    add_stage_option(parser, default="prod")
    parser.add_argument("--bucket", required=True, help="S3 bucket for the artifacts")
    aws.add_aws_options(parser)
    args = parser.parse_args(argv)

    def body() -> None:
        stage = stage_for(args.stage)
        bucket = aws.check_bucket(args.bucket, "deploy")
        deploy(stage, bucket, aws.session(args.region), args.account, args.params, args.aws)

    return guarded(body)
