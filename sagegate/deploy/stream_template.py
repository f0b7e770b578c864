"""The streaming function: OpenAI's completion routes answered in Lambda's streaming form.

Chalice's handlers return their answer whole, so ``POST /v1/chat/completions`` and ``POST
/v1/completions`` are served by one more function, which :func:`stream_resources` adds to the merge
template (``chalice package --merge-template``) of a stage that registers a language model:

* ``StreamingHandler`` (``sagegate-<stage>-stream``): Chalice's ``./deployment.zip`` and the
  ``DependenciesLayer``, with the API function's runtime, architecture, memory, environment and
  tracing; handler ``chalicelib.lambdastream.handler.handle``, run by sagegate's own runtime loop
  (``AWS_LAMBDA_EXEC_WRAPPER``), which speaks the Runtime API's streaming mode. No SnapStart: a
  runtime loop of its own gets none of the managed runtime's snapshot and restore hooks, so API
  Gateway invokes ``$LATEST``.
* Its own role (``.chalice/policy-<stage>-stream.json``, rendered by ``sagegate policy``, read here
  as Chalice reads ``iam_policy_file``) and its own log group, named in advance with the stage's
  retention.
* The two methods keep Chalice's (the API key requirement, the usage plan, CORS, the gateway
  responses); only their integration changes: ``InvokeWithResponseStream`` (the ``2021-11-15``
  ``response-streaming-invocations`` URI) in ``STREAM`` mode, deep-merged into Chalice's.
* API Gateway's permission to invoke it, from those two methods only.

``lambda_functions.stream`` in the stage sizes it as Chalice's keys size an app function:
``lambda_timeout`` (:data:`DEFAULT_TIMEOUT` without one), ``lambda_memory_size`` (the API
function's without one) and ``reserved_concurrency``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sagegate.deploy.iam import llm_models
from sagegate.deploy.stage import Stage

STREAM = "stream"  # the function's name suffix and its lambda_functions key
FUNCTION = "StreamingHandler"
LOG_GROUP = "StreamingHandlerLogGroup"
ROLE = "StreamingHandlerRole"
HANDLER = "chalicelib.lambdastream.handler.handle"
WRAPPER = "/var/task/chalicelib/lambdastream/bootstrap"
CODE_URI = "./deployment.zip"  # Chalice's function zip beside sam.json
ROUTES = {"/v1/chat/completions": "Chat", "/v1/completions": "Completions"}
"""The routes it serves, each with its permission's logical id part."""
DEFAULT_TIMEOUT = 300
"""Seconds. A stream may last 15 minutes on API Gateway, but answers here are short (the
``max_tokens`` ceiling, 512, at tens of tokens a second is well under a minute) and a regional
stream idle for 5 minutes is closed anyway: 300 s covers a slow endpoint and a cold start and
bounds what a hung stream costs."""
MAX_TIMEOUT = 900  # Lambda's, and API Gateway's for a streamed integration (900,000 ms)
_URI = ("arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2021-11-15/functions/"
        "${" + FUNCTION + ".Arn}/response-streaming-invocations")


def enabled(stage: Stage) -> bool:
    """Whether the stage registers a language model (OpenAI's routes serve one).

    Raises:
        ValueError: the stage's settings or a model.json are invalid for it.
    """
    return bool(llm_models(stage))


def function_name(stage: Stage) -> str:
    return f"{stage.function_name}-{STREAM}"


def policy_file(stage: Stage) -> str:
    return f"policy-{stage.name}-{STREAM}.json"


def timeout(stage: Stage) -> int:
    """The function's timeout, which is its integration's too.

    Raises:
        ValueError: ``lambda_functions.stream.lambda_timeout`` is not 1 to 900 seconds.
    """
    value = _settings(stage).get("lambda_timeout", DEFAULT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMEOUT:
        raise ValueError(f"stages.{stage.name}.lambda_functions.{STREAM}.lambda_timeout must be "
                         f"whole seconds from 1 to {MAX_TIMEOUT}, not {value!r}")
    return value


def stream_resources(stage: Stage, layer: str, architectures: list[str],
                     root: Path) -> dict[str, Any]:
    """The function, its role, log group and permissions (the caller adds what it depends on
    and the accepted scanner findings).

    Raises:
        ValueError: the stage's stream settings are invalid, or its policy file is missing.
    """
    resources: dict[str, Any] = {
        FUNCTION: {"Type": "AWS::Serverless::Function", "DependsOn": [LOG_GROUP],
                   "Properties": _function(stage, layer, architectures)},
        LOG_GROUP: {"Type": "AWS::Logs::LogGroup", "Properties": {
            "LogGroupName": f"/aws/lambda/{function_name(stage)}",
            **({"RetentionInDays": stage.log_retention_in_days}
               if stage.log_retention_in_days else {})}},
        ROLE: {"Type": "AWS::IAM::Role", "Properties": {
            "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
                "Action": "sts:AssumeRole"}]},
            "Policies": [{"PolicyName": f"{ROLE}Policy",
                          "PolicyDocument": _policy(stage, root)}]}},
    }
    for path, name in ROUTES.items():
        resources[f"{FUNCTION}{name}Permission"] = {
            "Type": "AWS::Lambda::Permission",
            "Properties": {
                "FunctionName": {"Fn::GetAtt": [FUNCTION, "Arn"]},
                "Action": "lambda:InvokeFunction",  # InvokeWithResponseStream's too
                "Principal": "apigateway.amazonaws.com",
                "SourceArn": {"Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:"
                                         "${AWS::AccountId}:${RestAPI}/*/POST" + path},
            },
        }
    return resources


def integrations(stage: Stage) -> dict[str, Any]:
    """The two methods' integrations, to deep-merge into Chalice's ``DefinitionBody.paths``:
    Chalice's own values for the rest (``responses``, ``contentHandling``: the event is the
    same as its function's), the method itself untouched."""
    return {path: {"post": {"x-amazon-apigateway-integration": {
        "type": "aws_proxy",
        "httpMethod": "POST",
        "uri": {"Fn::Sub": _URI},
        "responseTransferMode": "STREAM",
        "timeoutInMillis": timeout(stage) * 1000,
        "passthroughBehavior": "when_no_match",
        "contentHandling": "CONVERT_TO_TEXT",
    }}} for path in ROUTES}


def outputs() -> dict[str, Any]:
    return {"StreamingHandlerName": {"Value": {"Ref": FUNCTION}},
            "StreamingHandlerArn": {"Value": {"Fn::GetAtt": [FUNCTION, "Arn"]}}}


def _function(stage: Stage, layer: str, architectures: list[str]) -> dict[str, Any]:
    settings = _settings(stage)
    memory = settings.get("lambda_memory_size", stage.lambda_memory_size)
    reserved = settings.get("reserved_concurrency")
    return {
        "FunctionName": function_name(stage),
        "Handler": HANDLER,
        "CodeUri": CODE_URI,
        "Runtime": stage.python_version,
        "Architectures": architectures,
        **({"MemorySize": memory} if memory else {}),
        "Timeout": timeout(stage),
        **({"ReservedConcurrentExecutions": reserved} if reserved is not None else {}),
        "Tracing": "Active" if stage.xray else "PassThrough",
        "Environment": {"Variables": {**stage.env, "AWS_LAMBDA_EXEC_WRAPPER": WRAPPER}},
        "Layers": [{"Ref": layer}],
        "Role": {"Fn::GetAtt": [ROLE, "Arn"]},
        "Tags": dict(stage.tags),
    }


def _settings(stage: Stage) -> dict[str, Any]:
    return stage.lambda_functions.get(STREAM) or {}


def _policy(stage: Stage, root: Path) -> Any:
    path = root / ".chalice" / policy_file(stage)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f".chalice/{policy_file(stage)} is missing: run sagegate policy "
                         f"--stage {stage.name} (the streaming function's role)") from None
