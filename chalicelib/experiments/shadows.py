"""Shadow calls, after the caller's answer: a bounded pool of threads runs them, each within
its own timeout, so a shadow that is slow, failing or down never changes the caller's answer
or latency. Past the bound a copy is dropped at once, counted (``ShadowDropped``) and logged.
:meth:`Shadows.flush` waits for the calls handed over (on Lambda, the capture extension calls
it after each response, before the environment may freeze).

Where nothing can run after the response (a Lambda environment without the extension: under
SnapStart, or when its registration failed), the handler would have to wait for its shadows
before answering: there the pool is off (``off`` says why, logged once), and each copy is
skipped, counted (``ShadowSkipped``), never made."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from chalicelib.core.observability import emit_count

LOG = logging.getLogger("sagegate.experiments")

THREADS = 4
"""Shadow calls at once."""
MAX_PENDING = 64
"""Shadow calls waiting or running, at most."""


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
        self._changed = threading.Condition()

    def submit(self, call: Callable[[], None]) -> bool:
        """Run ``call`` in the background; False (dropped, counted) when too many wait, or
        when shadows are off here (skipped, counted)."""
        if self.off is not None:
            with self._changed:
                self.skipped += 1
            emit_count("ShadowSkipped", 1)
            return False
        with self._changed:
            if self._handed - self._settled >= self._max_pending:
                self.dropped += 1
                refused = True
            else:
                self._handed += 1
                refused = False
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="shadow")
                self._pool.submit(self._run, call)
        if refused:
            LOG.warning("shadow copy dropped: %d shadow calls are waiting", self._max_pending)
            emit_count("ShadowDropped", 1)
        return not refused

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
