"""The event functions' side of jobs: run a job its ticket names, finish one from its
endpoint's notification. Both are safe to run again for the same job (Lambda retries an event
that raised; S3 and SNS deliver at least once).

What running and finishing mean is the model's job backend's
(:mod:`chalicelib.jobs.backends`); :class:`JobsExecution` finds it, gives it the job's lease
and deadline, and offers the steps every backend is made of
(:class:`~chalicelib.jobs.backends.base.JobSteps`): the job's input read as the model route
reads a request, the model's pipeline, the capture (the same Model Monitor record as the
synchronous route's, inference id = job id), the answer kept.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from chalicelib.calls import Answer, Call, ModelRequest, Served
from chalicelib.core.aws import S3Uri
from chalicelib.core.config_names import CaptureMode
from chalicelib.core.errors import InvalidEndpointResponseError, SagegateError
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.serving import ServingPipeline
from chalicelib.jobs.backends.base import Run, backend_of, implementations
from chalicelib.jobs.lifetime import RemainingMillis
from chalicelib.jobs.objects import put_result, read_input
from chalicelib.jobs.records import Job, JobState
from chalicelib.jobs.service import JobsContext, input_key, job_id_of_ticket
from chalicelib.jobs.store import JobStore, Outcome
from chalicelib.jobs.uploads import Pin, changed, head_upload, is_changed, is_missing
from chalicelib.kinds import accepts, kind_of
from chalicelib.registry.specs import ModelSpec

logger = logging.getLogger("sagegate.jobs")


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
                (:meth:`~chalicelib.jobs.lifetime.RunnerLifetime.work_seconds`), and the
                claim's lease runs to its end (the backend's ``lease_seconds``).

        Raises:
            botocore's errors and anything unexpected (the event is retried; a job that
            already ran is not run again).
        """
        lifetime = self.context.lifetime
        deadline = time.monotonic() + lifetime.work_seconds(
            remaining_ms, self.context.settings.job_budget_seconds)
        job_id = job_id_of_ticket(key, self.context.prefix)
        job = self.context.store.get(job_id) if job_id else None
        if job is None:
            logger.warning("ticket %r names no job of this stage; ignored", key[:256])
            return None
        if job.state.final:
            return job
        model = self.model(job)
        backend = backend_of(model, self.context.backends)
        lease_until = self.context.clock() + backend.lease_seconds(model, lifetime,
                                                                   remaining_ms)
        return backend.start(self, Run(job, model, runner_id, deadline, lease_until))

    def complete(self, message: Any) -> Job | None:
        """Finish the job an endpoint's notification (an SNS message) is about; None when the
        message is no notification of one of this stage's jobs.

        Raises:
            botocore's errors (the message is redelivered; a finished job stays as it is).
        """
        for backend in implementations(self.context.backends):
            job = backend.complete(self, message)
            if job is not None:
                return job
        logger.warning("SNS message is no notification of a job of this stage; ignored")
        return None

    # --- the steps (JobSteps) ----------------------------------------------------------------

    @property
    def store(self) -> JobStore:
        return self.context.store

    @property
    def endpoint(self) -> EndpointClient:
        return self.context.endpoint

    def model(self, job: Job) -> ModelSpec:
        return self.context.registry.get(job.model)

    def pipeline(self, model: ModelSpec) -> ServingPipeline:
        return self.context.pipeline_for(model)

    def request(self, job: Job, model: ModelSpec) -> ModelRequest:
        """The job's input read as the model route reads a request, with the options read
        when the job was made: the object the job was made for, or an ``UploadChanged``
        failure."""
        body, content_type = read_input(
            self.context.s3, self.context.bucket, self.context.prefix,
            self.context.key_of(job.input_location), model.jobs.max_upload_bytes,
            lambda kind: accepts(model, kind), _pin(job))
        return kind_of(model).read_job(body, content_type, job.options, model,
                                       max_body_bytes=model.jobs.max_upload_bytes)

    def put_result(self, job: Job, answer: Answer) -> str:
        return put_result(self.context.s3, self.context.bucket, self.context.prefix,
                          job.job_id, answer)

    def capture(self, served: Served, job: Job, request: ModelRequest,
                deadline: float | None = None) -> None:
        if served.invoked:
            outcome = self.context.capturer.capture_served(
                served, job.job_id, request.options.custom_attributes,
                time.monotonic() + self.context.settings.job_budget_seconds
                if deadline is None else deadline)
            logger.info("job captured", extra={"job_id": job.job_id, "capture": outcome})

    def fail(self, job: Job, error: SagegateError) -> Job:
        failed, _ = self.context.store.advance(job.job_id, JobState.FAILED,
                                               Outcome(error=error.as_failure()))
        return failed

    def endpoint_input(self, job: Job, request: ModelRequest, call: Call) -> str:
        """Where an endpoint reads the job's input: an object of the server's own
        (``inputs/<job_id>``), never the upload, which the endpoint would read when it gets
        to it, after a client may have replaced it. An input the preprocessing left as it was
        is copied from the object the job read (S3's copy, on its ETag).

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

    def output(self, location: str) -> tuple[bytes, str]:
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

    def sent(self, job: Job) -> bytes:
        """What the endpoint was sent (for capture; nothing when capture is off): the job's
        input object, or nothing when it is gone (the capture record then has an empty
        input; the answer does not depend on it)."""
        if self.context.capturer.mode == CaptureMode.OFF:
            return b""
        key = input_key(self.context.prefix, job.job_id)
        if head_upload(self.context.s3, self.context.bucket, key) is None:
            key = self.context.key_of(job.input_location)
        try:
            return self.output(self.context.location(key))[0]
        except InvalidEndpointResponseError:
            logger.warning("job %s: its input is gone; captured without it", job.job_id)
            return b""


def _pin(job: Job) -> Pin | None:
    """The input object a job was made for (None: a job made before pins)."""
    return Pin(job.input_etag, job.input_version) if job.input_etag else None
