"""Where job records live: an interface, an in-memory store (one process: tests, ``chalice
local``) and a DynamoDB table (every Lambda of a stage), with the same forward-only rules.

Writes are conditional so that retries are idempotent on the job id: creating a job that
exists answers the existing record, a move a job may not make (backwards, out of a final
state) changes nothing and answers the record as it stands, and of the runners that claim one
job (duplicate deliveries of its event) one wins.
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.aws import error_code
from chalicelib.core.clients import DynamoTable
from chalicelib.jobs.records import (
    Job,
    JobNotFoundError,
    JobState,
    may_claim,
    may_move,
    states_before,
)

DEFAULT_TTL_SECONDS = 7 * 24 * 3600
"""How long a job is kept when no TTL is given: a week."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a job ends with: the inline answer, or the answer object's location, or an
    error ``{"Code", "Message"}``."""

    result: Any = None
    result_location: str | None = None
    error: Mapping[str, str] | None = None


class JobStore(Protocol):
    """Keeps job records."""

    def create(self, job: Job) -> Job:
        """Store a new job; when its id exists already, change nothing and answer the
        stored job (a retried create)."""

    def get(self, job_id: str) -> Job | None:
        """The job, or None (never created, or past its TTL)."""

    def advance(self, job_id: str, state: JobState,
                outcome: Outcome | None = None) -> tuple[Job, bool]:
        """Move a job to ``state`` (with its outcome when final) if it may move there
        (:func:`~chalicelib.jobs.records.may_move`); answers the job as it stands after and
        whether this call changed it.

        Raises:
            JobNotFoundError: no such job.
        """

    def claim(self, job_id: str, runner_id: str,
              reclaim_after: float | None = None) -> tuple[Job, bool]:
        """Move a job to ``running`` for the runner ``runner_id``, kept in the record, if it
        may (:func:`~chalicelib.jobs.records.may_claim`: from queued; from running only with
        ``reclaim_after``, for its own runner or after that long without a move); answers
        the job as it stands after and whether this call moved it (only one caller wins).

        Raises:
            JobNotFoundError: no such job.
        """

    def queued_between(self, since: float, before: float, limit: int) -> list[tuple[str, float]]:
        """The ids and creation times of at most ``limit`` jobs still queued that were created
        from ``since`` to ``before`` (epoch seconds), oldest first: jobs no runner has claimed
        (the re-drive's candidates, :mod:`chalicelib.jobs.redrive`). A listing, not a read: a
        job may have moved since (a claim decides)."""


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

    def claim(self, job_id: str, runner_id: str,
              reclaim_after: float | None = None) -> tuple[Job, bool]:
        with self._lock:
            job = self._live(job_id)
            if job is None:
                raise JobNotFoundError(f"No job {job_id!r}.")
            now = self._clock()
            if not may_claim(job, runner_id, now, reclaim_after):
                return job, False
            claimed = dataclasses.replace(job, state=JobState.RUNNING, updated_at=now,
                                          runner_id=runner_id)
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


class CorruptJobError(ValueError):
    """A table item is not one this module wrote."""


def encode_job(job: Job) -> dict[str, Any]:
    """A job's DynamoDB item (key ``job_id``; TTL attribute ``expires_at``)."""
    item: dict[str, Any] = {
        "job_id": {"S": job.job_id}, "model": {"S": job.model}, "state": {"S": str(job.state)},
        "created_at": {"N": repr(float(job.created_at))},
        "updated_at": {"N": repr(float(job.updated_at))},
        "input_location": {"S": job.input_location},
        "options": {"S": json.dumps(dict(job.options), sort_keys=True)},
        "expires_at": {"N": str(int(job.expires_at))}}
    item.update(_outcome_attributes(Outcome(job.result, job.result_location, job.error)))
    for name in ("owner", "runner_id", "input_etag", "input_version"):
        value = getattr(job, name)
        if value is not None:
            item[name] = {"S": value}
    return item


def result_text(result: Any) -> str:
    """An inline answer as the record keeps it: compact JSON, non-ASCII kept as is (its
    UTF-8 length is what counts against DynamoDB's item limit)."""
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False)


def _outcome_attributes(outcome: Outcome) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if outcome.result is not None:
        attributes["result"] = {"S": result_text(outcome.result)}
    if outcome.result_location is not None:
        attributes["result_location"] = {"S": outcome.result_location}
    if outcome.error is not None:
        attributes["error"] = {"S": json.dumps(dict(outcome.error))}
    return attributes


def decode_job(item: Mapping[str, Any]) -> Job:
    """The job of a table item.

    Raises:
        CorruptJobError: the item is not one :func:`encode_job` wrote.
    """
    try:
        options = json.loads(item["options"]["S"])
        error = json.loads(item["error"]["S"]) if "error" in item else None
        if not isinstance(options, dict) or not (error is None or isinstance(error, dict)):
            raise CorruptJobError("options or error is not an object")
        return Job(job_id=item["job_id"]["S"], model=item["model"]["S"],
                   state=JobState(item["state"]["S"]),
                   created_at=float(item["created_at"]["N"]),
                   updated_at=float(item["updated_at"]["N"]),
                   input_location=item["input_location"]["S"], options=options,
                   result=json.loads(item["result"]["S"]) if "result" in item else None,
                   result_location=item.get("result_location", {}).get("S"),
                   error=error, owner=item.get("owner", {}).get("S"),
                   expires_at=int(item["expires_at"]["N"]),
                   runner_id=item.get("runner_id", {}).get("S"),
                   input_etag=item.get("input_etag", {}).get("S"),
                   input_version=item.get("input_version", {}).get("S"))
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        if isinstance(error, CorruptJobError):
            raise
        raise CorruptJobError(f"malformed job item ({type(error).__name__})") from None


class TableJobStore(DynamoTable):
    """Jobs in one DynamoDB table (``JOBS_TABLE``): key ``job_id`` (S), TTL attribute
    ``expires_at``. Reads are strongly consistent (a job is read right after it moves); every
    write is conditional (see the module's docstring).

    Args:
        table: the table's name.
        client: a boto3 DynamoDB client; built on first use when None.
    """

    def __init__(self, table: str, client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(table, _dynamodb, client, clock)

    def create(self, job: Job) -> Job:
        try:
            self.client.put_item(TableName=self.table, Item=encode_job(job),
                                 ConditionExpression="attribute_not_exists(job_id)")
        except Exception as error:
            if not _condition_failed(error):
                raise
            existing = self.get(job.job_id)
            if existing is None:  # it existed and expired between the two calls
                raise
            return existing
        return job

    def get(self, job_id: str) -> Job | None:
        answer = self.client.get_item(TableName=self.table, Key={"job_id": {"S": job_id}},
                                      ConsistentRead=True)
        item = answer.get("Item")
        if item is None:
            return None
        job = decode_job(item)
        if job.expires_at and job.expires_at <= self._clock():
            return None  # TTL deletion lags by up to days
        return job

    def advance(self, job_id: str, state: JobState,
                outcome: Outcome | None = None) -> tuple[Job, bool]:
        allowed = states_before(state)
        if not allowed:
            job = self.get(job_id)
            if job is None:
                raise JobNotFoundError(f"No job {job_id!r}.")
            return job, False
        attributes = {"state": {"S": str(state)}, **_outcome_attributes(outcome or Outcome())}
        removed = [name for name in ("result", "result_location", "error")
                   if name not in attributes]
        froms = {f":from{index}": {"S": str(before)} for index, before in enumerate(allowed)}
        return self._update(job_id, self._clock(), attributes, removed,
                            "#state IN (" + ", ".join(froms) + ")", froms)

    def claim(self, job_id: str, runner_id: str,
              reclaim_after: float | None = None) -> tuple[Job, bool]:
        now = self._clock()
        attributes = {"state": {"S": str(JobState.RUNNING)}, "runner_id": {"S": runner_id}}
        values = {":queued": {"S": str(JobState.QUEUED)}}
        condition = "#state = :queued"
        if reclaim_after is not None:  # as records.may_claim
            values[":stale"] = {"N": repr(float(now - reclaim_after))}
            condition = ("(#state = :queued OR (#state = :state AND"
                         " (#runner_id = :runner_id OR #updated_at < :stale)))")
        return self._update(job_id, now, attributes, [], condition, values)

    def _update(self, job_id: str, now: float, attributes: Mapping[str, Any],
                removed: list[str], condition: str,
                values: Mapping[str, Any]) -> tuple[Job, bool]:
        """Set ``attributes`` (each ``:<name>`` in ``condition``), ``updated_at`` to ``now``,
        remove ``removed``, when the job is live and ``condition`` holds."""
        names = {"#updated_at": "updated_at", "#expires_at": "expires_at"}
        expression_values: dict[str, Any] = {**values, ":now": {"N": repr(float(now))},
                                             ":never": {"N": "0"}}
        sets = ["#updated_at = :now"]
        for name, value in attributes.items():
            names[f"#{name}"] = name
            expression_values[f":{name}"] = value
            sets.append(f"#{name} = :{name}")
        names.update({f"#{name}": name for name in removed})
        update = "SET " + ", ".join(sets)
        if removed:
            update += " REMOVE " + ", ".join(f"#{name}" for name in removed)
        try:
            answer = self.client.update_item(
                TableName=self.table, Key={"job_id": {"S": job_id}}, UpdateExpression=update,
                ConditionExpression=("attribute_exists(job_id)"
                                     " AND (#expires_at = :never OR #expires_at > :now)"
                                     f" AND {condition}"),
                ExpressionAttributeNames=names, ExpressionAttributeValues=expression_values,
                ReturnValues="ALL_NEW")
        except Exception as error:
            if not _condition_failed(error):
                raise
            job = self.get(job_id)
            if job is None:
                raise JobNotFoundError(f"No job {job_id!r}.") from None
            return job, False
        return decode_job(answer["Attributes"]), True

    QUEUED_INDEX = "state-created_at"
    """The table's global secondary index that :meth:`queued_between` queries: partition key
    ``state`` (S), sort key ``created_at`` (N), keys only (the stack declares it)."""

    def queued_between(self, since: float, before: float, limit: int) -> list[tuple[str, float]]:
        # the index is eventually consistent: a job claimed a moment ago may still be listed
        query: dict[str, Any] = {
            "TableName": self.table, "IndexName": self.QUEUED_INDEX,
            "KeyConditionExpression": "#state = :queued AND #created_at BETWEEN :since AND :before",
            "ExpressionAttributeNames": {"#state": "state", "#created_at": "created_at"},
            "ExpressionAttributeValues": {":queued": {"S": str(JobState.QUEUED)},
                                          ":since": {"N": repr(float(since))},
                                          ":before": {"N": repr(float(before))}}}
        found: list[tuple[str, float]] = []
        while len(found) < limit:
            answer = self.client.query(**query, Limit=limit - len(found))
            found += [(item["job_id"]["S"], float(item["created_at"]["N"]))
                      for item in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                break
            query["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        return found[:limit]


def _condition_failed(error: Exception) -> bool:
    """Whether a botocore error is DynamoDB's refusal of a conditional write."""
    return error_code(error) == "ConditionalCheckFailedException"


def _dynamodb() -> Any:
    return awsclients.build("dynamodb", aws.JOBS_TABLE)
