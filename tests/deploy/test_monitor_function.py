"""The scheduled monitor in the packaged templates: dev sets MONITOR_BASELINE and runs it as a
Step Functions state machine (MONITOR_ENGINE=stepfunctions), prod does not monitor.

dev: the state machine (its definition: a plan, a Distributed Map per hour prefix with its
ItemReader, ItemBatcher, EXPRESS children and ResultWriter, a reduce per endpoint, a verdict),
its schedule, their roles, the three functions (each its own role, its committed policy
exactly) and no single scheduled function; the API function's role gains nothing of it. The
single function (a stage without MONITOR_ENGINE) is checked on its template fixes and policy.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalicelib.monitor import deployed_settings
from sagegate.deploy import monitor_definition, monitor_template, templates
from sagegate.deploy.policy import (
    monitor_function_policy_path,
    monitor_policy_path,
    policy_path,
    render_monitor,
    render_monitor_functions,
)
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import load_config, load_stage
from tests.deploy.conftest import Package
from tests.deploy.test_policies import assert_no_wildcards
from tests.deploy.test_templates import sam_transform

pytestmark = pytest.mark.deploy

DATA = "arn:aws:s3:::sagegate-dev-data"
LOGS = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/sagegate-dev-{}:*"
FUNCTIONS = ("monitor_plan", "monitor_map", "monitor_reduce")
LOGS_ACTIONS = ["logs:CreateLogStream", "logs:PutLogEvents"]
DEV_FANOUT_POLICIES = {
    "monitor_plan": [
        {"Sid": "ListCapturesAndBaselines", "Effect": "Allow", "Action": ["s3:ListBucket"],
         "Resource": DATA,
         "Condition": {"StringLike": {"s3:prefix": ["captures/*", "baselines/*"]}}},
        {"Sid": "ReadBaselines", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": f"{DATA}/baselines/*"},
        {"Sid": "WriteTheRunsJobs", "Effect": "Allow", "Action": ["s3:PutObject"],
         "Resource": f"{DATA}/monitoring-runs/jobs/*"},
        {"Sid": "WriteOwnLogs", "Effect": "Allow", "Action": LOGS_ACTIONS,
         "Resource": LOGS.format("monitor_plan")},
    ],
    "monitor_map": [
        {"Sid": "ReadCaptures", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": f"{DATA}/captures/*"},
        {"Sid": "ReadTheRunsJobs", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": f"{DATA}/monitoring-runs/jobs/*"},
        {"Sid": "WriteTheRunsParts", "Effect": "Allow", "Action": ["s3:PutObject"],
         "Resource": f"{DATA}/monitoring-runs/parts/*"},
        {"Sid": "WriteOwnLogs", "Effect": "Allow", "Action": LOGS_ACTIONS,
         "Resource": LOGS.format("monitor_map")},
    ],
    "monitor_reduce": [
        {"Sid": "ListBaselines", "Effect": "Allow", "Action": ["s3:ListBucket"],
         "Resource": DATA, "Condition": {"StringLike": {"s3:prefix": ["baselines/*"]}}},
        {"Sid": "ReadBaselines", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": f"{DATA}/baselines/*"},
        {"Sid": "ReadTheRunsPartsAndResults", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": [f"{DATA}/monitoring-runs/parts/*", f"{DATA}/monitoring-runs/results/*"]},
        {"Sid": "WriteMonitoringReports", "Effect": "Allow", "Action": ["s3:PutObject"],
         "Resource": f"{DATA}/monitoring/*"},
        {"Sid": "WriteOwnLogs", "Effect": "Allow", "Action": LOGS_ACTIONS,
         "Resource": LOGS.format("monitor_reduce")},
    ],
}
SINGLE_FUNCTION_POLICY = [  # dev's settings with the single scheduled function instead
    {"Sid": "ListCapturesAndBaselines", "Effect": "Allow", "Action": ["s3:ListBucket"],
     "Resource": DATA,
     "Condition": {"StringLike": {"s3:prefix": ["captures/*", "baselines/*"]}}},
    {"Sid": "ReadCaptures", "Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": f"{DATA}/captures/*"},
    {"Sid": "ReadBaselines", "Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": f"{DATA}/baselines/*"},
    {"Sid": "WriteMonitoringReports", "Effect": "Allow", "Action": ["s3:PutObject"],
     "Resource": f"{DATA}/monitoring/*"},
    {"Sid": "WriteOwnLogs", "Effect": "Allow", "Action": LOGS_ACTIONS,
     "Resource": LOGS.format("monitor")},
]
STATES = "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}"
STATE_MACHINE_POLICY = [
    {"Sid": "InvokeTheMonitorsFunctions", "Effect": "Allow", "Action": ["lambda:InvokeFunction"],
     "Resource": [{"Fn::GetAtt": [name, "Arn"]}
                  for name in ("MonitorPlan", "MonitorMap", "MonitorReduce")]},
    {"Sid": "StartItsOwnChildExecutions", "Effect": "Allow", "Action": ["states:StartExecution"],
     "Resource": {"Fn::Sub": f"{STATES}:stateMachine:sagegate-dev-monitor"}},
    {"Sid": "WatchItsOwnChildExecutions", "Effect": "Allow",
     "Action": ["states:DescribeExecution", "states:StopExecution"],
     "Resource": {"Fn::Sub": f"{STATES}:execution:sagegate-dev-monitor/*"}},
    {"Sid": "ListTheCaptures", "Effect": "Allow", "Action": ["s3:ListBucket"],
     "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::sagegate-dev-data"},
     "Condition": {"StringLike": {"s3:prefix": ["captures/*"]}}},
    {"Sid": "WriteTheRunsResults", "Effect": "Allow",
     "Action": ["s3:PutObject", "s3:GetObject", "s3:ListMultipartUploadParts",
                "s3:AbortMultipartUpload"],
     "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::sagegate-dev-data/"
                             "monitoring-runs/results/*"}},
]


@pytest.fixture(scope="module")
def dev(package: Callable[[str], Package]) -> Package:
    return package("dev")


@pytest.fixture(scope="module")
def prod(package: Callable[[str], Package]) -> Package:
    return package("prod")


def single_function(stage: Stage) -> Stage:
    """The stage with the single scheduled function (no MONITOR_ENGINE)."""
    return dataclasses.replace(stage, env={name: value for name, value in stage.env.items()
                                           if name != "MONITOR_ENGINE"})


def test_dev_runs_its_monitor_as_a_state_machine_not_a_scheduled_function(dev: Package) -> None:
    resources = dev.template["Resources"]
    assert "Monitor" not in resources and "MonitorLogGroup" not in resources
    machine = dev.resource("MonitorStateMachine")
    assert machine["Type"] == "AWS::StepFunctions::StateMachine"
    properties = machine["Properties"]
    assert properties["StateMachineName"] == "sagegate-dev-monitor"  # the metrics' schedule
    assert properties["StateMachineType"] == "STANDARD"  # a Distributed Map's parent must be
    assert properties["RoleArn"] == {"Fn::GetAtt": ["MonitorStateMachineRole", "Arn"]}
    assert properties["DefinitionSubstitutions"] == {
        "MonitorPlanArn": {"Fn::GetAtt": ["MonitorPlan", "Arn"]},
        "MonitorMapArn": {"Fn::GetAtt": ["MonitorMap", "Arn"]},
        "MonitorReduceArn": {"Fn::GetAtt": ["MonitorReduce", "Arn"]}}
    assert "LoggingConfiguration" not in properties
    assert properties["Definition"] == monitor_definition.definition(load_stage("dev"))
    # the schedule starts the state machine, with a role that may do nothing else
    rule = dev.resource("MonitorSchedule")["Properties"]
    assert rule["ScheduleExpression"] == deployed_settings.DEFAULT_SCHEDULE == "cron(5 * * * ? *)"
    assert rule["State"] == "ENABLED"
    assert rule["Targets"] == [{"Id": "MonitorRun", "Arn": {"Ref": "MonitorStateMachine"},
                                "RoleArn": {"Fn::GetAtt": ["MonitorScheduleRole", "Arn"]}}]
    role = dev.resource("MonitorScheduleRole")["Properties"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    [document] = [p["PolicyDocument"] for p in role["Policies"]]
    assert document["Statement"] == [{"Sid": "StartTheMonitor", "Effect": "Allow",
                                      "Action": ["states:StartExecution"],
                                      "Resource": {"Ref": "MonitorStateMachine"}}]
    # none of the functions is scheduled or invoked by anything but the state machine
    for function in FUNCTIONS:
        assert "Events" not in dev.resource(monitor_template.logical_id(function))["Properties"]


def _states(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every state of a definition, nested ones included, by name."""
    found: dict[str, dict[str, Any]] = {}
    for name, state in definition["States"].items():
        found[name] = state
        if "ItemProcessor" in state:
            found.update(_states(state["ItemProcessor"]))
    return found


def test_the_definition_reads_each_prefix_with_a_distributed_map_then_reduces() -> None:
    definition = monitor_definition.definition(load_stage("dev"))
    states = _states(definition)
    assert definition["StartAt"] == "Plan"
    plan = states["Plan"]
    assert plan["Parameters"] == {"FunctionName": "${MonitorPlanArn}",
                                  "Payload": {"event.$": "$",
                                              "execution.$": "$$.Execution.Name"}}
    assert plan["Next"] == "ReadPrefixes"
    prefixes = states["ReadPrefixes"]
    assert prefixes["ItemsPath"] == "$.reads"
    assert prefixes["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED",
                                                            "ExecutionType": "STANDARD"}
    read = states["ReadPrefix"]
    assert read["ItemReader"] == {"Resource": "arn:aws:states:::s3:listObjectsV2",
                                  "Parameters": {"Bucket.$": "$.run.captures_bucket",
                                                 "Prefix.$": "$.read.prefix"}}
    assert read["ItemBatcher"] == {
        "MaxItemsPerBatch": monitor_definition.MAX_ITEMS_PER_BATCH,
        "MaxInputBytesPerBatch": monitor_definition.MAX_INPUT_BYTES_PER_BATCH,
        "BatchInput": {"run.$": "$.run", "read.$": "$.read"}}
    assert monitor_definition.MAX_INPUT_BYTES_PER_BATCH <= 256 * 1024  # Step Functions' limit
    assert read["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED",
                                                        "ExecutionType": "EXPRESS"}
    assert read["ToleratedFailurePercentage"] == 0  # a lost part is not passed over
    assert read["MaxConcurrency"] == 16 == load_config()["stages"]["dev"]["lambda_functions"][
        "monitor_map"]["reserved_concurrency"]
    assert read["ResultWriter"] == {"Resource": "arn:aws:states:::s3:putObject",
                                    "Parameters": {"Bucket.$": "$.run.runs_bucket",
                                                   "Prefix.$": "$.read.results"}}
    assert read["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.read.lost",
                              "Next": "PrefixLost"}]
    children = states["ReadObjects"]
    assert children["Parameters"] == {"FunctionName": "${MonitorMapArn}", "Payload.$": "$"}
    assert children["TimeoutSeconds"] < 300  # an EXPRESS child's 5 minutes
    assert {"Lambda.TooManyRequestsException"} <= set(children["Retry"][0]["ErrorEquals"])
    reduce = states["Reduce"]
    assert reduce["ItemProcessor"]["ProcessorConfig"] == {"Mode": "INLINE"}
    assert states["ReduceEndpoint"]["Parameters"] == {"FunctionName": "${MonitorReduceArn}",
                                                      "Payload.$": "$"}
    # once every endpoint is reduced, the run fails if one was lost
    assert reduce["Next"] == "Verdict" and states["Verdict"]["ItemsPath"] == "$"
    assert states["WasItLost"]["Choices"] == [{"Variable": "$.status", "StringEquals": "lost",
                                               "Next": "PartsLost"}]
    assert states["PartsLost"]["Type"] == "Fail"
    assert states["PartsLost"]["Error"] == "MonitorPartsLost"
    # every function is invoked through the optimized integration, with Lambda's retries
    tasks = {name: state for name, state in states.items() if state["Type"] == "Task"}
    assert set(tasks) == {"Plan", "ReadObjects", "ReduceEndpoint"}
    for task in tasks.values():
        assert task["Resource"] == "arn:aws:states:::lambda:invoke"
        assert task["OutputPath"] == "$.Payload"


def test_the_state_machines_role_is_its_own(dev: Package) -> None:
    role = dev.resource("MonitorStateMachineRole")["Properties"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "states.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    [document] = [p["PolicyDocument"] for p in role["Policies"]]
    assert document["Statement"] == STATE_MACHINE_POLICY
    assert "ManagedPolicyArns" not in role


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_has_its_own_role_and_settings(dev: Package, function: str) -> None:
    function_id = monitor_template.logical_id(function)
    resource = dev.resource(function_id)
    properties = resource["Properties"]
    assert properties["Handler"] == f"app.{function}"
    assert properties["FunctionName"] == f"sagegate-dev-{function}"
    assert properties["Layers"] == [{"Ref": "DependenciesLayer"}]
    configured = load_config()["stages"]["dev"]["lambda_functions"][function]
    assert properties["MemorySize"] == configured["lambda_memory_size"]
    assert properties["Timeout"] == configured["lambda_timeout"]
    assert properties["ReservedConcurrentExecutions"] == configured["reserved_concurrency"]
    assert "SnapStart" not in properties and "AutoPublishAlias" not in properties
    assert resource["DependsOn"] == [f"{function_id}LogGroup"]
    group = dev.resource(f"{function_id}LogGroup")["Properties"]
    assert group["LogGroupName"] == f"/aws/lambda/sagegate-dev-{function}"
    role = dev.resource(f"{function_id}Role")["Properties"]
    documents = [p["PolicyDocument"] for p in role["Policies"]]
    committed = json.loads(monitor_function_policy_path("dev", function).read_text())
    assert documents == [committed]
    assert committed["Statement"] == DEV_FANOUT_POLICIES[function]
    assert committed == render_monitor_functions(load_stage("dev"), "123456789012",
                                                 "us-east-1")[function]
    assert_no_wildcards(committed)
    assert "ManagedPolicyArns" not in role
    assert configured["lambda_timeout"] <= monitor_definition.MAX_MAP_SECONDS \
        or function != "monitor_map"


def test_dev_has_no_single_function_policy_left() -> None:
    assert not monitor_policy_path("dev").exists()
    assert render_monitor(load_stage("dev"), "123456789012", "us-east-1") is None


def test_the_api_functions_role_gains_nothing_of_the_monitor(dev: Package) -> None:
    role = dev.resource("ApiHandlerRole")["Properties"]
    [document] = [p["PolicyDocument"] for p in role["Policies"]]
    assert document == json.loads(policy_path("dev").read_text())
    # it reads and lists the jobs bucket only (tests/deploy/test_job_functions.py), never
    # the captures' bucket
    reads = [s for s in document["Statement"]
             if set(s["Action"]) & {"s3:GetObject", "s3:ListBucket"}]
    assert reads and "sagegate-dev-data" not in json.dumps(reads)
    resources = json.dumps(document)
    assert "baselines" not in resources and "monitoring" not in resources


def test_sams_expansion_keeps_the_state_machine_and_its_schedule(dev: Package) -> None:
    transformed = sam_transform(dev)["Resources"]  # AWS's SAM translator, as sagegate check
    assert transformed["MonitorStateMachine"] == dev.resource("MonitorStateMachine")
    assert transformed["MonitorSchedule"] == dev.resource("MonitorSchedule")
    rules = [r for r in transformed.values() if r["Type"] == "AWS::Events::Rule"
             and r["Properties"]["Targets"][0]["Arn"] == {"Ref": "MonitorStateMachine"}]
    assert len(rules) == 1
    assert not [r for r in transformed.values() if r["Type"] == "AWS::Events::Rule"
                and "Monitor" in json.dumps(r["Properties"]["Targets"][0]["Arn"])
                and r["Properties"]["Targets"][0]["Arn"] != {"Ref": "MonitorStateMachine"}]


def test_a_stage_without_monitor_baseline_has_no_monitor(prod: Package) -> None:
    resources = prod.template["Resources"]
    assert not {"Monitor", "MonitorRole", "MonitorLogGroup", "MonitorStateMachine",
                "MonitorSchedule", "MonitorPlan"} & set(resources)
    assert not [r for r in resources.values()
                if r.get("Properties", {}).get("Events")]
    stage = load_stage("prod")
    assert render_monitor(stage, "123456789012", "us-east-1") is None
    assert render_monitor_functions(stage, "123456789012", "us-east-1") == {}
    assert not monitor_policy_path("prod").exists()


def test_the_single_function_keeps_its_fixes_and_its_policy() -> None:
    stage = single_function(load_stage("dev"))
    assert stage.monitor is not None and not stage.monitor.fanned_out
    resources = templates.merge_template(stage)["Resources"]
    assert "MonitorStateMachine" not in resources and "MonitorPlan" not in resources
    monitor = resources["Monitor"]
    assert monitor["Properties"]["FunctionName"] == "sagegate-dev-monitor"
    # EventBridge invokes it asynchronously: a failed hour is not run twice more
    assert monitor["Properties"]["EventInvokeConfig"] == {"MaximumRetryAttempts": 0}
    assert monitor["DependsOn"] == ["MonitorLogGroup"]
    document = render_monitor(stage, "123456789012", "us-east-1")
    assert document is not None and document["Statement"] == SINGLE_FUNCTION_POLICY
    assert render_monitor_functions(stage, "123456789012", "us-east-1") == {}


def _config_with(tmp_path: Path, **env: str) -> Path:
    """The config with dev's variables changed, and dev's captures no longer delivered by
    its own stream to where the monitor reads (``capture_stream``, ``MONITOR_CAPTURES``)."""
    config = load_config()
    del config["stages"]["dev"]["capture_stream"]
    config["stages"]["dev"]["environment_variables"].pop("MONITOR_CAPTURES")
    config["stages"]["dev"]["environment_variables"].update(env)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("destination", ["captures", "firehose://stream", ""])
def test_monitoring_without_s3_captures_is_a_configuration_error(
        tmp_path: Path, destination: str) -> None:
    with pytest.raises(ValueError, match="CAPTURE_DESTINATION must be the s3:// prefix"):
        load_stage("dev", _config_with(tmp_path, CAPTURE_DESTINATION=destination))


def test_a_monitor_reading_monitor_captures_is_granted_that_prefix(tmp_path: Path) -> None:
    # captures delivered by a Firehose stream to S3: the monitor reads them there
    stage = load_stage("dev", _config_with(tmp_path, CAPTURE_DESTINATION="firehose://c",
                                           MONITOR_CAPTURES="s3://delivered/captures"))
    policies = render_monitor_functions(stage, "123456789012", "us-east-1")
    reads = {s["Sid"]: s["Resource"] for s in policies["monitor_map"]["Statement"]}
    assert reads["ReadCaptures"] == "arn:aws:s3:::delivered/captures/*"
    assert reads["WriteTheRunsParts"] == "arn:aws:s3:::delivered/monitoring-runs/parts/*"
    writes = {s["Sid"]: s["Resource"] for s in policies["monitor_reduce"]["Statement"]}
    assert writes["WriteMonitoringReports"] == "arn:aws:s3:::delivered/monitoring/*"
    single = render_monitor(single_function(stage), "123456789012", "us-east-1")
    assert single is not None
    assert {s["Sid"]: s["Resource"] for s in single["Statement"]}["ReadCaptures"] == \
        "arn:aws:s3:::delivered/captures/*"


@pytest.mark.parametrize(("function", "engine"), [("monitor_map", "stepfunctions"),
                                                  ("monitor_reduce", "stepfunctions"),
                                                  ("monitor", "lambda")])
def test_a_monitor_function_without_its_own_policy_file_is_refused(
        tmp_path: Path, function: str, engine: str) -> None:
    config = load_config()
    functions = config["stages"]["dev"]["lambda_functions"]
    config["stages"]["dev"]["environment_variables"]["MONITOR_ENGINE"] = engine
    functions.setdefault("monitor", {})
    functions[function].pop("iam_policy_file", None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"lambda_functions\.{function}\.iam_policy_file"):
        load_stage("dev", path)


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("lambda_timeout", 600, "runs 5 minutes at most"),
    ("reserved_concurrency", 0, "at least 1"),
    ("reserved_concurrency", "8", "at least 1")])
def test_a_map_function_that_could_not_run_as_a_child_is_refused(
        tmp_path: Path, setting: str, value: Any, message: str) -> None:
    config = load_config()
    config["stages"]["dev"]["lambda_functions"]["monitor_map"][setting] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        load_stage("dev", path)


def test_an_unknown_engine_is_refused(tmp_path: Path) -> None:
    config = load_config()
    config["stages"]["dev"]["environment_variables"]["MONITOR_ENGINE"] = "glue"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="MONITOR_ENGINE must be one of lambda, stepfunctions"):
        load_stage("dev", path)


def test_bucket_root_prefixes_and_separate_buckets_are_granted_apart() -> None:
    stage = load_stage("dev")
    env = {name: value for name, value in stage.env.items() if name != "MONITOR_CAPTURES"}
    stage = dataclasses.replace(stage, env={
        **env, "CAPTURE_DESTINATION": "s3://caps", "MONITOR_BASELINE": "s3://base/b/",
        "MONITOR_OUTPUT": "s3://reports/hourly"})
    document = render_monitor(single_function(stage), "111122223333", "eu-west-1")
    assert document is not None
    granted: dict[str, Any] = {s["Sid"]: (s["Resource"], s.get("Condition"))
                               for s in document["Statement"]}
    assert granted["ReadCaptures"] == ("arn:aws:s3:::caps/*", None)
    assert granted["ReadBaselines"] == ("arn:aws:s3:::base/b/*", None)
    assert granted["WriteMonitoringReports"] == ("arn:aws:s3:::reports/hourly/*", None)
    listings = [(s["Resource"], s["Condition"]["StringLike"]["s3:prefix"])
                for s in document["Statement"] if s["Action"] == ["s3:ListBucket"]]
    assert listings == [("arn:aws:s3:::caps", ["*"]), ("arn:aws:s3:::base", ["b/*"])]
    fanned = render_monitor_functions(stage, "111122223333", "eu-west-1")
    assert {s["Sid"]: s["Resource"] for s in fanned["monitor_map"]["Statement"]}[
        "WriteTheRunsParts"] == "arn:aws:s3:::reports/hourly-runs/parts/*"
    for policy in fanned.values():
        assert_no_wildcards(policy)
    machine = {s["Sid"]: s for s in monitor_template.state_machine_statements(stage)}
    assert machine["ListTheCaptures"]["Condition"] == {"StringLike": {"s3:prefix": ["*"]}}
    assert machine["WriteTheRunsResults"]["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:s3:::reports/hourly-runs/results/*"}
