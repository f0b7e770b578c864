"""The job functions' work: what ``app.py``'s event declarations call.

``job_runner`` (S3's event per ticket) runs jobs, ``job_results`` and ``job_failures`` (SNS)
finish asynchronous ones, ``job_redrive`` (a schedule) re-delivers lost tickets. Each returns
what it did, which Lambda logs as the invocation's result.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from chalicelib.core.observability import logger
from chalicelib.jobs import redrive
from chalicelib.jobs.events import s3_keys, sns_messages

if TYPE_CHECKING:
    from chalicelib.jobs.execution import JobsExecution
    from chalicelib.jobs.records import Job
    from chalicelib.jobs.service import JobsContext


def run_tickets(execution: JobsExecution, event: dict[str, Any],
                context: Any = None) -> dict[str, Any]:
    """The job runner's work: each ticket of the S3 notification, run once. Unexpected
    errors propagate, so Lambda retries the event.

    The runner is named by ``context.aws_request_id``, which Lambda's retries of one event
    keep and a duplicate delivery does not. Without a context each call is its own runner.
    """
    runner_id = str(getattr(context, "aws_request_id", None) or uuid.uuid4())
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    bucket = execution.context.settings.jobs_bucket
    return job_states("job ran", (execution.run_ticket(key, runner_id, remaining_ms)
                                  for key in s3_keys(event, bucket)))


def complete(execution: JobsExecution, event: dict[str, Any]) -> dict[str, Any]:
    return job_states("job completed",
                      (execution.complete(message) for message in sns_messages(event)))


def redrive_jobs(context: JobsContext, scheduled: str, function_name: str,
                 deliver: redrive.Deliver | None = None) -> dict[str, Any]:
    return redrive.run_scheduled(context, scheduled, function_name, deliver)


def job_states(what: str, jobs: Iterable[Job | None]) -> dict[str, Any]:
    """``{"jobs": {job_id: state}}`` of the jobs an event moved, each logged as ``what``."""
    states: dict[str, str] = {}
    for job in jobs:
        if job is not None:
            states[job.job_id] = str(job.state)
            logger.info(what, extra={"job_id": job.job_id, "model": job.model,
                                     "state": str(job.state)})
    return {"jobs": states}
