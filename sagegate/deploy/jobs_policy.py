"""The jobs' least-privilege IAM: what the API function gains, and each event function's role.

Every object statement names one prefix under ``s3://<JOBS_BUCKET>/<JOBS_PREFIX>``; every table
statement the jobs table; no ``DeleteItem``, ``DeleteObject`` or ``Scan`` anywhere (DynamoDB's
TTL and the lifecycle rule delete). ``s3:ListBucket`` comes with each read that must see a
missing object as S3's 404, not a 403.

* The API function: ``s3:PutObject`` on ``uploads/*`` (a presigned POST is signed with its role;
  inline bodies it uploads itself) and ``tickets/*``; ``s3:GetObject`` on ``uploads/*``
  (HeadObject is authorized by GetObject) and ``results/*`` (a large answer's presigned GET);
  ``dynamodb:PutItem`` / ``GetItem`` / ``UpdateItem`` (the last to fail a lost job). No
  ``InvokeEndpointAsync``.
* ``job_runner``: reads ``uploads/*``, writes ``inputs/*`` and ``results/*``; ``GetItem`` /
  ``UpdateItem``; ``sagemaker:InvokeEndpoint`` on the endpoints (and components) realtime jobs
  call, ``InvokeEndpointAsync`` on the asynchronous ones only; capture's write; its logs; the
  dead-letter queue.
* ``job_results``: reads :data:`~sagegate.deploy.jobs.ASYNC_OUTPUTS` only (a forged notification
  can make it read nothing else), writes ``results/*``; ``GetItem`` / ``UpdateItem``; with
  capture on, capture's write and a read of what the endpoint was sent (``inputs/*``, else
  ``uploads/*``); its logs; the dead-letter queue.
* ``job_failures``: ``GetItem`` / ``UpdateItem`` only (the reason is in the notification; it
  reads and captures nothing); its logs; the dead-letter queue.
* ``job_redrive``: ``dynamodb:Query`` on the queued index only, ``GetItem`` (reads, never writes:
  the runner claims), ``s3:GetObject`` on ``tickets/*`` (the HEAD that a ticket exists),
  ``lambda:InvokeFunction`` on the stage's ``job_runner`` only; its logs.
"""
from __future__ import annotations

from typing import Any

from chalicelib.jobs.table import TableJobStore
from chalicelib.registry.kinds import JobsBackend
from chalicelib.registry.specs import ModelSpec
from sagegate.deploy import jobs
from sagegate.deploy.iam import (
    allow,
    capture_statement,
    check_account_and_region,
    log_statement,
    models,
    partition_of,
)
from sagegate.deploy.stage import Stage


class _Arns:

    def __init__(self, stage: Stage, account: str, region: str) -> None:
        self.stage, self.account, self.region = stage, account, region
        self.arn = f"arn:{partition_of(region)}"
        self.bucket = f"{self.arn}:s3:::{jobs.bucket(stage)}"

    def objects(self, *parts: str) -> list[str]:
        return [f"{self.bucket}/{jobs.prefix(self.stage)}{part}*" for part in parts]

    def listing(self, sid: str) -> dict[str, Any]:
        # Not narrowed by an s3:prefix condition: that key is set by ListObjects requests, and
        # S3 decides a missing key's HEAD or GET (404, or 403 to a role that may not list)
        # without one, so a conditioned grant is not known to count. The bucket is the
        # stage's own jobs bucket; the keys it lists are random ids.
        return allow(sid, ["s3:ListBucket"], self.bucket)

    def table(self, sid: str, actions: list[str]) -> dict[str, Any]:
        return allow(sid, actions, f"{self.arn}:dynamodb:{self.region}:{self.account}:"
                                   f"table/{jobs.table(self.stage)}")

    def sagemaker(self, kind: str, name: str) -> str:
        return f"{self.arn}:sagemaker:{self.region}:{self.account}:{kind}/{name.lower()}"


def api_statements(stage: Stage, account: str, region: str) -> list[dict[str, Any]]:
    if not jobs.enabled(stage):
        return []
    arns = _Arns(stage, account, region)
    return [
        allow("WriteUploadsAndTickets", ["s3:PutObject"],
              arns.objects(jobs.UPLOADS, jobs.TICKETS)),
        allow("ReadUploadsAndResults", ["s3:GetObject"],
              arns.objects(jobs.UPLOADS, jobs.RESULTS)),
        arns.listing("ListUploads"),
        # UpdateItem: GET /jobs/{id} fails a job nothing will move any more (JobLost)
        arns.table("CreateAndReadJobs",
                   ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem"]),
    ]


def render_function(stage: Stage, function: str, account: str,
                    region: str) -> dict[str, Any] | None:
    """An event function's IAM policy; None when the stage does not declare ``function``.

    Raises:
        ValueError: a malformed account id or region, or a model.json invalid for the stage.
    """
    check_account_and_region(account, region)
    if function == jobs.JOB_REDRIVE and jobs.enabled(stage):
        return render_redrive(stage, account, region)
    if function not in jobs.functions(stage):
        return None
    arns = _Arns(stage, account, region)
    own = {jobs.JOB_RUNNER: _runner_statements, jobs.JOB_RESULTS: _results_statements}
    statements = [*own[function](stage, arns)] if function in own else []
    statements.append(arns.table("ReadAndAdvanceJobs", ["dynamodb:GetItem",
                                                        "dynamodb:UpdateItem"]))
    capture = capture_statement(stage.env, arns.arn, account, region)
    if capture is not None and function != jobs.JOB_FAILURES:
        statements.append(capture)
    statements += [
        log_statement(arns.arn, account, region, jobs.function_name(stage, function)),
        allow("SendFailedEvents", ["sqs:SendMessage"],
              f"{arns.arn}:sqs:{region}:{account}:{jobs.dead_letter_queue(stage)}"),
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def render_redrive(stage: Stage, account: str, region: str) -> dict[str, Any]:
    arns = _Arns(stage, account, region)
    table = f"{arns.arn}:dynamodb:{region}:{account}:table/{jobs.table(stage)}"
    runner = f"{arns.arn}:lambda:{region}:{account}:function:" \
             f"{jobs.function_name(stage, jobs.JOB_RUNNER)}"
    return {"Version": "2012-10-17", "Statement": [
        allow("ListQueuedJobs", ["dynamodb:Query"],
              f"{table}/index/{TableJobStore.QUEUED_INDEX}"),
        allow("ReadJobs", ["dynamodb:GetItem"], table),
        allow("ReadTickets", ["s3:GetObject"], arns.objects(jobs.TICKETS)),
        arns.listing("ListTickets"),
        allow("InvokeJobRunner", ["lambda:InvokeFunction"], runner),
        log_statement(arns.arn, account, region, jobs.function_name(stage, jobs.JOB_REDRIVE)),
    ]}


def _results_statements(stage: Stage, arns: _Arns) -> list[dict[str, Any]]:
    statements = [allow("ReadAsyncOutputs", ["s3:GetObject"], arns.objects(jobs.ASYNC_OUTPUTS))]
    if capture_statement(stage.env, arns.arn, arns.account, arns.region) is not None:
        statements += [allow("ReadSentInputs", ["s3:GetObject"],
                             arns.objects(jobs.INPUTS, jobs.UPLOADS)),
                       arns.listing("ListInputs")]
    return [*statements, allow("WriteResults", ["s3:PutObject"], arns.objects(jobs.RESULTS))]


def _runner_statements(stage: Stage, arns: _Arns) -> list[dict[str, Any]]:
    registered = models(stage)
    realtime = [model for model in registered if model.jobs.backend == JobsBackend.REALTIME]
    asynchronous = sorted({model.jobs_endpoint.lower() for model in registered
                           if model.jobs.backend == JobsBackend.ASYNC})
    targets = _realtime_targets(realtime, arns)
    statements = [allow("InvokeRealtimeEndpoints", ["sagemaker:InvokeEndpoint"], targets)] \
        if targets else []
    if asynchronous:
        statements.append(allow("InvokeAsyncEndpoints", ["sagemaker:InvokeEndpointAsync"],
                                [arns.sagemaker("endpoint", name) for name in asynchronous]))
    return [
        *statements,
        allow("ReadUploads", ["s3:GetObject"], arns.objects(jobs.UPLOADS)),
        arns.listing("ListUploads"),
        allow("WriteInputsAndResults", ["s3:PutObject"], arns.objects(jobs.INPUTS, jobs.RESULTS)),
    ]


def _realtime_targets(realtime: list[ModelSpec], arns: _Arns) -> list[str]:
    endpoints = sorted({model.jobs_endpoint.lower() for model in realtime})
    components = sorted({model.inference_component.lower() for model in realtime
                         if model.inference_component})
    return [arns.sagemaker("endpoint", name) for name in endpoints] + [
        arns.sagemaker("inference-component", name) for name in components]
