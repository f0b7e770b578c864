"""A small Python client for sagegate: it shrinks images before it uploads them, and sends what
is too large for the synchronous route through an upload and a job.

Shrinking (:mod:`sagegate.client.shrinking`): a photo is brought here to the model's own input
size, by the server's own code and losslessly, so a 12 MP photo goes up as about a hundred
kilobytes and the model is given the same tensor.

    >>> from sagegate.client import Client
    >>> client = Client("http://127.0.0.1:8000")
    >>> client.predict("samples/cat.jpg", k=3)["predictions"][0]["label"]
    'tiger cat'

Large inputs (:mod:`sagegate.client.transfer`): a body over :data:`SYNC_LIMIT_BYTES` (Lambda's 6
MB request, base64 inside) cannot reach the synchronous route. With ``mode="auto"`` (the default)
:meth:`Client.predict` sends it, shrunk, through an upload (a presigned S3 POST, streamed) and a
job, polled until it ends; the answer is the synchronous route's. Where the model runs jobs, auto
mode also sends a job a batch of more rows than one request carries (asynchronous backend), and,
once, what the synchronous route refused with a 504 ``EndpointTimeout`` or a 413 naming the job
route; it says so through ``note``. ``mode="async"`` always takes a job, ``mode="sync"`` never.
Defaults: an explicit argument, else the environment (:mod:`~sagegate.client.settings`), else the
default.

Its parts import downwards only: :mod:`~sagegate.client.cli` over this library, over settings,
jobs, http, transfer and shrinking; nothing of the local stack or deployment (the contracts in
``pyproject.toml``).
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.inference.tensors import MAX_INSTANCES
from sagegate.client.http import ClientError
from sagegate.client.jobs import (
    JobsClient,
    answer_of,
    names_job_route,
    over_row_limit,
    rows_of,
)
from sagegate.client.settings import ClientSettings
from sagegate.client.shrinking import (
    DEFAULT_ENCODING,
    Encoding,
    ShrinkRule,
    content_type_of,
    shrink,
)
from sagegate.client.transfer import (
    SYNC_LIMIT_BYTES,
    Source,
    Upload,
    UploadProgress,
    WaitProgress,
    as_is,
    read_input,
)

_shrink = shrink  # for Client.prepare, whose argument of the same name shadows it
LOG = logging.getLogger("sagegate.client")

Note = Callable[[str], None]
"""Told, in a sentence, when auto mode sends a file another way than it was asked to."""


@dataclasses.dataclass(frozen=True)
class _Delivery:

    upload: Upload
    k: int
    model: str | None
    timeout: float | None
    upload_progress: UploadProgress | None
    wait_progress: WaitProgress | None
    note: Note


class Mode(enum.StrEnum):
    """How :meth:`Client.predict` sends a file."""

    AUTO = "auto"
    """Synchronously when it fits (:data:`SYNC_LIMIT_BYTES`), else through a job."""
    SYNC = "sync"
    """Synchronously, always (the server refuses what is too large)."""
    ASYNC = "async"


class Client(JobsClient):
    """sagegate over HTTP: predictions (shrunk here, and through jobs for what is too large),
    resizes, the models.

    Args:
        url, api_key, timeout, wait_timeout: None reads
            :class:`~sagegate.client.settings.ClientSettings` (the environment, else ``make
            run``'s URL, no key, 30 s, 3600 s).
        retries: retries after a 503 or a failed connection.
        pool: keep-alive connections for the host (at least the threads sharing the client, to
            keep every one).

    Raises:
        ValueError: a timeout that is not a positive number of seconds.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 retries: int = 3, timeout: float | None = None,
                 wait_timeout: float | None = None, pool: int = 8,
                 encoding: Encoding | str = DEFAULT_ENCODING,
                 environ: Mapping[str, str] | None = None) -> None:
        settings = ClientSettings.resolve(url, api_key, timeout, wait_timeout, environ)
        super().__init__(settings.url, settings.api_key, retries=retries,
                         timeout=settings.timeout, pool=pool)
        self.settings = settings
        self.wait_timeout = settings.wait_timeout
        self.encoding = Encoding(encoding)
        self._descriptions: dict[str, dict[str, Any] | None] = {}
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
        """The shrink rule of ``model`` (None: the default), asked once per client; None when it
        takes no images or the server describes none."""
        description = self.description(model)
        return None if description is None else ShrinkRule.from_model(description)

    def description(self, model: str | None = None) -> dict[str, Any] | None:
        """``GET /models/{name}`` (None: the default model), asked once per client; None when
        there is no such model or the server describes none."""
        try:
            name = model if model is not None else self.default_model()
            with self._lock:
                if name not in self._descriptions:
                    self._descriptions[name] = self.model(name)
                return self._descriptions[name]
        except ClientError as error:
            if error.status in (404, 405):  # no such model (predict says so), or no /models
                return None
            raise

    def jobs_backend(self, model: str | None = None) -> str | None:
        """``realtime`` or ``async``, as ``GET /models/{name}`` says; None when it says none."""
        try:
            jobs = (self.description(model) or {}).get("jobs")
        except ClientError:
            return None  # not known: auto mode sends as it would without jobs
        backend = jobs.get("backend") if isinstance(jobs, dict) else None
        return str(backend) if backend else None

    # ------------------------------------------------------------------ predictions

    def prepare(self, path_or_bytes: Source, model: str | None = None, shrink: bool = True,
                content_type: str | None = None) -> Upload:
        """The upload for a file: an image shrunk by the model's rule, or the file itself (of
        ``content_type``, else the type its first bytes or extension show).

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
        """Post a prepared upload to the model's synchronous route (None: ``/predict``)."""
        path = "/predict" if model is None else \
            f"/models/{urllib.parse.quote(model, '')}/predict"
        # a handler model may answer CSV, text or bytes: read by its Content-Type
        return answer_of(self.check(self.request(
            "POST", f"{path}?k={int(k)}", upload.body(),
            {**(headers or {}), "Content-Type": upload.content_type})))

    def predict(self, path_or_bytes: Source, k: int = 5, model: str | None = None,
                shrink: bool = True, mode: Mode | str = Mode.AUTO, *,
                content_type: str | None = None, timeout: float | None = None,
                upload_progress: UploadProgress | None = None,
                wait_progress: WaitProgress | None = None,
                note: Note | None = None) -> dict[str, Any]:
        """Run a model on a file: an image shrunk here by the model's rule (unless ``shrink`` is
        False), then sent as ``mode`` says; the answer's JSON, the same either way.

        Args:
            model: a model of ``GET /models`` (None: the default model, ``/predict``).
            content_type: default: by its first bytes, else its name.
            timeout: seconds to wait for a job (None: the client's ``wait_timeout``).
            upload_progress, wait_progress: told how an upload and a job go.
            note: told when auto mode takes a job the size rule did not ask for (None: the
                ``sagegate.client`` logger).

        Raises:
            ClientError: an error answer, no connection, a job that failed
                (:class:`JobFailedError`) or did not end within ``timeout``.
            OSError: the file cannot be read.
        """
        upload = self.prepare(path_or_bytes, model, shrink, content_type)
        return self.deliver(upload, k, model, mode, timeout=timeout,
                            upload_progress=upload_progress, wait_progress=wait_progress,
                            note=note)

    @staticmethod
    def needs_job(upload: Upload, mode: Mode | str = Mode.AUTO) -> bool:
        mode = Mode(mode)
        return mode is Mode.ASYNC or (mode is Mode.AUTO and upload.size > SYNC_LIMIT_BYTES)

    def deliver(self, upload: Upload, k: int = 5, model: str | None = None,
                mode: Mode | str = Mode.AUTO, *, timeout: float | None = None,
                upload_progress: UploadProgress | None = None,
                wait_progress: WaitProgress | None = None,
                note: Note | None = None) -> dict[str, Any]:
        """Send a prepared upload synchronously or through a job, as ``mode`` says (arguments as
        :meth:`predict`)."""
        mode = Mode(mode)
        delivery = _Delivery(upload, k, model, timeout, upload_progress, wait_progress,
                             note or LOG.info)
        if self.needs_job(upload, mode):
            return self._through_job(delivery)
        if mode is Mode.SYNC:
            return self.send(upload, k, model)
        return self._auto(delivery)

    def _through_job(self, delivery: _Delivery) -> dict[str, Any]:
        name = delivery.model if delivery.model is not None else self.default_model()
        upload_id = self.upload(delivery.upload, name, progress=delivery.upload_progress)
        job = self.submit_job(name, upload_id=upload_id, k=delivery.k)
        return self.result(self.wait(str(job["job_id"]), delivery.timeout,
                                     delivery.wait_progress))

    def _auto(self, delivery: _Delivery) -> dict[str, Any]:
        """A file that fits: synchronously, unless the model's jobs take what the synchronous
        route would refuse (too many rows), or it refused the file for a reason a job does not
        have (the endpoint's time, the body's size): then once as a job."""
        reason = self._rows_reason(delivery)
        if reason is not None:
            return self._instead(delivery, reason, None)
        try:
            return self.send(delivery.upload, delivery.k, delivery.model)
        except ClientError as error:
            reason = self._refusal_reason(error, delivery.model)
            if reason is None:
                raise
            return self._instead(delivery, reason, error)

    def _rows_reason(self, delivery: _Delivery) -> str | None:
        rows = rows_of(delivery.upload)  # first: no question to the server for an image
        # only an asynchronous backend takes a whole batch: a real-time job takes a request's
        if rows is None or rows <= MAX_INSTANCES or self.jobs_backend(delivery.model) != "async":
            return None
        return f"{rows:,} rows is over the model's {MAX_INSTANCES:,} a request"

    def _refusal_reason(self, error: ClientError, model: str | None) -> str | None:
        timed_out = error.status == 504 and error.code == "EndpointTimeout"
        too_large = error.status == 413 and names_job_route(error.message)
        too_many = error.status == 400 and over_row_limit(error.message)
        backend = self.jobs_backend(model) if timed_out or too_large or too_many else None
        if backend is None or (too_many and backend != "async"):
            return None
        return f"the synchronous route answered {error.status} {error.code}"

    def _instead(self, delivery: _Delivery, reason: str,
                 refusal: ClientError | None) -> dict[str, Any]:
        """Once as a job; where the stage runs none (501 ``JobsDisabled``: the description cannot
        say so), the synchronous route's refusal or answer."""
        delivery.note(f"{reason}: sending it as a job")
        try:
            return self._through_job(delivery)
        except ClientError as error:
            if error.code != "JobsDisabled":
                raise
            if refusal is not None:
                raise refusal from error
        delivery.note("this stage runs no jobs (501 JobsDisabled): sending it synchronously")
        return self.send(delivery.upload, delivery.k, delivery.model)


    # ------------------------------------------------------------------ images

    def resize(self, path_or_bytes: Source, width: int, height: int, mode: str = "stretch",
               format: str = "jpeg", quality: int | None = None) -> bytes:
        """``POST /resize``: the image's bytes at exactly ``width`` x ``height``, encoded as
        ``format``.

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

