"""Keep an emulator child running: restart it on the same port when it dies, a bounded
number of times, with exponential backoff (what ``make run`` does, see scripts/run_local.py).

    supervisor = Supervisor(lambda: start_emulator(config, port=8080), say=print)
    supervisor.start()
    while running:
        if not supervisor.check():   # False: it kept dying, give up
            break
        time.sleep(0.2)
    supervisor.stop()

Only the standard library is imported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from emulator.process import EmulatorProcess, EmulatorStartError

MAX_RESTARTS = 5
"""Consecutive failed lives (a death or a failed start) tolerated before giving up."""
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 8.0
STABLE_AFTER_S = 30.0
"""An emulator that has served this long is healthy again: the failure count restarts at 0."""


def backoff(failures: int) -> float:
    """Seconds to wait before restart number ``failures`` (1, 2, ...): 0.5, 1, 2, 4, 8, 8 ..."""
    return float(min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (failures - 1)))


class Supervisor:
    """Restarts an emulator child when it exits, until it has failed too often in a row."""

    def __init__(
        self,
        start: Callable[[], EmulatorProcess],
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        """Prepares the supervisor; :meth:`start` starts the first child.

        Args:
            start: starts one emulator and waits until it serves (raises
                :class:`EmulatorStartError` when it cannot).
            say: prints one console line.
            clock: monotonic seconds (injected for tests).
            max_restarts: consecutive failures tolerated.
        """
        self._start = start
        self._say = say
        self._clock = clock
        self._max_restarts = max_restarts
        self.current: EmulatorProcess | None = None
        self.failures = 0
        self.restarts = 0
        self.gave_up = False
        self._started_at = 0.0
        self._restart_at = 0.0

    def start(self) -> EmulatorProcess:
        """Starts the first child (its failure is the caller's: nothing was serving yet)."""
        self.current = self._start()
        self._started_at = self._clock()
        return self.current

    def check(self) -> bool:
        """Notices a dead child and restarts it when its backoff has passed.

        Returns:
            False once the child has failed ``max_restarts`` times in a row (given up).
        """
        if self.gave_up:
            return False
        now = self._clock()
        current = self.current
        if current is not None and current.process.poll() is None:
            if self.failures and now - self._started_at >= STABLE_AFTER_S:
                self.failures = 0
            return True
        if current is not None:
            code = current.stop(timeout=2.0)
            self.current = None
            return self._failed(f"the emulator (pid {current.pid}) exited with code {code}")
        if now < self._restart_at:
            return True
        return self._restart(now)

    def _restart(self, now: float) -> bool:
        try:
            self.current = self._start()
        except EmulatorStartError as error:
            return self._failed(f"the emulator did not restart: {str(error).splitlines()[0]}")
        self._started_at = now
        self.restarts += 1
        self._say(f"sagegate: emulator restarted (pid {self.current.pid}) on {self.current.url}")
        return True

    def _failed(self, what: str) -> bool:
        self.failures += 1
        if self.failures > self._max_restarts:
            self.gave_up = True
            self._say(f"sagegate: {what}; giving up after {self._max_restarts} restarts in a row")
            return False
        delay = backoff(self.failures)
        self._restart_at = self._clock() + delay
        self._say(
            f"sagegate: {what}; the API answers 503 EndpointUnavailable meanwhile; "
            f"restarting it in {delay:g} s (attempt {self.failures}/{self._max_restarts})"
        )
        return True

    def stop(self) -> None:
        """Stops the current child, if any (by its PID)."""
        if self.current is not None:
            self.current.stop()
            self.current = None
