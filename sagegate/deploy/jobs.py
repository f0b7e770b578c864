"""What a deployed stage's jobs are made of: app.py's event functions and where they work.

With ``JOBS_BUCKET``, importing app.py declares its event functions, so ``chalice package`` and
``chalice deploy`` see:

* ``job_runner``: ``@app.on_s3_event`` on ``<JOBS_PREFIX>tickets/``: runs a queued job (realtime)
  or hands it to an asynchronous endpoint;
* ``job_results`` (``JOBS_SUCCESS_TOPIC``) and ``job_failures`` (a different
  ``JOBS_ERROR_TOPIC``): ``@app.on_sns_message``, finish a job from SageMaker's notification; one
  topic for both: ``job_results`` alone.
* ``job_redrive``: ``@app.schedule`` every ``JOB_REDRIVE_PERIOD_SECONDS``: hands ``job_runner``
  again the tickets of jobs still queued ``JOB_REDRIVE_AFTER_SECONDS`` after they were made
  (their S3 event was lost).

Under ``s3://<JOBS_BUCKET>/<JOBS_PREFIX>``: ``uploads/``, ``tickets/`` (one per job: the event
that starts ``job_runner``), ``inputs/`` (an asynchronous endpoint's preprocessed input),
``results/`` (answers too large for the job record) and :data:`ASYNC_OUTPUTS` (the asynchronous
endpoints' ``S3OutputPath`` and ``S3FailurePath``; docs/DEPLOY.md).

This module names those parts for the templates and the IAM policies, and refuses a deployed jobs
stage that could not work (:func:`check_jobs`).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from sagegate.deploy.stage import Stage

JOB_RUNNER = "job_runner"  # app.py's names for its event functions (lambda_functions keys)
JOB_RESULTS = "job_results"
JOB_FAILURES = "job_failures"
JOB_FUNCTIONS = (JOB_RUNNER, JOB_RESULTS, JOB_FAILURES)
JOB_REDRIVE = "job_redrive"  # app.py's scheduled re-drive (not an event function: no DLQ)
DEFAULT_PREFIX = "jobs/"  # JOBS_PREFIX's default (chalicelib.core.config)
UPLOADS, TICKETS, INPUTS, RESULTS = "uploads/", "tickets/", "inputs/", "results/"
ASYNC_OUTPUTS = "async/"
"""The only objects ``job_results`` reads besides its own."""
_ARN_RE = re.compile(r"^arn:aws[a-z-]*:sns:")


@dataclasses.dataclass(frozen=True)
class Topic:
    """One SNS topic an event function is subscribed to (``setting``: ``JOBS_SUCCESS_TOPIC``'s or
    ``JOBS_ERROR_TOPIC``'s value)."""

    setting: str
    function: str
    logical_id: str

    @property
    def created(self) -> bool:
        """Whether the stack creates the topic: a name is this stack's; an ARN one that exists
        elsewhere (another stack, another account's endpoint)."""
        return not _ARN_RE.match(self.setting)

    @property
    def name(self) -> str:
        return self.setting.rsplit(":", 1)[-1]


def enabled(stage: Stage) -> bool:
    return bool(bucket(stage))


def bucket(stage: Stage) -> str:
    return stage.env.get("JOBS_BUCKET", "").strip()


def prefix(stage: Stage) -> str:
    """``JOBS_PREFIX``, default ``jobs/``."""
    return stage.env.get("JOBS_PREFIX", "").strip() or DEFAULT_PREFIX


def table(stage: Stage) -> str:
    return stage.env.get("JOBS_TABLE", "").strip()


def ttl_days(stage: Stage) -> int:
    """``JOBS_TTL_SECONDS`` in whole days, rounded up, plus one: how long the bucket keeps a
    job's objects (a result URL must work while its record can be read)."""
    seconds = int(stage.env.get("JOBS_TTL_SECONDS", "").strip() or 7 * 86_400)
    return -(-seconds // 86_400) + 1


def topics(stage: Stage) -> list[Topic]:
    if not enabled(stage):
        return []
    success = stage.env.get("JOBS_SUCCESS_TOPIC", "").strip()
    error = stage.env.get("JOBS_ERROR_TOPIC", "").strip()
    found = []
    if success:
        found.append(Topic(success, JOB_RESULTS, "JobsSuccessTopic"))
    if error and error != success:
        found.append(Topic(error, JOB_FAILURES, "JobsErrorTopic"))
    return found


def functions(stage: Stage) -> list[str]:
    """The event functions app.py declares for the stage, in :data:`JOB_FUNCTIONS` order."""
    if not enabled(stage):
        return []
    return [JOB_RUNNER, *(topic.function for topic in topics(stage))]


def roles(stage: Stage) -> list[str]:
    return [*functions(stage), JOB_REDRIVE] if enabled(stage) else []


def function_name(stage: Stage, function: str) -> str:
    return f"{stage.function_name}-{function}"


def dead_letter_queue(stage: Stage) -> str:
    """The SQS queue keeping the events the job functions failed on after Lambda's retries."""
    return f"{stage.function_name}-jobs-dead-letter"


def policy_file(stage: Stage, function: str) -> str:
    return f"policy-{stage.name}-{function}.json"


def check_jobs(stage: Stage, on_disk: dict[str, Any]) -> None:
    """Refuse a deployed jobs stage that could not work, or would run with the API's role.

    Raises:
        ValueError: ``JOBS_BUCKET`` without ``JOBS_TABLE`` (the in-memory store lives in one
            process: the event functions would never find the API's jobs), a jobs function
            without its own policy file, or a wrong re-drive setting (its period whole minutes:
            EventBridge's rate).
    """
    if not enabled(stage):
        return
    where = f"stages.{stage.name}"
    if not table(stage):
        raise ValueError(f"{where} sets JOBS_BUCKET without JOBS_TABLE: deployed, the API and "
                         "the job functions are separate processes and need the DynamoDB "
                         "table to share jobs")
    _check_redrive(stage, where)
    configured = on_disk["stages"][stage.name].get("lambda_functions", {})
    _check_runner_timeout(stage, configured, where)
    for function in roles(stage):
        wanted = policy_file(stage, function)
        named = configured.get(function, {}).get("iam_policy_file")
        if named != wanted:
            raise ValueError(f"{where} serves jobs: give {function} its own role with "
                             f"lambda_functions.{function}.iam_policy_file = {wanted!r} "
                             f"(sagegate policy renders it), not {named!r}")


def _check_runner_timeout(stage: Stage, configured: dict[str, Any], where: str) -> None:
    """The runner's timeout the others assume (``JOB_RUNNER_TIMEOUT_SECONDS``, default Lambda's
    longest) must be the runner's own: shorter, a job would be declared lost while its runner
    works; longer, a dead runner's job waits longer than it must."""
    from chalicelib.core.config_names import JOB_RUNNER_TIMEOUT_SECONDS
    from chalicelib.core.errors import ConfigurationError
    from chalicelib.jobs.lifetime import RunnerLifetime

    try:
        assumed = RunnerLifetime.from_env(stage.env).timeout_seconds
    except ConfigurationError as error:
        raise ValueError(f"{where}: {error.message}") from None
    given = configured.get(JOB_RUNNER, {}).get("lambda_timeout")
    if given is not None and int(given) != assumed:
        raise ValueError(f"{where}: {JOB_RUNNER_TIMEOUT_SECONDS} is {assumed} s but "
                         f"lambda_functions.{JOB_RUNNER}.lambda_timeout is {given} s: set "
                         f"{JOB_RUNNER_TIMEOUT_SECONDS} to the runner's timeout")


def _check_redrive(stage: Stage, where: str) -> None:
    from chalicelib.core.errors import ConfigurationError
    from chalicelib.jobs.redrive import RedriveSettings

    try:
        period = RedriveSettings.from_env(stage.env).period_seconds
    except ConfigurationError as error:
        raise ValueError(f"{where}: {error.message}") from None
    if period % 60:
        raise ValueError(f"{where}: JOB_REDRIVE_PERIOD_SECONDS must be whole minutes when "
                         f"deployed (EventBridge's rate), not {period}")
