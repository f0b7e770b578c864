"""The job record, its ids, its owner and the states it moves through (forward only)."""
from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from collections.abc import Mapping
from typing import Any

from chalicelib.calls import CallOptions
from chalicelib.core.errors import JobNotFoundError


class JobState(enum.StrEnum):
    """A job's state: queued, then running, then succeeded or failed (both final)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    @property
    def final(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


_RANKS = {JobState.QUEUED: 0, JobState.RUNNING: 1, JobState.SUCCEEDED: 2, JobState.FAILED: 2}


def may_move(current: JobState, target: JobState) -> bool:
    """States only move forward; a final state is never left, not even for the other final
    state. Entering ``running`` again is a runner's claim (:func:`may_claim`), not a move."""
    if current.final:
        return False
    return target.rank > current.rank


LEGACY_LEASE_SECONDS = 900 + 60
"""The lease of a running job whose record holds none (made before leases): Lambda's longest
timeout and a margin after its last move."""


def lease_end(job: Job) -> float:
    """Until when the job's holder (its runner, or the endpoint it waits for) may move it."""
    if job.lease_expires_at is not None:
        return job.lease_expires_at
    return job.updated_at + LEGACY_LEASE_SECONDS


def may_claim(job: Job, runner_id: str, now: float, reclaim: bool) -> bool:
    """Whether the runner ``runner_id`` (the invocation's request id) may run ``job``.

    A queued job may be claimed. A running one only when ``reclaim`` is asked and its runner
    is ``runner_id`` (Lambda's retry of the same event keeps the request id) or its lease is
    over (its runner is gone); never by another delivery while its runner may be at work.
    """
    if job.state is JobState.QUEUED:
        return True
    return job.state is JobState.RUNNING and reclaim and (
        job.runner_id == runner_id or now > lease_end(job))


def states_before(target: JobState) -> tuple[JobState, ...]:
    return tuple(state for state in JobState if may_move(state, target))


JOB_ID = re.compile(r"^[0-9a-f]{32}\Z")


def new_job_id() -> str:
    return uuid.uuid4().hex


def is_job_id(text: str) -> bool:
    return bool(JOB_ID.match(text))


@dataclasses.dataclass(frozen=True)
class Job:
    """One job.

    Attributes:
        input_location: the input's ``s3://bucket/key``, or "" for an inline body.
        options: the model route's query options (e.g. ``k``), read once at creation.
        result: the answer body when small enough to keep in the record, else
            ``result_location`` names it.
        expires_at: epoch seconds after which the store may forget the job (its TTL).
        runner_id: the request id of the invocation that claimed it last.
        input_etag, input_version: the :class:`~chalicelib.jobs.uploads.Pin` of the input
            (None for a job made before pins).
        lease_expires_at: until when the job's holder may still move it, set by the claim
            from the holder's remaining time.
    """

    job_id: str
    model: str
    state: JobState
    created_at: float
    updated_at: float
    input_location: str = ""
    options: CallOptions = dataclasses.field(default_factory=CallOptions)
    result: Any = None
    result_location: str | None = None
    error: Mapping[str, str] | None = None
    owner: str | None = None
    expires_at: int = 0
    runner_id: str | None = None
    input_etag: str | None = None
    input_version: str | None = None
    lease_expires_at: float | None = None

    def view(self) -> dict[str, Any]:
        """The body of ``GET /jobs/{job_id}``, less a result object's presigned GET."""
        body: dict[str, Any] = {"job_id": self.job_id, "state": str(self.state),
                                "created_at": self.created_at, "updated_at": self.updated_at}
        if self.state is JobState.SUCCEEDED and self.result_location is None:
            body["result"] = self.result
        if self.state is JobState.FAILED and self.error is not None:
            body["error"] = dict(self.error)
        return body


def owner_of(request_context: Mapping[str, Any] | None) -> str | None:
    """The caller's identity from API Gateway's request context, or None: a Cognito
    ``sub``, else an IAM ARN, else an API key's id, each prefixed by its kind so identities
    of two kinds never compare equal."""
    if not request_context:
        return None
    authorizer = request_context.get("authorizer") or {}
    claims = authorizer.get("claims") if isinstance(authorizer, Mapping) else None
    if isinstance(claims, Mapping) and isinstance(claims.get("sub"), str) and claims["sub"]:
        return f"cognito:{claims['sub']}"
    identity = request_context.get("identity") or {}
    if not isinstance(identity, Mapping):
        return None
    user_arn = identity.get("userArn")
    if isinstance(user_arn, str) and user_arn:
        return f"iam:{user_arn}"
    key_id = identity.get("apiKeyId")
    if isinstance(key_id, str) and key_id:
        return f"apikey:{key_id}"
    return None


def check_owner(job: Job | None, job_id: str, caller: str | None) -> Job:
    """The job when the caller may read it: a job with no owner by anyone.

    Raises:
        JobNotFoundError: no job, or another caller's (the same answer for both).
    """
    if job is None or (job.owner is not None and job.owner != caller):
        raise JobNotFoundError(f"No job {job_id!r}.")
    return job
