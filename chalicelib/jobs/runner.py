"""Running one job: claim it, do its work, keep the answer (inline when small, else as an
object) or the error. Safe to run again: a finished job is answered as it stands; a running
one starts over only as :func:`~chalicelib.jobs.records.may_claim` allows.

Once the work has an outcome, keeping it is retried while S3 or DynamoDB fail in a way a retry
may cure: giving up there would have Lambda run the event again, and the endpoint invoked a
second time for an answer it gave. The work is passed in, so this module loads nothing heavy.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from chalicelib.calls import Answer
from chalicelib.core.errors import JobNotFoundError, SagegateError
from chalicelib.core.retries import Retrier, RetryPolicy, RetryQuota
from chalicelib.jobs.awsfaults import retriable
from chalicelib.jobs.codec import result_text
from chalicelib.jobs.lifetime import FINISH_MARGIN_SECONDS
from chalicelib.jobs.records import Job, JobState
from chalicelib.jobs.store import JobStore, Outcome

logger = logging.getLogger("sagegate.jobs")

INLINE_RESULT_BYTES = 256 * 1024
"""The largest JSON answer kept in the job record (DynamoDB items hold at most 400 KB)."""
KEEP_POLICY = RetryPolicy(max_attempts=6, budget_seconds=FINISH_MARGIN_SECONDS / 2,
                          base_delay=0.5, max_delay=8.0)
"""Keeping an outcome: a few attempts within half of what the runner kept of its time."""
_KEEP_QUOTA = RetryQuota()  # this process's retries of S3 and DynamoDB writes

Work = Callable[[Job], Answer]
PutResult = Callable[[Job, Answer], str]  # keeps an answer too large to inline; its s3:// URI


def outcome_of(job: Job, answer: Answer, put_result: PutResult) -> Outcome:
    """Inline when the answer is JSON of at most :data:`INLINE_RESULT_BYTES`, else an object."""
    if answer.content_type.split(";")[0].strip() == "application/json" \
            and len(answer.body) <= INLINE_RESULT_BYTES:
        try:
            result = json.loads(answer.body)
        except ValueError:
            result = None  # not JSON after all: keep the bytes as they came
        # measured as the record keeps it (what a JSON answer inflates to when re-encoded)
        if result is not None and len(result_text(result).encode()) <= INLINE_RESULT_BYTES:
            return Outcome(result=result)
    return Outcome(result_location=put_result(job, answer))


def run_job(store: JobStore, job_id: str, work: Work, put_result: PutResult, *,
            runner_id: str, lease_until: float,
            sleep: Callable[[float], None] = time.sleep) -> Job:
    """Run a job once (or again, after its runner died) and answer it as it ends.

    The job runs when ``runner_id`` claims it until ``lease_until``; otherwise it is answered
    as it stands. A :class:`SagegateError` from the work fails the job with its code and
    message. Anything else propagates and leaves the job running, so the event is retried
    (with the same request id: the retry may run it again).

    Raises:
        JobNotFoundError: no such job (or past its TTL).
    """
    job = store.get(job_id)
    if job is None:
        raise JobNotFoundError(f"No job {job_id!r}.")
    if job.state.final:
        return job
    job, claimed = store.claim(job_id, runner_id, lease_until, reclaim=True)
    if not claimed:  # another runner has it, or finished it meanwhile
        return job
    try:
        answer = work(job)
    except SagegateError as error:
        failure = Outcome(error=error.as_failure())
        return _keep(store, job_id, JobState.FAILED, lambda: failure, sleep)
    return _keep(store, job_id, JobState.SUCCEEDED,
                 lambda: outcome_of(job, answer, put_result), sleep)


def _keep(store: JobStore, job_id: str, state: JobState, outcome: Callable[[], Outcome],
          sleep: Callable[[float], None]) -> Job:
    """Move the job to its final ``state``, again after a failure a retry may cure."""
    retrier = Retrier(KEEP_POLICY, _KEEP_QUOTA)
    while True:
        try:
            done, _ = store.advance(job_id, state, outcome())
        except Exception as error:
            delay = retrier.failed() if retriable(error) else None
            if delay is None:
                raise
            logger.warning("job %s: keeping its outcome failed (%s); retrying in %.1f s",
                           job_id, type(error).__name__, delay)
            sleep(delay)
            continue
        retrier.succeeded()
        return done
