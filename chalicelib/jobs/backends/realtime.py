"""The ``realtime`` backend: the job's runner runs the model's own serve path on the uploaded
input, with the job's limits and no prediction cache, and captures it as the route does."""
from __future__ import annotations

import time
from typing import Any

from chalicelib.calls import Answer
from chalicelib.core.errors import ModelError
from chalicelib.inference.tensors import MAX_ELEMENTS, MAX_INSTANCES
from chalicelib.inference.timing import StageTimer
from chalicelib.jobs.backends.base import JobSteps, Run
from chalicelib.jobs.lifetime import RemainingMillis, RunnerLifetime
from chalicelib.jobs.records import Job
from chalicelib.jobs.runner import run_job
from chalicelib.registry.specs import ModelSpec

CAPTURE_SECONDS = 10.0
"""What a real-time job's capture may take when its endpoint answered at the end of its
work's time (out of :data:`~chalicelib.jobs.lifetime.FINISH_MARGIN_SECONDS`)."""


class RealtimeBackend:

    def batch_limits(self, model: ModelSpec) -> tuple[int, int]:
        return MAX_INSTANCES, MAX_ELEMENTS  # what one request to a real-time endpoint may

    def lease_seconds(self, model: ModelSpec, lifetime: RunnerLifetime,
                      remaining_ms: RemainingMillis | None) -> float:
        return lifetime.lease_seconds(remaining_ms)

    def start(self, steps: JobSteps, run: Run) -> Job:
        return run_job(steps.store, run.job.job_id, lambda running: _work(steps, running, run),
                       steps.put_result, runner_id=run.runner_id, lease_until=run.lease_until)

    def complete(self, steps: JobSteps, message: Any) -> Job | None:
        return None  # its runner finishes the job: nothing notifies


def _work(steps: JobSteps, job: Job, run: Run) -> Answer:
    request = steps.request(job, run.model)
    try:
        served = steps.pipeline(run.model).serve(request, job.job_id, StageTimer(),
                                                 run.deadline, cache=None)
    except ModelError as error:
        raise _with_model_message(error) from None
    steps.capture(served, job, request, max(run.deadline, time.monotonic() + CAPTURE_SECONDS))
    return served.answer


def _with_model_message(error: ModelError) -> ModelError:
    """A model failure whose message carries the model's own (a job's reader sees only the
    message, where the route's answer has it as a detail)."""
    original = error.details.get("original_message")
    if not original:
        return error
    return ModelError(f"{error.message} {original}", details=error.details)


BACKEND = RealtimeBackend()
