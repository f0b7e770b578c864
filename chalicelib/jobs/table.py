"""Job records in one DynamoDB table (``JOBS_TABLE``): every write conditional, so retries
are idempotent on the job id and of the runners that claim one job one wins (the rules are
:mod:`.records`', as the memory store's)."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.aws import error_code
from chalicelib.core.clients import DynamoTable
from chalicelib.core.errors import JobNotFoundError
from chalicelib.jobs.codec import decode_job, encode_job, outcome_attributes
from chalicelib.jobs.records import LEGACY_LEASE_SECONDS, Job, JobState, states_before
from chalicelib.jobs.store import Outcome


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
        attributes = {"state": {"S": str(state)}, **outcome_attributes(outcome or Outcome())}
        removed = [name for name in ("result", "result_location", "error")
                   if name not in attributes]
        froms = {f":from{index}": {"S": str(before)} for index, before in enumerate(allowed)}
        return self._update(job_id, self._clock(), attributes, removed,
                            "#state IN (" + ", ".join(froms) + ")", froms)

    def claim(self, job_id: str, runner_id: str, lease_until: float,
              reclaim: bool = False) -> tuple[Job, bool]:
        now = self._clock()
        attributes = {"state": {"S": str(JobState.RUNNING)}, "runner_id": {"S": runner_id},
                      "lease_expires_at": {"N": repr(float(lease_until))}}
        values = {":queued": {"S": str(JobState.QUEUED)}}
        condition = "#state = :queued"
        if reclaim:  # as records.may_claim (a record without a lease: records.lease_end)
            values[":stale"] = {"N": repr(float(now - LEGACY_LEASE_SECONDS))}
            condition = ("(#state = :queued OR (#state = :state AND"
                         " (#runner_id = :runner_id OR #lease_expires_at < :now"
                         " OR (attribute_not_exists(#lease_expires_at)"
                         " AND #updated_at < :stale))))")
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
