"""SnapStart for a stage deployed with ``chalice deploy``, which knows no versions or aliases.

SnapStart only serves published versions, never ``$LATEST``, and Chalice 1.34 wires API Gateway
to the unqualified function. After ``chalice deploy``, :func:`enable` turns SnapStart on for
published versions, publishes a version and waits for its snapshot, points the ``live`` alias at
it, lets API Gateway invoke the alias, points every proxy integration at it and redeploys the API
stage.

Each ``chalice deploy`` resets the integrations to ``$LATEST`` (it re-imports the Swagger
document), so ``sagegate chalice-deploy`` runs this after every deploy. :func:`disable` undoes
it. The SAM path does the same in the template
(:func:`sagegate.deploy.templates.apply_snapstart`)::

    sagegate snapstart enable --stage prod --region eu-west-1
    sagegate snapstart disable --stage prod --region eu-west-1
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from typing import Any

from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import DEPLOY_STAGES, deploy_stage, rest_api_id

ALIAS = "live"
STATEMENT_ID = f"sagegate-apigateway-{ALIAS}"
_INTEGRATION_URI = ("arn:{partition}:apigateway:{region}:lambda:path/2015-03-31/functions/"
                    "{arn}/invocations")


@dataclasses.dataclass(frozen=True)
class Target:
    """The deployed function and REST API of one stage."""

    function_name: str
    rest_api_id: str
    api_stage: str
    region: str
    account: str
    partition: str = "aws"

    @property
    def function_arn(self) -> str:
        return (f"arn:{self.partition}:lambda:{self.region}:{self.account}:function:"
                f"{self.function_name}")

    @property
    def alias_arn(self) -> str:
        return f"{self.function_arn}:{ALIAS}"

    def integration_uri(self, arn: str) -> str:
        return _INTEGRATION_URI.format(partition=self.partition, region=self.region, arn=arn)


def enable(lambda_client: Any, apigateway: Any, target: Target) -> str:
    """Publish a SnapStart version of the deployed code behind ``live``; returns the version."""
    lambda_client.update_function_configuration(
        FunctionName=target.function_name, SnapStart={"ApplyOn": "PublishedVersions"})
    lambda_client.get_waiter("function_updated_v2").wait(FunctionName=target.function_name)
    version = str(lambda_client.publish_version(
        FunctionName=target.function_name,
        Description="sagegate: published by sagegate chalice-deploy (SnapStart)")["Version"])
    # the snapshot is taken while the version is Pending; it serves once Active
    lambda_client.get_waiter("published_version_active").wait(
        FunctionName=target.function_name, Qualifier=version)
    _point_alias(lambda_client, target.function_name, version)
    _allow_api_gateway(lambda_client, target)
    _point_integrations(apigateway, target, target.function_arn, target.alias_arn)
    return version


def disable(lambda_client: Any, apigateway: Any, target: Target) -> None:
    """Serve ``$LATEST`` again, without SnapStart (the alias is left, unused)."""
    lambda_client.update_function_configuration(
        FunctionName=target.function_name, SnapStart={"ApplyOn": "None"})
    lambda_client.get_waiter("function_updated_v2").wait(FunctionName=target.function_name)
    _point_integrations(apigateway, target, target.alias_arn, target.function_arn)


def _point_alias(lambda_client: Any, function_name: str, version: str) -> None:
    try:
        lambda_client.update_alias(FunctionName=function_name, Name=ALIAS,
                                   FunctionVersion=version)
    except lambda_client.exceptions.ResourceNotFoundException:
        lambda_client.create_alias(FunctionName=function_name, Name=ALIAS,
                                   FunctionVersion=version,
                                   Description="What API Gateway invokes (SnapStart)")


def _allow_api_gateway(lambda_client: Any, target: Target) -> None:
    # ResourceConflictException: granted by an earlier run
    with contextlib.suppress(lambda_client.exceptions.ResourceConflictException):
        lambda_client.add_permission(
            FunctionName=target.function_name, Qualifier=ALIAS, StatementId=STATEMENT_ID,
            Action="lambda:InvokeFunction", Principal="apigateway.amazonaws.com",
            SourceArn=(f"arn:{target.partition}:execute-api:{target.region}:{target.account}:"
                       f"{target.rest_api_id}/*"))


def _point_integrations(apigateway: Any, target: Target, old_arn: str, new_arn: str) -> int:
    old_uri, new_uri = target.integration_uri(old_arn), target.integration_uri(new_arn)
    changed = 0
    pages = apigateway.get_paginator("get_resources").paginate(
        restApiId=target.rest_api_id, embed=["methods"])
    for page in pages:
        for resource in page["items"]:
            for verb, method in resource.get("resourceMethods", {}).items():
                integration = method.get("methodIntegration", {})
                if integration.get("type") == "AWS_PROXY" and integration.get("uri") == old_uri:
                    apigateway.update_integration(
                        restApiId=target.rest_api_id, resourceId=resource["id"], httpMethod=verb,
                        patchOperations=[{"op": "replace", "path": "/uri", "value": new_uri}])
                    changed += 1
    if changed:
        apigateway.create_deployment(restApiId=target.rest_api_id, stageName=target.api_stage,
                                     description=f"sagegate: integrations -> {new_arn}")
    return changed


def target_for(stage: Stage, session: Any) -> Target:
    """The function and API ``chalice deploy`` created for ``stage``.

    Raises:
        ValueError: the stage has not been deployed with ``chalice deploy``.
    """
    identity = session.client("sts").get_caller_identity()
    return Target(function_name=stage.function_name, rest_api_id=rest_api_id(stage.name),
                  api_stage=stage.api_gateway_stage, region=session.region_name,
                  account=identity["Account"], partition=identity["Arn"].split(":")[1])


def switch(action: str, stage: Stage, session: Any) -> str:
    target = target_for(stage, session)
    lambda_client, apigateway = session.client("lambda"), session.client("apigateway")
    if action == "enable":
        version = enable(lambda_client, apigateway, target)
        return (f"{target.function_name}: version {version} (SnapStart) behind alias "
                f"{ALIAS!r}; API {target.rest_api_id} invokes {target.alias_arn}")
    disable(lambda_client, apigateway, target)
    return f"{target.function_name}: SnapStart off; API {target.rest_api_id} invokes $LATEST"


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="SnapStart for a stage deployed with chalice deploy (Path B): "
        "enable publishes a version behind the 'live' alias and points the API at it "
        "(sagegate chalice-deploy does this itself); disable points the API back at $LATEST. "
        "Needs AWS.")
    parser.add_argument("action", choices=("enable", "disable"))
    parser.add_argument("--stage", required=True, choices=DEPLOY_STAGES)
    parser.add_argument("--region", required=True)
    args = parser.parse_args(argv)
    from chalicelib import awsclients
    from chalicelib.core.aws import DEPLOY

    try:
        print(switch(args.action, deploy_stage(args.stage),
                     awsclients.Clients(DEPLOY, region=args.region)))
    except ValueError as error:
        parser.exit(1, f"error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
