"""The event functions' side of jobs: run a job its ticket names, finish an asynchronous one
from its endpoint's notification. Both are safe to run again for the same job (Lambda retries
an event that raised; S3 and SNS deliver at least once).

A realtime job runs the model's own serve path on the uploaded input, with the job's limits
and no prediction cache; an asynchronous job runs the pipeline's first half here, the
endpoint later, and the second half when the notification comes. Each inference is captured
as the synchronous route captures it (the same Model Monitor record, inference id = job id).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from chalicelib.calls import Answer, Call, CallOptions, InvokeResult, ModelRequest, Served
from chalicelib.core.aws import S3Uri
from chalicelib.core.config import CaptureMode
from chalicelib.core.errors import (
    InvalidEndpointResponseError,
    InvalidParameterError,
    ModelError,
    SagegateError,
)
from chalicelib.inference.accepted import accepts
from chalicelib.inference.coercion import batch_limits
from chalicelib.inference.pipeline import StageTimer
from chalicelib.jobs import asyncinference
from chalicelib.jobs.lifetime import RemainingMillis
from chalicelib.jobs.objects import put_result, read_input
from chalicelib.jobs.records import Job, JobState, is_job_id
from chalicelib.jobs.runner import run_job
from chalicelib.jobs.service import (
    JOB_MAX_ELEMENTS,
    JOB_MAX_INSTANCES,
    JobsContext,
    input_key,
    job_id_of_ticket,
)
from chalicelib.jobs.store import Outcome
from chalicelib.jobs.uploads import Pin, changed, head_upload, is_changed, is_missing
from chalicelib.registry.specs import JobsBackend, ModelSpec

logger = logging.getLogger("sagegate.jobs")

CAPTURE_SECONDS = 10.0
"""What a real-time job's capture may take when its endpoint answered at the end of its
work's time (out of what the runner kept for after it,
:data:`~chalicelib.jobs.lifetime.FINISH_MARGIN_SECONDS`)."""


class JobsExecution:
    """Runs tickets and completes notifications (the ``job_*`` event functions)."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    def run_ticket(self, key: str, runner_id: str,
                   remaining_ms: RemainingMillis | None = None) -> Job | None:
        """Run the job a ticket's key names; None when it names none of this stage's jobs
        (logged, not retried).

        Args:
            key: the ticket's object key.
            runner_id: this invocation's id (Lambda's request id, kept by its retries of one
                event): a job another runner is running is not run again (a duplicate
                delivery of the ticket's event).
            remaining_ms: the invocation's remaining time (Lambda's context; None: not on
                Lambda). The job's work, the endpoint's retries included, ends before it
                (:meth:`~chalicelib.jobs.lifetime.RunnerLifetime.work_seconds`).

        Raises:
            botocore's errors and anything unexpected (the event is retried; a job that
            already ran is not run again).
        """
        deadline = time.monotonic() + self.context.lifetime.work_seconds(
            remaining_ms, self.context.settings.job_budget_seconds)
        job_id = job_id_of_ticket(key, self.context.prefix)
        job = self.context.store.get(job_id) if job_id else None
        if job is None:
            logger.warning("ticket %r names no job of this stage; ignored", key[:256])
            return None
        if job.state.final:
            return job
        model = self.context.registry.get(job.model)
        if model.jobs.backend == JobsBackend.ASYNC:
            return self._start_async(job, model, runner_id, deadline)
        return run_job(self.context.store, job.job_id,
                       lambda running: self._work(running, model, deadline), self._put_result,
                       runner_id=runner_id, lifetime=self.context.lifetime)

    def _put_result(self, job: Job, answer: Answer) -> str:
        return put_result(self.context.s3, self.context.bucket, self.context.prefix,
                          job.job_id, answer)

    def _request(self, job: Job, model: ModelSpec) -> ModelRequest:
        """The job's input read as the model route reads a request: the object the job was
        made for, or an ``UploadChanged`` failure."""
        body, content_type = read_input(
            self.context.s3, self.context.bucket, self.context.prefix,
            self.context.key_of(job.input_location), model.jobs.max_upload_bytes,
            lambda kind: accepts(model, kind), _pin(job))
        return self.context.read_request(body, content_type, job.options, model,
                                         model.jobs.max_upload_bytes)

    def _deadline(self) -> float:
        return time.monotonic() + self.context.settings.job_budget_seconds

    def _work(self, job: Job, model: ModelSpec, deadline: float) -> Answer:
        """A realtime job: the model's serve path on the upload, then its capture. The
        endpoint client retries what a retry may cure until ``deadline`` (see
        :func:`~chalicelib.jobs.invoking.job_retry_policy`)."""
        request = self._request(job, model)
        try:
            served = self.context.pipeline_for(model).serve(request, job.job_id, StageTimer(),
                                                            deadline, cache=None)
        except ModelError as error:
            raise _with_model_message(error) from None
        self._capture(served, job, request, max(deadline, time.monotonic() + CAPTURE_SECONDS))
        return served.answer

    def _capture(self, served: Served, job: Job, request: ModelRequest,
                 deadline: float | None = None) -> None:
        if served.invoked:
            outcome = self.context.capturer.capture_served(
                served, job.job_id, request.options.custom_attributes,
                self._deadline() if deadline is None else deadline)
            logger.info("job captured", extra={"job_id": job.job_id, "capture": outcome})

    def _start_async(self, job: Job, model: ModelSpec, runner_id: str, deadline: float) -> Job:
        """An asynchronous job: preprocess, keep the endpoint's input, queue it (once:
        :func:`~chalicelib.jobs.asyncinference.start`)."""
        if job.state is not JobState.QUEUED:
            return job  # started already (a retried event): the notification finishes it
        try:
            request = self._request(job, model)
            _check_async_options(request, self.context.read_options(job.options), model)
            with batch_limits(JOB_MAX_INSTANCES, JOB_MAX_ELEMENTS):
                call = self.context.pipeline_for(model).preprocess(request, StageTimer(),
                                                                   deadline)
            location = self._endpoint_input(job, request, call)
        except SagegateError as error:
            return self._fail(job, error)
        return asyncinference.start(
            self.context.runtime, self.context.store,
            dataclasses.replace(job, input_location=location), model.jobs_endpoint,
            call.content_type, model.jobs.invocation_timeout_seconds, runner_id=runner_id)

    def _endpoint_input(self, job: Job, request: ModelRequest, call: Call) -> str:
        """Where the asynchronous endpoint reads the job's input: an object of the server's
        own (``inputs/<job_id>``), never the upload, which the endpoint would read when it
        gets to it, after a client may have replaced it. An input the preprocessing left as
        it was is copied from the object the job read (S3's copy, on its ETag).

        Raises:
            UploadChangedError: the upload was replaced since the job read it.
        """
        key = input_key(self.context.prefix, job.job_id)
        if call.body != request.call.body or call.content_type != request.call.content_type:
            self.context.s3.put_object(Bucket=self.context.bucket, Key=key, Body=call.body,
                                       ContentType=call.content_type)
            return self.context.location(key)
        source = {"Bucket": self.context.bucket, "Key": self.context.key_of(job.input_location)}
        pin = _pin(job)
        if pin is not None and pin.version_id:
            source["VersionId"] = pin.version_id
        try:
            self.context.s3.copy_object(Bucket=self.context.bucket, Key=key, CopySource=source,
                                        **({"CopySourceIfMatch": pin.etag} if pin else {}))
        except Exception as error:
            if pin is None or not is_changed(error):
                raise
            raise changed(pin) from None
        return self.context.location(key)

    def _fail(self, job: Job, error: SagegateError) -> Job:
        failed, _ = self.context.store.advance(
            job.job_id, JobState.FAILED,
            Outcome(error=error.as_failure()))
        return failed

    def complete(self, message: Any) -> Job | None:
        """Finish the job an asynchronous endpoint's SNS message is about; None when the
        message is no notification of one of this stage's jobs.

        Raises:
            botocore's errors (the message is redelivered; a finished job stays as it is).
        """
        completion = asyncinference.parse_completion(message)
        job = self.context.store.get(completion.inference_id) \
            if completion and is_job_id(completion.inference_id) else None
        if completion is None or job is None:
            logger.warning("SNS message is no notification of a job of this stage; ignored")
            return None
        try:
            return asyncinference.complete(self.context.store, completion,
                                           lambda location: self._answer(job, location),
                                           self._put_result)
        except SagegateError as error:  # the output is not what the model answers
            return self._fail(job, error)

    def _answer(self, job: Job, output_location: str) -> Answer:
        """The synchronous route's answer to an asynchronous endpoint's output object,
        captured as the synchronous route captures an inference."""
        model = self.context.registry.get(job.model)
        output = self._get(output_location)
        options = self.context.read_options(job.options)
        request = ModelRequest(Call(b"", ""), options)
        result = InvokeResult(body=output[0], content_type=output[1],
                              variant=asyncinference.ASYNC_VARIANT, custom_attributes=None,
                              attempts=1)
        sent = self._sent(job) if self.context.capturer.mode != CaptureMode.OFF else b""
        with batch_limits(JOB_MAX_INSTANCES, JOB_MAX_ELEMENTS):
            served = self.context.pipeline_for(model).postprocess(request, result, job.job_id,
                                                                  sent)
        self._capture(served, job, request)
        return served.answer

    def _get(self, location: str) -> tuple[bytes, str]:
        """An object's bytes and type.

        Raises:
            InvalidEndpointResponseError: there is no such object (a retry would not make
                one: the job fails instead of staying ``running`` once the retries are spent).
        """
        uri = S3Uri.parse(location)
        try:
            answer = self.context.s3.get_object(Bucket=uri.bucket, Key=uri.key)
        except Exception as error:
            if not is_missing(error):
                raise
            raise InvalidEndpointResponseError(
                f"The asynchronous endpoint's output {location} is gone.") from None
        return answer["Body"].read(), str(answer.get("ContentType") or "")

    def _sent(self, job: Job) -> bytes:
        """What the asynchronous endpoint was sent (for capture): the job's input object,
        or nothing when it is gone (the capture record then has an empty input; the answer
        does not depend on it)."""
        key = input_key(self.context.prefix, job.job_id)
        if head_upload(self.context.s3, self.context.bucket, key) is None:
            key = self.context.key_of(job.input_location)
        try:
            return self._get(self.context.location(key))[0]
        except InvalidEndpointResponseError:
            logger.warning("job %s: its input is gone; captured without it", job.job_id)
            return b""


def _pin(job: Job) -> Pin | None:
    """The input object a job was made for (None: a job made before pins)."""
    return Pin(job.input_etag, job.input_version) if job.input_etag else None


def _check_async_options(request: ModelRequest, query: CallOptions, model: ModelSpec) -> None:
    """An asynchronous job's answer is made from its query options (the notification has
    nothing else): options inside an uploaded JSON body that change it are refused.

    Raises:
        InvalidParameterError: the body's ``k`` differs from the query's.
    """
    expected = query.k
    if expected is None and model.settings is not None:  # the image reader applies the default
        expected = model.default_k
    if request.options.k != expected:
        raise InvalidParameterError(
            "An asynchronous job takes its options from the query string of POST "
            f"/models/{model.name}/jobs (?k=...), not from the uploaded body.")


def _with_model_message(error: ModelError) -> ModelError:
    """A model failure whose message carries the model's own (a job's reader sees only the
    message; the synchronous route's answer has it as a detail)."""
    original = error.details.get("original_message")
    if not original:
        return error
    return ModelError(f"{error.message} {original}", details=error.details)
