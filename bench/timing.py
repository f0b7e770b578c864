"""Interleaved timing of two contenders, so drift (thermal, caches, neighbours) hits both."""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable


@dataclasses.dataclass
class Samples:
    """Per-call CPU and wall-clock times of one contender, in milliseconds."""

    cpu_ms: list[float] = dataclasses.field(default_factory=list)
    wall_ms: list[float] = dataclasses.field(default_factory=list)

    @property
    def cpu(self) -> float:
        """Median CPU milliseconds per call (every thread of the process counted)."""
        return statistics.median(self.cpu_ms)

    @property
    def wall(self) -> float:
        """Median wall-clock milliseconds per call."""
        return statistics.median(self.wall_ms)

    def record(self, call: Callable[[], object]) -> None:
        """Run ``call`` once and keep its times."""
        cpu, wall = time.process_time(), time.perf_counter()
        call()
        self.wall_ms.append((time.perf_counter() - wall) * 1000.0)
        self.cpu_ms.append((time.process_time() - cpu) * 1000.0)


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long to measure: at least ``min_reps`` rounds, at most ``max_reps`` or ``seconds``."""

    warmup: int
    min_reps: int
    max_reps: int
    seconds: float


def compare(reference: Callable[[], object], candidate: Callable[[], object],
            budget: Budget) -> tuple[Samples, Samples]:
    """Time both callables alternately (ABBA: the one that runs first switches every round).

    Returns:
        The reference's samples and the candidate's.
    """
    for _ in range(budget.warmup):
        reference()
        candidate()
    ref, cand = Samples(), Samples()
    deadline = time.perf_counter() + budget.seconds
    rounds = 0
    while rounds < budget.max_reps and (rounds < budget.min_reps
                                        or time.perf_counter() < deadline):
        pair = ((ref, reference), (cand, candidate))
        for samples, call in pair if rounds % 2 == 0 else pair[::-1]:
            samples.record(call)
        rounds += 1
    return ref, cand


def ratio(reference: float, candidate: float) -> float:
    """How many times the candidate is faster (reference / candidate)."""
    return reference / candidate if candidate > 0 else float("inf")


@dataclasses.dataclass(frozen=True)
class Budgets:
    """Every budget of a run: ``full`` by default, ``quick`` for a smoke run."""

    image: Budget
    parse: Budget
    stage_reps: int
    import_runs: int
    e2e: Budget

    @classmethod
    def full(cls) -> Budgets:
        """About three minutes on two cores."""
        return cls(image=Budget(warmup=3, min_reps=15, max_reps=60, seconds=5.0),
                   parse=Budget(warmup=50, min_reps=200, max_reps=3000, seconds=2.0),
                   stage_reps=9, import_runs=5,
                   e2e=Budget(warmup=2, min_reps=16, max_reps=16, seconds=0.0))

    @classmethod
    def quick(cls) -> Budgets:
        """Under a minute: enough to see the shape, not to quote."""
        return cls(image=Budget(warmup=1, min_reps=5, max_reps=10, seconds=1.0),
                   parse=Budget(warmup=10, min_reps=50, max_reps=300, seconds=0.5),
                   stage_reps=3, import_runs=3,
                   e2e=Budget(warmup=1, min_reps=5, max_reps=5, seconds=0.0))
