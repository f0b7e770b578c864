"""Work handed to another thread, counted until it is settled, and a wait for it.

The capture writer (inferences until stored or dropped), the shadow pool (copies until run or
dropped) and the capture extension (invocations until their handler has returned) each hand
work on and must later wait until it is done: on Lambda before the environment may freeze, or
as the process ends. A wait is for what was handed when it began, so work handed meanwhile
never holds it.

Standard library only: the capture extension imports it before anything else.
"""
from __future__ import annotations

import threading


class Pending:
    """How much work was handed and settled, safe to share between threads.

    A settle may come before the hand it answers (a handler may return before the extension
    hears of its invocation): it counts all the same, so a wait that begins after both
    returns at once.
    """

    def __init__(self) -> None:
        self._handed = 0
        self._settled = 0
        self._changed = threading.Condition(threading.Lock())

    @property
    def settled(self) -> int:
        with self._changed:
            return self._settled

    @property
    def outstanding(self) -> int:
        with self._changed:
            return self._handed - self._settled

    def hand(self, count: int = 1) -> None:
        with self._changed:
            self._handed += count

    def settle(self, count: int = 1) -> None:
        """Count work settled (done, dropped or given up), releasing the waits it completes."""
        with self._changed:
            self._settled += count
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything handed so far is settled; False when ``timeout`` ran out."""
        with self._changed:
            target = self._handed
            return self._changed.wait_for(lambda: self._settled >= target, timeout)
