"""The ``async`` backend: the runner preprocesses the job's input (the pipeline's first half),
keeps it as an object of the server's, and hands it to a SageMaker asynchronous endpoint
(:func:`~chalicelib.jobs.asyncinference.start`); the endpoint's SNS notification finishes it
with the second half, captured as the synchronous route captures an inference."""
from __future__ import annotations

import dataclasses
from typing import Any, cast

from chalicelib.calls import Answer, Call, InvokeResult, ModelRequest
from chalicelib.core.errors import InvalidParameterError, SagegateError
from chalicelib.inference.serving import SplitPipeline
from chalicelib.inference.tensors import batch_limits
from chalicelib.inference.timing import StageTimer
from chalicelib.jobs import asyncinference
from chalicelib.jobs.backends.base import JobSteps, Run
from chalicelib.jobs.lifetime import RemainingMillis, RunnerLifetime
from chalicelib.jobs.records import Job, JobState, is_job_id
from chalicelib.kinds import kind_of
from chalicelib.registry.specs import ModelSpec

JOB_MAX_INSTANCES = 4_000_000
"""Rows an asynchronous job's tensor input may carry (a 30 MB CSV batch is about 2 million)."""
JOB_MAX_ELEMENTS = 16_000_000
ASYNC_PATIENCE_SECONDS = 6 * 3600 + 120
"""The lease of a job handed to an asynchronous endpoint, beyond the invocation's timeout:
SageMaker may keep a request queued 6 hours (``RequestTTLSeconds``' default), and a margin."""


class AsyncBackend:

    def batch_limits(self, model: ModelSpec) -> tuple[int, int]:
        return JOB_MAX_INSTANCES, JOB_MAX_ELEMENTS  # the endpoint takes a whole batch

    def lease_seconds(self, model: ModelSpec, lifetime: RunnerLifetime,
                      remaining_ms: RemainingMillis | None) -> float:
        # the job's holder, once started, is the endpoint: it notifies within these
        return float(model.jobs.invocation_timeout_seconds + ASYNC_PATIENCE_SECONDS)

    def start(self, steps: JobSteps, run: Run) -> Job:
        """Preprocess, keep the endpoint's input, queue it (once)."""
        job, model = run.job, run.model
        if job.state is not JobState.QUEUED:
            return job  # started already (a retried event): the notification finishes it
        try:
            request = steps.request(job, model)
            _check_options(request, job, model)
            with batch_limits(*self.batch_limits(model)):
                call = _split(steps, model).preprocess(request, StageTimer(), run.deadline)
            location = steps.endpoint_input(job, request, call)
        except SagegateError as error:
            return steps.fail(job, error)
        return asyncinference.start(
            steps.endpoint, steps.store, dataclasses.replace(job, input_location=location),
            model.jobs_endpoint, call.content_type, model.jobs.invocation_timeout_seconds,
            runner_id=run.runner_id, lease_until=run.lease_until, deadline=run.deadline)

    def complete(self, steps: JobSteps, message: Any) -> Job | None:
        completion = asyncinference.parse_completion(message)
        job = steps.store.get(completion.inference_id) \
            if completion and is_job_id(completion.inference_id) else None
        if completion is None or job is None:
            return None
        try:
            return asyncinference.complete(steps.store, completion,
                                           lambda location: _answer(steps, job, location),
                                           steps.put_result)
        except SagegateError as error:  # the output is not what the model answers
            return steps.fail(job, error)


def _split(steps: JobSteps, model: ModelSpec) -> SplitPipeline:
    # the registry lets only the kinds that split name this backend
    return cast(SplitPipeline, steps.pipeline(model))


def _answer(steps: JobSteps, job: Job, output_location: str) -> Answer:
    model = steps.model(job)
    body, content_type = steps.output(output_location)
    request = ModelRequest(Call(b"", ""), job.options)
    result = InvokeResult(body=body, content_type=content_type,
                          variant=asyncinference.ASYNC_VARIANT, custom_attributes=None,
                          attempts=1)
    with batch_limits(JOB_MAX_INSTANCES, JOB_MAX_ELEMENTS):
        served = _split(steps, model).postprocess(request, result, job.job_id, steps.sent(job))
    steps.capture(served, job, request)
    return served.answer


def _check_options(request: ModelRequest, job: Job, model: ModelSpec) -> None:
    """An asynchronous job's answer is made from its query options (the notification has
    nothing else): a ``k`` inside an uploaded JSON body that differs is refused."""
    expected = kind_of(model).applied_k(model, job.options.k)
    if request.options.k != expected:
        raise InvalidParameterError(
            "An asynchronous job takes its options from the query string of POST "
            f"/models/{model.name}/jobs (?k=...), not from the uploaded body.")


BACKEND = AsyncBackend()
