"""The jobs service the routes call: presign an upload, create a job from an upload (or a
small inline body), read a job. Running and finishing jobs is :mod:`.execution`."""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.calls import CallOptions
from chalicelib.capture import Capturer
from chalicelib.core.aws import S3Uri
from chalicelib.core.config import Settings
from chalicelib.core.errors import InvalidUploadError
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.serving import ServingPipeline
from chalicelib.inference.tensors import batch_limits
from chalicelib.jobs.awsfaults import translated
from chalicelib.jobs.backends.base import backend_of
from chalicelib.jobs.lifetime import LAMBDA_RETRY_WAIT_SECONDS, RunnerLifetime
from chalicelib.jobs.objects import check_input, result_url
from chalicelib.jobs.records import (
    Job,
    JobState,
    check_owner,
    is_job_id,
    lease_end,
    new_job_id,
)
from chalicelib.jobs.store import JobStore, Outcome
from chalicelib.jobs.uploads import (
    UPLOADS,
    Pin,
    Upload,
    check_content_type,
    pin_of,
    presign_upload,
    upload_key,
)
from chalicelib.kinds import accepts, check_type, kind_of
from chalicelib.registry.kinds import BackendRules
from chalicelib.registry.loading import Registry
from chalicelib.registry.specs import ModelSpec

TICKETS = "tickets/"
"""Where job tickets go under ``JOBS_PREFIX``: writing one starts the job's runner (S3 event)."""
INPUTS = "inputs/"
"""Where an asynchronous endpoint's input goes under ``JOBS_PREFIX`` when it differs from the
upload (the image resized, a tensor body made TF Serving's)."""

JOB_LOST = "JobLost"
QUEUED_PATIENCE_SECONDS = 6 * 3600 + 15 * 60 + 5 * 60
"""How long a queued job may wait for its runner: Lambda may keep a throttled event up to 6
hours before running it (``MaximumEventAgeInSeconds``' default), the attempt that claims the
job may take 15 minutes (Lambda's longest timeout; an asynchronous job is claimed after its
preprocessing), and 5 minutes' margin."""


@dataclasses.dataclass
class JobsContext:
    """What the jobs service works with; the composition root builds it on first use.

    Attributes:
        endpoint: a real-time job's ``InvokeEndpoint`` and an asynchronous one's
            ``InvokeEndpointAsync``, retried by one rule.
        pipeline_for: a model's pipeline with the job's limits (its image pixel cap, the
            job endpoint client's timeouts and budget).
        lifetime: the runner function's timeout and what follows (work time, leases).
    """

    settings: Settings
    registry: Registry
    store: JobStore
    s3: Any
    endpoint: EndpointClient
    pipeline_for: Callable[[ModelSpec], ServingPipeline]
    backends: Mapping[str, BackendRules]
    capturer: Capturer
    clock: Callable[[], float] = time.time
    lifetime: RunnerLifetime = dataclasses.field(default_factory=RunnerLifetime)

    @property
    def bucket(self) -> str:
        """``JOBS_BUCKET``."""
        return self.settings.jobs_bucket

    @property
    def prefix(self) -> str:
        """``JOBS_PREFIX``."""
        return self.settings.jobs_prefix

    def location(self, key: str) -> str:
        return str(S3Uri(self.bucket, key))

    def key_of(self, location: str) -> str:
        """The key of one of this bucket's ``s3://`` locations (InvalidUploadError if not)."""
        try:
            uri = S3Uri.parse(location)
        except ValueError:
            uri = None
        if uri is None or uri.bucket != self.bucket:
            raise InvalidUploadError("The input is not an upload of this stage.")
        return uri.key


def ticket_key(prefix: str, job_id: str) -> str:
    return f"{prefix}{TICKETS}{job_id}"


def job_id_of_ticket(key: str, prefix: str) -> str | None:
    """The job id a ticket's key names, or None when the key is no ticket of this stage."""
    job_id = key[len(prefix) + len(TICKETS):]
    if not key.startswith(prefix + TICKETS) or not is_job_id(job_id):
        return None
    return job_id


def input_key(prefix: str, job_id: str) -> str:
    return f"{prefix}{INPUTS}{job_id}"


class JobsService:
    """The routes' side of jobs. S3 or DynamoDB failures a retry may cure are 503
    ``JobsUnavailable`` (:mod:`.awsfaults`); the others keep their meaning."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    @translated("presign upload")
    def presign(self, model_name: str, content_type: object,
                owner: str | None = None) -> Upload:
        """A presigned POST for one input, for ``owner``'s jobs only when auth identifies
        callers.

        Raises:
            ModelNotFoundError, InvalidUploadError (no media type),
            UnsupportedMediaTypeError (the model does not read that type).
        """
        model = self.context.registry.get(model_name)
        kind = check_type(model, check_content_type(content_type))
        settings = self.context.settings
        return presign_upload(self.context.s3, self.context.bucket, self.context.prefix, kind,
                              model.jobs.max_upload_bytes, settings.upload_expiry_seconds,
                              clock=self.context.clock, owner=owner)

    @translated("create job")
    def create_from_upload(self, model: ModelSpec, upload_id: object,
                           options: CallOptions, owner: str | None) -> Job:
        """A queued job for an uploaded object, checked first (HEAD), with its ticket. The
        job is pinned to the object checked (ETag, version): replaced later, it is not run.

        Raises:
            InvalidUploadError, UploadNotFoundError (also another caller's upload),
            UploadTooLargeError, UploadTypeMismatchError, JobsUnavailableError.
        """
        if not isinstance(upload_id, str):
            raise InvalidUploadError("upload_id must be the id POST /uploads answered "
                                     "(32 lowercase hex digits).")
        key = upload_key(self.context.prefix, upload_id)
        _, pin = check_input(self.context.s3, self.context.bucket, self.context.prefix, key,
                             model.jobs.max_upload_bytes, lambda kind: accepts(model, kind),
                             owner)
        return self._create(model, key, options, owner, pin)

    @translated("create job")
    def create_from_body(self, model: ModelSpec, body: bytes, content_type: str,
                         options: CallOptions, owner: str | None) -> Job:
        """A queued job for a small inline body, kept as an upload the server makes itself.
        The body is read first as the job will read it, so one the model cannot read is the
        caller's 4xx now (the model route reader's errors), not a failed job later."""
        kind = check_type(model, content_type)
        request = kind_of(model).read_job(body, content_type, options, model,
                                          max_body_bytes=max(len(body), 1))
        backend = backend_of(model, self.context.backends)
        with batch_limits(*backend.batch_limits(model)):  # sagegate's own preprocessing, now
            kind_of(model).preflight(request, lambda: self.context.pipeline_for(model))
        key = f"{self.context.prefix}{UPLOADS}{uuid.uuid4().hex}"
        put = self.context.s3.put_object(Bucket=self.context.bucket, Key=key, Body=body,
                                         ContentType=kind)
        return self._create(model, key, options, owner, pin_of(put))

    def _create(self, model: ModelSpec, key: str, options: CallOptions,
                owner: str | None, pin: Pin | None) -> Job:
        now = self.context.clock()
        job = self.context.store.create(Job(
            job_id=new_job_id(), model=model.name, state=JobState.QUEUED, created_at=now,
            updated_at=now, input_location=self.context.location(key), options=options,
            owner=owner, expires_at=int(now + self.context.settings.jobs_ttl_seconds),
            input_etag=pin.etag if pin else None, input_version=pin.version_id if pin else None))
        self.context.s3.put_object(Bucket=self.context.bucket,
                                   Key=ticket_key(self.context.prefix, job.job_id),
                                   Body=json.dumps({"job_id": job.job_id}).encode(),
                                   ContentType="application/json")
        return job

    @translated("read job")
    def view(self, job_id: str, caller: str | None) -> dict[str, Any]:
        """``GET /jobs/{job_id}``'s body, with a presigned GET (``result_url``) of an answer
        kept as an object. JobNotFoundError also for another caller's job."""
        found = self.context.store.get(job_id) if is_job_id(job_id) else None
        job = self._settled(check_owner(found, job_id[:64], caller))
        body = job.view()
        if job.state is JobState.SUCCEEDED and job.result_location is not None:
            body["result_url"] = result_url(self.context.s3, job.result_location)
        return body

    def _settled(self, job: Job) -> Job:
        """The job, failed as ``JobLost`` when nothing will move it any more.

        A queued job waits :data:`QUEUED_PATIENCE_SECONDS` for a runner to claim it. A running
        job is held by the lease its claim stored (the runner's remaining time, or the
        backend's ``lease_seconds``); Lambda retries an event at most
        :data:`~chalicelib.jobs.lifetime.LAMBDA_RETRY_WAIT_SECONDS` after an attempt ended.
        A job still running that long past its lease was dropped by every attempt (out of
        memory or time): it is failed, so its clients stop waiting.
        """
        if job.state.final:
            return job
        now = self.context.clock()
        if job.state is JobState.QUEUED:
            lost_at = job.updated_at + QUEUED_PATIENCE_SECONDS
        else:
            lost_at = lease_end(job) + LAMBDA_RETRY_WAIT_SECONDS
        if now <= lost_at:
            return job
        waited = now - job.updated_at
        failed, _ = self.context.store.advance(job.job_id, JobState.FAILED, Outcome(error={
            "Code": JOB_LOST, "Message": f"The job was {job.state} for {int(waited)} s with no "
            "runner left to finish it (its function ran out of memory or time on every "
            "attempt); submit it again, or with a smaller input."}))
        return failed
