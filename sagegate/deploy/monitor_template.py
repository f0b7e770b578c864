"""The fanned-out monitor: a Step Functions state machine that checks each hour's captures.

A monitored stage (``MONITOR_BASELINE``) with ``MONITOR_ENGINE=stepfunctions`` in its
environment runs the hourly check as a state machine instead of one scheduled function
(docs/MONITOR.md, "Deployed: fanned out"). ``app.py`` then declares three plain functions,
``monitor_plan``, ``monitor_map`` and ``monitor_reduce`` (their work:
:mod:`chalicelib.monitor.fanout`), and no ``monitor`` schedule; :func:`monitor_resources` adds:

* ``MonitorStateMachine`` (``AWS::StepFunctions::StateMachine``, STANDARD: a Distributed
  Map's parent must be), named ``<app>-<stage>-monitor`` as the single function was (the
  metrics' ``MonitoringSchedule``), whose definition (:func:`definition`) is:

  1. ``Plan``: ``monitor_plan`` with the execution's input (EventBridge's scheduled event:
     its ``time``) and name: the window, and the hour prefixes to read (each variant's hour
     and the one on each side);
  2. ``ReadPrefixes``: a Distributed Map over those prefixes (STANDARD children, a few at
     once), each child running ``ReadPrefix``, a Distributed Map whose ``ItemReader`` lists
     the prefix (``s3:listObjectsV2``), whose ``ItemBatcher`` hands each EXPRESS child
     :data:`MAX_ITEMS_PER_BATCH` objects with the run and the prefix as ``BatchInput``, each
     child invoking ``monitor_map``, and whose ``ResultWriter`` writes the children's
     outputs under the run's ``results/``; it tolerates no failed child
     (``ToleratedFailurePercentage`` 0): a prefix whose Map fails is caught and marked
     ``lost``. (The prefixes' Map is itself a Distributed Map because the nesting
     LocalStack's tests, recorded against AWS, show is a Distributed Map in a STANDARD child
     of another; an Inline Map holding one is not shown anywhere found.)
  3. ``Reduce``: an Inline Map over the endpoints, ``monitor_reduce`` for each
     (:data:`REDUCE_CONCURRENCY` at once): its parts merged in order, checked, the files and
     metrics written;
  4. ``Verdict``: once every endpoint is reduced, an Inline Map over their outcomes fails the
     run (``MonitorPartsLost``) when one was lost, so the execution's failure is what an
     alarm on ``ExecutionsFailed`` sees; otherwise it succeeds with each endpoint's outcome.

* ``MonitorStateMachineRole``: may invoke the three functions only; start its own executions
  (the Map's children) and describe or stop them; list the capture bucket under the capture
  prefix only (the ItemReader); write, read back and abort uploads of the run's
  ``results/`` only (the ResultWriter). No logging to CloudWatch Logs (that needs
  ``logs:*Delivery*`` on ``*``): the execution history keeps each state's input and output
  for 90 days, and each function logs its own outcome.
* ``MonitorSchedule``: the EventBridge rule (``MONITOR_SCHEDULE``) starting the state machine,
  with ``MonitorScheduleRole`` (assumed by EventBridge for this account only; may start this
  state machine only).
* the three functions' fixes, as the jobs' get them (:mod:`sagegate.deploy.jobs_template`):
  their Chalice names (so their roles' log ARNs are known), the layer, their log groups named
  in advance and waited for, their accepted findings.

The functions' own roles are ``.chalice/policy-<stage>-monitor_<step>.json``
(:func:`sagegate.deploy.policy.render_monitor_functions`). Only the SAM stack (Path A) can
deploy this; ``sagegate chalice-deploy`` refuses such a stage.
"""
from __future__ import annotations

from typing import Any

from sagegate.deploy.stage import (
    MONITOR_FUNCTION,
    MONITOR_MAP,
    MONITOR_PLAN,
    MONITOR_REDUCE,
    Stage,
)

STATE_MACHINE = "MonitorStateMachine"
STATE_MACHINE_ROLE = "MonitorStateMachineRole"
SCHEDULE = "MonitorSchedule"
SCHEDULE_ROLE = "MonitorScheduleRole"
PREFIX_CONCURRENCY = 4
"""Prefixes whose Distributed Maps run at once (each variant's three hours of each
endpoint)."""
REDUCE_CONCURRENCY = 2
"""Endpoints reduced at once."""
DEFAULT_MAP_CONCURRENCY = 10
"""Children of one prefix's Distributed Map at once, unless ``monitor_map`` has a reserved
concurrency (then that: more would be throttled, and retried)."""
MAX_ITEMS_PER_BATCH = 16
"""Capture objects per child. A Firehose object holds one buffer (64 MiB of records here):
16 of them are about 1 GiB of records, some 2.5 million records of 400 bytes, which one
child reads in about 40 s at the 70,000 records/s measured here, far inside an EXPRESS
child's 5 minutes."""
MAX_INPUT_BYTES_PER_BATCH = 128 * 1024
"""A batch's input at most (Step Functions' limit is 256 KiB): 16 items are about 4 KB."""
MAX_MAP_SECONDS = 280
"""The longest ``monitor_map`` timeout: an EXPRESS child runs 5 minutes at most."""
TASK_RETRY = [{
    "ErrorEquals": ["Lambda.ServiceException", "Lambda.AWSLambdaException",
                    "Lambda.SdkClientException", "Lambda.TooManyRequestsException"],
    "IntervalSeconds": 2, "MaxAttempts": 6, "BackoffRate": 2, "JitterStrategy": "FULL"}]
"""Lambda's own failures and throttles: retried (the guide's advice for Lambda tasks)."""
WORK_RETRY = {"ErrorEquals": ["States.TaskFailed"], "IntervalSeconds": 5, "MaxAttempts": 2,
              "BackoffRate": 2}
"""A function that raised (S3 refused, a timeout): tried twice more before the part is
lost."""
PLACEHOLDERS = {MONITOR_PLAN: "MonitorPlanArn", MONITOR_MAP: "MonitorMapArn",
                MONITOR_REDUCE: "MonitorReduceArn"}
"""``DefinitionSubstitutions`` of the three functions' ARNs."""
_FUNCTION_SKIPS = [
    ("CKV_AWS_116", "Invoked synchronously by the monitor's state machine, which retries it "
                    "and records every failure in its execution history: there is no "
                    "asynchronous event to dead-letter."),
    ("CKV_AWS_117", "Calls only S3 (captures, baselines, the run's parts, reports) and "
                    "CloudWatch Logs; a VPC adds NAT cost and no isolation. Set "
                    "subnet_ids/security_group_ids in the stage to run in one."),
    ("CKV_AWS_173", "Environment variables hold settings only (S3 prefixes, the schedule), no "
                    "secrets; encrypted at rest with the AWS managed key by default."),
]
_LOG_GROUP_SKIPS = [
    ("CKV_AWS_158", "The monitor's outcomes and metrics, never a capture record; CloudWatch "
                    "Logs encrypts at rest by default."),
]


def enabled(stage: Stage) -> bool:
    """Whether the stage's monitor is the state machine (``MONITOR_ENGINE=stepfunctions``)."""
    settings = stage.monitor
    return settings is not None and settings.fanned_out


def state_machine_name(stage: Stage) -> str:
    """``<app>-<stage>-monitor``: the single function's name, kept as the metrics'
    ``MonitoringSchedule``."""
    return f"{stage.function_name}-{MONITOR_FUNCTION}"


def function_name(stage: Stage, function: str) -> str:
    """Chalice's name of one of app.py's functions (``sagegate-dev-monitor_plan``)."""
    return f"{stage.function_name}-{function}"


def logical_id(function: str) -> str:
    """Chalice's logical id for a function of app.py (``monitor_plan`` -> ``MonitorPlan``)."""
    return "".join(part.capitalize() for part in function.split("_"))


def map_concurrency(stage: Stage) -> int:
    """Children of a prefix's Distributed Map at once: ``monitor_map``'s reserved
    concurrency, else :data:`DEFAULT_MAP_CONCURRENCY`."""
    reserved = stage.lambda_functions.get(MONITOR_MAP, {}).get("reserved_concurrency")
    return int(reserved) if reserved else DEFAULT_MAP_CONCURRENCY


def map_timeout(stage: Stage) -> int:
    """``monitor_map``'s timeout (Chalice's default, 60 s, unless set)."""
    return int(stage.lambda_functions.get(MONITOR_MAP, {}).get("lambda_timeout") or 60)


def check_monitor_fanout(stage: Stage) -> None:
    """Refuse a fanned-out monitor that could not run.

    Raises:
        ValueError: ``monitor_map``'s timeout is longer than an EXPRESS child may run
            (:data:`MAX_MAP_SECONDS`), or its reserved concurrency is not a whole number of
            at least 1.
    """
    where = f"stages.{stage.name}.lambda_functions.{MONITOR_MAP}"
    if map_timeout(stage) > MAX_MAP_SECONDS:
        raise ValueError(f"{where}.lambda_timeout is {map_timeout(stage)} s: a Distributed "
                         f"Map's EXPRESS child runs 5 minutes at most, give it at most "
                         f"{MAX_MAP_SECONDS} s")
    reserved = stage.lambda_functions.get(MONITOR_MAP, {}).get("reserved_concurrency")
    if reserved is not None and (not isinstance(reserved, int) or isinstance(reserved, bool)
                                 or reserved < 1):
        raise ValueError(f"{where}.reserved_concurrency must be a whole number of at least 1, "
                         f"not {reserved!r}")


def _lambda_task(function: str, payload: dict[str, Any] | str, *, work_retry: bool,
                 timeout: int | None = None) -> dict[str, Any]:
    """A Task invoking one of the functions (its ``Payload`` the JSON the function gets),
    output the function's answer."""
    parameters: dict[str, Any] = {"FunctionName": f"${{{PLACEHOLDERS[function]}}}"}
    if isinstance(payload, str):
        parameters["Payload.$"] = payload
    else:
        parameters["Payload"] = payload
    state: dict[str, Any] = {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Parameters": parameters,
        "OutputPath": "$.Payload",
        "Retry": [*TASK_RETRY, *([WORK_RETRY] if work_retry else [])]}
    if timeout is not None:
        state["TimeoutSeconds"] = timeout
    return state


def definition(stage: Stage) -> dict[str, Any]:
    """The state machine's definition (Amazon States Language, JSONPath), the functions'
    ARNs as ``${MonitorPlanArn}``, ``${MonitorMapArn}``, ``${MonitorReduceArn}``
    (``DefinitionSubstitutions``)."""
    read_objects = _lambda_task(MONITOR_MAP, "$", work_retry=True,
                                timeout=map_timeout(stage) + 15)
    read_prefix = {
        "Type": "Map",
        "Comment": "One hour prefix: its objects listed, read by EXPRESS children a batch "
                   "each, each batch's part written to S3 and its key returned",
        "ItemReader": {"Resource": "arn:aws:states:::s3:listObjectsV2",
                       "Parameters": {"Bucket.$": "$.run.captures_bucket",
                                      "Prefix.$": "$.read.prefix"}},
        "ItemBatcher": {"MaxItemsPerBatch": MAX_ITEMS_PER_BATCH,
                        "MaxInputBytesPerBatch": MAX_INPUT_BYTES_PER_BATCH,
                        "BatchInput": {"run.$": "$.run", "read.$": "$.read"}},
        "MaxConcurrency": map_concurrency(stage),
        "ToleratedFailurePercentage": 0,
        "Label": "ReadPrefix",
        "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "EXPRESS"},
                          "StartAt": "ReadObjects",
                          "States": {"ReadObjects": {**read_objects, "End": True}}},
        # its paths on the state's input, as the CDK guide's ResultWriterV2 example has them
        # (moto's interpreter evaluates them on the Map's results instead)
        "ResultWriter": {"Resource": "arn:aws:states:::s3:putObject",
                         "Parameters": {"Bucket.$": "$.run.runs_bucket",
                                        "Prefix.$": "$.read.results"}},
        "ResultSelector": {"Bucket.$": "$.ResultWriterDetails.Bucket",
                           "Key.$": "$.ResultWriterDetails.Key"},
        "ResultPath": "$.read.manifest",
        "OutputPath": "$.read",
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.read.lost",
                   "Next": "PrefixLost"}],
        "End": True,
    }
    reduce_endpoint = _lambda_task(MONITOR_REDUCE, "$", work_retry=True)
    return {
        "Comment": f"sagegate {stage.name}: the data quality monitor's scheduled run, each "
                   "endpoint's hour of captures read by a Distributed Map per prefix, then "
                   "merged, checked and written per endpoint",
        "StartAt": "Plan",
        "States": {
            "Plan": {**_lambda_task(MONITOR_PLAN, {"event.$": "$",
                                                   "execution.$": "$$.Execution.Name"},
                                    work_retry=True), "Next": "ReadPrefixes"},
            "ReadPrefixes": {
                "Type": "Map",
                "ItemsPath": "$.reads",
                "ItemSelector": {"run.$": "$.run", "read.$": "$$.Map.Item.Value"},
                "MaxConcurrency": PREFIX_CONCURRENCY,
                "ToleratedFailurePercentage": 0,
                "Label": "ReadPrefixes",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                    "StartAt": "ReadPrefix",
                    "States": {"ReadPrefix": read_prefix,
                               "PrefixLost": {"Type": "Pass", "OutputPath": "$.read",
                                              "End": True}}},
                "ResultPath": "$.reads",
                "Next": "Reduce",
            },
            "Reduce": {
                "Type": "Map",
                "ItemsPath": "$.endpoints",
                "ItemSelector": {"run.$": "$.run", "endpoint.$": "$$.Map.Item.Value",
                                 "reads.$": "$.reads"},
                "MaxConcurrency": REDUCE_CONCURRENCY,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "ReduceEndpoint",
                    "States": {
                        "ReduceEndpoint": {
                            **reduce_endpoint,
                            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.failure",
                                       "Next": "ReduceLost"}],
                            "End": True},
                        "ReduceLost": {"Type": "Pass",
                                       "Parameters": {"endpoint.$": "$.endpoint.endpoint",
                                                      "status": "lost",
                                                      "error.$": "$.failure.Cause"},
                                       "End": True}}},
                "Next": "Verdict",
            },
            "Verdict": {
                "Type": "Map",
                "Comment": "Once every endpoint is reduced: the run fails if one was lost",
                "ItemsPath": "$",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "WasItLost",
                    "States": {
                        "WasItLost": {"Type": "Choice",
                                      "Choices": [{"Variable": "$.status",
                                                   "StringEquals": "lost",
                                                   "Next": "PartsLost"}],
                                      "Default": "Whole"},
                        "PartsLost": {"Type": "Fail", "Error": "MonitorPartsLost",
                                      "Cause": "a part of an endpoint's window could not be "
                                               "read, so nothing was written for it: see the "
                                               "reduce's log line (status lost) and the "
                                               "failed Map Run"},
                        "Whole": {"Type": "Succeed"}}},
                "ResultPath": None,
                "End": True,
            },
        },
    }


def monitor_resources(stage: Stage) -> dict[str, Any]:
    """The state machine, its schedule, their roles, and the functions' fixes (empty unless
    the stage's monitor is fanned out)."""
    if not enabled(stage):
        return {}
    resources: dict[str, Any] = {
        STATE_MACHINE: _state_machine(stage),
        STATE_MACHINE_ROLE: _role(stage, "states.amazonaws.com",
                                  f"sagegate {stage.name}: the monitor's state machine",
                                  "RunTheMonitor", state_machine_statements(stage)),
        SCHEDULE: _schedule(stage),
        SCHEDULE_ROLE: _role(stage, "events.amazonaws.com",
                             f"sagegate {stage.name}: the monitor's schedule starts its run",
                             "StartTheMonitor", [{
                                 "Sid": "StartTheMonitor", "Effect": "Allow",
                                 "Action": ["states:StartExecution"],
                                 "Resource": {"Ref": STATE_MACHINE}}]),
    }
    for function in (MONITOR_PLAN, MONITOR_MAP, MONITOR_REDUCE):
        resources.update(_function(stage, function))
    return resources


def monitor_outputs(stage: Stage) -> dict[str, Any]:
    """The state machine (its executions are the hourly runs)."""
    if not enabled(stage):
        return {}
    return {"MonitorStateMachineArn": {"Description": "The monitor's hourly runs",
                                       "Value": {"Ref": STATE_MACHINE}}}


def _state_machine(stage: Stage) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "StateMachineName": state_machine_name(stage),
        "StateMachineType": "STANDARD",
        "Definition": definition(stage),
        "DefinitionSubstitutions": {
            placeholder: {"Fn::GetAtt": [logical_id(function), "Arn"]}
            for function, placeholder in PLACEHOLDERS.items()},
        "RoleArn": {"Fn::GetAtt": [STATE_MACHINE_ROLE, "Arn"]},
        "Tags": _tags(stage),
    }
    if stage.xray:
        properties["TracingConfiguration"] = {"Enabled": True}
    return {"Type": "AWS::StepFunctions::StateMachine", "Properties": properties}


def _schedule(stage: Stage) -> dict[str, Any]:
    settings = stage.monitor
    assert settings is not None
    return {
        "Type": "AWS::Events::Rule",
        "Properties": {
            "Description": f"sagegate {stage.name}: check each endpoint's previous hour of "
                           "captures",
            "ScheduleExpression": settings.schedule,
            "State": "ENABLED",
            "Targets": [{"Id": "MonitorRun", "Arn": {"Ref": STATE_MACHINE},
                         "RoleArn": {"Fn::GetAtt": [SCHEDULE_ROLE, "Arn"]}}],
        },
    }


def state_machine_statements(stage: Stage) -> list[dict[str, Any]]:
    """What the state machine may do: invoke the three functions; start, describe and stop
    its own executions (a Distributed Map's children); list the capture prefix (the
    ItemReader); write and read back its results (the ResultWriter)."""
    settings = stage.monitor
    assert settings is not None
    name = state_machine_name(stage)
    states = "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}"
    captures, runs = settings.captures, settings.runs
    listed = f"{captures.prefix}/*" if captures.prefix else "*"
    return [
        {"Sid": "InvokeTheMonitorsFunctions", "Effect": "Allow",
         "Action": ["lambda:InvokeFunction"],
         "Resource": [{"Fn::GetAtt": [logical_id(function), "Arn"]}
                      for function in (MONITOR_PLAN, MONITOR_MAP, MONITOR_REDUCE)]},
        {"Sid": "StartItsOwnChildExecutions", "Effect": "Allow",
         "Action": ["states:StartExecution"],
         "Resource": {"Fn::Sub": f"{states}:stateMachine:{name}"}},
        {"Sid": "WatchItsOwnChildExecutions", "Effect": "Allow",
         "Action": ["states:DescribeExecution", "states:StopExecution"],
         "Resource": {"Fn::Sub": f"{states}:execution:{name}/*"}},
        {"Sid": "ListTheCaptures", "Effect": "Allow", "Action": ["s3:ListBucket"],
         "Resource": {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{captures.bucket}"},
         "Condition": {"StringLike": {"s3:prefix": [listed]}}},
        {"Sid": "WriteTheRunsResults", "Effect": "Allow",
         "Action": ["s3:PutObject", "s3:GetObject", "s3:ListMultipartUploadParts",
                    "s3:AbortMultipartUpload"],
         "Resource": {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{runs.bucket}/"
                                 f"{runs.key('results')}/*"}},
    ]


def _role(stage: Stage, service: str, description: str, policy: str,
          statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "Description": description,
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{
                    "Effect": "Allow", "Principal": {"Service": service},
                    "Action": "sts:AssumeRole",
                    "Condition": {"StringEquals": {
                        "aws:SourceAccount": {"Ref": "AWS::AccountId"}}}}]},
            "Policies": [{"PolicyName": policy, "PolicyDocument": {
                "Version": "2012-10-17", "Statement": statements}}],
            "Tags": _tags(stage),
        },
    }


def _function(stage: Stage, function: str) -> dict[str, Any]:
    """One of the three functions' fixes: its Chalice name, the layer (numpy, datasketches),
    its log group named in advance and waited for, its accepted findings."""
    function_id = logical_id(function)
    log_group = f"{function_id}LogGroup"
    name = function_name(stage, function)
    return {
        function_id: {
            "DependsOn": [log_group],
            "Properties": {"FunctionName": name, "Layers": [{"Ref": "DependenciesLayer"}]},
            "Metadata": _skips(_FUNCTION_SKIPS),
        },
        log_group: {"Properties": {"LogGroupName": f"/aws/lambda/{name}"},
                    "Metadata": _skips(_LOG_GROUP_SKIPS)},
    }


def _tags(stage: Stage) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in sorted(stage.tags.items())]


def _skips(skips: list[tuple[str, str]]) -> dict[str, Any]:
    return {"checkov": {"skip": [{"id": check, "comment": reason} for check, reason in skips]}}
