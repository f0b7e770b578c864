"""A job backend sagegate does not ship: ``outbox``. Its runner claims the job, runs the
model's pipeline, and posts the answer to an outbox (the stand-in for an engine that
notifies later, as SNS does); the job ends when that notice is completed. It holds the job
for a fixed lease."""
from __future__ import annotations

from typing import Any

from chalicelib.calls import Answer
from chalicelib.core.errors import SagegateError
from chalicelib.inference.tensors import MAX_ELEMENTS, MAX_INSTANCES
from chalicelib.inference.timing import StageTimer
from chalicelib.jobs.backends.base import JobSteps, Run
from chalicelib.jobs.lifetime import RemainingMillis, RunnerLifetime
from chalicelib.jobs.records import Job, JobState
from chalicelib.jobs.runner import outcome_of
from chalicelib.registry.kinds import BackendRules
from chalicelib.registry.specs import ModelSpec

RULES = BackendRules("outbox", implementation=__name__)
LEASE_SECONDS = 1234.0
OUTBOX: list[dict[str, Any]] = []  # the notices "sent", for the test to deliver


class OutboxBackend:
    def batch_limits(self, model: ModelSpec) -> tuple[int, int]:
        return MAX_INSTANCES, MAX_ELEMENTS

    def lease_seconds(self, model: ModelSpec, lifetime: RunnerLifetime,
                      remaining_ms: RemainingMillis | None) -> float:
        return LEASE_SECONDS

    def start(self, steps: JobSteps, run: Run) -> Job:
        job, claimed = steps.store.claim(run.job.job_id, run.runner_id, run.lease_until)
        if not claimed:
            return job
        try:
            request = steps.request(job, run.model)
            served = steps.pipeline(run.model).serve(request, job.job_id, StageTimer(),
                                                     run.deadline)
        except SagegateError as error:
            return steps.fail(job, error)
        OUTBOX.append({"outbox": job.job_id, "body": served.answer.body.decode()})
        return job

    def complete(self, steps: JobSteps, message: Any) -> Job | None:
        if not isinstance(message, dict) or "outbox" not in message:
            return None
        job = steps.store.get(message["outbox"])
        if job is None:
            return None
        answer = Answer(message["body"].encode(), "application/json")
        done, _ = steps.store.advance(job.job_id, JobState.SUCCEEDED,
                                      outcome_of(job, answer, steps.put_result))
        return done


BACKEND = OutboxBackend()
