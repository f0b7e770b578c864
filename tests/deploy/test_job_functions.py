"""The jobs in the packaged templates: dev sets JOBS_BUCKET, prod does not.

Three event functions of their own (memory, timeout, reserved concurrency, role, log group,
dead-letter queue), the bucket with its notification to job_runner on the tickets prefix, the
table, the topics and their subscriptions; each role exactly its committed policy, scoped to
the stage's prefixes, table and endpoints; the API function gains no InvokeEndpointAsync."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chalicelib.jobs.table import TableJobStore
from sagegate.deploy import jobs, jobs_policy, jobs_template
from sagegate.deploy.chalice_sam import s3_event
from sagegate.deploy.policy import policy_path, render
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import load_config, load_stage
from tests.deploy.conftest import ROOT, Package
from tests.deploy.test_policies import assert_no_wildcards
from tests.deploy.test_templates import sam_transform

pytestmark = pytest.mark.deploy

ACCOUNT, REGION = "123456789012", "us-east-1"
FUNCTIONS = {"JobRunner": "job_runner", "JobResults": "job_results",
             "JobFailures": "job_failures"}
OBJECTS = "arn:aws:s3:::sagegate-dev-jobs/jobs/"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/sagegate-dev-jobs"
NEVER = {"dynamodb:DeleteItem", "dynamodb:Scan", "dynamodb:Query", "dynamodb:BatchWriteItem",
         "s3:DeleteObject", "s3:PutObjectAcl", "s3:PutBucketNotification"}


@pytest.fixture(scope="module")
def dev(package: Callable[[str], Package]) -> Package:
    return package("dev")


@pytest.fixture(scope="module")
def expanded(dev: Package) -> dict[str, Any]:
    return sam_transform(dev)["Resources"]  # type: ignore[no-any-return]


def policy_of(function: str) -> dict[str, Any]:
    return json.loads((ROOT / ".chalice" / f"policy-dev-{function}.json").read_text())  # type: ignore[no-any-return]


def granted(document: dict[str, Any]) -> dict[str, tuple[list[str], Any]]:
    return {s["Sid"]: (s["Action"], s["Resource"]) for s in document["Statement"]}


def actions(document: dict[str, Any]) -> set[str]:
    return {action for statement in document["Statement"] for action in statement["Action"]}


@pytest.mark.parametrize("logical_id,function", FUNCTIONS.items())
def test_each_job_function_is_its_own_function(dev: Package, logical_id: str,
                                               function: str) -> None:
    resource = dev.resource(logical_id)
    properties = resource["Properties"]
    configured = load_config()["stages"]["dev"]["lambda_functions"][function]
    assert properties["Handler"] == f"app.{function}"
    assert properties["FunctionName"] == f"sagegate-dev-{function}"
    assert properties["MemorySize"] == configured["lambda_memory_size"]
    assert properties["Timeout"] == configured["lambda_timeout"]
    assert properties["ReservedConcurrentExecutions"] == configured["reserved_concurrency"] > 0
    assert properties["Layers"] == [{"Ref": "DependenciesLayer"}]
    assert properties["Role"] == {"Fn::GetAtt": [f"{logical_id}Role", "Arn"]}
    assert properties["DeadLetterQueue"] == {
        "Type": "SQS", "TargetArn": {"Fn::GetAtt": ["JobsDeadLetterQueue", "Arn"]}}
    assert "SnapStart" not in properties and "AutoPublishAlias" not in properties
    assert resource["DependsOn"][:2] == [f"{logical_id}LogGroup", "JobsTable"]
    group = dev.resource(f"{logical_id}LogGroup")["Properties"]
    assert group["LogGroupName"] == f"/aws/lambda/sagegate-dev-{function}"
    assert group["RetentionInDays"] > 0
    role = dev.resource(f"{logical_id}Role")["Properties"]
    assert [p["PolicyDocument"] for p in role["Policies"]] == [policy_of(function)]
    assert "ManagedPolicyArns" not in role


def test_the_runner_has_the_memory_and_time_of_a_large_decode(dev: Package) -> None:
    runner = dev.resource("JobRunner")["Properties"]
    assert runner["MemorySize"] >= 3008 and runner["Timeout"] == 900
    # the results function postprocesses a whole asynchronous output (a 30 MB batch's answer
    # is over 100 MB of JSON); the failures function reads no object
    results = dev.resource("JobResults")["Properties"]
    assert results["MemorySize"] >= 3008 and 60 < results["Timeout"] <= 900
    failures = dev.resource("JobFailures")["Properties"]
    assert failures["MemorySize"] <= 1024 and failures["Timeout"] <= 60
    # the API function keeps its own size and API Gateway's time
    assert dev.resource("APIHandler")["Properties"]["Timeout"] < 29


def test_the_bucket_notifies_the_runner_of_new_tickets_only(dev: Package,
                                                            expanded: dict[str, Any]) -> None:
    events = dev.resource("JobRunner")["Properties"]["Events"]
    assert events == {"JobRunnerS3event": {"Type": "S3", "Properties": {
        "Bucket": {"Ref": "JobsBucket"}, "Events": ["s3:ObjectCreated:*"],
        "Filter": {"S3Key": {"Rules": [{"Name": "prefix", "Value": "jobs/tickets/"}]}}}}}
    bucket = expanded["JobsBucket"]
    [notification] = bucket["Properties"]["NotificationConfiguration"]["LambdaConfigurations"]
    assert notification == {
        "Event": "s3:ObjectCreated:*", "Function": {"Fn::GetAtt": ["JobRunner", "Arn"]},
        "Filter": {"S3Key": {"Rules": [{"Name": "prefix", "Value": "jobs/tickets/"}]}}}
    [permission] = [name for name in bucket["DependsOn"]
                    if expanded[name]["Type"] == "AWS::Lambda::Permission"]
    allowed = expanded[permission]["Properties"]
    assert allowed["FunctionName"] == {"Ref": "JobRunner"}
    assert allowed["Principal"] == "s3.amazonaws.com"
    assert allowed["SourceAccount"] == {"Ref": "AWS::AccountId"}


def test_the_bucket_is_private_encrypted_and_expires_the_stages_objects(dev: Package) -> None:
    bucket = dev.resource("JobsBucket")
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    props = bucket["Properties"]
    assert props["BucketName"] == "sagegate-dev-jobs"
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    [rule] = props["LifecycleConfiguration"]["Rules"]
    assert rule["Prefix"] == "jobs/" and rule["Status"] == "Enabled"
    assert rule["ExpirationInDays"] == 8  # JOBS_TTL_SECONDS' default 7 days, plus one
    [cors] = props["CorsConfiguration"]["CorsRules"]
    # the page's presigned POST of an upload and presigned GET of a large answer, no more
    assert cors["AllowedMethods"] == ["POST", "GET"]
    assert cors["AllowedOrigins"] == [
        {"Fn::Sub": "https://${RestAPI}.execute-api.${AWS::Region}.${AWS::URLSuffix}"}]
    [deny] = dev.resource("JobsBucketPolicy")["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_the_table_is_the_one_the_functions_name(dev: Package) -> None:
    table = dev.resource("JobsTable")
    props = table["Properties"]
    assert props["TableName"] == "sagegate-dev-jobs"
    assert props["KeySchema"] == [{"AttributeName": "job_id", "KeyType": "HASH"}]
    # the re-drive's index of queued jobs by age: attributes every record already has
    assert props["AttributeDefinitions"] == [{"AttributeName": "job_id", "AttributeType": "S"},
                                             {"AttributeName": "state", "AttributeType": "S"},
                                             {"AttributeName": "created_at",
                                              "AttributeType": "N"}]
    assert props["GlobalSecondaryIndexes"] == [{
        "IndexName": TableJobStore.QUEUED_INDEX,
        "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"},
                      {"AttributeName": "created_at", "KeyType": "RANGE"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"}}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    for name in ("APIHandler", *FUNCTIONS):
        variables = dev.resource(name)["Properties"]["Environment"]["Variables"]
        assert variables["JOBS_TABLE"] == "sagegate-dev-jobs"
        assert variables["JOBS_BUCKET"] == "sagegate-dev-jobs"
    assert "JobsTable" in dev.resource("APIHandler")["DependsOn"]


def test_each_topic_is_encrypted_and_subscribes_its_function(
        dev: Package, expanded: dict[str, Any]) -> None:
    topics = {"JobsSuccessTopic": ("sagegate-dev-jobs-success", "JobResults"),
              "JobsErrorTopic": ("sagegate-dev-jobs-error", "JobFailures")}
    subscriptions = [r["Properties"] for r in expanded.values()
                     if r["Type"] == "AWS::SNS::Subscription"]
    assert len(subscriptions) == len(topics)
    for logical_id, (name, function) in topics.items():
        topic = dev.resource(logical_id)["Properties"]
        assert topic["TopicName"] == name and topic["KmsMasterKeyId"] == "alias/aws/sns"
        assert logical_id in dev.resource(function)["DependsOn"]  # subscribed once it exists
        arn = {"Fn::Sub": f"arn:${{AWS::Partition}}:sns:${{AWS::Region}}:${{AWS::AccountId}}:"
                          f"{name}"}
        assert {"Endpoint": {"Fn::GetAtt": [function, "Arn"]}, "Protocol": "lambda",
                "TopicArn": arn} in subscriptions
        [permission] = [r["Properties"] for r in expanded.values()
                        if r["Type"] == "AWS::Lambda::Permission"
                        and r["Properties"]["FunctionName"] == {"Ref": function}]
        assert permission["Principal"] == "sns.amazonaws.com"
        assert permission["SourceArn"] == arn
    document = dev.resource("JobsTopicPolicy")["Properties"]["PolicyDocument"]
    publish, deny = document["Statement"]
    assert publish["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::"
                                                       "${AWS::AccountId}:root"}}
    assert publish["Action"] == "sns:Publish"
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*"


def test_the_outputs_say_where_asynchronous_endpoints_write(dev: Package) -> None:
    outputs = dev.template["Outputs"]
    assert outputs["JobsAsyncOutputPath"]["Value"] == {
        "Fn::Sub": "s3://${JobsBucket}/jobs/async/output"}
    assert outputs["JobsSuccessTopicArn"]["Value"] == {"Ref": "JobsSuccessTopic"}
    assert outputs["JobsErrorTopicArn"]["Value"] == {"Ref": "JobsErrorTopic"}


def test_the_api_function_gains_uploads_tickets_and_records_only() -> None:
    document = json.loads(policy_path("dev").read_text())
    found = granted(document)
    assert found["WriteUploadsAndTickets"] == (
        ["s3:PutObject"], [f"{OBJECTS}uploads/*", f"{OBJECTS}tickets/*"])
    assert found["ReadUploadsAndResults"] == (
        ["s3:GetObject"], [f"{OBJECTS}uploads/*", f"{OBJECTS}results/*"])
    assert found["CreateAndReadJobs"] == (
        ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem"], TABLE)
    [listing] = [s for s in document["Statement"] if s["Sid"] == "ListUploads"]
    # unconditioned: S3 answers a missing key 404 only to a role that may list the bucket
    assert listing["Resource"] == "arn:aws:s3:::sagegate-dev-jobs" and "Condition" not in listing
    assert "sagemaker:InvokeEndpointAsync" not in actions(document)
    assert not actions(document) & NEVER
    assert_no_wildcards(document)


def test_the_runner_invokes_realtime_and_asynchronous_endpoints_apart() -> None:
    found = granted(policy_of("job_runner"))
    endpoint = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/"
    assert found["InvokeAsyncEndpoints"] == (
        ["sagemaker:InvokeEndpointAsync"], [f"{endpoint}iris-async", f"{endpoint}slow-async"])
    realtime_actions, realtime = found["InvokeRealtimeEndpoints"]
    assert realtime_actions == ["sagemaker:InvokeEndpoint"]
    assert f"{endpoint}efficientnet-lite0" in realtime
    assert not {f"{endpoint}iris-async", f"{endpoint}slow-async"} & set(realtime)
    assert found["ReadUploads"] == (["s3:GetObject"], [f"{OBJECTS}uploads/*"])
    assert found["WriteInputsAndResults"] == (
        ["s3:PutObject"], [f"{OBJECTS}inputs/*", f"{OBJECTS}results/*"])
    assert found["ReadAndAdvanceJobs"] == (["dynamodb:GetItem", "dynamodb:UpdateItem"], TABLE)
    assert found["WriteCaptures"] == (  # the dev stage captures through its Firehose stream
        ["firehose:PutRecordBatch"],
        f"arn:aws:firehose:{REGION}:{ACCOUNT}:deliverystream/sagegate-dev-captures")
    assert found["SendFailedEvents"] == (
        ["sqs:SendMessage"], f"arn:aws:sqs:{REGION}:{ACCOUNT}:sagegate-dev-jobs-dead-letter")


def test_the_finishers_read_outputs_and_nothing_they_do_not_need() -> None:
    results = granted(policy_of("job_results"))
    assert results["ReadAsyncOutputs"] == (["s3:GetObject"], [f"{OBJECTS}async/*"])
    assert results["WriteResults"] == (["s3:PutObject"], [f"{OBJECTS}results/*"])
    assert not any(action.startswith("sagemaker:") for action in actions(policy_of("job_results")))
    failures = policy_of("job_failures")
    assert actions(failures) == {"dynamodb:GetItem", "dynamodb:UpdateItem",
                                 "logs:CreateLogStream", "logs:PutLogEvents", "sqs:SendMessage"}


@pytest.mark.parametrize("function", [*jobs.JOB_FUNCTIONS, jobs.JOB_REDRIVE])
def test_each_job_policy_is_committed_scoped_and_deletes_nothing(function: str) -> None:
    document = policy_of(function)
    assert document == jobs_policy.render_function(load_stage("dev"), function, ACCOUNT, REGION)
    # the re-drive lists queued jobs through the table's index: Query there, nowhere else
    assert not actions(document) & NEVER - ({"dynamodb:Query"}
                                            if function == jobs.JOB_REDRIVE else set())
    assert_no_wildcards(document)
    logs = granted(document)["WriteOwnLogs"][1]
    assert logs.endswith(f":log-group:/aws/lambda/sagegate-dev-{function}:*")


def test_the_redrive_is_a_scheduled_function_of_its_own(dev: Package,
                                                          expanded: dict[str, Any]) -> None:
    resource = dev.resource("JobRedrive")
    properties = resource["Properties"]
    configured = load_config()["stages"]["dev"]["lambda_functions"]["job_redrive"]
    assert properties["Handler"] == "app.job_redrive"
    assert properties["FunctionName"] == "sagegate-dev-job_redrive"
    assert (properties["MemorySize"], properties["Timeout"]) == (
        configured["lambda_memory_size"], configured["lambda_timeout"])
    assert properties["ReservedConcurrentExecutions"] == 1  # one run at a time
    assert properties["Layers"] == [{"Ref": "DependenciesLayer"}]
    assert properties["EventInvokeConfig"] == {"MaximumRetryAttempts": 0}
    assert "DeadLetterQueue" not in properties and "SnapStart" not in properties
    assert properties["Events"] == {"JobRedriveEvent": {
        "Type": "Schedule", "Properties": {"Schedule": "rate(5 minutes)"}}}
    assert resource["DependsOn"] == ["JobRedriveLogGroup", "JobsTable", "JobRunner"]
    assert dev.resource("JobRedriveLogGroup")["Properties"]["LogGroupName"] == \
        "/aws/lambda/sagegate-dev-job_redrive"
    role = dev.resource("JobRedriveRole")["Properties"]
    assert [p["PolicyDocument"] for p in role["Policies"]] == [policy_of("job_redrive")]
    [rule] = [r["Properties"] for r in expanded.values() if r["Type"] == "AWS::Events::Rule"
              and r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": ["JobRedrive", "Arn"]}]
    assert rule["ScheduleExpression"] == "rate(5 minutes)"
    [permission] = [r["Properties"] for r in expanded.values()
                    if r["Type"] == "AWS::Lambda::Permission"
                    and r["Properties"]["FunctionName"] == {"Ref": "JobRedrive"}]
    assert permission["Principal"] == "events.amazonaws.com"


def test_the_redrive_reads_jobs_and_tickets_and_invokes_the_runner_only() -> None:
    found = granted(policy_of("job_redrive"))
    assert found["ListQueuedJobs"] == (
        ["dynamodb:Query"], f"{TABLE}/index/{TableJobStore.QUEUED_INDEX}")
    assert found["ReadJobs"] == (["dynamodb:GetItem"], TABLE)
    assert found["ReadTickets"] == (["s3:GetObject"], [f"{OBJECTS}tickets/*"])
    assert found["ListTickets"] == (["s3:ListBucket"], "arn:aws:s3:::sagegate-dev-jobs")
    assert found["InvokeJobRunner"] == (
        ["lambda:InvokeFunction"],
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:sagegate-dev-job_runner")
    assert set(found) == {"ListQueuedJobs", "ReadJobs", "ReadTickets", "ListTickets",
                          "InvokeJobRunner", "WriteOwnLogs"}
    assert not {action for action in actions(policy_of("job_redrive"))
                if action.startswith("s3:Put") or action.endswith(("UpdateItem", "PutItem"))}


def test_a_redrive_without_its_own_policy_or_with_a_period_eventbridge_cannot_run_is_refused(
        tmp_path: Path) -> None:
    functions = load_config()["stages"]["dev"]["lambda_functions"]
    del functions["job_redrive"]["iam_policy_file"]
    with pytest.raises(ValueError, match=r"lambda_functions\.job_redrive\.iam_policy_file"):
        load_stage("dev", _config_with(tmp_path, functions))
    with pytest.raises(ValueError, match="whole minutes"):
        load_stage("dev", _config_with(tmp_path, JOB_REDRIVE_PERIOD_SECONDS="90"))
    with pytest.raises(ValueError, match="JOB_REDRIVE_AFTER_SECONDS"):
        load_stage("dev", _config_with(tmp_path, JOB_REDRIVE_AFTER_SECONDS="soon"))


def test_a_stage_without_jobs_bucket_has_no_jobs(package: Callable[[str], Package]) -> None:
    prod = package("prod")
    resources = prod.template["Resources"]
    assert not [name for name in resources if name.startswith(("Job", "Jobs"))]
    assert "JobsTable" not in resources["APIHandler"]["DependsOn"]
    document = render(load_stage("prod"), ACCOUNT, REGION)
    assert not [s for s in document["Statement"] if "jobs" in json.dumps(s)]
    assert not list((ROOT / ".chalice").glob("policy-prod-job_*.json"))


def with_env(stage: Stage, **env: str) -> Stage:
    return dataclasses.replace(stage, env={**stage.env, **env})


def test_one_topic_for_both_outcomes_is_one_function() -> None:
    stage = with_env(load_stage("dev"), JOBS_ERROR_TOPIC="sagegate-dev-jobs-success")
    assert jobs.functions(stage) == ["job_runner", "job_results"]
    resources = jobs_template.jobs_resources(stage)
    assert "JobsErrorTopic" not in resources and "JobFailures" not in resources
    assert resources["JobsTopicPolicy"]["Properties"]["Topics"] == [{"Ref": "JobsSuccessTopic"}]
    assert jobs_policy.render_function(stage, "job_failures", ACCOUNT, REGION) is None


def test_a_topic_given_by_arn_is_not_created_by_the_stack() -> None:
    arn = "arn:aws:sns:us-east-1:111122223333:shared-async-success"
    stage = with_env(load_stage("dev"), JOBS_SUCCESS_TOPIC=arn)
    resources = jobs_template.jobs_resources(stage)
    assert "JobsSuccessTopic" not in resources
    assert "JobsSuccessTopic" not in resources["JobResults"]["DependsOn"]
    assert resources["JobsTopicPolicy"]["Properties"]["Topics"] == [{"Ref": "JobsErrorTopic"}]
    assert jobs_template.jobs_outputs(stage)["JobsSuccessTopicArn"]["Value"] == arn


def _config_with(tmp_path: Path, functions: dict[str, Any] | None = None,
                 **env: str) -> Path:
    config = load_config()
    config["stages"]["dev"]["environment_variables"].update(env)
    if functions is not None:
        config["stages"]["dev"]["lambda_functions"] = functions
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_deployed_jobs_without_a_table_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="JOBS_BUCKET without JOBS_TABLE"):
        load_stage("dev", _config_with(tmp_path, JOBS_TABLE=""))


def test_a_job_function_without_its_own_policy_file_is_refused(tmp_path: Path) -> None:
    functions = load_config()["stages"]["dev"]["lambda_functions"]
    del functions["job_results"]["iam_policy_file"]
    with pytest.raises(ValueError, match=r"lambda_functions\.job_results\.iam_policy_file"):
        load_stage("dev", _config_with(tmp_path, functions))


def test_only_the_stages_own_bucket_can_carry_an_s3_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBS_BUCKET", "sagegate-dev-jobs")
    notification = SimpleNamespace(bucket="someone-elses-bucket", prefix="", suffix=".jpg",
                                   events=["s3:ObjectCreated:*"])
    with pytest.raises(NotImplementedError, match="only the stage's JOBS_BUCKET"):
        s3_event(notification)  # type: ignore[arg-type]
    mine = SimpleNamespace(**{**vars(notification), "bucket": "sagegate-dev-jobs"})
    assert s3_event(mine)["Properties"] == {  # type: ignore[arg-type]
        "Bucket": {"Ref": "JobsBucket"}, "Events": ["s3:ObjectCreated:*"],
        "Filter": {"S3Key": {"Rules": [{"Name": "suffix", "Value": ".jpg"}]}}}


def test_a_runner_timeout_the_api_does_not_assume_is_refused(tmp_path: Path) -> None:
    # the API judges a runner gone by JOB_RUNNER_TIMEOUT_SECONDS (default 900, dev's timeout)
    load_stage("dev", _config_with(tmp_path, JOB_RUNNER_TIMEOUT_SECONDS="900"))
    with pytest.raises(ValueError, match=r"JOB_RUNNER_TIMEOUT_SECONDS is 600 s but "
                       r"lambda_functions\.job_runner\.lambda_timeout is 900 s"):
        load_stage("dev", _config_with(tmp_path, JOB_RUNNER_TIMEOUT_SECONDS="600"))
    functions = load_config()["stages"]["dev"]["lambda_functions"]
    functions["job_runner"]["lambda_timeout"] = 300
    with pytest.raises(ValueError, match=r"is 900 s but .* is 300 s"):
        load_stage("dev", _config_with(tmp_path, functions))
