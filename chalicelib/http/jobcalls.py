"""The job routes' answers (``POST /uploads``, ``POST /models/{name}/jobs``, ``GET
/jobs/{job_id}``): read the request, hand it to the jobs service, answer.

The jobs room itself is the service's (:mod:`chalicelib.jobs`), passed in: this module imports
none of it, so the request path's cold start loads no part of jobs (``bench/imports.py``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from chalicelib.http.exchange import Exchange, HttpAnswer
from chalicelib.reading.jobrequest import read_job
from chalicelib.registry.specs import ModelSpec

if TYPE_CHECKING:
    from chalicelib.jobs.service import JobsService

JOB_LOCATION = "/jobs/{job_id}"
"""A job's URL, relative to the API's stage (as the web page's URLs are)."""


def create_upload(jobs: JobsService, exchange: Exchange) -> HttpAnswer:
    """A presigned S3 POST for one large input of a model: ``{"model", "content_type"}``.

    Raises:
        SagegateError: (a 4xx subclass) the body, the model or the type is not acceptable.
    """
    from chalicelib.http import uploads  # deferred, as the jobs room is (bench/imports.py)

    asked = uploads.read_upload_request(exchange.http_request().body)
    exchange.log.model = asked.model[:64]
    return HttpAnswer(jobs.presign(asked.model, asked.content_type, exchange.caller()).view())


def create_job(jobs: JobsService, model: ModelSpec, exchange: Exchange, *,
               max_body_bytes: int) -> HttpAnswer:
    """Run ``model`` on an upload (``{"upload_id": ...}``) or a small inline body, as a job:
    202 with the job's id and its ``Location``.

    Raises:
        SagegateError: (a 4xx subclass) the request, the upload or the input is not acceptable.
    """
    http = exchange.http_request()
    exchange.log.model = model.name
    queued = read_job(http, max_body_bytes=max_body_bytes)
    caller = exchange.caller()
    if queued.inline:
        job = jobs.create_from_body(model, http.body, http.content_type or "", queued.options,
                                    caller)
    else:
        job = jobs.create_from_upload(model, queued.upload_id, queued.options, caller)
    exchange.log.job_id = job.job_id
    return HttpAnswer({"job_id": job.job_id, "state": str(job.state)},
                      {"Location": JOB_LOCATION.format(job_id=job.job_id)}, 202)


def describe_job(jobs: JobsService, job_id: str, exchange: Exchange) -> HttpAnswer:
    """A job's state and, when it is done, its answer (or a presigned GET of it)."""
    exchange.log.job_id = job_id[:64]
    return HttpAnswer(jobs.view(job_id, exchange.caller()))
