"""The dev stage's capture stream in the packaged template: dev captures through Kinesis Data
Firehose into its data bucket, prod captures nothing.

One stream for the stage, partitioned by each record's endpoint and variant into the folders
the S3 sink writes and the monitor reads; its buffers, compression, encryption, error prefix
and log; its role (S3 on the capture and error prefixes only, its one log stream); the
function's role may put records on that stream alone; the monitor reads where it delivers;
the stand-alone stack of Path B is the same stream; the stage checks that refuse a stream
that could not work."""
from __future__ import annotations

import dataclasses
import datetime
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chalicelib.capture.records import Exchange, build_record
from chalicelib.capture.sinks import S3Sink, firehose_line
from chalicelib.core.aws import S3Uri
from chalicelib.monitor.deployed_settings import DEFAULT_SCHEDULE
from sagegate.deploy import capture_template, chalice_deploy, monitor_template
from sagegate.deploy.policy import (
    monitor_function_policy_path,
    policy_path,
    render_monitor_functions,
)
from sagegate.deploy.stages import load_config, load_stage
from tests.deploy.conftest import ROOT, Package
from tests.deploy.test_templates import sam_transform

pytestmark = pytest.mark.deploy

ACCOUNT, REGION = "123456789012", "us-east-1"
STREAM = "sagegate-dev-captures"
DATA = "sagegate-dev-data"
WHEN = datetime.datetime(2026, 11, 23, 9, 59, 58, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def dev(package: Callable[[str], Package]) -> Package:
    return package("dev")


@pytest.fixture(scope="module")
def prod(package: Callable[[str], Package]) -> Package:
    return package("prod")


def destination(dev: Package) -> dict[str, Any]:
    properties: dict[str, Any] = dev.resource("CaptureStream")["Properties"]
    return properties["ExtendedS3DestinationConfiguration"]


QUERY_KEY = re.compile(r"(\w+): \.eventMetadata\.(\w+)(?:\[(\d+):(\d+)\])?")


def partition_keys(record: dict[str, Any]) -> dict[str, str]:
    """The keys the stream's MetadataExtractionQuery reads from a record: each
    ``name: .eventMetadata.field`` or ``name: .eventMetadata.field[a:b]`` (jq's slice)."""
    query = capture_template.PARTITION_QUERY
    found = QUERY_KEY.findall(query)
    assert query == "{" + ", ".join(match.group(0) for match in QUERY_KEY.finditer(query)) + "}"
    metadata = record["eventMetadata"]
    return {name: metadata[field][int(start):int(stop)] if start else metadata[field]
            for name, field, start, stop in found}


def firehose_prefix(expression: str, record: dict[str, Any], arrival: datetime.datetime) -> str:
    """A Firehose S3 prefix expression evaluated as the stream does: each
    ``!{partitionKeyFromQuery:k}`` from the keys its MetadataExtractionQuery reads, each
    ``!{timestamp:yyyy/MM/dd/HH}`` from the arrival time (UTC)."""
    keys = partition_keys(record)
    text = re.sub(r"!\{partitionKeyFromQuery:(\w+)\}", lambda m: keys[m.group(1)], expression)
    text = text.replace("!{timestamp:yyyy/MM/dd/HH}", arrival.strftime("%Y/%m/%d/%H"))
    assert "!{" not in text, text
    return text


@pytest.mark.parametrize("endpoint,variant", [("efficientnet-lite0", "AllTraffic"),
                                              ("iris", "variant-2"), ("../up", "a/b")])
def test_the_stream_delivers_in_the_folders_the_s3_sink_writes(
        dev: Package, endpoint: str, variant: str) -> None:
    exchange = Exchange(endpoint=endpoint, variant=variant, inference_id="r-1", sent=b"[1]",
                        sent_content_type="application/json", received=b"[0.5]",
                        received_content_type="application/json")
    captured = build_record(exchange, "both", now=WHEN)
    sent = json.loads(firehose_line(captured))  # what the sink puts on the stream
    delivered = firehose_prefix(destination(dev)["Prefix"], sent, WHEN)
    written = S3Sink(None, DATA, "captures").key(captured)  # the direct S3 sink's object
    assert delivered == written.rsplit("/", 1)[0] + "/"
    assert delivered.startswith("captures/") and ".." not in delivered


@pytest.mark.parametrize("late", [datetime.timedelta(0), datetime.timedelta(seconds=3),
                                  datetime.timedelta(hours=2)])
def test_a_record_is_delivered_in_its_inferences_hour_however_late_it_arrives(
        late: datetime.timedelta) -> None:
    """WHEN is 09:59:58: a record held 3 s by a sink outage reaches the stream at 10:00:01,
    yet belongs in the 09 folder, where the S3 and directory sinks put it."""
    stack = capture_template.capture_template(load_stage("dev"))
    s3 = stack["Resources"]["CaptureStream"]["Properties"]["ExtendedS3DestinationConfiguration"]
    exchange = Exchange(endpoint="iris", variant="Canary", inference_id="r-1", sent=b"[1]",
                        sent_content_type="application/json", received=b"[0.5]",
                        received_content_type="application/json")
    captured = build_record(exchange, "both", now=WHEN)
    delivered = firehose_prefix(s3["Prefix"], json.loads(firehose_line(captured)), WHEN + late)
    assert delivered == "captures/iris/Canary/2026/11/23/09/"
    assert delivered == S3Sink(None, DATA, "captures").key(captured).rsplit("/", 1)[0] + "/"


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_jq_reads_the_partition_keys_as_the_tests_helper_does() -> None:
    """The stream's JQ 1.6 on a record the sink sends gives the keys the helper above reads."""
    exchange = Exchange(endpoint="iris", variant="Canary", inference_id="r-1", sent=b"[1]",
                        sent_content_type="application/json", received=b"[0.5]",
                        received_content_type="application/json")
    line = firehose_line(build_record(exchange, "both", now=WHEN))
    done = subprocess.run(["jq", "-c", capture_template.PARTITION_QUERY], input=line,
                          capture_output=True, check=True, timeout=30)
    assert json.loads(done.stdout) == partition_keys(json.loads(line))


def test_one_stream_for_the_stage_buffered_compressed_and_encrypted(dev: Package) -> None:
    stream = dev.resource("CaptureStream")
    properties = stream["Properties"]
    stage = load_stage("dev")
    assert stage.env["CAPTURE_DESTINATION"] == f"firehose://{STREAM}"
    assert properties["DeliveryStreamName"] == STREAM
    assert properties["DeliveryStreamType"] == "DirectPut"
    assert properties["DeliveryStreamEncryptionConfigurationInput"] == {
        "KeyType": "AWS_OWNED_CMK"}
    s3 = destination(dev)
    assert s3["BucketARN"] == {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{DATA}"}
    assert s3["RoleARN"] == {"Fn::GetAtt": ["CaptureStreamRole", "Arn"]}
    assert s3["ErrorOutputPrefix"] == (
        "captures-errors/!{firehose:error-output-type}/!{timestamp:yyyy/MM/dd/HH}/")
    assert not s3["ErrorOutputPrefix"].startswith("captures/")  # the monitor never lists it
    # dynamic partitioning takes 64 MiB buffers at least; 60 s lands an hour's last object
    # well before the monitor's run at five past
    assert s3["BufferingHints"] == {"SizeInMBs": 64, "IntervalInSeconds": 60}
    assert DEFAULT_SCHEDULE == "cron(5 * * * ? *)"
    assert (s3["CompressionFormat"], s3["FileExtension"]) == ("GZIP", ".jsonl.gz")
    assert s3["DynamicPartitioningConfiguration"]["Enabled"] is True
    [processor] = s3["ProcessingConfiguration"]["Processors"]  # no AppendDelimiterToRecord:
    assert processor["Type"] == "MetadataExtraction"          # records end with a newline
    assert {p["ParameterName"]: p["ParameterValue"] for p in processor["Parameters"]} == {
        "MetadataExtractionQuery": "{endpoint: .eventMetadata.sagegateEndpoint, "
                                   "variant: .eventMetadata.sagegateVariant, "
                                   "year: .eventMetadata.inferenceTime[0:4], "
                                   "month: .eventMetadata.inferenceTime[5:7], "
                                   "day: .eventMetadata.inferenceTime[8:10], "
                                   "hour: .eventMetadata.inferenceTime[11:13]}",
        "JsonParsingEngine": "JQ-1.6"}
    assert s3["CloudWatchLoggingOptions"] == {
        "Enabled": True, "LogGroupName": {"Ref": "CaptureStreamLogGroup"},
        "LogStreamName": {"Ref": "CaptureStreamLogStream"}}
    group = dev.resource("CaptureStreamLogGroup")["Properties"]
    assert group["LogGroupName"] == f"/aws/kinesisfirehose/{STREAM}"
    assert group["RetentionInDays"] == stage.log_retention_in_days == 14
    assert dev.resource("CaptureStreamLogStream")["Properties"]["LogStreamName"] == \
        "DestinationDelivery"
    assert {"Key": "stage", "Value": "dev"} in properties["Tags"]
    # the function's first capture finds the stream
    assert "CaptureStream" in dev.resource("APIHandler")["DependsOn"]
    streams = [name for name, resource in dev.template["Resources"].items()
               if resource.get("Type") == "AWS::KinesisFirehose::DeliveryStream"]
    assert streams == ["CaptureStream"]
    outputs = dev.template["Outputs"]
    assert outputs["CaptureStreamName"]["Value"] == {"Ref": "CaptureStream"}
    assert outputs["CaptureS3Prefix"]["Value"] == f"s3://{DATA}/captures"


def test_the_streams_role_writes_the_capture_prefixes_and_its_log_only(dev: Package) -> None:
    role = dev.resource("CaptureStreamRole")["Properties"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "firehose.amazonaws.com"}
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"] == {"StringEquals": {"sts:ExternalId": {"Ref": "AWS::AccountId"}}}
    [policy] = role["Policies"]
    bucket = f"arn:${{AWS::Partition}}:s3:::{DATA}"
    assert policy["PolicyDocument"]["Statement"] == [
        {"Sid": "FindAndListTheBucket", "Effect": "Allow",
         "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
         "Resource": {"Fn::Sub": bucket}},
        {"Sid": "DeliverCaptures", "Effect": "Allow",
         "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
         "Resource": [{"Fn::Sub": f"{bucket}/captures/*"},
                      {"Fn::Sub": f"{bucket}/captures-errors/*"}]},
        {"Sid": "LogDeliveryErrors", "Effect": "Allow", "Action": ["logs:PutLogEvents"],
         "Resource": {"Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:"
                                 f"log-group:/aws/kinesisfirehose/{STREAM}:log-stream:"
                                 "DestinationDelivery"}},
    ]
    assert "ManagedPolicyArns" not in role


@pytest.mark.parametrize("policy", ["policy-dev.json", "policy-dev-job_runner.json",
                                    "policy-dev-job_results.json"])
def test_the_functions_that_capture_may_put_records_on_that_stream_alone(policy: str) -> None:
    document = json.loads((ROOT / ".chalice" / policy).read_text())
    [capture] = [s for s in document["Statement"] if s["Sid"] == "WriteCaptures"]
    assert capture["Action"] == ["firehose:PutRecordBatch"]
    assert capture["Resource"] == f"arn:aws:firehose:{REGION}:{ACCOUNT}:deliverystream/{STREAM}"
    assert DATA not in json.dumps(document)  # no S3 grant on the data bucket any more


def test_the_api_role_in_the_template_is_that_policy(dev: Package) -> None:
    [document] = [p["PolicyDocument"] for p in
                  dev.resource("ApiHandlerRole")["Properties"]["Policies"]]
    assert document == json.loads(policy_path("dev").read_text())


def test_the_monitor_reads_where_the_stream_delivers() -> None:
    stage = load_stage("dev")
    monitor = stage.monitor
    assert monitor is not None
    assert (monitor.captures.bucket, monitor.captures.prefix) == (DATA, "captures")
    assert S3Uri.parse(stage.capture_stream) == S3Uri(DATA, "captures")
    # dev's monitor is fanned out: its map function reads the captures, its state machine
    # lists them (docs/MONITOR.md, "Deployed: fanned out")
    document = json.loads(monitor_function_policy_path("dev", "monitor_map").read_text())
    assert document == render_monitor_functions(stage, ACCOUNT, REGION)["monitor_map"]
    reads = {s["Sid"]: s["Resource"] for s in document["Statement"]}
    assert reads["ReadCaptures"] == f"arn:aws:s3:::{DATA}/captures/*"
    listed = {s["Sid"]: s for s in monitor_template.state_machine_statements(stage)}
    assert listed["ListTheCaptures"]["Condition"] == {
        "StringLike": {"s3:prefix": ["captures/*"]}}


def test_sams_expansion_keeps_the_stream_and_its_role(dev: Package) -> None:
    resources = sam_transform(dev)["Resources"]
    assert resources["CaptureStream"]["Type"] == "AWS::KinesisFirehose::DeliveryStream"
    assert resources["CaptureStreamRole"]["Type"] == "AWS::IAM::Role"
    assert resources["CaptureStream"]["Properties"] == \
        dev.resource("CaptureStream")["Properties"]


def test_the_stand_alone_stack_is_the_same_stream_and_passes_the_checkers(
        dev: Package, tmp_path: Path) -> None:
    # Path B (chalice deploy) and Terraform: the stream as a stack of its own
    stage = load_stage("dev")
    stack = capture_template.capture_template(stage)
    assert set(stack["Resources"]) == {"CaptureStream", "CaptureStreamRole",
                                       "CaptureStreamLogGroup", "CaptureStreamLogStream"}
    for name, resource in stack["Resources"].items():
        assert resource == dev.resource(name), name
    commands = chalice_deploy.stack_commands(stage, REGION, root=tmp_path)
    written = chalice_deploy.capture_stack_path("dev", tmp_path)
    assert json.loads(written.read_text()) == json.loads(json.dumps(stack))
    deploy = commands[-2]
    assert deploy[deploy.index("--stack-name") + 1] == "sagegate-dev-capture"
    assert deploy[deploy.index("--template-file") + 1] == "build/capture-dev.json"
    assert deploy[deploy.index("--capabilities") + 1] == "CAPABILITY_IAM"  # its role
    tools = ROOT / ".venv" / "iac" / "bin"
    assert (tools / "cfn-lint").exists(), "run `make iac-tools` (make test does)"
    linted = subprocess.run([str(tools / "cfn-lint"), str(written)], capture_output=True,
                            text=True, timeout=300)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    scanned = subprocess.run([str(tools / "checkov"), "--quiet", "--compact",
                              "--skip-download", "--framework", "cloudformation", "-f",
                              str(written)], capture_output=True, text=True, timeout=300)
    assert scanned.returncode == 0, scanned.stdout + scanned.stderr
    assert "Failed checks: 0" in scanned.stdout


def test_prod_has_no_stream(prod: Package) -> None:
    resources = prod.template["Resources"]
    assert not {"CaptureStream", "CaptureStreamRole", "CaptureStreamLogGroup"} & set(resources)
    stage = load_stage("prod")
    assert capture_template.capture_resources(stage) == {}
    with pytest.raises(ValueError, match="no capture_stream"):
        capture_template.capture_template(stage)


def _dev_config(tmp_path: Path, stream: Any = None, **env: str) -> Path:
    config = load_config()
    dev = config["stages"]["dev"]
    if stream is not None:
        dev["capture_stream"] = stream
    dev["environment_variables"].update(env)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("stream,env,message", [
    (None, {"CAPTURE_DESTINATION": "s3://sagegate-dev-data/captures",
            "MONITOR_CAPTURES": ""}, "CAPTURE_DESTINATION must be firehose://"),
    (None, {"CAPTURE_DESTINATION": "firehose://no spaces"}, "CAPTURE_DESTINATION must be"),
    ("s3://sagegate-dev-data", {}, "must be s3://<bucket>/<prefix>"),
    ("s3://sagegate-dev-data/!{x}", {}, "must be s3://<bucket>/<prefix>"),
    ("s3://Bad_Bucket/captures", {}, "must be s3://<bucket>/<prefix>"),
    ("sagegate-dev-data/captures", {}, "capture_stream: not an s3:// URI"),
    (["s3://sagegate-dev-data/captures"], {}, "must be an s3://bucket/prefix string"),
    (None, {"MONITOR_CAPTURES": "s3://elsewhere/captures"}, "set MONITOR_CAPTURES to it"),
])
def test_a_stream_that_could_not_work_is_refused(
        tmp_path: Path, stream: Any, env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        load_stage("dev", _dev_config(tmp_path, stream, **env))


def test_a_firehose_destination_without_capture_stream_is_a_stream_made_elsewhere(
        tmp_path: Path) -> None:
    config = load_config()
    del config["stages"]["dev"]["capture_stream"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    stage = load_stage("dev", path)
    assert not capture_template.enabled(stage)
    assert capture_template.capture_resources(stage) == {}
    assert capture_template.stream_name(stage) == STREAM  # still granted PutRecordBatch
    unmonitored = dataclasses.replace(stage, env={
        k: v for k, v in stage.env.items() if not k.startswith("MONITOR_")})
    assert unmonitored.monitor is None
