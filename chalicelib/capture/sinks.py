"""Where capture records go: a local directory, S3 or Kinesis Data Firehose.

Every sink writes before ``write()`` returns, so a record is stored before the response leaves
the function, and nothing is left in memory when Lambda freezes the process.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from chalicelib import awsclients
from chalicelib.capture.records import CaptureRecord
from chalicelib.core import aws
from chalicelib.core.aws import S3_SCHEME, S3Uri, error_code
from chalicelib.core.config_names import FIREHOSE_SCHEME
from chalicelib.core.retries import Retrier, RetryPolicy, RetryQuota, classify

FIREHOSE_BATCH = 500  # PutRecordBatch's limit of records a call
FIREHOSE_CALL_BYTES = 4 * 1024 * 1024  # ... of bytes a call (4 MiB)
FIREHOSE_RECORD_BYTES = 1000 * 1024  # Firehose's limit of a record's bytes (1,000 KiB)
FIREHOSE_ATTEMPTS = 3
MIN_SEGMENT_BYTES = 64 * 1024
CAPTURE_POLICY = RetryPolicy(max_attempts=FIREHOSE_ATTEMPTS, budget_seconds=2.0,
                             base_delay=0.05, max_delay=0.5)
"""Brief: a response may wait for a capture write."""
_T = TypeVar("_T")
LOG = logging.getLogger("sagegate.capture")


class CaptureSinkError(Exception):
    """A sink could not store every record it was given.

    Args:
        unstored: the records not stored, when the sink knows them: a retry writes only
            these, and only these are counted as dropped. None: every record is to be
            written again.
        refused: records the sink will never store, not among ``unstored``: dropped, not
            tried again.
    """

    def __init__(self, message: str, unstored: Sequence[CaptureRecord] | None = None,
                 refused: Sequence[CaptureRecord] = ()) -> None:
        super().__init__(message)
        self.unstored = unstored
        self.refused = refused


class Sink(Protocol):
    """Stores capture records durably before returning."""

    def write(self, records: Sequence[CaptureRecord]) -> Sequence[CaptureRecord] | None:
        """Store ``records``; raise on any failure. Returns the records it refused for good
        (a record over Firehose's size), which the caller counts as dropped."""

    def close(self) -> None:
        """Drop pooled connections; the sink stays usable (they reopen on the next write)."""


PRIVATE_FILE, PRIVATE_DIRECTORY = 0o600, 0o700


def _private_directories(root: Path, directory: Path) -> None:
    """Create ``directory`` and its missing parents up from ``root``, each 0700."""
    if not directory.resolve().is_relative_to(root.resolve()):
        raise CaptureSinkError("capture path escapes the capture directory")
    missing = []
    for level in (directory, *directory.parents):
        if level.is_dir():
            break
        missing.append(level)
    for level in reversed(missing):
        level.mkdir(mode=PRIVATE_DIRECTORY, exist_ok=True)


class DirectorySink:
    """Model Monitor's layout under a local directory: ``{root}/{endpoint}/{variant}/yyyy/mm/dd/
    hh/{file}.jsonl``, one file per process and hour, appended to one whole line at a time.

    With ``max_bytes``, each endpoint's folder stays under that size: files roll over at an
    eighth of it, and once over, its least recently written files are deleted down to nine
    tenths. One endpoint's traffic never deletes another's records.
    """

    def __init__(self, root: str | os.PathLike[str], max_bytes: int = 0) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._segment = max(MIN_SEGMENT_BYTES, max_bytes // 8) if max_bytes else 0
        self._lock = threading.Lock()
        self._files: dict[str, Path] = {}
        self._sizes: dict[Path, int] = {}
        self._totals: dict[str, int] = {}  # bytes under each endpoint's folder

    def _path(self, record: CaptureRecord) -> Path:
        partition = record.partition()
        path = self._files.get(partition)
        if path is None or (self._segment and self._sizes.get(path, 0) >= self._segment):
            directory = self.root / partition
            _private_directories(self.root, directory)
            path = directory / f"{record.file_stem()}.jsonl"
            if len(self._files) >= 256:  # hours gone by: forget their files
                self._files.clear()
                self._sizes.clear()
            self._files[partition] = path
        return path

    def close(self) -> None:
        """Nothing is held open between writes."""

    def write(self, records: Sequence[CaptureRecord]) -> Sequence[CaptureRecord]:
        with self._lock:
            for record in records:
                path = self._path(record)
                self._append(path, record.line)
                if self.max_bytes:
                    self._account(record.partition().split("/", 1)[0], path, len(record.line))
        return ()

    @staticmethod
    def _append(path: Path, line: bytes) -> None:
        # O_APPEND with one write() per line: other processes appending to the same
        # directory never interleave inside a line.
        # clients' images: readable by this user only
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
        try:
            written = os.write(fd, line)
        finally:
            os.close(fd)
        if written != len(line):
            raise CaptureSinkError(f"short write to {path.name}")

    def _account(self, endpoint: str, path: Path, size: int) -> None:
        self._sizes[path] = self._sizes.get(path, 0) + size
        folder = self.root / endpoint
        total = self._totals.get(endpoint)
        total = _usage(folder) if total is None else total + size
        if total > self.max_bytes:
            total = self._prune(folder, keep=path)
        self._totals[endpoint] = total

    def _prune(self, folder: Path, keep: Path) -> int:
        files = []
        for path in folder.rglob("*.jsonl"):
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                files.append((stat.st_mtime_ns, str(path), stat.st_size, path))
        total = sum(size for _, _, size, _ in files)
        for _, _, size, path in sorted(files):
            if total <= self.max_bytes * 9 // 10:
                break
            if path == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                self._remove_empty_parents(path.parent, folder)
            self._sizes.pop(path, None)
            total -= size
        return total

    @staticmethod
    def _remove_empty_parents(directory: Path, top: Path) -> None:
        while directory != top and top in directory.parents:
            try:
                directory.rmdir()
            except OSError:  # not empty (or already gone): stop here
                return
            directory = directory.parent


class _Retrying:
    """What the AWS sinks share: the one retry policy, and a quota per sink (per process)."""

    def __init__(self, policy: RetryPolicy, sleep: Callable[[float], None],
                 clock: Callable[[], float], rng: Callable[[], float]) -> None:
        self.policy, self.quota = policy, RetryQuota()
        self._sleep, self._clock, self._rng = sleep, clock, rng

    def _retrier(self) -> Retrier:
        return Retrier(self.policy, self.quota, clock=self._clock, rng=self._rng)

    def _waited(self, retrier: Retrier, throttled: bool) -> bool:
        delay = retrier.failed(throttled=throttled)
        if delay is None:
            return False
        self._sleep(delay)
        return True

    def _attempt(self, retrier: Retrier, call: Callable[[], _T]) -> _T | None:
        """One call; None after a retryable failure waited for, raised when given up."""
        try:
            return call()
        except Exception as error:
            throttled = retry_kind(error)
            if throttled is None or not self._waited(retrier, throttled):
                raise
            return None


def retry_kind(error: Exception) -> bool | None:
    """Whether a boto3 failure is retryable, as :func:`chalicelib.core.retries.classify`."""
    # deferred: botocore loads only when a boto3 sink fails (a directory sink never needs it)
    from botocore.exceptions import ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    if isinstance(error, BotoConnectionError | HTTPClientError):
        return False
    if not isinstance(error, ClientError):
        return None
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return classify(error_code(error), status)


def _usage(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*.jsonl"):
        with contextlib.suppress(FileNotFoundError):  # pruned by another process meanwhile
            total += path.stat().st_size
    return total


class S3Sink(_Retrying):
    """JSON Lines objects under ``s3://bucket/prefix/{endpoint}/{variant}/yyyy/mm/dd/hh/``,
    one per write and partition, however mixed the batch."""

    def __init__(self, client: Any, bucket: str, prefix: str, *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random) -> None:
        super().__init__(CAPTURE_POLICY, sleep, clock, rng)
        self._client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")

    def key(self, record: CaptureRecord) -> str:
        name = f"{record.partition()}/{record.file_stem()}.jsonl"
        return f"{self.prefix}/{name}" if self.prefix else name

    def close(self) -> None:
        self._client.close()

    def write(self, records: Sequence[CaptureRecord]) -> Sequence[CaptureRecord]:
        """One object per partition, named by its first record: writing the same records
        again puts the same keys, so a retried batch never stores a record twice. The
        partitions share one retry budget, and one that keeps failing does not keep the
        others from being put (CaptureSinkError then carries its records)."""
        retrier = self._retrier()
        unstored: list[CaptureRecord] = []
        failure: Exception | None = None
        for group in by_partition(records).values():
            try:
                self._put(retrier, self.key(group[0]), b"".join(r.line for r in group))
            except Exception as error:  # this partition's; the next ones are still put
                unstored.extend(group)
                failure = error
        if failure is not None:
            raise CaptureSinkError(f"S3 did not store {len(unstored)} of {len(records)} "
                                   f"record(s): {type(failure).__name__}", unstored) from failure
        return ()

    def _put(self, retrier: Retrier, key: str, body: bytes) -> None:
        while self._attempt(retrier, lambda: self._client.put_object(
                Bucket=self.bucket, Key=key, Body=body,
                ContentType="application/jsonlines")) is None:
            pass
        retrier.succeeded()


class FirehoseSink(_Retrying):
    """``PutRecordBatch`` to a delivery stream, retrying a failed call and the records
    Firehose refused.

    Each record's ``eventMetadata`` gains its endpoint and variant (:func:`firehose_line`),
    the keys the stream's dynamic partitioning reads, with the hour of its ``inferenceTime``,
    for Model Monitor's layout (each record in its own hour's folder, not its arrival's). A
    record over :data:`FIREHOSE_RECORD_BYTES` is not sent (Firehose would refuse the whole
    call for it) but returned as refused, to be counted dropped, never also stored. Records a
    failed ``write`` did deliver are not sent again when the batch is retried.
    """

    def __init__(self, client: Any, stream: str, attempts: int = FIREHOSE_ATTEMPTS, *,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random) -> None:
        super().__init__(dataclasses.replace(CAPTURE_POLICY, max_attempts=attempts),
                         sleep, clock, rng)
        self._client = client
        self.stream = stream
        self._delivered: set[str] = set()  # event ids a failed write delivered (or dropped)

    def close(self) -> None:
        self._client.close()

    def write(self, records: Sequence[CaptureRecord]) -> Sequence[CaptureRecord]:
        pending = [record for record in records if record.event_id not in self._delivered]
        lines, oversized = [], []
        for record in pending:
            line = firehose_line(record)
            if len(line) > FIREHOSE_RECORD_BYTES:
                oversized.append(record)
            else:
                lines.append((record.event_id, line))
        if oversized:
            LOG.warning("data capture dropped %d record(s) over Firehose's %d bytes a record",
                        len(oversized), FIREHOSE_RECORD_BYTES)
            # settled: refused once, never sent nor refused again by a retry of the batch
            self._delivered.update(record.event_id for record in oversized)
        retrier = self._retrier()  # one budget for the whole write, however many calls
        unstored: set[str] = set()
        failure: Exception | None = None
        for call in _calls(lines):
            sent = [event_id for event_id, _ in call]
            try:
                self._write_batch(retrier, call)
            except Exception as error:  # this call's; the next ones are still sent
                unstored.update(event_id for event_id, _ in call)  # what it did not deliver
                failure = error
            self._delivered.update(event_id for event_id in sent if event_id not in unstored)
        if failure is not None:
            left = [record for record in pending if record.event_id in unstored]
            raise CaptureSinkError(f"Firehose did not take {len(left)} of {len(records)} "
                                   f"record(s): {failure}", left, oversized) from failure
        self._delivered.clear()  # every record of this write is stored or refused
        return oversized

    def _put(self, lines: list[bytes]) -> Any:
        return self._client.put_record_batch(
            DeliveryStreamName=self.stream, Records=[{"Data": line} for line in lines])

    def _write_batch(self, retrier: Retrier, pending: list[tuple[str, bytes]]) -> None:
        """Send until Firehose took them all; on failure ``pending`` holds those it did not."""
        while True:
            answer = self._attempt(retrier, functools.partial(
                self._put, [line for _, line in pending]))
            if answer is None:
                continue
            if not answer.get("FailedPutCount"):
                retrier.succeeded()
                return
            refused = [(entry, result["ErrorCode"]) for entry, result
                       in zip(pending, answer["RequestResponses"], strict=True)
                       if result.get("ErrorCode")]
            pending[:] = [entry for entry, _ in refused]
            throttled = all(classify(code, None) is True for _, code in refused)
            if not self._waited(retrier, throttled):
                raise CaptureSinkError(f"Firehose refused {len(pending)} record(s) after "
                                       f"{retrier.attempts} attempts")


_METADATA = b'"eventMetadata":{'


def firehose_line(record: CaptureRecord) -> bytes:
    """The record's line with ``sagegateEndpoint`` and ``sagegateVariant`` first in its
    ``eventMetadata`` (the names of its path: none needs escaping in JSON).

    The first ``"eventMetadata":{`` of the line is the object's own key: inside a JSON string
    every quote is escaped, so it cannot occur in a body's data. A line without it is returned
    as it is (Firehose then delivers it under the stream's error prefix).
    """
    line = record.line
    at = line.find(_METADATA)
    if at < 0:
        return line
    at += len(_METADATA)
    endpoint, variant = record.partition().split("/", 2)[:2]
    keys = f'"sagegateEndpoint":"{endpoint}","sagegateVariant":"{variant}"'.encode("ascii")
    separator = b"" if line[at:at + 1] == b"}" else b","
    return b"".join((line[:at], keys, separator, line[at:]))


def _calls(lines: list[tuple[str, bytes]]) -> list[list[tuple[str, bytes]]]:
    calls: list[list[tuple[str, bytes]]] = []
    size = 0
    for entry in lines:
        if not calls or len(calls[-1]) == FIREHOSE_BATCH \
                or size + len(entry[1]) > FIREHOSE_CALL_BYTES:
            calls.append([])
            size = 0
        calls[-1].append(entry)
        size += len(entry[1])
    return calls


def by_partition(records: Sequence[CaptureRecord]) -> dict[str, list[CaptureRecord]]:
    groups: dict[str, list[CaptureRecord]] = {}
    for record in records:
        groups.setdefault(record.partition(), []).append(record)
    return groups


def sink_for(destination: str, max_bytes: int = 0) -> Sink:
    """The sink a ``CAPTURE_DESTINATION`` names: a directory, ``s3://`` or ``firehose://``.
    boto3 honours ``AWS_ENDPOINT_URL_S3`` and ``AWS_ENDPOINT_URL_FIREHOSE`` (how the tests
    point them at a local server)."""
    if destination.startswith(S3_SCHEME):
        uri = S3Uri.parse(destination)
        return S3Sink(_client("s3"), uri.bucket, uri.prefix)
    if destination.startswith(FIREHOSE_SCHEME):
        return FirehoseSink(_client("firehose"), destination[len(FIREHOSE_SCHEME):])
    return DirectorySink(destination, max_bytes)


def _client(service: str) -> Any:
    return awsclients.build(service, aws.CAPTURE)
