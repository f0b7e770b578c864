"""The stage's capture stream: a Kinesis Data Firehose delivery stream into the data bucket.

A stage with ``CAPTURE_DESTINATION=firehose://<stream>`` and sagegate's ``"capture_stream":
"s3://<bucket>/<prefix>"`` (a stage key Chalice ignores) gets the stream in its stack, delivering
to that prefix of an existing bucket in Model Monitor's layout, which ``MONITOR_CAPTURES`` must
name (:func:`check_capture_stream`). Without ``capture_stream`` the stream is made elsewhere: the
stack adds nothing, the role still gets ``firehose:PutRecordBatch`` on it alone.

One stream for the stage, partitioned by each record's endpoint and variant (dynamic
partitioning, keys read with JQ from the ``eventMetadata``
:class:`chalicelib.capture.sinks.FirehoseSink` adds), not one per endpoint: a new model needs no
template change, the variant that answered is only known at run time, and one stream has one set
of buffers to pay for and watch. :func:`capture_resources` adds:

* ``CaptureStream`` (Direct PUT): objects under ``<prefix>/<endpoint>/<variant>/yyyy/.../hh/`` by
  each record's ``inferenceTime`` hour (where the other sinks file it, not its arrival); what
  Firehose could not partition or deliver under ``<prefix>-errors/<error type>/...`` (beside the
  captures, so the monitor never lists it); buffers of :data:`BUFFER_MB` MiB or
  :data:`BUFFER_SECONDS` s per partition (64 MiB is dynamic partitioning's least; 60 s lands an
  hour's last object minutes before the monitor's run at five past); GZIP ``*.jsonl.gz``; no
  delimiter added (each record ends with its newline); the stream encrypted with an AWS owned key
  (no key to own, no KMS fee), objects by the bucket's default encryption (SSE-S3 at least);
  delivery errors logged;
* ``CaptureStreamRole``: assumed by Firehose for this account only (``sts:ExternalId``); may
  write, read back and abort multipart uploads under the capture and error prefixes, find and
  list the bucket, and write its one log stream;
* ``CaptureStreamLogGroup`` / ``LogStream``: ``/aws/kinesisfirehose/<stream>``,
  ``DestinationDelivery``, the stage's retention.

:func:`capture_template` is the same as a stand-alone stack, ``build/capture-<stage>.json``,
which ``sagegate chalice-deploy`` deploys before ``chalice deploy`` and a Terraform user beside
the Terraform package (which takes no merge template).
"""
from __future__ import annotations

import re
from typing import Any

from chalicelib.core.aws import S3_SCHEME, S3Uri, valid_bucket_name
from chalicelib.core.config_names import FIREHOSE_SCHEME
from sagegate.deploy.stage import Stage

STREAM = "CaptureStream"
ROLE = "CaptureStreamRole"
LOG_GROUP = "CaptureStreamLogGroup"
LOG_STREAM = "CaptureStreamLogStream"
DELIVERY_LOG_STREAM = "DestinationDelivery"  # the log stream Firehose's console names too
BUFFER_MB = 64  # dynamic partitioning's least buffer size
BUFFER_SECONDS = 60
PARTITION_RETRY_SECONDS = 300  # Firehose retries a failed partitioned delivery this long
FILE_EXTENSION = ".jsonl.gz"
JQ_ENGINE = "JQ-1.6"
PARTITION_QUERY = ("{endpoint: .eventMetadata.sagegateEndpoint, "
                   "variant: .eventMetadata.sagegateVariant, "
                   "year: .eventMetadata.inferenceTime[0:4], "
                   "month: .eventMetadata.inferenceTime[5:7], "
                   "day: .eventMetadata.inferenceTime[8:10], "
                   "hour: .eventMetadata.inferenceTime[11:13]}")
"""The partition keys: the record's endpoint, variant and inference hour (UTC) from its
``inferenceTime``, not the hour it reached the stream."""
DEFAULT_LOG_DAYS = 14
ERRORS_SUFFIX = "-errors"
_STREAM_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,64}\Z")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*\Z")
_LOG_GROUP_SKIPS = [
    ("CKV_AWS_158", "Firehose's delivery errors (object keys, error codes), never a record; "
                    "CloudWatch Logs encrypts at rest by default."),
]


def stream_name(stage: Stage) -> str:
    """The stream ``CAPTURE_DESTINATION`` names (``firehose://<name>``), or ""."""
    destination = stage.env.get("CAPTURE_DESTINATION", "").strip()
    return destination[len(FIREHOSE_SCHEME):] if destination.startswith(FIREHOSE_SCHEME) \
        else ""


def enabled(stage: Stage) -> bool:
    return bool(stage.capture_stream)


def delivery(stage: Stage) -> S3Uri:
    """``capture_stream``'s bucket and prefix.

    Raises:
        ValueError: unset or not an ``s3://bucket/prefix`` URI.
    """
    try:
        uri = S3Uri.parse(stage.capture_stream.strip())
    except ValueError as error:
        raise ValueError(f"stages.{stage.name}.capture_stream: {error}") from None
    return uri


def prefix(stage: Stage) -> str:
    return delivery(stage).prefix


def error_prefix(stage: Stage) -> str:
    return prefix(stage) + ERRORS_SUFFIX


def s3_prefix_expression(stage: Stage) -> str:
    """The stream's S3 ``Prefix``: Model Monitor's layout by the inference's hour, however late a
    record arrives."""
    keys = ("endpoint", "variant", "year", "month", "day", "hour")
    return "/".join([prefix(stage), *(f"!{{partitionKeyFromQuery:{key}}}" for key in keys)]) + "/"


def error_prefix_expression(stage: Stage) -> str:
    """The stream's ``ErrorOutputPrefix``: the error type first (``processing-failed``, ...),
    then the hour."""
    return f"{error_prefix(stage)}/!{{firehose:error-output-type}}/!{{timestamp:yyyy/MM/dd/HH}}/"


def log_group_name(stage: Stage) -> str:
    return f"/aws/kinesisfirehose/{stream_name(stage)}"


def check_capture_stream(stage: Stage) -> None:
    """Refuse a capture stream that could not work, or that the monitor would not read.

    Raises:
        ValueError: ``CAPTURE_DESTINATION`` is not ``firehose://`` and a stream name,
            ``capture_stream`` is not ``s3://<bucket>/<prefix>`` (the error prefix sits beside
            the prefix), or ``MONITOR_CAPTURES`` reads elsewhere.
    """
    if not enabled(stage):
        return
    where = f"stages.{stage.name}"
    name = stream_name(stage)
    if not _STREAM_NAME.match(name):
        raise ValueError(f"{where} sets capture_stream, so CAPTURE_DESTINATION must be "
                         "firehose://<stream name> (1 to 64 of a-z A-Z 0-9 . _ -), not "
                         f"{stage.env.get('CAPTURE_DESTINATION', '')[:80]!r}")
    uri = delivery(stage)
    if not valid_bucket_name(uri.bucket) or not _PREFIX.match(uri.prefix):
        raise ValueError(f"{where}.capture_stream must be s3://<bucket>/<prefix> (a bucket "
                         "name and a prefix of A-Z a-z 0-9 . _ - /), not "
                         f"{stage.capture_stream[:80]!r}")
    monitor = stage.monitor
    if monitor is not None and (monitor.captures.bucket, monitor.captures.prefix) != \
            (uri.bucket, uri.prefix):
        raise ValueError(f"{where}: the capture stream delivers to {S3_SCHEME}{uri.bucket}/"
                         f"{uri.prefix}, where the monitor must read: set MONITOR_CAPTURES "
                         f"to it, not {monitor.captures.location!r}")


def capture_resources(stage: Stage) -> dict[str, Any]:
    if not enabled(stage):
        return {}
    return {
        STREAM: _stream(stage),
        ROLE: _role(stage),
        LOG_GROUP: {
            "Type": "AWS::Logs::LogGroup",
            "DeletionPolicy": "Delete",
            "UpdateReplacePolicy": "Delete",
            "Properties": {"LogGroupName": log_group_name(stage),
                           "RetentionInDays": stage.log_retention_in_days or DEFAULT_LOG_DAYS,
                           "Tags": _tags(stage)},
            "Metadata": _skips(_LOG_GROUP_SKIPS),
        },
        LOG_STREAM: {
            "Type": "AWS::Logs::LogStream",
            "DeletionPolicy": "Delete",
            "UpdateReplacePolicy": "Delete",
            "Properties": {"LogGroupName": {"Ref": LOG_GROUP},
                           "LogStreamName": DELIVERY_LOG_STREAM},
        },
    }


def capture_outputs(stage: Stage) -> dict[str, Any]:
    if not enabled(stage):
        return {}
    uri = delivery(stage)
    return {
        "CaptureStreamName": {"Description": "CAPTURE_DESTINATION's stream",
                              "Value": {"Ref": STREAM}},
        "CaptureStreamArn": {"Value": {"Fn::GetAtt": [STREAM, "Arn"]}},
        "CaptureS3Prefix": {"Description": "Where the stream delivers (MONITOR_CAPTURES)",
                            "Value": f"{S3_SCHEME}{uri.bucket}/{uri.prefix}"},
    }


def capture_template(stage: Stage) -> dict[str, Any]:
    """A stand-alone stack, ``sagegate-<stage>-capture``, for a stage deployed without the SAM
    stack.

    Raises:
        ValueError: the stage sets no ``capture_stream``.
    """
    if not enabled(stage):
        raise ValueError(f"stage {stage.name!r} sets no capture_stream: it has no capture "
                         "stream")
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"sagegate {stage.name}: the capture stream (Kinesis Data Firehose)",
        "Resources": capture_resources(stage),
        "Outputs": capture_outputs(stage),
    }


def _stream(stage: Stage) -> dict[str, Any]:
    return {
        "Type": "AWS::KinesisFirehose::DeliveryStream",
        "DeletionPolicy": "Delete",
        "UpdateReplacePolicy": "Delete",
        "Properties": {
            "DeliveryStreamName": stream_name(stage),
            "DeliveryStreamType": "DirectPut",
            "DeliveryStreamEncryptionConfigurationInput": {"KeyType": "AWS_OWNED_CMK"},
            "ExtendedS3DestinationConfiguration": {
                "BucketARN": {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{delivery(stage).bucket}"},
                "RoleARN": {"Fn::GetAtt": [ROLE, "Arn"]},
                "Prefix": s3_prefix_expression(stage),
                "ErrorOutputPrefix": error_prefix_expression(stage),
                "BufferingHints": {"SizeInMBs": BUFFER_MB, "IntervalInSeconds": BUFFER_SECONDS},
                "CompressionFormat": "GZIP",
                "FileExtension": FILE_EXTENSION,
                "DynamicPartitioningConfiguration": {
                    "Enabled": True,
                    "RetryOptions": {"DurationInSeconds": PARTITION_RETRY_SECONDS}},
                "ProcessingConfiguration": {"Enabled": True, "Processors": [{
                    "Type": "MetadataExtraction",
                    "Parameters": [
                        {"ParameterName": "MetadataExtractionQuery",
                         "ParameterValue": PARTITION_QUERY},
                        {"ParameterName": "JsonParsingEngine", "ParameterValue": JQ_ENGINE},
                    ]}]},
                "CloudWatchLoggingOptions": {"Enabled": True,
                                             "LogGroupName": {"Ref": LOG_GROUP},
                                             "LogStreamName": {"Ref": LOG_STREAM}},
                "S3BackupMode": "Disabled",
            },
            "Tags": _tags(stage),
        },
    }


def role_statements(stage: Stage) -> list[dict[str, Any]]:
    uri = delivery(stage)
    bucket = f"arn:${{AWS::Partition}}:s3:::{uri.bucket}"
    objects = [{"Fn::Sub": f"{bucket}/{prefix(stage)}/*"},
               {"Fn::Sub": f"{bucket}/{error_prefix(stage)}/*"}]
    log_stream = (f"arn:${{AWS::Partition}}:logs:${{AWS::Region}}:${{AWS::AccountId}}:"
                  f"log-group:{log_group_name(stage)}:log-stream:{DELIVERY_LOG_STREAM}")
    return [
        {"Sid": "FindAndListTheBucket", "Effect": "Allow",
         "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
         "Resource": {"Fn::Sub": bucket}},
        {"Sid": "DeliverCaptures", "Effect": "Allow",
         "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
         "Resource": objects},
        {"Sid": "LogDeliveryErrors", "Effect": "Allow", "Action": ["logs:PutLogEvents"],
         "Resource": {"Fn::Sub": log_stream}},
    ]


def _role(stage: Stage) -> dict[str, Any]:
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "Description": f"sagegate {stage.name}: Firehose delivers captures to S3",
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [{
                    "Effect": "Allow", "Principal": {"Service": "firehose.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                    "Condition": {"StringEquals": {"sts:ExternalId": {"Ref": "AWS::AccountId"}}},
                }]},
            "Policies": [{"PolicyName": "DeliverCaptures", "PolicyDocument": {
                "Version": "2012-10-17", "Statement": role_statements(stage)}}],
            "Tags": _tags(stage),
        },
    }


def _tags(stage: Stage) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in sorted(stage.tags.items())]


def _skips(skips: list[tuple[str, str]]) -> dict[str, Any]:
    return {"checkov": {"skip": [{"id": check, "comment": reason} for check, reason in skips]}}
