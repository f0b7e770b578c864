"""Keeping ``make run``'s children running: a :class:`Supervisor` restarts a child that died
(the emulator, moto's server), with backoff, until it has failed too often in a row, and says
so on the console. :mod:`sagegate.local.stack` runs one per child it supervises.
"""
from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from chalicelib.core.retries import RetryPolicy
from emulator.process import EmulatorStartError

MAX_RESTARTS = 5
"""Consecutive failed lives (a death or a failed start) tolerated before giving up."""
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 8.0
STABLE_AFTER_S = 30.0
"""An emulator that has served this long is healthy again: the failure count restarts at 0."""


RESTART_POLICY = RetryPolicy(max_attempts=MAX_RESTARTS + 1, budget_seconds=math.inf,
                             base_delay=FIRST_DELAY_S, max_delay=MAX_DELAY_S)
"""sagegate's one retry policy, for restarts; its ceiling is waited without jitter: one
supervisor restarts one child, there is no crowd to spread, and the console says when."""


def backoff(failures: int) -> float:
    """Seconds before restart number ``failures`` (1, 2, ...): 0.5, 1, 2, 4, 8, 8 ..."""
    return RESTART_POLICY.ceiling(failures)


class Child(Protocol):

    @property
    def process(self) -> subprocess.Popen[Any]:
        ...

    @property
    def pid(self) -> int:
        ...

    @property
    def url(self) -> str:
        ...

    def stop(self, timeout: float = ...) -> int:
        """SIGTERM it (by its PID), SIGKILL after ``timeout``; its exit code."""
        ...


ChildT = TypeVar("ChildT", bound=Child)
EMULATOR_MEANWHILE = "the API answers 503 EndpointUnavailable meanwhile"


class Supervisor(Generic[ChildT]):
    """Restarts a child when it exits, until it has failed too often in a row."""

    def __init__(
        self,
        start: Callable[[], ChildT],
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        max_restarts: int = MAX_RESTARTS,
        *,
        name: str = "the emulator",
        meanwhile: str = EMULATOR_MEANWHILE,
        start_errors: tuple[type[Exception], ...] = (EmulatorStartError,),
    ) -> None:
        """Prepares the supervisor; :meth:`start` starts the first child.

        Args:
            start: starts one child and waits until it serves (raises one of ``start_errors``
                when it cannot).
            clock: monotonic seconds (injected for tests).
            name: the child, in the console lines ("the emulator").
            meanwhile: what a user sees until it is back, in the console lines.
        """
        self._start = start
        self._say = say
        self._clock = clock
        self._max_restarts = max_restarts
        self._name = name
        self._meanwhile = meanwhile
        self._start_errors = start_errors
        self.current: ChildT | None = None
        self.failures = 0
        self.restarts = 0
        self.gave_up = False
        self._started_at = 0.0
        self._restart_at = 0.0

    def start(self) -> ChildT:
        """Starts the first child (its failure is the caller's: nothing was serving yet)."""
        self.current = self._start()
        self._started_at = self._clock()
        return self.current

    def check(self) -> bool:
        """Notices a dead child and restarts it when its backoff has passed; False once it has
        failed ``max_restarts`` times in a row (given up)."""
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
            return self._failed(f"{self._name} (pid {current.pid}) exited with code {code}")
        if now < self._restart_at:
            return True
        return self._restart(now)

    def _restart(self, now: float) -> bool:
        try:
            self.current = self._start()
        except self._start_errors as error:
            return self._failed(f"{self._name} did not restart: {str(error).splitlines()[0]}")
        self._started_at = now
        self.restarts += 1
        self._say(f"sagegate: {self._name} restarted (pid {self.current.pid}) on "
                  f"{self.current.url}")
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
            f"sagegate: {what}; {self._meanwhile}; "
            f"restarting it in {delay:g} s (attempt {self.failures}/{self._max_restarts})"
        )
        return True

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None
