"""CloudFormation that Chalice does not generate: the layer, usage plan, cache table, fixes.

``chalice package --merge-template`` deep-merges a template into its SAM template;
:func:`merge_template` builds it for one stage:

* ``DependenciesLayer``: the layer zip beside the template as the function's only layer (``aws
  cloudformation package`` uploads it), replacing any ARN in the stage's ``layers`` (the
  ``chalice deploy`` path's).
* The function gets its Chalice name (``sagegate-<stage>``), so its log group and the policy's
  log ARN are known in advance; ``ApiHandlerLogGroup`` gets it too (Chalice 1.34 writes
  ``${ApiHandler}``, a resource that does not exist: the handler is ``APIHandler``), and the
  function waits for its log group.
* A stage-wide throttle on every method, whatever the authentication mode.
* API Gateway's own errors (413 over 10 MB, throttling, quota, bad key) in sagegate's error shape
  (:mod:`sagegate.deploy.gateway_responses`).
* With ``SAGEGATE_AUTH=api-key``: a usage plan (rate, burst, monthly quota), one API key and its
  membership. Chalice marks the routes ``api_key_required`` but creates none of these, and
  without them every request is refused.
* With ``CACHE_TABLE``: ``PredictionCache`` (:func:`cache_table`); the function waits for it, so
  no request finds the table missing.
* With ``TOKEN_BUDGET_TABLE``: ``TokenBudgets`` (:func:`budget_table`), which both functions wait
  for.
* With a language model registered: the streaming function that serves OpenAI's completion
  routes in ``STREAM`` mode (:mod:`sagegate.deploy.stream_template`).
* With ``MONITOR_BASELINE``: the same fixes for the ``monitor`` function
  (``sagegate-<stage>-monitor``), no retry of a failed scheduled invocation
  (``MaximumRetryAttempts: 0``, which Chalice cannot set: Lambda would run a timed-out hour twice
  more), its accepted findings. With ``MONITOR_ENGINE=stepfunctions`` instead: the state machine,
  its schedule, roles and functions (:mod:`sagegate.deploy.monitor_template`).
* With ``capture_stream``: the Firehose capture stream (:mod:`sagegate.deploy.capture_template`);
  the function waits for it.
* With ``JOBS_BUCKET``: the jobs bucket, table, topics, dead-letter queue and functions' fixes
  (:mod:`sagegate.deploy.jobs_template`).
* ``Metadata.checkov.skip``: the accepted scanner findings, each with its reason.

:func:`apply_snapstart` edits the packaged template of a ``"snapstart": true`` stage (Chalice
cannot express it): SAM publishes a version on every change (``AutoPublishAlias: live``,
``AutoPublishAliasAllProperties``) with ``SnapStart: {ApplyOn: PublishedVersions}``, and every
integration of ``APIHandler`` and its invoke permission point at ``live`` instead of ``$LATEST``,
which SnapStart never serves (the streaming function's two keep invoking it unqualified: it has
no SnapStart).

:func:`usage_plan_template`, :func:`cache_template` and :func:`budget_template` are the same usage
plan and tables as stand-alone stacks for a ``chalice deploy`` stage (the API id from
``.chalice/deployed/<stage>.json``), written by ``sagegate package`` and ``sagegate check`` to
``build/usage-plan-<stage>.json``, ``build/cache-<stage>.json`` and ``build/budgets-<stage>.json``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chalicelib.core.access import AuthMode
from sagegate.deploy import (
    capture_template,
    jobs,
    jobs_template,
    monitor_template,
    stream_template,
)
from sagegate.deploy.gateway_responses import gateway_responses
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import ROOT

LAYER_ZIP = "./layer.zip"
API = "RestAPI"  # Chalice's logical id for the REST API
FUNCTION = "APIHandler"  # ... for its Lambda function
LOG_GROUP = "ApiHandlerLogGroup"  # ... for the function's log group (log_retention_in_days)
PERMISSION = "APIHandlerInvokePermission"  # ... for API Gateway's permission to invoke it
CACHE = "PredictionCache"  # sagegate's logical id for the cache's DynamoDB table
BUDGETS = "TokenBudgets"  # ... for the token budgets' DynamoDB table
LAYER = "DependenciesLayer"  # ... for the layer
MONITOR = "Monitor"  # Chalice's logical id for app.py's scheduled monitor (name "monitor")
MONITOR_LOG_GROUP = "MonitorLogGroup"  # ... for its log group
MONITOR_RETRY_ATTEMPTS = 0  # Lambda's asynchronous retries of a failed scheduled run
CACHE_KEY = "key"  # the table's partition key (S): the function's cache key
CACHE_TTL_ATTRIBUTE = "expires_at"  # the item's expiry (N, epoch seconds): DynamoDB's TTL
ALIAS = "live"  # the alias API Gateway invokes when SnapStart is on
_UNQUALIFIED = "${" + FUNCTION + ".Arn}"
# SAM resolves ``Ref: APIHandler.Alias`` but not ``${APIHandler.Alias}`` inside a Swagger
# body's Fn::Sub; there the alias is named by the logical id SAM gives it (function id +
# "Alias" + alias name), whose Ref is the alias ARN.
_ALIASED = "${" + FUNCTION + "Alias" + ALIAS + "}"

_USAGE_PLAN_PARAMETERS: dict[str, dict[str, Any]] = {
    "UsagePlanRateLimit": {"Type": "Number", "Default": 10, "MinValue": 1,
                           "Description": "Steady requests per second allowed per API key"},
    "UsagePlanBurstLimit": {"Type": "Number", "Default": 20, "MinValue": 1,
                            "Description": "Burst of requests allowed per API key"},
    "UsagePlanQuotaLimit": {"Type": "Number", "Default": 100000, "MinValue": 1,
                            "Description": "Requests allowed per API key per quota period"},
    "UsagePlanQuotaPeriod": {"Type": "String", "Default": "MONTH",
                             "AllowedValues": ["DAY", "WEEK", "MONTH"],
                             "Description": "The quota's period"},
}
_STAGE_PARAMETERS: dict[str, dict[str, Any]] = {
    "StageRateLimit": {"Type": "Number", "Default": 50, "MinValue": 1,
                       "Description": "Steady requests per second for the whole stage"},
    "StageBurstLimit": {"Type": "Number", "Default": 100, "MinValue": 1,
                        "Description": "Burst of requests for the whole stage"},
}

# Accepted scanner findings, each with the reason it is accepted (see docs/DEPLOY.md).
_FUNCTION_SKIPS = [
    ("CKV_AWS_116", "Synchronous API Gateway invocations: a failed request is answered to the "
                    "client, there is no asynchronous event to dead-letter."),
    ("CKV_AWS_117", "Calls only public AWS APIs (SageMaker runtime, CloudWatch Logs, S3/"
                    "Firehose for capture); a VPC adds NAT cost and cold-start latency and no "
                    "isolation. Set subnet_ids/security_group_ids in the stage to run in one."),
    ("CKV_AWS_173", "Environment variables hold settings only (endpoint name, sizes, "
                    "timeouts), no secrets; they are encrypted at rest with the AWS managed "
                    "key by default."),
]
_API_SKIPS = [
    ("CKV_AWS_120", "Responses are per-image predictions: caching by path would serve one "
                    "client's answer to another."),
]
_CACHE_SKIPS = [
    ("CKV_AWS_28", "A cache, not a record: every item is an endpoint answer that the next miss "
                   "recomputes, and expires within CACHE_TTL_SECONDS; point-in-time recovery "
                   "would bill for backups of data nobody restores."),
    ("CKV_AWS_119", "Encrypted at rest with the AWS managed key (SSEEnabled, alias/aws/dynamodb)."
                    " Items hold predictions, answers the API gives any caller of the same "
                    "image, keyed by a hash; a customer managed key adds a key, its policy and "
                    "a monthly fee to own and protects nothing more. Set KMSMasterKeyId for a "
                    "stricter policy."),
]
_BUDGET_SKIPS = [
    ("CKV_AWS_28", "Counters of the current minute and day per API key, each expiring (TTL) after "
                   "its window: a restore would bring back spent windows nobody needs; losing "
                   "the table costs at most a day's counts, never an answer."),
    ("CKV_AWS_119", "Encrypted at rest with the AWS managed key (SSEEnabled, alias/aws/dynamodb)."
                    " Items hold API key ids and token counts, no request or answer; a customer "
                    "managed key adds a key, its policy and a monthly fee to own and protects "
                    "nothing more. Set KMSMasterKeyId for a stricter policy."),
]
_MONITOR_SKIPS = [
    ("CKV_AWS_116", "A scheduled run that fails is retried by Lambda and logged; the next "
                    "hour's run checks the next window, and any hour can be checked again "
                    "with sagegate monitor check: a dead-letter queue would hold only the "
                    "schedule's empty event."),
    ("CKV_AWS_117", "Calls only S3 (captures, baselines, reports) and CloudWatch Logs; a VPC "
                    "adds NAT cost and no isolation. Set subnet_ids/security_group_ids in the "
                    "stage to run in one."),
    ("CKV_AWS_173", "Environment variables hold settings only (S3 prefixes, the schedule), no "
                    "secrets; encrypted at rest with the AWS managed key by default."),
]
_LOG_GROUP_SKIPS = [
    ("CKV_AWS_158", "Logs hold request metadata, never images or keys; CloudWatch Logs "
                    "encrypts at rest by default. Add a KMS key for a stricter policy."),
]


def merge_template(stage: Stage, layer_zip: str = LAYER_ZIP,
                   root: Path = ROOT) -> dict[str, Any]:
    """The template to merge into Chalice's SAM template for ``stage``.

    Raises:
        ValueError: the stage streams (a language model registered) but its streaming settings
            are invalid or its role's policy file (under ``root``) is missing.
    """
    resources: dict[str, Any] = {
        LAYER: _layer(stage, layer_zip),
        FUNCTION: {
            "DependsOn": [LOG_GROUP],
            "Properties": {"FunctionName": stage.function_name,
                           "Layers": [{"Ref": LAYER}]},
            "Metadata": _skips(_FUNCTION_SKIPS),
        },
        LOG_GROUP: {
            "Properties": {"LogGroupName": f"/aws/lambda/{stage.function_name}"},
            "Metadata": _skips(_LOG_GROUP_SKIPS),
        },
        API: {
            "Properties": {
                "TracingEnabled": stage.xray,
                "MethodSettings": [{"ResourcePath": "/*", "HttpMethod": "*",
                                    "ThrottlingRateLimit": {"Ref": "StageRateLimit"},
                                    "ThrottlingBurstLimit": {"Ref": "StageBurstLimit"}}],
                "DefinitionBody": {"x-amazon-apigateway-gateway-responses": gateway_responses(
                    stage.env.get("CORS_ALLOW_ORIGIN", ""))},
            },
            "Metadata": _skips(_api_skips(stage)),
        },
    }
    parameters = dict(_STAGE_PARAMETERS)
    outputs: dict[str, Any] = {"DependenciesLayerArn": {"Value": {"Ref": LAYER}}}
    if monitor_template.enabled(stage):
        resources.update(monitor_template.monitor_resources(stage))
        outputs.update(monitor_template.monitor_outputs(stage))
    elif stage.monitor is not None:
        resources.update(_monitor(stage))
    functions = [FUNCTION]  # what each function of the API waits for
    if stream_template.enabled(stage):
        _add_streaming(stage, resources, root)
        outputs.update(stream_template.outputs())
        functions.append(stream_template.FUNCTION)
    if stage.cache_table:
        resources[CACHE] = cache_table(stage)
        _wait_for(resources, functions, CACHE)
        outputs.update(_cache_outputs())
    if stage.budget_table:
        resources[BUDGETS] = budget_table(stage)
        _wait_for(resources, functions, BUDGETS)
        outputs.update(_budget_outputs())
    if capture_template.enabled(stage):
        resources.update(capture_template.capture_resources(stage))
        _wait_for(resources, functions, capture_template.STREAM)
        outputs.update(capture_template.capture_outputs(stage))
    if jobs.enabled(stage):
        resources.update(jobs_template.jobs_resources(stage))
        resources[FUNCTION]["DependsOn"].append(jobs_template.TABLE)
        outputs.update(jobs_template.jobs_outputs(stage))
    if stage.auth == AuthMode.API_KEY:
        resources.update(_usage_plan(stage, {"Ref": API}, {"Ref": f"{API}.Stage"}))
        parameters.update(_USAGE_PLAN_PARAMETERS)
        outputs.update(_usage_plan_outputs())
    return {"Parameters": parameters, "Resources": resources, "Outputs": outputs}


def _add_streaming(stage: Stage, resources: dict[str, Any], root: Path) -> None:
    """The streaming function's resources, with the API function's accepted findings (the
    same code and calls), and its two methods' integrations merged into the API's."""
    added = stream_template.stream_resources(
        stage, LAYER, resources[LAYER]["Properties"]["CompatibleArchitectures"], root)
    added[stream_template.FUNCTION]["Metadata"] = _skips(_FUNCTION_SKIPS)
    added[stream_template.LOG_GROUP]["Metadata"] = _skips(_LOG_GROUP_SKIPS)
    resources.update(added)
    resources[API]["Properties"]["DefinitionBody"]["paths"] = \
        stream_template.integrations(stage)


def _wait_for(resources: dict[str, Any], functions: list[str], dependency: str) -> None:
    for function in functions:
        resources[function]["DependsOn"].append(dependency)


def _monitor(stage: Stage) -> dict[str, Any]:
    """The scheduled monitor's fixes: its Chalice name, the layer, its log group named in advance
    and waited for, and no asynchronous retries (a run that failed or timed out would fail again,
    and the next hour's is due anyway)."""
    return {
        MONITOR: {
            "DependsOn": [MONITOR_LOG_GROUP],
            "Properties": {"FunctionName": stage.monitor_function_name,
                           "Layers": [{"Ref": LAYER}],
                           "EventInvokeConfig": {"MaximumRetryAttempts":
                                                 MONITOR_RETRY_ATTEMPTS}},
            "Metadata": _skips(_MONITOR_SKIPS),
        },
        MONITOR_LOG_GROUP: {
            "Properties": {"LogGroupName": f"/aws/lambda/{stage.monitor_function_name}"},
            "Metadata": _skips(_LOG_GROUP_SKIPS),
        },
    }


def apply_snapstart(template: dict[str, Any]) -> int:
    """Turn SnapStart on in a packaged SAM template, in place.

    Returns:
        How many API Gateway integrations now invoke the ``live`` alias.

    Raises:
        ValueError: the template is not the one Chalice generates (nothing to point).
    """
    resources = template["Resources"]
    function = resources[FUNCTION]["Properties"]
    function["AutoPublishAlias"] = ALIAS
    function["AutoPublishAliasAllProperties"] = True  # a settings change gets a new snapshot
    function["SnapStart"] = {"ApplyOn": "PublishedVersions"}
    resources[PERMISSION]["Properties"]["FunctionName"] = {"Ref": f"{FUNCTION}.Alias"}
    pointed = 0
    for methods in resources[API]["Properties"]["DefinitionBody"]["paths"].values():
        for operation in methods.values():
            uri = operation.get("x-amazon-apigateway-integration", {}).get("uri", {})
            if isinstance(uri, dict) and _UNQUALIFIED in str(uri.get("Fn::Sub", "")):
                uri["Fn::Sub"] = uri["Fn::Sub"].replace(_UNQUALIFIED, _ALIASED)
                pointed += 1
    if not pointed:
        raise ValueError(f"no API Gateway integration invokes {FUNCTION}")
    template.setdefault("Outputs", {})["LiveAlias"] = {
        "Description": "The alias API Gateway invokes (SnapStart serves published versions)",
        "Value": {"Ref": f"{FUNCTION}.Alias"}}
    return pointed


def usage_plan_template(stage: Stage) -> dict[str, Any]:
    """A stand-alone stack: the usage plan and key for an API created by ``chalice deploy``."""
    parameters: dict[str, Any] = {
        "RestApiId": {"Type": "String", "Description": "rest_api_id from .chalice/deployed"},
        "StageName": {"Type": "String", "Default": stage.api_gateway_stage},
        **_USAGE_PLAN_PARAMETERS,
    }
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"sagegate {stage.name}: API key and usage plan for a chalice-deployed API",
        "Parameters": parameters,
        "Resources": _usage_plan(stage, {"Ref": "RestApiId"}, {"Ref": "StageName"}),
        "Outputs": _usage_plan_outputs(),
    }


def cache_table(stage: Stage) -> dict[str, Any]:
    """The shared prediction cache: the DynamoDB table the stage's ``CACHE_TABLE`` names.

    On demand: the function only does ``GetItem`` and ``PutItem``, as bursty as its traffic, and
    an idle cache costs its storage alone. Items expire through TTL on ``expires_at`` (the
    function ignores an expired item too, as deletion lags). Encrypted at rest; deleted with its
    stack: it holds nothing the endpoint cannot answer again.

    Raises:
        ValueError: the stage sets no ``CACHE_TABLE``.
    """
    if not stage.cache_table:
        raise ValueError(f"stage {stage.name!r} sets no CACHE_TABLE: it has no cache table")
    return _table(stage, stage.cache_table, cache_table_schema(), _CACHE_SKIPS)


def budget_table(stage: Stage) -> dict[str, Any]:
    """The token budgets: the DynamoDB table the stage's ``TOKEN_BUDGET_TABLE`` names.

    On demand, as the cache: an ``UpdateItem`` (an atomic counter) per reservation and
    settlement, a ``GetItem`` per usage read; each window's item expires through TTL on
    ``expires_at``. Encrypted at rest; deleted with its stack (counters of minutes and days).

    Raises:
        ValueError: the stage sets no ``TOKEN_BUDGET_TABLE``.
    """
    if not stage.budget_table:
        raise ValueError(f"stage {stage.name!r} sets no TOKEN_BUDGET_TABLE: it has no budgets "
                         "table")
    return _table(stage, stage.budget_table, budget_table_schema(), _BUDGET_SKIPS)


def _table(stage: Stage, name: str, schema: dict[str, Any],
           skips: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "Type": "AWS::DynamoDB::Table",
        "DeletionPolicy": "Delete",
        "UpdateReplacePolicy": "Delete",
        "Properties": {
            "TableName": name,
            "BillingMode": "PAY_PER_REQUEST",
            **schema,
            "SSESpecification": {"SSEEnabled": True},
            "Tags": [{"Key": key, "Value": value} for key, value in sorted(stage.tags.items())],
        },
        "Metadata": _skips(skips),
    }


def cache_table_schema() -> dict[str, Any]:
    """The cache table's key and TTL: what every copy needs (the stack's, the local stack's on
    moto)."""
    return {"AttributeDefinitions": [{"AttributeName": CACHE_KEY, "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": CACHE_KEY, "KeyType": "HASH"}],
            "TimeToLiveSpecification": {"AttributeName": CACHE_TTL_ATTRIBUTE, "Enabled": True}}


BUDGET_KEY = "key"  # the token budgets table's partition key (S): key id, model, window, start
BUDGET_TTL_ATTRIBUTE = "expires_at"  # the window's expiry (N, epoch seconds): DynamoDB's TTL


def budget_table_schema() -> dict[str, Any]:
    """The token budgets table's key and TTL (``TOKEN_BUDGET_TABLE``): one item per API key,
    model and time window, an atomic counter that expires after its window."""
    return {"AttributeDefinitions": [{"AttributeName": BUDGET_KEY, "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": BUDGET_KEY, "KeyType": "HASH"}],
            "TimeToLiveSpecification": {"AttributeName": BUDGET_TTL_ATTRIBUTE, "Enabled": True}}


def cache_template(stage: Stage) -> dict[str, Any]:
    """A stand-alone stack, ``sagegate-<stage>-cache``, for ``chalice deploy``, which creates no
    table."""
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"sagegate {stage.name}: the shared prediction cache (DynamoDB)",
        "Resources": {CACHE: cache_table(stage)},
        "Outputs": _cache_outputs(),
    }


def budget_template(stage: Stage) -> dict[str, Any]:
    """A stand-alone stack, ``sagegate-<stage>-budgets``, for ``chalice deploy``."""
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"sagegate {stage.name}: the per-key token budgets (DynamoDB)",
        "Resources": {BUDGETS: budget_table(stage)},
        "Outputs": _budget_outputs(),
    }


def _cache_outputs() -> dict[str, Any]:
    return {"PredictionCacheTable": {"Description": "The function's CACHE_TABLE",
                                     "Value": {"Ref": CACHE}},
            "PredictionCacheArn": {"Value": {"Fn::GetAtt": [CACHE, "Arn"]}}}


def _budget_outputs() -> dict[str, Any]:
    return {"TokenBudgetsTable": {"Description": "The functions' TOKEN_BUDGET_TABLE",
                                  "Value": {"Ref": BUDGETS}},
            "TokenBudgetsArn": {"Value": {"Fn::GetAtt": [BUDGETS, "Arn"]}}}


def _layer(stage: Stage, layer_zip: str) -> dict[str, Any]:
    return {
        "Type": "AWS::Serverless::LayerVersion",
        "Properties": {
            "LayerName": f"{stage.function_name}-dependencies",
            "Description": "numpy, OpenCV and the other compiled dependencies",
            "ContentUri": layer_zip,
            "CompatibleRuntimes": [stage.python_version],
            "CompatibleArchitectures": [stage.architecture],
            "RetentionPolicy": "Delete",
        },
    }


def _api_skips(stage: Stage) -> list[tuple[str, str]]:
    skips = list(_API_SKIPS)
    skips.append(("CKV_AWS_76", "Access logging needs the account's API Gateway CloudWatch role "
                                "(AWS::ApiGateway::Account), which one stack must not own; the "
                                "function logs every request with API Gateway's request id."))
    if not stage.xray:
        skips.append(("CKV_AWS_73", "X-Ray is opt-in per stage (\"xray\": true in "
                                    ".chalice/config.json); off, it costs nothing."))
    return skips


def _skips(skips: list[tuple[str, str]]) -> dict[str, Any]:
    return {"checkov": {"skip": [{"id": check, "comment": reason} for check, reason in skips]}}


def _usage_plan(stage: Stage, api_id: dict[str, str],
                api_stage: dict[str, str]) -> dict[str, Any]:
    return {
        "ApiUsagePlan": {
            "Type": "AWS::ApiGateway::UsagePlan",
            "Properties": {
                "UsagePlanName": stage.function_name,
                "Description": f"sagegate {stage.name}: per-key rate, burst and quota",
                "ApiStages": [{"ApiId": api_id, "Stage": api_stage}],
                "Throttle": {"RateLimit": {"Ref": "UsagePlanRateLimit"},
                             "BurstLimit": {"Ref": "UsagePlanBurstLimit"}},
                "Quota": {"Limit": {"Ref": "UsagePlanQuotaLimit"},
                          "Period": {"Ref": "UsagePlanQuotaPeriod"}},
            },
        },
        "ApiKey": {
            "Type": "AWS::ApiGateway::ApiKey",
            "Properties": {"Name": f"{stage.function_name}-default", "Enabled": True,
                           "Description": f"sagegate {stage.name}: first client key"},
        },
        "ApiUsagePlanKey": {
            "Type": "AWS::ApiGateway::UsagePlanKey",
            "Properties": {"KeyId": {"Ref": "ApiKey"}, "KeyType": "API_KEY",
                           "UsagePlanId": {"Ref": "ApiUsagePlan"}},
        },
    }


def _usage_plan_outputs() -> dict[str, Any]:
    return {
        "ApiKeyId": {"Description": "aws apigateway get-api-key --include-value --api-key <id>",
                     "Value": {"Ref": "ApiKey"}},
        "UsagePlanId": {"Value": {"Ref": "ApiUsagePlan"}},
    }

