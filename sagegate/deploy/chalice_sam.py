"""``chalice package`` (SAM) that can package app.py's ``@app.on_s3_event`` function.

Chalice 1.34 refuses to write an S3 event into a SAM template ("CloudFormation does not support
modifying the event notifications of existing buckets"). sagegate's jobs bucket is made by the
stack itself, so this runs the real ``chalice`` command line with that one step replaced: SAM's
own ``S3`` event on ``{"Ref": "JobsBucket"}`` (event types and key filter as declared), from
which SAM writes the notification and S3's permission to invoke.

Only the stage's ``JOBS_BUCKET`` can be packaged so (Chalice loads app.py with the stage's
variables): any other bucket still fails, saying why. Terraform output is Chalice's own, which
supports S3 events on an existing bucket.

A leading ``--architecture`` packages for that ``lambda_architecture`` instead of the stage's
(Chalice's command line has no such option; it is given to Chalice's config as a value passed on
the command line, which wins over the file's)::

    python -m sagegate.deploy.chalice_sam [--architecture x86_64] package --stage dev \
        build/package-dev
"""
from __future__ import annotations

import os
import sys
from typing import Any

from chalice.cli import main as chalice_main
from chalice.cli.factory import CLIFactory
from chalice.config import Config
from chalice.deploy import models
from chalice.package import SAMTemplateGenerator
from chalice.utils import to_cfn_resource_name

from sagegate.deploy.jobs_template import BUCKET


def s3_event(resource: models.S3BucketNotification) -> dict[str, Any]:
    """The SAM ``S3`` event for a Chalice S3 notification on the stack's jobs bucket.

    Raises:
        NotImplementedError: the notification is on a bucket the stack does not create.
    """
    jobs_bucket = os.environ.get("JOBS_BUCKET", "")
    if resource.bucket != jobs_bucket:
        raise NotImplementedError(
            f"@app.on_s3_event(bucket={resource.bucket!r}): only the stage's JOBS_BUCKET "
            f"({jobs_bucket or 'unset'}) is created by the stack and can carry a "
            "notification; CloudFormation cannot change the notifications of another bucket")
    rules = [{"Name": name, "Value": value}
             for name, value in (("prefix", resource.prefix), ("suffix", resource.suffix))
             if value]
    properties: dict[str, Any] = {"Bucket": {"Ref": BUCKET}, "Events": list(resource.events)}
    if rules:
        properties["Filter"] = {"S3Key": {"Rules": rules}}
    return {"Type": "S3", "Properties": properties}


def _generate_s3bucketnotification(self: SAMTemplateGenerator,
                                   resource: models.S3BucketNotification,
                                   template: dict[str, Any]) -> None:
    function = template["Resources"][to_cfn_resource_name(
        resource.lambda_function.resource_name)]
    name = self._register_cfn_resource_name(resource.resource_name)
    function["Properties"].setdefault("Events", {})[name] = s3_event(resource)


def _with_architecture(architecture: str) -> None:
    create = CLIFactory.create_config_obj

    def create_config_obj(self: CLIFactory, *args: Any, **kwargs: Any) -> Config:
        kwargs["user_provided_params"] = {**(kwargs.get("user_provided_params") or {}),
                                          "lambda_architecture": architecture}
        return create(self, *args, **kwargs)

    CLIFactory.create_config_obj = create_config_obj  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    SAMTemplateGenerator._generate_s3bucketnotification = (  # type: ignore[method-assign]
        _generate_s3bucketnotification)
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--architecture"]:
        _with_architecture(args[1])
        args = args[2:]
    sys.argv = ["chalice", *args]
    return int(chalice_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
