"""Running one job: claim it (move it to running for this runner), do its work, keep the
answer (inline when small, else as an object) or the error, and move it to its final state.
Safe to run again for the same job id: a finished job is answered as it stands; a running one
starts over only for a retry of its own runner's event or after its runner is surely gone,
never for a duplicate delivery while its runner may still be at work.

The work itself (read the upload, run the model's pipeline) is passed in, so this module
loads nothing heavy and the same steps serve every backend and every test.
"""
from __future__ import annotations

import json
from collections.abc import Callable

from chalicelib.calls import Answer
from chalicelib.core.errors import SagegateError
from chalicelib.jobs.records import Job, JobNotFoundError, JobState
from chalicelib.jobs.store import JobStore, Outcome, result_text

RUNNER_LIFETIME_SECONDS = 15 * 60 + 60
"""How long a runner may live: Lambda's longest timeout (15 minutes) and a minute's margin.
A job running that long past its last move has no runner left; another one may take it."""
INLINE_RESULT_BYTES = 256 * 1024
"""The largest JSON answer kept in the job record (DynamoDB items hold at most 400 KB)."""

Work = Callable[[Job], Answer]
"""A job's work: the answer the synchronous route would have given for its input."""
PutResult = Callable[[Job, Answer], str]
"""Store an answer too large to inline; answers its location (``s3://bucket/key``)."""


def outcome_of(job: Job, answer: Answer, put_result: PutResult) -> Outcome:
    """Where a job's answer goes: inline when it is JSON of at most
    :data:`INLINE_RESULT_BYTES`, else an object written by ``put_result``."""
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
            runner_id: str) -> Job:
    """Run a job once (or again, after its runner died) and answer it as it ends.

    ``runner_id`` names this invocation (Lambda's request id, the same for its retries of one
    event): the job runs when this runner claims it (see
    :func:`~chalicelib.jobs.records.may_claim`, with :data:`RUNNER_LIFETIME_SECONDS`);
    otherwise it is answered as it stands. A :class:`SagegateError` from the work (a missing
    or wrong upload, a bad image, the endpoint's failure) fails the job with its code and
    message. Anything else propagates and leaves the job running, so the event that started
    it is retried (with the same request id: the retry may run it again).

    Raises:
        JobNotFoundError: no such job (or past its TTL).
    """
    job = store.get(job_id)
    if job is None:
        raise JobNotFoundError(f"No job {job_id!r}.")
    if job.state.final:
        return job
    job, claimed = store.claim(job_id, runner_id, RUNNER_LIFETIME_SECONDS)
    if not claimed:  # another runner has it, or finished it meanwhile
        return job
    try:
        outcome = outcome_of(job, work(job), put_result)
    except SagegateError as error:
        failed, _ = store.advance(job_id, JobState.FAILED,
                                  Outcome(error={"Code": error.CODE, "Message": error.message}))
        return failed
    done, _ = store.advance(job_id, JobState.SUCCEEDED, outcome)
    return done
