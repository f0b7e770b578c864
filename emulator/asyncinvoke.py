"""Asynchronous Inference: ``InvokeEndpointAsync`` on the endpoints configured with ``async``.

A request is checked and queued at once (202 with ``InferenceId``, ``OutputLocation`` and
``FailureLocation``); a fixed number of worker threads per endpoint (its
``max_concurrent_invocations``) then read the input from S3, run the model, and write
``<output_path>/<uuid>.out`` or ``<failure_path>/<uuid>-error.out``, publish the success or
error notification to SNS and append it to the local outbox (JSON Lines). The queue is
bounded (``max_queued``: one more request is throttled) and so is every input
(``max_input_bytes``, checked before it is read). S3 and SNS go through boto3 at the endpoint
URLs the emulator is given (moto's server locally). Nothing here raises into a worker: every
failure becomes a failure object and an error notification.

With a :class:`~emulator.journal.Journal` (a state directory) the queue is durable, as
SageMaker's is: each call is written down before its 202, and :meth:`AsyncInference.resume`
runs again, on the next start, what a dead process left queued or running (a running one from
the start, as SageMaker retries an instance failure, at most :data:`MAX_ATTEMPTS` times), and
sends the notifications it had not sent.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from emulator import errors
from emulator.config import AsyncConfig, EndpointConfig
from emulator.journal import COMPLETED as DONE
from emulator.journal import QUEUED, RUNNING, Entry, Journal
from emulator.runtime import (
    INFERENCE_ID_MAX,
    BackgroundCall,
    InvokeRequest,
    Runtime,
    check_request,
)

LOG = logging.getLogger("emulator")
DEFAULT_TIMEOUT_S = 900
MAX_TIMEOUT_S = 3600
DEFAULT_TTL_S = 21600
MIN_TTL_S = 60
INLINE_BODY_MAX = 128_000
"""The largest inline ``Body`` of InvokeEndpointAsync (``AsyncBodyBlob``)."""
LOCATION_MAX = 1024
INPUT_LOCATION = re.compile(r"(https|s3)://([^/]+)/?(.*)", re.DOTALL)
"""botocore's pattern for ``InputLocation``."""
INFERENCE_ID = re.compile(r"\S[\x20-\x7e]*")
"""``InferenceId``: a non-space, then printable ASCII (``\\A\\S[\\p{Print}]*\\z``)."""
PATH_EXTENSION = re.compile(r"(?!s3:|https:)[a-zA-Z0-9!_.*'()/-]+")
FILENAME = re.compile(r"(?!.*\..*\.)[a-zA-Z0-9][a-zA-Z0-9-_\.]*")
VIRTUAL_HOST = re.compile(r"(.+)\.s3[.-].*amazonaws\.com(\.cn)?", re.IGNORECASE)
READ_CHUNK = 1024 * 1024
COMPLETED, FAILED, EXPIRED = "Completed", "Failed", "Expired"
"""``invocationStatus`` of a notification."""
MAX_ATTEMPTS = 3
"""Runs of one invocation a restart may start: one cut short by the process's death is run
again from the start, up to this many in all; then it fails (a poison input must not kill
every restart)."""


class InputError(Exception):
    """The input cannot be read (missing, too large, S3 unreachable): the message says why."""


class ObjectStore(Protocol):
    """Reads inputs from and writes results to S3."""

    def read(self, bucket: str, key: str, limit: int) -> tuple[bytes, str | None]:
        """Returns an object's bytes and content type; raises InputError when it cannot."""
        ...

    def write(self, bucket: str, key: str, body: bytes, content_type: str) -> None:
        """Stores an object."""
        ...


class Notifier(Protocol):
    """Publishes notifications to SNS topics."""

    def publish(self, topic_arn: str, message: str) -> None:
        """Publishes one message."""
        ...


@dataclass(frozen=True)
class AsyncRequest:
    """One InvokeEndpointAsync call, as the server read it (header values still text)."""

    endpoint_name: str
    input_location: str | None = None
    body: bytes | None = None
    body_length: int = 0
    content_type: str | None = None
    accept: str | None = None
    custom_attributes: str | None = None
    inference_id: str | None = None
    invocation_timeout: str | None = None
    request_ttl: str | None = None
    output_extension: str | None = None
    filename: str | None = None


@dataclass(frozen=True)
class Accepted:
    """The 202 answer: ``InferenceId``, ``OutputLocation`` and ``FailureLocation``."""

    inference_id: str
    output_location: str
    failure_location: str | None


@dataclass(frozen=True)
class Job:
    """A queued invocation.

    Attributes:
        key: its journal entry's name (a fresh UUID; the inference id may repeat).
        attempts: the runs already started (by processes that died before the end).
    """

    request: AsyncRequest
    accepted: Accepted
    timeout_s: int
    ttl_s: int
    received_at: float
    key: str = ""
    attempts: int = 0

    def to_document(self) -> dict[str, Any]:
        """The job as JSON (an inline body in base64), for the journal."""
        request = {name: getattr(self.request, name) for name in _REQUEST_TEXT}
        if self.request.body is not None:
            request["body"] = base64.b64encode(self.request.body).decode("ascii")
        accepted = self.accepted
        return {"request": request, "inference_id": accepted.inference_id,
                "output_location": accepted.output_location,
                "failure_location": accepted.failure_location, "timeout_s": self.timeout_s,
                "ttl_s": self.ttl_s, "received_at": self.received_at}  # fmt: skip

    @classmethod
    def from_document(cls, document: dict[str, Any], key: str, attempts: int) -> Job:
        """Reads :meth:`to_document`'s JSON back.

        Raises:
            ValueError: a member is missing or of the wrong type.
        """
        try:
            raw = dict(document["request"])
            encoded = raw.pop("body", None)
            body = None if encoded is None else base64.b64decode(encoded, validate=True)
            request = AsyncRequest(**{name: _text(raw.get(name)) for name in _REQUEST_TEXT},
                                   body=body, body_length=len(body or b""))  # fmt: skip
            if not isinstance(request.endpoint_name, str):
                raise ValueError("no endpoint name")
            accepted = Accepted(str(document["inference_id"]), str(document["output_location"]),
                                _text(document.get("failure_location")))  # fmt: skip
            return cls(request, accepted, int(document["timeout_s"]), int(document["ttl_s"]),
                       float(document["received_at"]), key, attempts)  # fmt: skip
        except (KeyError, TypeError, ValueError, binascii.Error) as error:
            raise ValueError(f"not a job: {error!r}") from None


_REQUEST_TEXT = ("endpoint_name", "input_location", "content_type", "accept",
                 "custom_attributes", "inference_id", "invocation_timeout", "request_ttl",
                 "output_extension", "filename")  # fmt: skip
"""The members of :class:`AsyncRequest` that are text (or None)."""


def _text(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{value!r} is not text")
    return value


@dataclass(frozen=True)
class Completion:
    """What became of a job: its status and the notification sent (or that would be)."""

    status: str
    notification: dict[str, Any]


def split_location(location: str) -> tuple[str, str]:
    """Splits an S3 location into bucket and key.

    Args:
        location: ``s3://bucket/key``, or an ``https://`` S3 URL (virtual-hosted
            ``https://bucket.s3.region.amazonaws.com/key`` or path-style ``https://host/bucket/key``).

    Returns:
        ``(bucket, key)``.

    Raises:
        ValueError: not such a location.
    """
    match = INPUT_LOCATION.fullmatch(location)
    if match is None:
        raise ValueError(f"{location!r} is not an S3 location")
    scheme, host, rest = match.groups()
    if scheme == "s3":
        return host, rest
    hosted = VIRTUAL_HOST.fullmatch(host)
    if hosted is not None:
        return hosted.group(1), rest
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"{location!r} names no bucket")
    return bucket, key


def _timestamp(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


_INTEGER = re.compile(r"-?[0-9]{1,11}")


def _integer_header(raw: str | None, field: str, low: int, high: int, default: int) -> int:
    if raw is None:
        return default
    text = raw.strip()
    # ASCII digits only: isdigit() admits "--5" (after lstrip) and "²", which int() refuses
    value = int(text) if _INTEGER.fullmatch(text) else None
    if value is None or not low <= value <= high:
        constraint = f"Member must be an integer between {low} and {high}"
        raise errors.validation_error([errors.violation(field, raw[:64], constraint)])
    return value


def check_async_request(request: AsyncRequest) -> tuple[int, int]:
    """Validates the members SageMaker checks before queueing.

    Returns:
        ``(InvocationTimeoutSeconds, RequestTTLSeconds)`` with their defaults applied.

    Raises:
        ValidationError: naming every member that fails its constraint.
    """
    violations: list[str] = []
    if request.inference_id is not None and (
        len(request.inference_id) > INFERENCE_ID_MAX
        or not INFERENCE_ID.fullmatch(request.inference_id)
    ):
        constraint = (
            f"Member must have length less than or equal to {INFERENCE_ID_MAX} and "
            "satisfy regular expression pattern: \\A\\S[\\p{Print}]*\\z"
        )
        violations.append(errors.violation("inferenceId", request.inference_id[:80], constraint))
    location = request.input_location
    if location is not None and (len(location) > LOCATION_MAX or not _is_location(location)):
        constraint = "Member must satisfy regular expression pattern: ^(https|s3)://([^/]+)/?(.*)$"
        violations.append(errors.violation("inputLocation", location[:200], constraint))
    if request.body is not None and request.body_length > INLINE_BODY_MAX:
        constraint = f"Member must have length less than or equal to {INLINE_BODY_MAX}"
        violations.append(errors.violation("body", None, constraint))
    for field, value, pattern in (
        ("s3OutputPathExtension", request.output_extension, PATH_EXTENSION),
        ("filename", request.filename, FILENAME),
    ):
        if value is not None and (len(value) > 512 or not pattern.fullmatch(value)):
            constraint = f"Member must satisfy regular expression pattern: {pattern.pattern}"
            violations.append(errors.violation(field, value[:200], constraint))
    if violations:
        raise errors.validation_error(violations)
    if (location is None) == (request.body is None):
        raise errors.ValidationError(
            "Exactly one of InputLocation (an S3 object) or Body (an inline payload of up to "
            f"{INLINE_BODY_MAX} bytes) must be given."
        )
    timeout = _integer_header(request.invocation_timeout, "invocationTimeoutSeconds", 1,
                              MAX_TIMEOUT_S, DEFAULT_TIMEOUT_S)  # fmt: skip
    ttl = _integer_header(request.request_ttl, "requestTTLSeconds", MIN_TTL_S, DEFAULT_TTL_S,
                          DEFAULT_TTL_S)  # fmt: skip
    return timeout, ttl


def _is_location(location: str) -> bool:
    try:
        split_location(location)
    except ValueError:
        return False
    return True


def _wait(event: threading.Event, timeout: float) -> bool:
    return event.wait(timeout)


OUTBOX_MAX_BYTES = 16 * 1024 * 1024
"""The outbox's size cap: past it the file is rotated (see :class:`Outbox`)."""


class Outbox:
    """Appends each completion to a JSON Lines file, one object per line:
    ``{"topic_arn": ARN or null, "status": ..., "message": {notification}}``.

    Bounded: a line that would take the file past ``max_bytes`` first renames it to
    ``<name>.1`` (replacing the previous one) and starts a new file, so the two hold at most
    about ``2 * max_bytes``, the newest completions kept.
    """

    def __init__(self, path: Path, max_bytes: int = OUTBOX_MAX_BYTES) -> None:
        self.path = path
        self.rotated = path.with_name(path.name + ".1")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        """Appends one record (the whole line in one write), rotating the file first when
        the line would take it past the cap."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(line) > self.max_bytes:
                os.replace(self.path, self.rotated)
            with self.path.open("ab") as sink:
                sink.write(line)


class AsyncInference:
    """Queues and runs the asynchronous invocations of a runtime's asynchronous endpoints."""

    def __init__(
        self,
        runtime: Runtime,
        store: ObjectStore,
        notifier: Notifier | None = None,
        outbox: Outbox | None = None,
        clock: Callable[[], float] = time.time,
        wait: Callable[[threading.Event, float], bool] = _wait,
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        journal: Journal | None = None,
    ) -> None:
        """Builds the queues (one per asynchronous endpoint); :meth:`start` runs the workers.

        Args:
            runtime: runs the models (its endpoints with ``async`` are served here).
            store: S3 (inputs, outputs, failures).
            notifier: SNS, for the endpoints with topics (None: the outbox only).
            outbox: the local JSON Lines file of completions, or None.
            clock: wall time in seconds (injected for tests: queue TTL, timestamps).
            wait: waits for the model call's event up to a timeout; False when it timed out.
            new_id: makes inference ids and object names.
            journal: where accepted calls are written down until they complete (None: the
                queue is in memory only, lost with the process).
        """
        self.runtime = runtime
        self.store = store
        self.notifier = notifier
        self.outbox = outbox
        self.clock = clock
        self.wait = wait
        self.new_id = new_id
        self.journal = journal
        # unbounded: a restart puts back every call it finds; submit() applies max_queued
        self.queues: dict[str, queue.Queue[Job | None]] = {
            name: queue.Queue()
            for name, endpoint in runtime.config.endpoints.items()
            if endpoint.asynchronous is not None
        }
        self._threads: list[threading.Thread] = []
        self._admit = threading.Lock()
        self._stopping = threading.Event()

    def start(self) -> None:
        """Starts ``max_concurrent_invocations`` daemon workers per asynchronous endpoint."""
        for name, jobs in self.queues.items():
            settings = self._settings(name)
            for index in range(settings.max_concurrent_invocations):
                worker = threading.Thread(target=self._work, args=(jobs,), daemon=True,
                                          name=f"async-{name}-{index}")  # fmt: skip
                worker.start()
                self._threads.append(worker)

    def stop(self, timeout: float = 5.0) -> None:
        """Asks the workers to stop after the jobs they run (none starts another: with a
        journal, the queued ones wait on disk for the next start); waits up to ``timeout``."""
        self._stopping.set()
        for name, jobs in self.queues.items():
            for _ in range(self._settings(name).max_concurrent_invocations):
                jobs.put_nowait(None)
        deadline = time.monotonic() + timeout
        for worker in self._threads:
            worker.join(max(0.0, deadline - time.monotonic()))

    def submit(self, request: AsyncRequest) -> Accepted:
        """Checks and queues one InvokeEndpointAsync call.

        Returns:
            The 202 answer's members.

        Raises:
            ValidationError: a bad member, an unknown or real-time endpoint.
            ThrottlingException: the endpoint's queue is full.
        """
        check_request(InvokeRequest(
            endpoint_name=request.endpoint_name, content_type=request.content_type,
            accept=request.accept, custom_attributes=request.custom_attributes,
        ))  # fmt: skip
        timeout, ttl = check_async_request(request)
        endpoint = self.runtime.endpoint(request.endpoint_name)
        settings = self._async_settings(endpoint)
        inference_id = request.inference_id or self.new_id()
        accepted = self._locations(settings, request, inference_id)
        job = Job(request, accepted, timeout, ttl, self.clock(), uuid.uuid4().hex)
        jobs = self.queues[endpoint.name]
        with self._admit:  # the check and the put together, or two calls take one slot
            if jobs.qsize() >= settings.max_queued:
                raise errors.ThrottlingException(
                    f"Too many requests are queued for endpoint {endpoint.name} "
                    f"({settings.max_queued}); retry later."
                )
            self._keep(job)  # written down before the 202: what is accepted is not lost
            jobs.put_nowait(job)
        return accepted

    def resume(self) -> int:
        """Puts back what the journal holds from a process that died: queued and running
        calls are queued again (a running one is run from the start), completed ones have
        their notification sent (in a thread: SNS may be slow). Call it once, after
        :meth:`start`, before the server answers.

        Returns:
            How many calls were found.
        """
        if self.journal is None:
            return 0
        found = self.journal.load()
        unsent: list[Entry] = []
        for entry in found:
            job = self._resumable(entry)
            if job is None:
                continue
            if entry.phase == DONE:
                unsent.append(entry)
            else:
                self.queues[job.request.endpoint_name].put_nowait(job)
        if unsent:
            threading.Thread(target=self._send_unsent, args=(unsent,), daemon=True,
                             name="async-resume").start()  # fmt: skip
        if found:
            LOG.info("state: %d asynchronous invocation(s) found in %s: %d to run, %d to "
                     "notify", len(found), self.journal.directory,
                     len(found) - len(unsent), len(unsent))  # fmt: skip
        return len(found)

    def _resumable(self, entry: Entry) -> Job | None:
        """The entry's job, or None (logged, removed) when this configuration cannot run it."""
        journal = self.journal
        assert journal is not None
        try:
            job = Job.from_document(entry.job, entry.key, entry.attempts)
        except ValueError as error:
            LOG.error("state: entry %s dropped: %s", entry.key, error)
            journal.remove(entry.key)
            return None
        if job.request.endpoint_name not in self.queues:
            LOG.error("state: async %s dropped: endpoint %s is not an asynchronous endpoint of "
                      "this configuration", job.accepted.inference_id,
                      job.request.endpoint_name)  # fmt: skip
            journal.remove(entry.key)
            return None
        return job

    def _send_unsent(self, entries: list[Entry]) -> None:
        for entry in entries:
            completion = entry.completion or {}
            job = Job.from_document(entry.job, entry.key, entry.attempts)
            self._deliver(job, completion.get("topic_arn"), str(completion.get("status")),
                          dict(completion.get("message") or {}))  # fmt: skip

    def _keep(self, job: Job, phase: str = QUEUED,
              completion: dict[str, Any] | None = None) -> None:
        """Writes the job's journal entry (nothing without a journal).

        Raises:
            InternalFailure: at submission, the entry cannot be written (the call is refused:
                accepting what cannot be kept would lose it silently).
        """
        if self.journal is None:
            return
        attempts = job.attempts + (phase == RUNNING)
        entry = Entry(job.key, job.to_document(), phase, attempts, completion)
        try:
            self.journal.write(entry)
        except OSError as error:
            LOG.error("async %s: cannot write its journal entry: %s",
                      job.accepted.inference_id, error)  # fmt: skip
            if phase == QUEUED:
                raise errors.InternalFailure("An internal failure occurred: the request "
                                             "could not be queued durably.") from None

    def _forget(self, job: Job) -> None:
        if self.journal is None:
            return
        try:
            self.journal.remove(job.key)
        except OSError as error:  # sent once more at the next start, at worst
            LOG.error("async %s: cannot remove its journal entry: %s",
                      job.accepted.inference_id, error)  # fmt: skip

    def _async_settings(self, endpoint: EndpointConfig) -> AsyncConfig:
        if endpoint.asynchronous is None:
            raise errors.ValidationError(
                f"Endpoint {endpoint.name} is not an asynchronous inference endpoint; "
                "invoke it with InvokeEndpoint."
            )
        return endpoint.asynchronous

    def _settings(self, name: str) -> AsyncConfig:
        return self._async_settings(self.runtime.config.endpoints[name])

    def _locations(self, settings: AsyncConfig, request: AsyncRequest, inference_id: str
                   ) -> Accepted:  # fmt: skip
        name = self.new_id()
        extension = (request.output_extension or "").strip("/")
        output = "/".join(part for part in (settings.output_path, extension) if part)
        output += "/" + (request.filename or f"{name}.out")
        failure = None
        if settings.failure_path is not None:
            base = "/".join(part for part in (settings.failure_path, extension) if part)
            failure = f"{base}/{name}-error.out"
        return Accepted(inference_id, output, failure)

    def _work(self, jobs: queue.Queue[Job | None]) -> None:
        while (job := jobs.get()) is not None and not self._stopping.is_set():
            try:
                self.run(job)
            except Exception:  # never lose the worker
                LOG.exception("async %s: the worker failed", job.accepted.inference_id)

    def run_next(self, endpoint: str) -> Completion | None:
        """Runs the next queued job of an endpoint in this thread (tests), if there is one."""
        try:
            job = self.queues[endpoint].get_nowait()
        except queue.Empty:
            return None
        return None if job is None else self.run(job)

    def run(self, job: Job) -> Completion:
        """Runs one job to its completion: output or failure object, notification, outbox.

        Returns:
            The completion (its status and notification).
        """
        started = self.clock()
        waited = started - job.received_at
        if waited > job.ttl_s:
            reason = (f"Request expired: it waited {waited:.0f} s in the queue, over its "
                      f"RequestTTLSeconds of {job.ttl_s}.")  # fmt: skip
            return self._fail(job, EXPIRED, reason)
        if job.attempts >= MAX_ATTEMPTS:
            reason = (f"InternalFailure: the instance failed {job.attempts} times while "
                      "running this request.")  # fmt: skip
            return self._fail(job, FAILED, reason)
        self._keep(job, RUNNING)
        LOG.info("async %s on %s: running (attempt %d)", job.accepted.inference_id,
                 job.request.endpoint_name, job.attempts + 1)  # fmt: skip
        settings = self._settings(job.request.endpoint_name)
        try:
            body, stored_type = self._input(job.request, settings.max_input_bytes)
        except InputError as error:
            return self._fail(job, FAILED, f"ClientError: {error}")
        content_type = job.request.content_type or stored_type
        return self._invoke(job, body, content_type, settings.max_input_bytes)

    def _input(self, request: AsyncRequest, limit: int) -> tuple[bytes, str | None]:
        if request.body is not None:
            return request.body, None
        location = request.input_location or ""
        bucket, key = split_location(location)
        return self.store.read(bucket, key, limit)

    def _invoke(self, job: Job, body: bytes, content_type: str | None, limit: int) -> Completion:
        request = job.request
        call = InvokeRequest(
            endpoint_name=request.endpoint_name, body=body, body_length=len(body),
            content_type=content_type, accept=request.accept,
            custom_attributes=request.custom_attributes,
            inference_id=job.accepted.inference_id,
        )  # fmt: skip
        running = BackgroundCall(
            partial(self.runtime.invoke, call, asynchronous=True, body_limit=limit),
            f"async-call-{job.accepted.inference_id[:16]}",
        )  # fmt: skip
        if not self.wait(running.done, job.timeout_s):
            reason = (f"Inference request timed out: the model did not answer within the "
                      f"InvocationTimeoutSeconds of {job.timeout_s} s.")  # fmt: skip
            completion = self._fail(job, FAILED, reason)
            running.done.wait()  # the worker's slot stays taken until the model call ends
            return completion
        result = running.outcome()  # the worker decides what an exception means
        if isinstance(result, errors.ModelError):
            original = result.original_message.encode()
            return self._fail(job, FAILED, f"ClientError: {result.message}", original)
        if isinstance(result, errors.EmulatorError):
            return self._fail(job, FAILED, f"{result.CODE}: {result.message}")
        if isinstance(result, BaseException):
            LOG.error("async %s: the model call failed: %r", job.accepted.inference_id, result)
            return self._fail(job, FAILED, "InternalFailure: An internal failure occurred.")
        return self._succeed(job, result.reply.body, result.reply.content_type)

    def _succeed(self, job: Job, body: bytes, content_type: str) -> Completion:
        bucket, key = split_location(job.accepted.output_location)
        try:
            self.store.write(bucket, key, body, content_type)
        except Exception as error:  # the output cannot be stored: a failure
            LOG.error("async %s: cannot write the output: %s", job.accepted.inference_id, error)
            return self._fail(job, FAILED, f"ClientError: cannot write the output: {error}")
        response = {"contentType": content_type, "outputLocation": job.accepted.output_location}
        return self._complete(job, COMPLETED, response, None)

    def _fail(self, job: Job, status: str, reason: str, body: bytes | None = None) -> Completion:
        location = job.accepted.failure_location
        content_type = "text/plain; charset=utf-8"
        response: dict[str, Any] = {"contentType": content_type}
        if location is not None:
            bucket, key = split_location(location)
            try:
                self.store.write(bucket, key, reason.encode() if body is None else body,
                                 content_type)  # fmt: skip
                response["failureLocation"] = location
            except Exception as error:  # logged; the notification still goes
                LOG.error("async %s: cannot write the failure object: %s",
                          job.accepted.inference_id, error)  # fmt: skip
        return self._complete(job, status, response, reason)

    def _complete(
        self, job: Job, status: str, response: dict[str, Any], reason: str | None
    ) -> Completion:
        request = job.request
        parameters: dict[str, Any] = {"endpointName": request.endpoint_name}
        if request.input_location is not None:
            parameters["inputLocation"] = request.input_location
        for key, value in (("contentType", request.content_type), ("accept", request.accept),
                           ("customAttributes", request.custom_attributes)):  # fmt: skip
            if value is not None:
                parameters[key] = value
        message: dict[str, Any] = {
            "awsRegion": self.runtime.config.region,
            "eventTime": _timestamp(self.clock()),
            "receivedTime": _timestamp(job.received_at),
            "invocationStatus": status,
            "requestParameters": parameters,
            "responseParameters": response,
            "inferenceId": job.accepted.inference_id,
            "eventVersion": "1.0",
            "eventSource": "aws:sagemaker",
            "eventName": "InferenceResult",
        }
        if reason is not None:
            message["failureReason"] = reason
        settings = self._settings(request.endpoint_name)
        topic = settings.success_topic if status == COMPLETED else settings.error_topic
        # written down first: a death between here and the end sends it at the next start
        self._keep(job, DONE, {"topic_arn": topic, "status": status, "message": message})
        self._deliver(job, topic, status, message)
        LOG.info("async %s on %s: %s%s", job.accepted.inference_id, request.endpoint_name,
                 status, "" if reason is None else f" ({reason})")  # fmt: skip
        return Completion(status, message)

    def _deliver(self, job: Job, topic: str | None, status: str, message: dict[str, Any]) -> None:
        """Keeps a completion in the outbox, then sends it (SNS), then forgets the job: the
        local record first, so whoever acts on the notification finds it there too."""
        if self.outbox is not None:
            try:
                self.outbox.append({"topic_arn": topic, "status": status, "message": message})
            except OSError as error:
                LOG.error("async %s: cannot append to the outbox: %s",
                          job.accepted.inference_id, error)  # fmt: skip
        self._notify(topic, message, job.accepted.inference_id)
        self._forget(job)

    def _notify(self, topic: str | None, message: dict[str, Any], inference_id: str) -> None:
        if topic is None or self.notifier is None:
            return
        try:
            self.notifier.publish(topic, json.dumps(message))
        except Exception as error:  # SNS down: logged, the outbox still has it
            LOG.error("async %s: cannot publish to %s: %s", inference_id, topic, error)


def _session(region: str) -> Any:
    import boto3  # loaded only when an asynchronous endpoint is served

    session = boto3.session.Session(region_name=region)
    if session.get_credentials() is None:  # a local S3 (moto) takes any key
        session = boto3.session.Session(aws_access_key_id="emulator",
                                        aws_secret_access_key="emulator",
                                        region_name=region)  # fmt: skip
    return session


def _client_config() -> Any:
    from botocore.config import Config

    return Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3})


class S3Store:
    """S3 through boto3 at ``endpoint_url`` (None: boto3's own resolution)."""

    def __init__(self, endpoint_url: str | None, region: str) -> None:
        self._client = _session(region).client("s3", endpoint_url=endpoint_url,
                                               config=_client_config())  # fmt: skip

    def read(self, bucket: str, key: str, limit: int) -> tuple[bytes, str | None]:
        """Reads an object of at most ``limit`` bytes, checking its size before reading."""
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"s3://{bucket}/{key}"
        try:
            head = self._client.head_object(Bucket=bucket, Key=key)
            size = int(head.get("ContentLength", 0))
            if size > limit:
                raise InputError(f"the input {where} has {size} bytes, over this endpoint's "
                                 f"limit of {limit}")  # fmt: skip
            answer = self._client.get_object(Bucket=bucket, Key=key)
            body = _read_bounded(answer["Body"], limit, where)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
                raise InputError(f"the input {where} does not exist ({code})") from None
            raise InputError(f"cannot read the input {where}: {code or error}") from None
        except BotoCoreError as error:
            raise InputError(f"cannot read the input {where}: {error}") from None
        return body, head.get("ContentType")

    def write(self, bucket: str, key: str, body: bytes, content_type: str) -> None:
        """Stores an object."""
        self._client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)


def _read_bounded(stream: Any, limit: int, where: str) -> bytes:
    parts: list[bytes] = []
    total = 0
    while chunk := stream.read(READ_CHUNK):
        total += len(chunk)
        if total > limit:
            stream.close()
            raise InputError(f"the input {where} is over this endpoint's limit of {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


class SnsNotifier:
    """SNS through boto3 at ``endpoint_url`` (None: boto3's own resolution)."""

    def __init__(self, endpoint_url: str | None, region: str) -> None:
        self._client = _session(region).client("sns", endpoint_url=endpoint_url,
                                               config=_client_config())  # fmt: skip

    def publish(self, topic_arn: str, message: str) -> None:
        """Publishes one message."""
        self._client.publish(TopicArn=topic_arn, Message=message)


def build_async(
    runtime: Runtime,
    s3_endpoint_url: str | None,
    sns_endpoint_url: str | None,
    outbox: Path | None,
    journal: Journal | None = None,
) -> AsyncInference | None:
    """Builds and starts the asynchronous side of a runtime, if any endpoint is asynchronous
    (call :meth:`AsyncInference.resume` once the server listens).

    Args:
        runtime: the models and endpoints.
        s3_endpoint_url: S3's URL (None: boto3's own resolution).
        sns_endpoint_url: SNS's URL (None: S3's).
        outbox: the JSON Lines file of completions, or None.
        journal: the state directory's journal (None: the queue is in memory only).

    Returns:
        The running service, or None when every endpoint is real-time.
    """
    if all(endpoint.asynchronous is None for endpoint in runtime.config.endpoints.values()):
        return None
    region = runtime.config.region
    needs_sns = any(
        endpoint.asynchronous is not None
        and (endpoint.asynchronous.success_topic or endpoint.asynchronous.error_topic)
        for endpoint in runtime.config.endpoints.values()
    )
    notifier = SnsNotifier(sns_endpoint_url or s3_endpoint_url, region) if needs_sns else None
    service = AsyncInference(runtime, S3Store(s3_endpoint_url, region), notifier,
                             None if outbox is None else Outbox(outbox),
                             journal=journal)  # fmt: skip
    service.start()
    return service
