"""The scheduled monitor in the packaged templates: dev sets MONITOR_BASELINE, prod does not.

Its own function, schedule, role and log group; its policy exactly (read the captures and the
baseline, write the monitoring prefix, its own logs); the API function's role gains nothing
of it."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalicelib.monitor import deployed
from sagegate.deploy.policy import monitor_policy_path, policy_path, render_monitor
from sagegate.deploy.stages import load_config, load_stage
from tests.deploy.conftest import Package
from tests.deploy.test_policies import assert_no_wildcards
from tests.deploy.test_templates import sam_transform

pytestmark = pytest.mark.deploy

DEV_MONITOR_POLICY = [
    {"Sid": "ListCapturesAndBaselines", "Effect": "Allow", "Action": ["s3:ListBucket"],
     "Resource": "arn:aws:s3:::sagegate-dev-data",
     "Condition": {"StringLike": {"s3:prefix": ["captures/*", "baselines/*"]}}},
    {"Sid": "ReadCaptures", "Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": "arn:aws:s3:::sagegate-dev-data/captures/*"},
    {"Sid": "ReadBaselines", "Effect": "Allow", "Action": ["s3:GetObject"],
     "Resource": "arn:aws:s3:::sagegate-dev-data/baselines/*"},
    {"Sid": "WriteMonitoringReports", "Effect": "Allow", "Action": ["s3:PutObject"],
     "Resource": "arn:aws:s3:::sagegate-dev-data/monitoring/*"},
    {"Sid": "WriteOwnLogs", "Effect": "Allow",
     "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
     "Resource": "arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/"
                 "sagegate-dev-monitor:*"},
]


@pytest.fixture(scope="module")
def dev(package: Callable[[str], Package]) -> Package:
    return package("dev")


@pytest.fixture(scope="module")
def prod(package: Callable[[str], Package]) -> Package:
    return package("prod")


def test_the_monitor_is_a_scheduled_function_of_its_own(dev: Package) -> None:
    monitor = dev.resource("Monitor")
    properties = monitor["Properties"]
    assert properties["Handler"] == "app.monitor"
    assert properties["Events"] == {"MonitorEvent": {"Type": "Schedule", "Properties": {
        "Schedule": deployed.DEFAULT_SCHEDULE}}}
    assert deployed.DEFAULT_SCHEDULE == "cron(5 * * * ? *)"  # app.py's default too
    assert properties["FunctionName"] == "sagegate-dev-monitor"
    assert properties["Layers"] == [{"Ref": "DependenciesLayer"}]
    # EventBridge invokes it asynchronously: a failed hour is not run twice more
    assert properties["EventInvokeConfig"] == {"MaximumRetryAttempts": 0}
    configured = load_config()["stages"]["dev"]["lambda_functions"]["monitor"]
    assert properties["MemorySize"] == configured["lambda_memory_size"]
    assert properties["Timeout"] == configured["lambda_timeout"] == 900
    assert properties["ReservedConcurrentExecutions"] == 1  # one run at a time
    assert properties["Role"] == {"Fn::GetAtt": ["MonitorRole", "Arn"]}
    assert "SnapStart" not in properties and "AutoPublishAlias" not in properties
    assert monitor["DependsOn"] == ["MonitorLogGroup"]
    group = dev.resource("MonitorLogGroup")["Properties"]
    assert group["LogGroupName"] == "/aws/lambda/sagegate-dev-monitor"
    assert group["RetentionInDays"] > 0


def test_the_monitors_role_is_its_committed_policy_exactly(dev: Package) -> None:
    role = dev.resource("MonitorRole")["Properties"]
    documents = [p["PolicyDocument"] for p in role["Policies"]]
    assert documents == [json.loads(monitor_policy_path("dev").read_text())]
    assert documents[0]["Statement"] == DEV_MONITOR_POLICY
    assert "ManagedPolicyArns" not in role
    assert documents[0] == render_monitor(load_stage("dev"), "123456789012", "us-east-1")
    assert_no_wildcards(documents[0])


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


def test_the_schedule_becomes_an_events_rule_invoking_the_monitor(dev: Package) -> None:
    transformed = sam_transform(dev)  # AWS's SAM translator, as sagegate check runs it
    rules = {name: r for name, r in transformed["Resources"].items()
             if r["Type"] == "AWS::Events::Rule"
             and r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": ["Monitor", "Arn"]}}
    assert len(rules) == 1  # (the jobs' re-drive has its own rule)
    [rule] = rules.values()
    assert rule["Properties"]["ScheduleExpression"] == "cron(5 * * * ? *)"
    [target] = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["Monitor", "Arn"]}


def test_a_stage_without_monitor_baseline_has_no_monitor(prod: Package) -> None:
    resources = prod.template["Resources"]
    assert not {"Monitor", "MonitorRole", "MonitorLogGroup"} & set(resources)
    assert not [r for r in resources.values()
                if r.get("Properties", {}).get("Events")]
    assert render_monitor(load_stage("prod"), "123456789012", "us-east-1") is None
    assert not monitor_policy_path("prod").exists()


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
    policy = render_monitor(stage, "123456789012", "us-east-1")
    assert policy is not None
    reads = {s["Sid"]: s["Resource"] for s in policy["Statement"]}
    assert reads["ReadCaptures"] == "arn:aws:s3:::delivered/captures/*"
    assert reads["WriteMonitoringReports"] == "arn:aws:s3:::delivered/monitoring/*"


def test_a_monitor_without_its_own_policy_file_is_refused(tmp_path: Path) -> None:
    config = load_config()
    del config["stages"]["dev"]["lambda_functions"]["monitor"]["iam_policy_file"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"lambda_functions\.monitor\.iam_policy_file"):
        load_stage("dev", path)


def test_bucket_root_prefixes_and_separate_buckets_are_granted_apart() -> None:
    stage = load_stage("dev")
    env = {name: value for name, value in stage.env.items() if name != "MONITOR_CAPTURES"}
    stage = dataclasses.replace(stage, env={
        **env, "CAPTURE_DESTINATION": "s3://caps", "MONITOR_BASELINE": "s3://base/b/",
        "MONITOR_OUTPUT": "s3://reports/hourly"})
    document = render_monitor(stage, "111122223333", "eu-west-1")
    assert document is not None
    granted: dict[str, Any] = {s["Sid"]: (s["Resource"], s.get("Condition"))
                               for s in document["Statement"]}
    assert granted["ReadCaptures"] == ("arn:aws:s3:::caps/*", None)
    assert granted["ReadBaselines"] == ("arn:aws:s3:::base/b/*", None)
    assert granted["WriteMonitoringReports"] == ("arn:aws:s3:::reports/hourly/*", None)
    listings = [(s["Resource"], s["Condition"]["StringLike"]["s3:prefix"])
                for s in document["Statement"] if s["Action"] == ["s3:ListBucket"]]
    assert listings == [("arn:aws:s3:::caps", ["*"]), ("arn:aws:s3:::base", ["b/*"])]
