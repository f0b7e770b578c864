"""The event functions' side of jobs: run a job its ticket names, finish one from its
endpoint's notification. Both are safe to run again for the same job (Lambda retries an event
that raised; S3 and SNS deliver at least once).

What running and finishing mean is the model's job backend's; :class:`JobsExecution` gives it
the job's lease and deadline and the steps every backend is made of
(:class:`~chalicelib.jobs.backends.base.JobSteps`). The capture is the same Model Monitor
record as the synchronous route's, with inference id = job id.
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

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    def run_ticket(self, key: str, runner_id: str,
                   remaining_ms: RemainingMillis | None = None) -> Job | None:
        """Run the job a ticket's key names; None when it names none of this stage's jobs
        (logged, not retried).

        Args:
            runner_id: Lambda's request id, kept by its retries of one event: a job another
                runner is running is not run again (a duplicate delivery).
            remaining_ms: the invocation's remaining time (None: not on Lambda). The job's
                work, endpoint retries included, ends before it; the claim's lease runs to it.

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
        """Finish the job an SNS notification is about; None when it is no notification of
        this stage's jobs. botocore's errors raise (the message is redelivered)."""
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
        """The job's input read as the model route reads a request: the object the job was
        made for, or an ``UploadChanged`` failure."""
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
        (``inputs/<job_id>``), never the upload, which a client may replace before the
        endpoint gets to it. An unchanged input is copied from the object the job read (on
        its ETag: UploadChangedError if it was replaced since)."""
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
        """An object's bytes and type; a missing one is InvalidEndpointResponseError (a retry
        would not make one: the job fails instead of staying ``running``)."""
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
        """What the endpoint was sent, for capture: nothing when capture is off or the input
        is gone (the record then has an empty input; the answer does not depend on it)."""
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
    return Pin(job.input_etag, job.input_version) if job.input_etag else None
