"""The jobs' CloudFormation, merged into Chalice's SAM template for a stage with ``JOBS_BUCKET``.

Chalice's SAM output refuses ``@app.on_s3_event`` (CloudFormation cannot change the notifications
of a bucket it did not create), so the stack creates the jobs bucket and
:mod:`sagegate.deploy.chalice_sam` writes the function's event as SAM's ``S3`` event on it, from
which SAM makes the notification (``s3:ObjectCreated:*`` under ``<JOBS_PREFIX>tickets/``) and
S3's permission to invoke ``job_runner``. :func:`jobs_resources` adds:

* ``JobsBucket``: kept when the stack is deleted (it holds users' inputs and results); S3-managed
  encryption, public access blocked, bucket-owner objects, one lifecycle rule expiring the
  stage's prefix a day after the jobs' TTL (unfinished multipart uploads after a day), CORS for
  the browser's presigned POST from the API's page (and ``CORS_ALLOW_ORIGIN``);
  ``JobsBucketPolicy`` refuses requests without TLS;
* ``JobsTable``: key ``job_id``, TTL on ``expires_at``, on demand, point-in-time recovery,
  encrypted; the API function waits for it;
* ``JobsSuccessTopic`` / ``JobsErrorTopic`` for a topic setting that is a name: the AWS managed
  SNS key; ``JobsTopicPolicy`` lets this account's principals publish (SageMaker publishes as the
  endpoint's execution role) and refuses publishes without TLS;
* ``JobsDeadLetterQueue``: events a job function still failed on after Lambda's two retries (a
  ``queued`` job can be run again from there), kept 14 days;
* each event function's fixes (Chalice name, layer, log group named in advance and waited for)
  and the dead-letter queue;
* for ``job_redrive`` (whose rule Chalice writes): the same fixes, no asynchronous retry (the
  next run, a period later, does the same work).
"""
from __future__ import annotations

from typing import Any

from chalicelib.jobs.table import TableJobStore
from sagegate.deploy import jobs
from sagegate.deploy.stage import Stage

BUCKET = "JobsBucket"  # the logical id chalice_sam's S3 event refers to
BUCKET_POLICY = "JobsBucketPolicy"
TABLE = "JobsTable"
TOPIC_POLICY = "JobsTopicPolicy"
DEAD_LETTER_QUEUE = "JobsDeadLetterQueue"
JOB_KEY = "job_id"  # the table's partition key (S)
JOB_TTL_ATTRIBUTE = "expires_at"  # the item's expiry (N, epoch seconds)
JOB_STATE, JOB_CREATED = "state", "created_at"  # the queued index's keys (S, N)
QUEUED_INDEX = TableJobStore.QUEUED_INDEX  # the index the re-drive queries
SNS_KEY = "alias/aws/sns"  # the AWS managed key: a publisher in the account needs no grant
DEAD_LETTER_SECONDS = 14 * 86_400  # SQS's longest retention
LOG_GROUP_SKIPS = [
    ("CKV_AWS_158", "Logs hold job ids and request metadata, never inputs or answers; "
                    "CloudWatch Logs encrypts at rest by default."),
]
_FUNCTION_SKIPS = [
    ("CKV_AWS_117", "Calls only public AWS APIs (S3, DynamoDB, SageMaker runtime, CloudWatch "
                    "Logs); a VPC adds NAT cost and cold-start latency and no isolation. Set "
                    "subnet_ids/security_group_ids in the stage to run in one."),
    ("CKV_AWS_173", "Environment variables hold settings only (bucket, table and topic names, "
                    "limits), no secrets; encrypted at rest with the AWS managed key."),
]
_REDRIVE_SKIPS = [
    ("CKV_AWS_116", "Its event is the schedule's, empty: a failed run is logged and the next "
                    "run, a period later, does the same work; a dead-letter queue would hold "
                    "only the schedule's empty event."),
    ("CKV_AWS_117", "Calls only public AWS APIs (DynamoDB, S3, Lambda, CloudWatch Logs); a VPC "
                    "adds NAT cost and cold-start latency and no isolation. Set "
                    "subnet_ids/security_group_ids in the stage to run in one."),
    ("CKV_AWS_173", "Environment variables hold settings only (bucket and table names, the "
                    "re-drive's period), no secrets; encrypted at rest with the AWS managed "
                    "key."),
]
REDRIVE_RETRY_ATTEMPTS = 0  # Lambda's asynchronous retries of a failed scheduled run
_BUCKET_SKIPS = [
    ("CKV_AWS_18", "Access logs need a second bucket this stack would have to own; every job "
                   "is logged by the functions with its id, and CloudTrail data events can be "
                   "turned on for the bucket."),
    ("CKV_AWS_21", "Keys are chosen by the server and written once (an upload, a ticket, a "
                   "result); versions would only keep users' inputs past the lifecycle rule "
                   "that promises to delete them."),
]
_QUEUE_SKIPS = [
    ("CKV_AWS_27", "Encrypted at rest with SQS-managed keys (SqsManagedSseEnabled), which the "
                   "check predates; a KMS key would need grants for every job function's role "
                   "to send, for events that hold only bucket keys and job ids."),
]
_TABLE_SKIPS = [
    ("CKV_AWS_119", "Encrypted at rest with the AWS managed key (SSEEnabled, alias/aws/"
                    "dynamodb). Items hold job states and small answers; a customer managed "
                    "key adds a key, its policy and a monthly fee. Set KMSMasterKeyId for a "
                    "stricter policy."),
]


def jobs_resources(stage: Stage) -> dict[str, Any]:
    if not jobs.enabled(stage):
        return {}
    resources: dict[str, Any] = {
        BUCKET: jobs_bucket(stage),
        BUCKET_POLICY: _bucket_policy(),
        TABLE: jobs_table(stage),
        DEAD_LETTER_QUEUE: _dead_letter_queue(stage),
    }
    created = [topic for topic in jobs.topics(stage) if topic.created]
    for topic in created:
        resources[topic.logical_id] = _topic(stage, topic)
    if created:
        resources[TOPIC_POLICY] = _topic_policy(created)
    waits = {topic.function: topic.logical_id for topic in created}
    for function in jobs.functions(stage):
        resources.update(_function(stage, function, waits.get(function)))
    resources.update(_redrive(stage))
    return resources


def jobs_outputs(stage: Stage) -> dict[str, Any]:
    """Where the stage's jobs are, for whoever configures the asynchronous endpoints."""
    outputs: dict[str, Any] = {
        "JobsBucketName": {"Value": {"Ref": BUCKET}},
        "JobsAsyncOutputPath": {
            "Description": "S3OutputPath of the stage's asynchronous endpoints (S3FailurePath: "
                           "the same with async/failure)",
            "Value": {"Fn::Sub": f"s3://${{{BUCKET}}}/{jobs.prefix(stage)}"
                                 f"{jobs.ASYNC_OUTPUTS}output"}},
        "JobsTableName": {"Value": {"Ref": TABLE}},
        "JobsDeadLetterQueueUrl": {"Value": {"Ref": DEAD_LETTER_QUEUE}},
    }
    for topic in jobs.topics(stage):
        outputs[f"{topic.logical_id}Arn"] = {
            "Description": "SuccessTopic" if topic.function == jobs.JOB_RESULTS
            else "ErrorTopic",
            "Value": {"Ref": topic.logical_id} if topic.created else topic.setting}
    return outputs


def logical_id(function: str) -> str:
    return "".join(part.capitalize() for part in function.split("_"))


def jobs_bucket(stage: Stage) -> dict[str, Any]:
    origins: list[Any] = [{"Fn::Sub": "https://${RestAPI}.execute-api.${AWS::Region}."
                                      "${AWS::URLSuffix}"}]
    configured = stage.env.get("CORS_ALLOW_ORIGIN", "").strip()
    if configured:
        origins.append(configured)
    return {
        "Type": "AWS::S3::Bucket",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {
            "BucketName": jobs.bucket(stage),
            "BucketEncryption": {"ServerSideEncryptionConfiguration": [
                {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]},
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True, "BlockPublicPolicy": True,
                "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
            "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
            "LifecycleConfiguration": {"Rules": [{
                "Id": "expire-jobs", "Status": "Enabled", "Prefix": jobs.prefix(stage),
                "ExpirationInDays": jobs.ttl_days(stage),
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]},
            "CorsConfiguration": {"CorsRules": [{
                # the page's presigned POST of an upload, and its GET of a large answer
                "AllowedMethods": ["POST", "GET"], "AllowedOrigins": origins,
                "AllowedHeaders": ["*"], "MaxAge": 3000}]},
            "Tags": _tags(stage),
        },
        "Metadata": _skips(_BUCKET_SKIPS),
    }


def jobs_table_schema() -> dict[str, Any]:
    """The job table's keys, index and TTL, for every copy (the stack's, moto's). The index lists
    queued jobs by age for the re-drive: ``state`` and ``created_at`` are on every record, so no
    write changes; keys only, a few dozen bytes a job."""
    return {
        "AttributeDefinitions": [{"AttributeName": JOB_KEY, "AttributeType": "S"},
                                 {"AttributeName": JOB_STATE, "AttributeType": "S"},
                                 {"AttributeName": JOB_CREATED, "AttributeType": "N"}],
        "KeySchema": [{"AttributeName": JOB_KEY, "KeyType": "HASH"}],
        "GlobalSecondaryIndexes": [{
            "IndexName": QUEUED_INDEX,
            "KeySchema": [{"AttributeName": JOB_STATE, "KeyType": "HASH"},
                          {"AttributeName": JOB_CREATED, "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"}}],
        "TimeToLiveSpecification": {"AttributeName": JOB_TTL_ATTRIBUTE, "Enabled": True},
    }


def jobs_table(stage: Stage) -> dict[str, Any]:
    return {
        "Type": "AWS::DynamoDB::Table",
        "DeletionPolicy": "Delete",
        "UpdateReplacePolicy": "Delete",
        "Properties": {
            "TableName": jobs.table(stage),
            "BillingMode": "PAY_PER_REQUEST",
            **jobs_table_schema(),
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True},
            "Tags": _tags(stage),
        },
        "Metadata": _skips(_TABLE_SKIPS),
    }


def _bucket_policy() -> dict[str, Any]:
    objects = {"Fn::Sub": "${" + BUCKET + ".Arn}/*"}
    return {
        "Type": "AWS::S3::BucketPolicy",
        "Properties": {"Bucket": {"Ref": BUCKET}, "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*",
                           "Action": "s3:*",
                           "Resource": [{"Fn::GetAtt": [BUCKET, "Arn"]}, objects],
                           "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}},
    }


def _topic(stage: Stage, topic: jobs.Topic) -> dict[str, Any]:
    return {"Type": "AWS::SNS::Topic",
            "Properties": {"TopicName": topic.name, "KmsMasterKeyId": SNS_KEY,
                           "Tags": _tags(stage)}}


def _topic_policy(created: list[jobs.Topic]) -> dict[str, Any]:
    topics = [{"Ref": topic.logical_id} for topic in created]
    return {
        "Type": "AWS::SNS::TopicPolicy",
        "Properties": {"Topics": topics, "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Sid": "PublishFromThisAccount", "Effect": "Allow",
                 "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::"
                                                  "${AWS::AccountId}:root"}},
                 "Action": "sns:Publish", "Resource": topics},
                {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*",
                 "Action": "sns:Publish", "Resource": topics,
                 "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
            ]}},
    }


def _dead_letter_queue(stage: Stage) -> dict[str, Any]:
    return {"Type": "AWS::SQS::Queue",
            "Properties": {"QueueName": jobs.dead_letter_queue(stage),
                           "MessageRetentionPeriod": DEAD_LETTER_SECONDS,
                           "SqsManagedSseEnabled": True, "Tags": _tags(stage)},
            "Metadata": _skips(_QUEUE_SKIPS)}


def _function(stage: Stage, function: str, topic: str | None) -> dict[str, Any]:
    name = jobs.function_name(stage, function)
    function_id = logical_id(function)
    log_group = f"{function_id}LogGroup"
    waits = [log_group, TABLE, *([topic] if topic else [])]
    return {
        function_id: {
            "DependsOn": waits,
            "Properties": {"FunctionName": name, "Layers": [{"Ref": "DependenciesLayer"}],
                           "DeadLetterQueue": {"Type": "SQS", "TargetArn": {
                               "Fn::GetAtt": [DEAD_LETTER_QUEUE, "Arn"]}}},
            "Metadata": _skips(_FUNCTION_SKIPS),
        },
        log_group: {"Properties": {"LogGroupName": f"/aws/lambda/{name}"},
                    "Metadata": _skips(LOG_GROUP_SKIPS)},
    }


def _redrive(stage: Stage) -> dict[str, Any]:
    """The re-drive's fixes: its Chalice name, the layer (app.py imports numpy and OpenCV), its
    log group, no asynchronous retry; it waits for the table and the runner it reads and invokes."""
    name = jobs.function_name(stage, jobs.JOB_REDRIVE)
    function_id = logical_id(jobs.JOB_REDRIVE)
    log_group = f"{function_id}LogGroup"
    return {
        function_id: {
            "DependsOn": [log_group, TABLE, logical_id(jobs.JOB_RUNNER)],
            "Properties": {"FunctionName": name, "Layers": [{"Ref": "DependenciesLayer"}],
                           "EventInvokeConfig": {"MaximumRetryAttempts":
                                                 REDRIVE_RETRY_ATTEMPTS}},
            "Metadata": _skips(_REDRIVE_SKIPS),
        },
        log_group: {"Properties": {"LogGroupName": f"/aws/lambda/{name}"},
                    "Metadata": _skips(LOG_GROUP_SKIPS)},
    }


def _tags(stage: Stage) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in sorted(stage.tags.items())]


def _skips(skips: list[tuple[str, str]]) -> dict[str, Any]:
    return {"checkov": {"skip": [{"id": check, "comment": reason} for check, reason in skips]}}
