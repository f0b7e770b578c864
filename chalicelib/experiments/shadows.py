"""Shadow calls, after the caller's answer: a bounded pool of threads runs them, each within
its own timeout, so a shadow that is slow, failing or down never changes the caller's answer
or latency. Past the bound a copy is dropped at once: the request's own metrics count it
(``ShadowDropped``, beside ``ShadowQueued``), and a warning says so at most once a minute, with
the count since the last one (a full pool must not add a log line to every request).
:meth:`Shadows.flush` waits for the calls handed over (on Lambda, the capture extension calls
it after each response, before the environment may freeze).

Where nothing can run after the response (a Lambda environment without the extension: under
SnapStart, or when its registration failed), the handler would have to wait for its shadows
before answering: there the pool is off (``off`` says why, logged once), and each copy is
skipped (``ShadowSkipped``), never made."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

LOG = logging.getLogger("sagegate.experiments")

THREADS = 4
"""Shadow calls at once."""
MAX_PENDING = 64
"""Shadow calls waiting or running, at most."""
DROP_WARNING_SECONDS = 60.0
"""The shortest time between two warnings of dropped copies."""
QUEUED, DROPPED, SKIPPED = "queued", "dropped", "skipped"
"""What :meth:`Shadows.submit` did with a copy."""


class Shadows:
    """Runs shadow calls in the background (see the module)."""

    def __init__(self, threads: int = THREADS, max_pending: int = MAX_PENDING,
                 off: str | None = None) -> None:
        self.off = off
        """Why no shadow call is made here (None: they are)."""
        if off is not None:
            LOG.warning("shadow copies are off: %s", off)
        self.skipped = 0
        self._threads = threads
        self._max_pending = max_pending
        self._pool: ThreadPoolExecutor | None = None
        self._handed = 0
        self._settled = 0
        self.dropped = 0
        self._warned_at: float | None = None
        self._warned_drops = 0
        self._changed = threading.Condition()

    def submit(self, call: Callable[[], None]) -> str:
        """Run ``call`` in the background: :data:`QUEUED`; :data:`DROPPED` when too many
        wait; :data:`SKIPPED` when shadows are off here. The caller counts the outcome (in
        its request's metrics)."""
        if self.off is not None:
            with self._changed:
                self.skipped += 1
            return SKIPPED
        with self._changed:
            if self._handed - self._settled >= self._max_pending:
                self.dropped += 1
                warn = self._dropped_since_warning()
            else:
                self._handed += 1
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="shadow")
                self._pool.submit(self._run, call)
                return QUEUED
        if warn:
            LOG.warning("%d shadow cop%s dropped: %d shadow calls were waiting", warn,
                        "y" if warn == 1 else "ies", self._max_pending)
        return DROPPED

    def _dropped_since_warning(self) -> int:
        """The drops to warn of now (0: a warning was given less than a minute ago)."""
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < DROP_WARNING_SECONDS:
            return 0
        count, self._warned_at, self._warned_drops = (self.dropped - self._warned_drops, now,
                                                      self.dropped)
        return count

    def _run(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # a shadow's failure is its own, never the pool's
            LOG.exception("shadow call failed")
        finally:
            with self._changed:
                self._settled += 1
                self._changed.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the calls handed over so far have ended; False when ``timeout`` ran out."""
        with self._changed:
            target = self._handed
            return self._changed.wait_for(lambda: self._settled >= target, timeout)
