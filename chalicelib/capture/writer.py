"""Capture records written off the response path: the request hands its inference over and
answers; a thread of this process builds the records and stores them in batches.

Nothing is lost silently. The hand-over is bounded (records and bytes waiting): past it an
inference is refused at once and counted as dropped (a sink that cannot keep up must not grow
the function's memory). A batch the sink fails to store is tried again (:data:`RETRY_POLICY`,
past the sink's own retries); then its records are dropped, counted (``CaptureDropped``) and
logged. :meth:`CaptureWriter.flush` waits until everything handed over is stored or dropped:
on Lambda the internal extension (:mod:`.extension`) calls it after each invocation's response
and before the environment may freeze; under ``chalice local`` the process calls it as it exits.
What is still held when the process ends is given up by the last exit hook: dropped, counted
and logged.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import math
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from chalicelib.capture.records import CaptureRecord, Exchange
from chalicelib.capture.sinks import CaptureSinkError, Sink
from chalicelib.core.observability import emit_count
from chalicelib.core.pending import Pending
from chalicelib.core.retries import RetryPolicy

LOG = logging.getLogger("sagegate.capture")

MAX_PENDING_RECORDS = 10_000  # inferences waiting to be stored
MAX_PENDING_BYTES = 64 * 1024 * 1024  # their bodies (a Lambda function's memory is the bound)
BATCH_RECORDS = 500  # records per sink call (Firehose's PutRecordBatch takes 500)
RETRY_POLICY = RetryPolicy(max_attempts=5, budget_seconds=math.inf, base_delay=0.2,
                           max_delay=5.0)
"""No time budget: only the writer's own thread waits."""
EXIT_SECONDS = 1.0
"""What the process's end still gives held records after the app's own flush at exit (which
waits for shadow calls and records, ``CLOSE_FLUSH_SECONDS``) ran out: the parent that stops a
local server waits 10 s in all before it kills it."""


def _size(exchange: Exchange) -> int:
    return len(exchange.sent) + len(exchange.received) + len(exchange.original or b"")


class CaptureWriter:
    """Stores capture records on a thread of its own; ``build`` makes an inference's record
    there, off the request's path."""

    def __init__(self, sink: Sink, build: Callable[[Exchange], CaptureRecord], *,
                 max_pending_records: int = MAX_PENDING_RECORDS,
                 max_pending_bytes: int = MAX_PENDING_BYTES,
                 batch_records: int = BATCH_RECORDS,
                 attempts: int = RETRY_POLICY.max_attempts,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        self._sink = sink
        self._build = build
        self._max_records = max_pending_records
        self._max_bytes = max_pending_bytes
        self._batch = batch_records
        self._policy = dataclasses.replace(RETRY_POLICY, max_attempts=attempts)
        self._sleep, self._rng = sleep, rng
        self._queue: collections.deque[Exchange] = collections.deque()
        self._bytes = 0
        # inferences accepted until stored or dropped; handed and settled under _changed,
        # so close() sees them beside the queue and _counted
        self._pending = Pending()
        self.written = 0
        self.dropped = 0
        self._closed = False
        self._gave_up = 0  # times close() gave up what it held: a batch taken before is settled
        self._counted = 0  # records counted as written or dropped whose metrics are on their way
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        _OPEN.add(self)

    @property
    def pending(self) -> int:
        return self._pending.outstanding

    def submit(self, exchange: Exchange) -> bool:
        """Hand one inference over; False (dropped, counted) when the hand-over is full or the
        writer is closed. Never blocks on the sink."""
        size = _size(exchange)
        with self._changed:
            if self._closed or len(self._queue) >= self._max_records \
                    or (self._queue and self._bytes + size > self._max_bytes):
                self.dropped += 1
                refused = True
            else:
                self._queue.append(exchange)
                self._bytes += size
                self._pending.hand()
                refused = False
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="capture-writer",
                                                    daemon=True)
                    self._thread.start()
                self._changed.notify_all()
        if refused:
            LOG.warning("data capture dropped 1 record: %d are waiting for the sink",
                        self.pending)
            emit_count("CaptureDropped", 1)
        return not refused

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every inference handed over so far is stored or dropped; False when
        ``timeout`` ran out first."""
        return self._pending.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush, then stop taking inferences (the process is ending). What the flush could
        not store within ``timeout`` is given up (False): dropped, counted and logged, the batch
        the sink is still busy with included (a process that exits never learns how it ended).
        """
        self.flush(timeout)
        with self._changed:
            self._closed = True
            lost = self._pending.outstanding - self._counted
            if lost:
                self._queue.clear()
                self._bytes = 0
                self._pending.settle(lost)  # the counted batch settles as its metrics are out
                self.dropped += lost
                self._gave_up += 1
            self._changed.notify_all()
        if lost:
            LOG.warning("data capture dropped %d record(s) at exit: the sink did not store "
                        "them in time", lost)
            emit_count("CaptureDropped", lost)
        return not lost

    def _take(self) -> tuple[list[Exchange], int] | None:
        """The next batch, and how many times the writer had given up when it was taken."""
        with self._changed:
            while not self._queue:
                if self._closed:
                    return None
                self._changed.wait()
            batch = [self._queue.popleft()
                     for _ in range(min(self._batch, len(self._queue)))]
            self._bytes -= sum(_size(exchange) for exchange in batch)
            return batch, self._gave_up

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            batch, gave_up = taken
            stored = 0
            try:
                stored = self._store(batch)
            except Exception:  # the writer must outlive anything one batch does
                LOG.exception("data capture: a batch of %d record(s) failed", len(batch))
            dropped = len(batch) - stored
            with self._changed:
                if gave_up != self._gave_up:  # close() counted this batch as dropped
                    continue
                self.written += stored
                self.dropped += dropped
                self._counted = len(batch)
            # the metrics are written before the batch is settled: on Lambda the environment
            # may freeze as soon as a flush returns
            if stored:
                emit_count("CaptureRecords", stored)
            if dropped:
                emit_count("CaptureDropped", dropped)
            with self._changed:
                self._counted = 0
                self._pending.settle(len(batch))

    def _store(self, batch: Sequence[Exchange]) -> int:
        records = []
        for exchange in batch:
            try:
                records.append(self._build(exchange))
            except Exception as error:  # one inference's record, not the batch's
                LOG.warning("data capture: a record could not be built: %s: %s",
                            type(error).__name__, error)
        built, attempts = len(records), self._policy.max_attempts
        refused = 0  # records the sink will never store: dropped, not tried again
        for attempt in range(1, attempts + 1):
            try:
                if records:
                    refused += len(self._sink.write(records) or ())
                return built - refused
            except Exception as error:
                # what the sink says it stored is settled: only the rest is tried again
                if isinstance(error, CaptureSinkError):
                    refused += len(error.refused)
                records = _unstored(error, records)
                if attempt == attempts:
                    LOG.warning("data capture dropped %d record(s) after %d attempts: %s: %s",
                                len(records), attempt, type(error).__name__, error)
                    return built - refused - len(records)
                delay = self._policy.delay(attempt, self._rng)
                LOG.info("data capture: storing %d record(s) failed (%s); again in %.1f s",
                         len(records), type(error).__name__, delay)
                self._sleep(delay)
        return built - refused - len(records)


def _unstored(error: Exception, records: list[CaptureRecord]) -> list[CaptureRecord]:
    if isinstance(error, CaptureSinkError) and error.unstored is not None:
        return list(error.unstored)
    return records


_OPEN: weakref.WeakSet[CaptureWriter] = weakref.WeakSet()  # closed as the process exits


def _close_at_exit() -> None:
    for writer in list(_OPEN):
        writer.close(EXIT_SECONDS)


# registered as this module is imported, before the app registers its own flush at exit:
# atexit runs last in, first out, so this runs after it, on what that flush left
atexit.register(_close_at_exit)
