"""A job record as a DynamoDB item and back (:mod:`.table`'s items)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chalicelib.calls import CallOptions
from chalicelib.jobs.records import Job, JobState
from chalicelib.jobs.store import Outcome


class CorruptJobError(ValueError):
    """A table item is not one this module wrote."""


def encode_job(job: Job) -> dict[str, Any]:
    """A job's DynamoDB item (key ``job_id``; TTL attribute ``expires_at``)."""
    item: dict[str, Any] = {
        "job_id": {"S": job.job_id}, "model": {"S": job.model}, "state": {"S": str(job.state)},
        "created_at": {"N": repr(float(job.created_at))},
        "updated_at": {"N": repr(float(job.updated_at))},
        "input_location": {"S": job.input_location},
        "options": {"S": json.dumps(job.options.to_record(), sort_keys=True)},
        "expires_at": {"N": str(int(job.expires_at))}}
    item.update(outcome_attributes(Outcome(job.result, job.result_location, job.error)))
    for name in ("owner", "runner_id", "input_etag", "input_version"):
        value = getattr(job, name)
        if value is not None:
            item[name] = {"S": value}
    if job.lease_expires_at is not None:
        item["lease_expires_at"] = {"N": repr(float(job.lease_expires_at))}
    return item


def result_text(result: Any) -> str:
    """An inline answer as the record keeps it: compact JSON, non-ASCII kept as is (its
    UTF-8 length is what counts against DynamoDB's item limit)."""
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False)


def outcome_attributes(outcome: Outcome) -> dict[str, Any]:
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
                   input_location=item["input_location"]["S"],
                   options=CallOptions.from_record(options),
                   result=json.loads(item["result"]["S"]) if "result" in item else None,
                   result_location=item.get("result_location", {}).get("S"),
                   error=error, owner=item.get("owner", {}).get("S"),
                   expires_at=int(item["expires_at"]["N"]),
                   runner_id=item.get("runner_id", {}).get("S"),
                   input_etag=item.get("input_etag", {}).get("S"),
                   input_version=item.get("input_version", {}).get("S"),
                   lease_expires_at=float(item["lease_expires_at"]["N"])
                   if "lease_expires_at" in item else None)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        if isinstance(error, CorruptJobError):
            raise
        raise CorruptJobError(f"malformed job item ({type(error).__name__})") from None
