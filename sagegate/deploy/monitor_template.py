"""The fanned-out monitor: a Step Functions state machine that checks each hour's captures.

A monitored stage with ``MONITOR_ENGINE=stepfunctions`` runs the hourly check as a state machine
instead of one scheduled function (docs/MONITOR.md, "Deployed: fanned out"). ``app.py`` then
declares ``monitor_plan``, ``monitor_map`` and ``monitor_reduce``
(:mod:`chalicelib.monitor.fanout`) and no ``monitor`` schedule; :func:`monitor_resources` adds:

* ``MonitorStateMachine`` (STANDARD: a Distributed Map's parent must be), named
  ``<app>-<stage>-monitor`` as the single function was (the metrics' ``MonitoringSchedule``), its
  definition :func:`sagegate.deploy.monitor_definition.definition`'s;
* ``MonitorStateMachineRole``: may invoke the three functions; start, describe and stop its own
  executions (the Map's children); list the capture prefix only (the ItemReader); write, read
  back and abort uploads of ``results/`` only (the ResultWriter). No CloudWatch Logs (that needs
  ``logs:*Delivery*`` on ``*``): the execution history keeps each state's input and output 90
  days, and each function logs its outcome.
* ``MonitorSchedule``: the EventBridge rule (``MONITOR_SCHEDULE``) starting it, with
  ``MonitorScheduleRole`` (this account only; may start this state machine only);
* the three functions' fixes, as the jobs' get them: Chalice names (their roles' log ARNs known),
  the layer, log groups named in advance and waited for, accepted findings.

The functions' own roles are ``.chalice/policy-<stage>-monitor_<step>.json``. Only the SAM stack
(Path A) can deploy this; ``sagegate chalice-deploy`` refuses such a stage.
"""
from __future__ import annotations

from typing import Any

from sagegate.deploy.monitor_definition import (
    PLACEHOLDERS,
    definition,
)
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
    settings = stage.monitor
    return settings is not None and settings.fanned_out


def state_machine_name(stage: Stage) -> str:
    """``<app>-<stage>-monitor``: the single function's name, kept as the metrics'
    ``MonitoringSchedule``."""
    return f"{stage.function_name}-{MONITOR_FUNCTION}"


def function_name(stage: Stage, function: str) -> str:
    return f"{stage.function_name}-{function}"


def logical_id(function: str) -> str:
    """Chalice's logical id for a function of app.py (``monitor_plan`` -> ``MonitorPlan``)."""
    return "".join(part.capitalize() for part in function.split("_"))


def monitor_resources(stage: Stage) -> dict[str, Any]:
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
                                 f"{runs.child('results').key}/*"}},
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
