"""A request's stages timed: wall-clock milliseconds per named stage, rendered as the
``Server-Timing`` header and logged with the request."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class StageTimer:
    """Wall-clock milliseconds per named stage (rendered later as ``Server-Timing``)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.durations: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the enclosed block under ``name`` (accumulating if repeated)."""
        start = self.clock()
        try:
            yield
        finally:
            self.since(name, start)

    def since(self, name: str, start: float) -> None:
        """Add the time from ``start`` (a reading of :attr:`clock`) to now to stage ``name``:
        the one call a hot path makes where :meth:`stage` makes two."""
        elapsed = (self.clock() - start) * 1000.0
        self.durations[name] = self.durations.get(name, 0.0) + elapsed

    def server_timing(self) -> str:
        """A ``Server-Timing`` header's value: each stage and its milliseconds."""
        return ", ".join([f"{name};dur={ms:.1f}" for name, ms in self.durations.items()])
