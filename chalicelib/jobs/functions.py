"""The job functions' work: what ``app.py``'s event declarations call.

``job_runner`` (S3's event for each new ticket) runs the jobs of its tickets, ``job_results``
and ``job_failures`` (SNS's for each asynchronous endpoint's notification) finish theirs, and
``job_redrive`` (EventBridge's schedule) hands the runner again the tickets of jobs whose S3
event was lost. Each is told the parts it works with by the composition root; each returns
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
    """The job runner's work: each ticket of the S3 notification, run once (a retried event
    does nothing twice). Unexpected errors propagate, so Lambda retries the event.

    The runner is named by Lambda's ``context.aws_request_id``, which Lambda's retries of one
    event keep and a duplicate delivery does not: a job another invocation is running is not
    run again. Without a context (a test, a local call) each call is a runner of its own.
    Each job's work, its endpoint's retries included, ends before the invocation's time does
    (the context's remaining time, less a margin).
    """
    runner_id = str(getattr(context, "aws_request_id", None) or uuid.uuid4())
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    bucket = execution.context.settings.jobs_bucket
    return job_states("job ran", (execution.run_ticket(key, runner_id, remaining_ms)
                                  for key in s3_keys(event, bucket)))


def complete(execution: JobsExecution, event: dict[str, Any]) -> dict[str, Any]:
    """The SNS functions' work: each asynchronous endpoint notification, finished once."""
    return job_states("job completed",
                      (execution.complete(message) for message in sns_messages(event)))


def redrive_jobs(context: JobsContext, scheduled: str, function_name: str,
                 deliver: redrive.Deliver | None = None) -> dict[str, Any]:
    """The re-drive's run scheduled at ``scheduled`` (an ISO time; empty: now), as
    ``function_name`` (this function's own name: its runner is the sibling Chalice names the
    same way): :func:`chalicelib.jobs.redrive.run_scheduled`. The local event pump passes its
    own ``deliver`` (a message on its tickets queue)."""
    return redrive.run_scheduled(context, scheduled, function_name, deliver)


def job_states(what: str, jobs: Iterable[Job | None]) -> dict[str, Any]:
    """``{"jobs": {job_id: state}}`` of the jobs an event moved, each logged as ``what``
    (None: the event named no job of this stage)."""
    states: dict[str, str] = {}
    for job in jobs:
        if job is not None:
            states[job.job_id] = str(job.state)
            logger.info(what, extra={"job_id": job.job_id, "model": job.model,
                                     "state": str(job.state)})
    return {"jobs": states}
