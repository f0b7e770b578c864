"""Render a stage's least-privilege IAM policy (``.chalice/policy-<stage>.json``).

Chalice's ``autogen_policy`` is off: it would grant ``sagemaker:InvokeEndpoint`` on ``*``.
Instead the role gets exactly what the function does, each action on its own resource:

* ``sagemaker:InvokeEndpoint`` on the stage's endpoint (``ENDPOINT_NAME``) only;
* ``logs:CreateLogStream`` / ``logs:PutLogEvents`` in the function's own log group only
  (the group itself is created by the deployment, with its retention, not by the function);
* with data capture on (``CAPTURE_MODE`` not ``off``): ``s3:PutObject`` under the
  ``CAPTURE_DESTINATION`` bucket/prefix, or ``firehose:PutRecordBatch`` on its delivery stream;
* with X-Ray on (the stage's ``xray``): ``xray:PutTraceSegments`` and
  ``xray:PutTelemetryRecords``, which AWS only grants on ``"*"`` (X-Ray has no resource-level
  permissions), so X-Ray is opt-in and the prod test refuses it until someone decides to.

ARNs hold the account and region, so the committed files are rendered for the documentation
account ``123456789012`` / ``us-east-1``; ``make policy`` (and the deploy targets) render them
for the real account::

    python -m scripts.iam_policy --stage prod --account 111122223333 --region eu-west-1
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from scripts.stage_config import DEPLOYED_STAGES, ROOT, Stage, load_stage

EXAMPLE_ACCOUNT = "123456789012"
EXAMPLE_REGION = "us-east-1"
_ACCOUNT_RE = re.compile(r"^[0-9]{12}\Z")
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]\Z")


def policy_path(stage: str) -> Path:
    """Where Chalice looks for the stage's policy (``iam_policy_file`` in the config)."""
    return ROOT / ".chalice" / f"policy-{stage}.json"


def partition_of(region: str) -> str:
    """The ARN partition of a region (``aws``, ``aws-cn``, ``aws-us-gov``)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def render(stage: Stage, account: str, region: str) -> dict[str, Any]:
    """The IAM policy document for ``stage`` in ``account`` / ``region``.

    Raises:
        ValueError: a malformed account id or region.
    """
    if not _ACCOUNT_RE.match(account):
        raise ValueError(f"account must be 12 digits, not {account!r}")
    if not _REGION_RE.match(region):
        raise ValueError(f"not an AWS region: {region!r}")
    arn = f"arn:{partition_of(region)}"
    # SageMaker lower-cases resource names in its ARNs; IAM compares ARNs case-sensitively.
    endpoint = stage.endpoint_name.lower()
    statements = [
        _allow("InvokeOwnEndpoint", ["sagemaker:InvokeEndpoint"],
               f"{arn}:sagemaker:{region}:{account}:endpoint/{endpoint}"),
        _allow("WriteOwnLogs", ["logs:CreateLogStream", "logs:PutLogEvents"],
               f"{arn}:logs:{region}:{account}:log-group:/aws/lambda/{stage.function_name}:*"),
    ]
    capture = _capture_statement(stage.env, arn, account, region)
    if capture is not None:
        statements.append(capture)
    if stage.xray:
        statements.append(_allow("WriteTraces",
                                 ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "*"))
    return {"Version": "2012-10-17", "Statement": statements}


def _allow(sid: str, actions: list[str], resource: str) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resource}


def _capture_statement(env: dict[str, str], arn: str, account: str,
                       region: str) -> dict[str, Any] | None:
    if env.get("CAPTURE_MODE", "off") in ("", "off"):
        return None
    destination = env.get("CAPTURE_DESTINATION", "")
    if destination.startswith("s3://"):
        bucket, _, prefix = destination[len("s3://"):].partition("/")
        prefix = prefix.strip("/")
        objects = f"{bucket}/{prefix}/*" if prefix else f"{bucket}/*"
        return _allow("WriteCaptures", ["s3:PutObject"], f"{arn}:s3:::{objects}")
    if destination.startswith("firehose://"):
        stream = destination[len("firehose://"):]
        return _allow("WriteCaptures", ["firehose:PutRecordBatch"],
                      f"{arn}:firehose:{region}:{account}:deliverystream/{stream}")
    return None  # a local directory: nothing to grant (only meaningful off Lambda)


def write(stage: str, account: str, region: str) -> Path:
    """Render the stage's policy into ``.chalice/policy-<stage>.json``; return the path."""
    document = render(load_stage(stage), account, region)
    path = policy_path(stage)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: render one stage's policy file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", required=True, choices=DEPLOYED_STAGES)
    parser.add_argument("--account", default=EXAMPLE_ACCOUNT)
    parser.add_argument("--region", default=EXAMPLE_REGION)
    args = parser.parse_args(argv)
    try:
        path = write(args.stage, args.account.strip(), args.region.strip())
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {path.relative_to(ROOT)} for account {args.account}, region {args.region}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
