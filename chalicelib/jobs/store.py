"""Where job records live: an interface and an in-memory store (one process: tests, ``chalice
local``); the DynamoDB table (every Lambda of a stage) is :mod:`.table`, with the same
forward-only rules, its items :mod:`.codec`'s.

Writes are conditional so that retries are idempotent on the job id: creating a job that
exists answers the existing record, a move a job may not make (backwards, out of a final
state) changes nothing and answers the record as it stands, and of the runners that claim one
job (duplicate deliveries of its event) one wins.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from chalicelib.core.errors import JobNotFoundError
from chalicelib.jobs.records import Job, JobState, may_claim, may_move

DEFAULT_TTL_SECONDS = 7 * 24 * 3600  # a job's TTL when none is given


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a job ends with: an inline answer, an answer object's location, or an error."""

    result: Any = None
    result_location: str | None = None
    error: Mapping[str, str] | None = None


class JobStore(Protocol):
    """Keeps job records."""

    def create(self, job: Job) -> Job:
        """Store a new job; a retried create (its id exists) answers the stored job."""

    def get(self, job_id: str) -> Job | None:
        """The job, or None (never created, or past its TTL)."""

    def advance(self, job_id: str, state: JobState,
                outcome: Outcome | None = None) -> tuple[Job, bool]:
        """Move a job to ``state`` if :func:`~chalicelib.jobs.records.may_move` allows;
        answers the job as it stands after and whether this call changed it.

        Raises:
            JobNotFoundError: no such job.
        """

    def claim(self, job_id: str, runner_id: str, lease_until: float,
              reclaim: bool = False) -> tuple[Job, bool]:
        """Move a job to ``running`` for ``runner_id`` until ``lease_until`` (both kept in
        the record) if :func:`~chalicelib.jobs.records.may_claim` allows; answers the job and
        whether this call moved it (only one caller wins).

        Raises:
            JobNotFoundError: no such job.
        """

    def queued_between(self, since: float, before: float, limit: int) -> list[tuple[str, float]]:
        """The ids and creation times of at most ``limit`` jobs still queued, created from
        ``since`` to ``before``, oldest first (the re-drive's candidates). A listing, not a
        read: a job may have moved since."""


def _moved(job: Job, state: JobState, outcome: Outcome | None, now: float) -> Job:
    outcome = outcome or Outcome()
    return dataclasses.replace(job, state=state, updated_at=now, result=outcome.result,
                               result_location=outcome.result_location,
                               error=dict(outcome.error) if outcome.error else None)


class MemoryJobStore:
    """Jobs in a dict, thread-safe; a job past its ``expires_at`` is gone."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def create(self, job: Job) -> Job:
        with self._lock:
            existing = self._live(job.job_id)
            if existing is not None:
                return existing
            self._jobs[job.job_id] = job
            return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._live(job_id)

    def advance(self, job_id: str, state: JobState,
                outcome: Outcome | None = None) -> tuple[Job, bool]:
        with self._lock:
            job = self._live(job_id)
            if job is None:
                raise JobNotFoundError(f"No job {job_id!r}.")
            if not may_move(job.state, state):
                return job, False
            moved = _moved(job, state, outcome, self._clock())
            self._jobs[job_id] = moved
            return moved, True

    def claim(self, job_id: str, runner_id: str, lease_until: float,
              reclaim: bool = False) -> tuple[Job, bool]:
        with self._lock:
            job = self._live(job_id)
            if job is None:
                raise JobNotFoundError(f"No job {job_id!r}.")
            now = self._clock()
            if not may_claim(job, runner_id, now, reclaim):
                return job, False
            claimed = dataclasses.replace(job, state=JobState.RUNNING, updated_at=now,
                                          runner_id=runner_id, lease_expires_at=lease_until)
            self._jobs[job_id] = claimed
            return claimed, True

    def _live(self, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is not None and job.expires_at and job.expires_at <= self._clock():
            del self._jobs[job_id]
            return None
        return job

    def queued_between(self, since: float, before: float, limit: int) -> list[tuple[str, float]]:
        with self._lock:
            live = [job for job in map(self._live, list(self._jobs)) if job is not None]
        queued = sorted((job.created_at, job.job_id) for job in live
                        if job.state is JobState.QUEUED and since <= job.created_at <= before)
        return [(job_id, created_at) for created_at, job_id in queued[:limit]]


