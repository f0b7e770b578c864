"""Uploads and jobs, for :mod:`sagegate.client`: ``POST /uploads`` and the presigned S3 POST,
``POST /models/{name}/jobs``, ``GET /jobs/{id}`` until the job ends, then its answer (kept in the
job, or downloaded from S3); and what tells that a file is for a job (its rows, a refusal naming
the job route)."""
from __future__ import annotations

import base64
import csv
import io
import json
import re
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import urllib3

from chalicelib.core.media import MediaType, bare, is_binary
from sagegate.client import http, transfer
from sagegate.client.http import ClientError, HttpClient, check_s3, json_object
from sagegate.client.transfer import Source, Upload, UploadProgress, WaitProgress, as_is

DEFAULT_WAIT_S = 3600.0
"""SageMaker Asynchronous Inference's longest invocation."""
_clock = time.monotonic  # the tests replace it
_JOB_ROUTE = re.compile(r"POST /models/\S+/jobs")
_ROW_LIMIT = re.compile(r"at most [0-9,]+ a request")
_BLANK = re.compile(rb"\s*")


def names_job_route(message: str) -> bool:
    """Whether a refusal's message names the job route (a 413 over the body limit, a 504)."""
    return _JOB_ROUTE.search(message) is not None


def over_row_limit(message: str) -> bool:
    return _ROW_LIMIT.search(message) is not None


def rows_of(upload: Upload) -> int | None:
    """The rows of a batch file in memory, counted as sagegate reads them (CSV records, JSON
    lines, ``instances`` or a bare list of rows); None for anything else."""
    if upload.path is not None:
        return None
    kind = bare(upload.content_type)
    try:
        if kind == MediaType.CSV:
            rows = csv.reader(io.StringIO(upload.data.decode("utf-8-sig")))
            return sum(1 for row in rows if row)
        if kind == MediaType.JSONLINES:
            return sum(1 for line in upload.data.splitlines() if not _BLANK.fullmatch(line))
        if kind == MediaType.JSON:
            return _json_rows(json.loads(upload.data))
    except (ValueError, csv.Error):  # not what it says: the server's refusal is clearer
        return None
    return None


def _json_rows(document: Any) -> int | None:
    if isinstance(document, dict):
        document = document.get("instances")
    if isinstance(document, list) and document and isinstance(document[0], list | dict):
        return len(document)
    return None


def answer_of(response: urllib3.BaseHTTPResponse) -> dict[str, Any]:
    """An answer read by its ``Content-Type``: a JSON object as it is; any other (a JSON list,
    CSV, text, bytes) as ``{"content_type", "body"}``, or ``{"content_type", "body_base64"}`` for
    bytes that are not text, so it prints and dumps as JSON like every other answer.

    Raises:
        ClientError: a JSON answer that does not parse (``InvalidAnswer``).
    """
    content_type = response.headers.get("Content-Type") or MediaType.OCTET_STREAM
    kind, data = bare(content_type), bytes(response.data)
    if kind == MediaType.JSON or kind.endswith("+json"):
        try:
            answer = json.loads(data)
        except ValueError:
            raise ClientError(response.status, "InvalidAnswer", f"The answer says it is "
                              f"{kind} but is not JSON ({data[:80]!r}).") from None
        if isinstance(answer, dict):
            return answer
        return {"content_type": content_type, "body": answer}
    if not is_binary(content_type):
        try:
            return {"content_type": content_type, "body": data.decode()}
        except UnicodeDecodeError:
            pass  # not text after all
    return {"content_type": content_type, "body_base64": base64.b64encode(data).decode()}


class JobFailedError(ClientError):
    """A job that ended ``failed``: its error's ``Code`` and ``Message`` (status 0: the job's
    answer was a success; its work was not)."""

    def __init__(self, job: Mapping[str, Any]) -> None:
        error = job.get("error")
        if not isinstance(error, Mapping):
            error = {}
        super().__init__(0, str(error.get("Code", "JobFailed")),
                         str(error.get("Message", "The job failed.")))
        self.job = dict(job)


class JobsClient(HttpClient):
    """The job steps one by one (:class:`sagegate.client.Client` puts them together)."""

    wait_timeout: float = DEFAULT_WAIT_S

    def upload(self, path_or_bytes: Source | Upload, model: str,
               content_type: str | None = None,
               progress: UploadProgress | None = None) -> str:
        """Upload a file for a job of ``model``: ``POST /uploads``, then the file streamed
        straight to S3 by the presigned POST; answers the upload id.

        Raises:
            ClientError: sagegate's refusal (415 for a type the model does not take), S3's
                (``EntityTooLarge`` over the model's cap), or no connection.
            OSError: the file cannot be read.
        """
        upload = path_or_bytes if isinstance(path_or_bytes, Upload) \
            else as_is(path_or_bytes, content_type)
        request = json.dumps({"model": model, "content_type": upload.content_type}).encode()
        presigned = json_object(self.check(self.request(
            "POST", "/uploads", request, {"Content-Type": "application/json"})), "POST /uploads")
        url, fields = presigned.get("url"), presigned.get("fields")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or \
                not isinstance(fields, dict) or "upload_id" not in presigned:
            raise ClientError(200, "InvalidAnswer", "POST /uploads answered no upload.")
        self._post_form(url, {str(k): str(v) for k, v in fields.items()}, upload, progress)
        return str(presigned["upload_id"])

    def _post_form(self, url: str, fields: Mapping[str, str], upload: Upload,
                   progress: UploadProgress | None) -> None:
        cap = transfer.policy_max_bytes(fields)
        if cap is not None and upload.size > cap:  # S3 would read it all to refuse it
            raise ClientError(400, "EntityTooLarge", f"The file is {upload.size:,} bytes; "
                              f"this model's uploads take at most {cap:,} bytes.")
        form = transfer.form(fields, upload.content_type)
        size = upload.size

        def body() -> Iterable[bytes]:
            return transfer.streamed(form, transfer.file_chunks(upload.source()), size,
                                     progress)

        check_s3(self._send("POST", url, body, {"Content-Type": form.content_type,
                                                "Content-Length": str(form.length(size))}))

    def submit_job(self, model: str, upload_id: str, k: int | None = None) -> dict[str, Any]:
        """``POST /models/{model}/jobs`` for an upload; the job (``job_id``, ``state``).

        Raises:
            ClientError: the upload is missing, too large or of the wrong type, an option is
                refused, or no connection.
        """
        path = f"/models/{urllib.parse.quote(model, '')}/jobs"
        if k is not None:
            path += f"?k={int(k)}"
        response = self.check(self.request("POST", path, json.dumps(
            {"upload_id": upload_id}).encode(), {"Content-Type": "application/json"}))
        job = json_object(response, f"POST {path}")
        if not isinstance(job.get("job_id"), str):
            raise ClientError(response.status, "InvalidAnswer", f"POST {path} gave no job id.")
        return job

    def job(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/{job_id}``.

        Raises:
            ClientError: ``JobNotFound`` (404), or no connection.
        """
        return self._job(job_id)[0]

    def _job(self, job_id: str) -> tuple[dict[str, Any], float | None]:
        response = self.check(self.request("GET", "/jobs/" + urllib.parse.quote(job_id, "")))
        return json_object(response, "GET /jobs"), http.retry_after_seconds(
            response.headers.get("Retry-After"))

    def wait(self, job_id: str, timeout: float | None = None,
             progress: WaitProgress | None = None) -> dict[str, Any]:
        """Read a job until it ends, waiting 0.25 s, then twice as long up to 5 s (longer when
        ``Retry-After`` says so), at most ``timeout`` seconds (None: :attr:`wait_timeout`); the
        succeeded job.

        Raises:
            JobFailedError: the job failed.
            ClientError: it did not end in time (``WaitTimeout``), it is not found, or no
                connection.
        """
        timeout = self.wait_timeout if timeout is None else timeout
        started, delay = _clock(), transfer.POLL_FIRST_S
        while True:
            job, retry_after = self._job(job_id)
            elapsed = _clock() - started
            if progress:
                progress(job, elapsed)
            state = job.get("state")
            if state == "failed":
                raise JobFailedError(job)
            if state == "succeeded":
                return job
            if elapsed >= timeout:
                raise ClientError(0, "WaitTimeout", f"Job {job_id} is still {state} after "
                                  f"{elapsed:.0f} s; read it later with GET /jobs/{job_id}.")
            http._sleep(transfer.next_poll(delay, retry_after, timeout - elapsed))
            delay = transfer.backoff(delay)

    def result(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """A succeeded job's answer: kept in the job or, when too large for that or not JSON,
        downloaded from its ``result_url``.

        Raises:
            JobFailedError: the job failed.
            ClientError: not finished, S3 refused the download, or a JSON answer that does not
                parse.
        """
        if job.get("state") == "failed":
            raise JobFailedError(job)
        if "result" in job:
            answer: dict[str, Any] = job["result"]
            return answer
        url = job.get("result_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ClientError(200, "NoResult", f"Job {job.get('job_id')} has no result "
                              f"(it is {job.get('state')}).")
        return answer_of(check_s3(self._send("GET", url, None, {})))
