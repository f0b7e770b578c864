"""What a deployed stage's jobs are made of: app.py's event functions and where they work.

A stage with ``JOBS_BUCKET`` serves uploads and jobs (issue 21). Importing app.py with that
setting declares its event functions, so ``chalice package`` and ``chalice deploy`` see:

* ``job_runner``: ``@app.on_s3_event`` on the stage's ticket prefix
  (``<JOBS_PREFIX>tickets/``): runs a queued job (realtime backend) or hands it to an
  asynchronous endpoint;
* ``job_results`` (with ``JOBS_SUCCESS_TOPIC``) and ``job_failures`` (with a different
  ``JOBS_ERROR_TOPIC``): ``@app.on_sns_message``, finish a job from SageMaker's
  notification; when both settings name one topic, ``job_results`` alone takes both.
* ``job_redrive``: ``@app.schedule`` every ``JOB_REDRIVE_PERIOD_SECONDS`` (5 minutes): hands
  ``job_runner`` again the tickets of jobs still queued ``JOB_REDRIVE_AFTER_SECONDS`` after
  they were made (their S3 event was lost; :mod:`chalicelib.jobs.redrive`).

Under ``s3://<JOBS_BUCKET>/<JOBS_PREFIX>``: ``uploads/`` (presigned POSTs, the server's own
inline uploads), ``tickets/`` (one per job: the S3 event that starts ``job_runner``),
``inputs/`` (an asynchronous endpoint's input when preprocessing changed it), ``results/``
(answers too large for the job record) and :data:`ASYNC_OUTPUTS` (where the stage's
asynchronous endpoints are configured to write: ``S3OutputPath`` ``.../async/output``,
``S3FailurePath`` ``.../async/failure``; docs/DEPLOY.md).

This module names those parts for the templates (:mod:`sagegate.deploy.jobs_template`) and the
IAM policies (:mod:`sagegate.deploy.jobs_policy`), and refuses a deployed jobs stage that
could not work (:func:`check_jobs`).
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
"""Under the stage's prefix: the asynchronous endpoints' ``S3OutputPath`` and
``S3FailurePath`` (``async/output``, ``async/failure``), the only objects ``job_results``
reads besides its own."""
_ARN_RE = re.compile(r"^arn:aws[a-z-]*:sns:")


@dataclasses.dataclass(frozen=True)
class Topic:
    """One SNS topic an event function is subscribed to.

    Attributes:
        setting: the value of ``JOBS_SUCCESS_TOPIC`` or ``JOBS_ERROR_TOPIC``.
        function: the function subscribed (:data:`JOB_RESULTS` or :data:`JOB_FAILURES`).
        logical_id: the template's id for the topic the stack creates.
    """

    setting: str
    function: str
    logical_id: str

    @property
    def created(self) -> bool:
        """Whether the stack creates the topic: a name is this stack's topic; an ARN names
        one that exists elsewhere (another stack, another account's endpoint)."""
        return not _ARN_RE.match(self.setting)

    @property
    def name(self) -> str:
        """The topic's name (the last part of an ARN)."""
        return self.setting.rsplit(":", 1)[-1]


def enabled(stage: Stage) -> bool:
    """Whether the stage serves jobs (``JOBS_BUCKET`` set)."""
    return bool(bucket(stage))


def bucket(stage: Stage) -> str:
    """The stage's jobs bucket (``JOBS_BUCKET``; empty: jobs off)."""
    return stage.env.get("JOBS_BUCKET", "").strip()


def prefix(stage: Stage) -> str:
    """The stage's key prefix in the bucket (``JOBS_PREFIX``, default ``jobs/``)."""
    return stage.env.get("JOBS_PREFIX", "").strip() or DEFAULT_PREFIX


def table(stage: Stage) -> str:
    """The job records' DynamoDB table (``JOBS_TABLE``)."""
    return stage.env.get("JOBS_TABLE", "").strip()


def ttl_days(stage: Stage) -> int:
    """``JOBS_TTL_SECONDS`` in whole days, rounded up, plus one: how long the bucket keeps a
    job's objects (its record may be read until its TTL; a result URL must still work)."""
    seconds = int(stage.env.get("JOBS_TTL_SECONDS", "").strip() or 7 * 86_400)
    return -(-seconds // 86_400) + 1


def topics(stage: Stage) -> list[Topic]:
    """The SNS topics of the stage's event functions (none without jobs)."""
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
    """Every jobs function with a role of its own: the event functions, then the re-drive."""
    return [*functions(stage), JOB_REDRIVE] if enabled(stage) else []


def function_name(stage: Stage, function: str) -> str:
    """An event function's Lambda name, as Chalice names it (``<app>-<stage>-<function>``)."""
    return f"{stage.function_name}-{function}"


def dead_letter_queue(stage: Stage) -> str:
    """The SQS queue that keeps the events the job functions failed on after Lambda's retries."""
    return f"{stage.function_name}-jobs-dead-letter"


def policy_file(stage: Stage, function: str) -> str:
    """The file name of an event function's own IAM policy in ``.chalice``."""
    return f"policy-{stage.name}-{function}.json"


def check_jobs(stage: Stage, on_disk: dict[str, Any]) -> None:
    """Refuse a deployed jobs stage that could not work, or would run with the API's role.

    Raises:
        ValueError: ``JOBS_BUCKET`` is set without ``JOBS_TABLE`` (the in-memory store lives
            in one process: the event functions would never find the API's jobs), a jobs
            function has no policy file of its own, or a re-drive setting is wrong (its
            period must be whole minutes: EventBridge's rate).
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
    """The runner's timeout the API and the other functions assume (``JOB_RUNNER_TIMEOUT_
    SECONDS``, by default Lambda's longest) must be the one the runner is given: shorter, a
    job would be declared lost while its runner still works; longer, a dead runner's job
    would wait longer than it must."""
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
