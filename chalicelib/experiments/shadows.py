"""Shadow calls, after the caller's answer, each within its own timeout, so that a shadow that
is slow, failing or down never changes the caller's answer or latency.

Each shadow target (an endpoint and its routing) has its own small queue and its own threads:
a target that hangs fills only its own, and another target's copies neither wait behind it nor
are dropped for it. What waits is bounded, in copies and in bytes, per target and in all; past
a bound a copy is dropped at once. A copy still waiting when its own ``timeout_seconds`` has
passed is dropped when a thread reaches it, never run late (its answer would be no use for a
comparison, and running it would only feed the backlog). Nothing is kept of a copy once it is
dropped or done, and a thread with nothing to do for :data:`IDLE_SECONDS` ends.

Drops are counted as ``ShadowDropped``: in the request's own metrics when the copy is dropped
at once, as a line of its own when a queued copy expires; a warning says so at most once a
minute (a full queue must not add a log line to every request). :meth:`Shadows.flush` waits
for the calls handed over (on Lambda, the capture extension calls it after each response,
before the environment may freeze).

Where nothing can run after the response (on Lambda without the extension), the handler would
have to wait for its shadows before answering: there the pool is off (``off`` says why, logged
once), and each copy is skipped (``ShadowSkipped``), never made."""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import NamedTuple

from chalicelib.core.observability import emit_count
from chalicelib.core.pending import Pending

LOG = logging.getLogger("sagegate.experiments")

# per target: calls at once, copies waiting, their bytes (a copy as large as a request may be
# still fits); then every target's waiting bytes
THREADS = 4
MAX_WAITING = 16
MAX_WAITING_BYTES = 16 * 1024 * 1024
MAX_ALL_WAITING_BYTES = 64 * 1024 * 1024
IDLE_SECONDS = 30.0  # a target's thread ends after waiting this long for another copy
DROP_WARNING_SECONDS = 60.0
QUEUED, DROPPED, SKIPPED = "queued", "dropped", "skipped"  # what Shadows.submit did


class Backlog(NamedTuple):
    """What the pool holds: copies waiting for a thread, their bytes, threads alive."""

    copies: int
    bytes: int
    threads: int


@dataclasses.dataclass
class _Copy:
    """One waiting copy: its call (None once taken), its bytes and when it is of no use."""

    call: Callable[[], None] | None
    size: int
    expires: float
    dimensions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Its request's metric dimensions, for the line that counts it if it expires."""


@dataclasses.dataclass
class _Target:
    """One shadow target's queue and threads (``wake`` shares the pool's lock)."""

    wake: threading.Condition
    waiting: collections.deque[_Copy] = dataclasses.field(default_factory=collections.deque)
    waiting_bytes: int = 0
    threads: int = 0
    idle: int = 0


class Shadows:
    """Runs shadow calls in the background (see the module)."""

    def __init__(self, threads: int = THREADS, max_waiting: int = MAX_WAITING,
                 max_waiting_bytes: int = MAX_WAITING_BYTES,
                 max_all_waiting_bytes: int = MAX_ALL_WAITING_BYTES,
                 off: str | None = None, idle_seconds: float = IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.off = off
        """Why no shadow call is made here (None: they are)."""
        if off is not None:
            LOG.warning("shadow copies are off: %s", off)
        self.skipped = 0
        self.dropped = 0
        self.expired = 0
        """Of :attr:`dropped`, the copies that waited past their timeout."""
        self._threads = threads
        self._max_waiting = max_waiting
        self._max_waiting_bytes = max_waiting_bytes
        self._max_all_waiting_bytes = max_all_waiting_bytes
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._targets: dict[Hashable, _Target] = {}
        self._all_waiting_bytes = 0
        self._pending = Pending()  # copies queued until run or dropped, for flush
        self._warned_at: float | None = None
        self._warned_drops = 0

    def submit(self, target: Hashable, call: Callable[[], None], *, timeout_seconds: float,
               size: int = 0, dimensions: Mapping[str, str] | None = None) -> str:
        """Run ``call``, a copy for the shadow ``target``, in the background.

        Args:
            size: the bytes the copy holds (its request's body), for the bound on waiting.
            dimensions: the request's metric dimensions: a copy that expires is counted in
                the series its request's own drops are.

        Returns:
            :data:`QUEUED`, :data:`DROPPED` (at the bound) or :data:`SKIPPED` (off here); the
            caller counts it in its request's metrics.
        """
        if self.off is not None:
            with self._lock:
                self.skipped += 1
            return SKIPPED
        with self._lock:
            queue = self._targets.get(target)
            if queue is None:
                queue = self._targets[target] = _Target(threading.Condition(self._lock))
            queued = len(queue.waiting) < self._max_waiting \
                and queue.waiting_bytes + size <= self._max_waiting_bytes \
                and self._all_waiting_bytes + size <= self._max_all_waiting_bytes
            if queued:
                thread = self._queue(queue, _Copy(call, size, self._clock() + timeout_seconds,
                                                  dict(dimensions or {})))
            else:
                self.dropped += 1
                warn = self._dropped_since_warning()
        if queued:
            # a new thread starts once the lock is let go: other requests' submits wait for
            # the lock, never for a thread to start
            if thread is not None:
                thread.start()
            return QUEUED
        if warn:
            self._warn(warn)
        return DROPPED

    def _queue(self, queue: _Target, copy: _Copy) -> threading.Thread | None:
        """Under the lock: ``copy`` waits for one of its target's threads; the new thread
        to start once the lock is let go, when every thread it has is busy and it may have
        another (counted now, so no other submit starts one more)."""
        self._pending.hand()
        queue.waiting.append(copy)
        queue.waiting_bytes += copy.size
        self._all_waiting_bytes += copy.size
        if len(queue.waiting) > queue.idle and queue.threads < self._threads:
            queue.threads += 1
            return threading.Thread(target=self._work, args=(queue,), daemon=True,
                                    name=f"shadow-{queue.threads}")
        queue.wake.notify()
        return None

    def _work(self, queue: _Target) -> None:
        while True:
            copy = self._next(queue)
            if copy is None:
                return
            if self._clock() > copy.expires:
                self._expire(copy)
            else:
                self._run(copy)
            del copy  # hold nothing of a copy while waiting for the next

    def _next(self, queue: _Target) -> _Copy | None:
        with self._lock:
            queue.idle += 1
            found = queue.wake.wait_for(lambda: queue.waiting, self._idle_seconds)
            queue.idle -= 1
            if not found:
                queue.threads -= 1
                return None
            copy = queue.waiting.popleft()
            queue.waiting_bytes -= copy.size
            self._all_waiting_bytes -= copy.size
            return copy

    def _run(self, copy: _Copy) -> None:
        call, copy.call = copy.call, None
        try:
            if call is not None:
                call()
        except Exception:  # a shadow's failure is its own, never the pool's
            LOG.exception("shadow call failed")
        finally:
            del call  # the copy's request is given back before the call counts as ended
            self._pending.settle()

    def _expire(self, copy: _Copy) -> None:
        copy.call = None
        with self._lock:
            self.dropped += 1
            self.expired += 1
            warn = self._dropped_since_warning()
        # its request's metrics are already out: a line of its own, in their series
        emit_count("ShadowDropped", 1, **copy.dimensions)
        if warn:
            self._warn(warn)
        self._pending.settle()

    def _dropped_since_warning(self) -> int:
        """Under the lock: the drops to warn of now (0: a warning was given less than a
        minute ago)."""
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < DROP_WARNING_SECONDS:
            return 0
        count, self._warned_at, self._warned_drops = (self.dropped - self._warned_drops, now,
                                                      self.dropped)
        return count

    def _warn(self, count: int) -> None:
        LOG.warning("%d shadow cop%s dropped: its target's waiting copies were at their bound "
                    "(%d copies, %d bytes), or it waited past its timeout (%d so far)", count,
                    "y" if count == 1 else "ies", self._max_waiting, self._max_waiting_bytes,
                    self.expired)

    def backlog(self) -> Backlog:
        """The copies waiting, their bytes and the threads, over every target."""
        with self._lock:
            return Backlog(sum(len(queue.waiting) for queue in self._targets.values()),
                           self._all_waiting_bytes,
                           sum(queue.threads for queue in self._targets.values()))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the calls handed over so far have ended (or been dropped); False when
        ``timeout`` ran out."""
        return self._pending.wait(timeout)
