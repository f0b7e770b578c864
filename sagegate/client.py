"""A small Python client for sagegate: it shrinks images before it uploads them, and sends
what is too large for the synchronous route through an upload and a job.

Shrinking (:mod:`sagegate.shrinking`): a photo is brought here to the model's own input size,
by the server's own code and losslessly, so a 12 MP photo goes up as about a hundred kilobytes
and the model is given the same tensor.

    >>> from sagegate.client import Client
    >>> client = Client("http://127.0.0.1:8000")
    >>> client.predict("samples/cat.jpg", k=3)["predictions"][0]["label"]
    'tiger cat'

Large inputs (:mod:`sagegate.transfer`): a body over :data:`SYNC_LIMIT_BYTES` (Lambda's 6 MB
request, with the body base64-encoded in it) cannot reach the synchronous route. With
``mode="auto"`` (the default) :meth:`Client.predict` sends such a body, after the shrink,
through ``POST /uploads`` (a presigned S3 POST, the file streamed straight to S3),
``POST /models/{name}/jobs`` and ``GET /jobs/{id}`` until the job ends; the answer is the one
the synchronous route gives. ``mode="async"`` always does so, ``mode="sync"`` never.

The steps of a job are :class:`~sagegate.jobs_client.JobsClient`'s (``upload``,
``submit_job``, ``job``, ``wait``, ``result``); the HTTP, its retries and its errors
(:class:`ClientError`) are :mod:`sagegate.http_client`'s.
"""
from __future__ import annotations

import enum
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from sagegate.http_client import (
    DEFAULT_URL,
    MAX_RETRY_AFTER_S,
    ClientError,
    retry_after_seconds,
    retry_policy,
)
from sagegate.jobs_client import DEFAULT_WAIT_S, JobFailedError, JobsClient, answer_of
from sagegate.shrinking import (
    DEFAULT_ENCODING,
    OCTET_STREAM,
    Encoding,
    ShrinkRule,
    content_type_of,
    encode,
    shrink,
)
from sagegate.transfer import (
    SYNC_LIMIT_BYTES,
    Source,
    Upload,
    UploadProgress,
    WaitProgress,
    as_is,
    read_input,
)

__all__ = ["DEFAULT_ENCODING", "DEFAULT_URL", "DEFAULT_WAIT_S", "MAX_RETRY_AFTER_S",
           "OCTET_STREAM", "SYNC_LIMIT_BYTES", "Client", "ClientError", "Encoding",
           "JobFailedError", "Mode", "ShrinkRule", "Upload", "content_type_of", "encode",
           "read_input", "retry_after_seconds", "retry_policy", "shrink"]

_shrink = shrink  # for Client.prepare, whose argument of the same name shadows it


class Mode(enum.StrEnum):
    """How :meth:`Client.predict` sends a file."""

    AUTO = "auto"
    """Synchronously when it fits (:data:`SYNC_LIMIT_BYTES`), else through a job."""
    SYNC = "sync"
    """Synchronously, always (the server refuses what is too large)."""
    ASYNC = "async"
    """Through an upload and a job, always."""


class Client(JobsClient):
    """sagegate over HTTP: predictions (with client-side shrinking, and through jobs for what
    is too large), resizes, the models.

    Args:
        url: the API's base URL.
        api_key: sent as ``x-api-key`` (deployed stages with API-key authentication).
        retries: how many times a request is retried after a 503 or a failed connection.
        timeout: seconds to connect, and to wait for each answer.
        pool: keep-alive connections kept for the host (at least the threads sharing the
            client, to keep every one of them).
        encoding: how shrunk images are encoded (:class:`Encoding`).
    """

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, retries: int = 3,
                 timeout: float = 30, pool: int = 8,
                 encoding: Encoding | str = DEFAULT_ENCODING) -> None:
        super().__init__(url, api_key, retries=retries, timeout=timeout, pool=pool)
        self.encoding = Encoding(encoding)
        self._rules: dict[str | None, ShrinkRule | None] = {}
        self._default: str | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ models

    def models(self) -> dict[str, Any]:
        """``GET /models``: ``{"default": name, "models": [...]}``."""
        answer: dict[str, Any] = self._json("GET", "/models")
        return answer

    def model(self, name: str) -> dict[str, Any]:
        """``GET /models/{name}``: one model, with its image rule when it takes images."""
        answer: dict[str, Any] = self._json("GET", "/models/" + urllib.parse.quote(name, ""))
        return answer

    def default_model(self) -> str:
        """The name of the model ``/predict`` serves (asked once per client)."""
        with self._lock:
            if self._default is None:
                self._default = str(self.models()["default"])
            return self._default

    def rule(self, model: str | None = None) -> ShrinkRule | None:
        """The shrink rule of ``model`` (None: the default model), asked once per client;
        None when the model takes no images or the server does not describe its models."""
        with self._lock:
            if model not in self._rules:
                self._rules[model] = self._fetch_rule(model)
            return self._rules[model]

    def _fetch_rule(self, model: str | None) -> ShrinkRule | None:
        try:
            name = model if model is not None else str(self.models()["default"])
            return ShrinkRule.from_model(self.model(name))
        except ClientError as error:
            if error.status in (404, 405):  # no such model (predict says so), or no /models
                return None
            raise

    # ------------------------------------------------------------------ predictions

    def prepare(self, path_or_bytes: Source, model: str | None = None, shrink: bool = True,
                content_type: str | None = None) -> Upload:
        """The upload for a file: an image shrunk by the model's rule, or the file itself
        (of ``content_type``, else the type its first bytes or its extension show).

        Raises:
            ClientError: the model's description could not be read.
            OSError: the file cannot be read.
        """
        rule = self.rule(model) if shrink else None
        if rule is None:
            return as_is(path_or_bytes, content_type)
        data = read_input(path_or_bytes)
        body, kind = _shrink(data, rule, self.encoding)
        return Upload(body, content_type if content_type and body is data else kind, len(data))

    def send(self, upload: Upload, k: int = 5, model: str | None = None,
             headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Post a prepared upload to the synchronous route of the model (None:
        ``/predict``); its answer (see :func:`~sagegate.jobs_client.answer_of`)."""
        path = "/predict" if model is None else \
            f"/models/{urllib.parse.quote(model, '')}/predict"
        # a handler model may answer CSV, text or bytes: read by its Content-Type
        return answer_of(self.check(self.request(
            "POST", f"{path}?k={int(k)}", upload.body(),
            {**(headers or {}), "Content-Type": upload.content_type})))

    def predict(self, path_or_bytes: Source, k: int = 5, model: str | None = None,
                shrink: bool = True, mode: Mode | str = Mode.AUTO, *,
                content_type: str | None = None, timeout: float = DEFAULT_WAIT_S,
                upload_progress: UploadProgress | None = None,
                wait_progress: WaitProgress | None = None) -> dict[str, Any]:
        """Run a model on a file: an image shrunk here by the model's rule (unless
        ``shrink`` is False), then sent as ``mode`` says (:class:`Mode`); the answer's JSON
        (``predictions``, ``endpoint``, ``variant`` ...), the same either way.

        Raises:
            ClientError: an error answer, no connection, a job that failed
                (:class:`JobFailedError`) or did not end within ``timeout`` seconds.
            OSError: the file cannot be read.
        """
        upload = self.prepare(path_or_bytes, model, shrink, content_type)
        return self.deliver(upload, k, model, mode, timeout=timeout,
                            upload_progress=upload_progress, wait_progress=wait_progress)

    @staticmethod
    def needs_job(upload: Upload, mode: Mode | str = Mode.AUTO) -> bool:
        """Whether :meth:`deliver` sends ``upload`` through a job."""
        mode = Mode(mode)
        return mode is Mode.ASYNC or (mode is Mode.AUTO and upload.size > SYNC_LIMIT_BYTES)

    def deliver(self, upload: Upload, k: int = 5, model: str | None = None,
                mode: Mode | str = Mode.AUTO, *, timeout: float = DEFAULT_WAIT_S,
                upload_progress: UploadProgress | None = None,
                wait_progress: WaitProgress | None = None) -> dict[str, Any]:
        """Send a prepared upload synchronously or through a job, as ``mode`` says; the
        answer (see :meth:`predict`)."""
        if not self.needs_job(upload, mode):
            return self.send(upload, k, model)
        name = model if model is not None else self.default_model()
        upload_id = self.upload(upload, name, progress=upload_progress)
        job = self.submit_job(name, upload_id=upload_id, k=k)
        return self.result(self.wait(str(job["job_id"]), timeout, wait_progress))


    # ------------------------------------------------------------------ images

    def resize(self, path_or_bytes: Source, width: int, height: int, mode: str = "stretch",
               format: str = "jpeg", quality: int | None = None) -> bytes:
        """``POST /resize``: the image at exactly ``width`` x ``height``, encoded as
        ``format``; the image's bytes.

        Raises:
            ClientError: an error answer, or no connection.
        """
        data = read_input(path_or_bytes)
        query = {"width": width, "height": height, "mode": mode, "format": format}
        if quality is not None:
            query["quality"] = quality
        response = self.request("POST", "/resize?" + urllib.parse.urlencode(query), data,
                                {"Content-Type": content_type_of(data),
                                 "Accept": f"image/{format}"})
        return bytes(self.check(response).data)

