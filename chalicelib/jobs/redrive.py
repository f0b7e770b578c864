"""The re-drive: queued jobs whose ticket's S3 event never started a runner, delivered again.

S3's notification of a ticket invokes the job runner. That event can be delayed or dropped
(locally: a bucket that came back without its notification), and nothing else would move the
job until ``GET /jobs/{id}`` fails it as ``JobLost`` hours later. A scheduled function
(``app.job_redrive``) lists the jobs still queued ``after_seconds`` after they were made and,
for each whose ticket object exists, hands the runner the event S3 would have sent.

Running it twice is harmless: the runner claims a job only from ``queued``, so a job claimed
meanwhile is never run twice. A job is re-delivered when due and then each time its wait
doubles (:func:`due`), so a throttled runner gets a few duplicate events, not one per period.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from chalicelib import awsclients
from chalicelib.core import aws, environment
from chalicelib.core.config_names import JOB_REDRIVE_AFTER_SECONDS, JOB_REDRIVE_PERIOD_SECONDS
from chalicelib.core.errors import ConfigurationError
from chalicelib.jobs.records import JobState
from chalicelib.jobs.service import JobsContext
from chalicelib.jobs.store import JobStore
from chalicelib.jobs.uploads import head_upload

REDRIVE_FUNCTION, RUNNER_FUNCTION = "job_redrive", "job_runner"  # app.py's function names

logger = logging.getLogger("sagegate.jobs")

DEFAULT_PERIOD_SECONDS = 300
DEFAULT_AFTER_SECONDS = 300
"""S3 delivers an event within seconds, nearly always: five minutes of waiting means lost."""
MAX_LISTED = 10_000
"""Queued jobs one run looks at (their keys only: a few hundred kilobytes)."""
MAX_DELIVERED = 500
"""Events one run sends at most (the rest are due again in a later run)."""
_MAX_SECONDS = 86_400

Deliver = Callable[[dict[str, Any]], None]
"""Hands the runner one S3 notification: on Lambda an asynchronous invocation, locally a
message on the event pump's tickets queue."""


@dataclasses.dataclass(frozen=True)
class RedriveSettings:
    """``JOB_REDRIVE_PERIOD_SECONDS`` (how often it runs) and ``JOB_REDRIVE_AFTER_SECONDS``
    (how long a job waits queued before it is re-driven)."""

    period_seconds: int = DEFAULT_PERIOD_SECONDS
    after_seconds: int = DEFAULT_AFTER_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RedriveSettings:
        """The settings in ``environ``, defaults for those unset or blank.

        Raises:
            ConfigurationError: a value is not a whole number of seconds from 1 to 86400.
        """
        return cls(_seconds(environ, JOB_REDRIVE_PERIOD_SECONDS, DEFAULT_PERIOD_SECONDS),
                   _seconds(environ, JOB_REDRIVE_AFTER_SECONDS, DEFAULT_AFTER_SECONDS))


def _seconds(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= _MAX_SECONDS:
        raise ConfigurationError(f"{name} must be a whole number of seconds from 1 to "
                                 f"{_MAX_SECONDS}, not {raw[:32]!r}")
    return int(raw)


def due(waited: float, settings: RedriveSettings) -> bool:
    """Whether a job queued for ``waited`` seconds is re-delivered by this run: once it has
    waited ``after_seconds``, then in the runs 1, 2, 4, 8 ... periods later (a run that failed
    or a delivery that was lost is made up for, a throttled runner is not flooded)."""
    if waited < settings.after_seconds:
        return False
    periods = int((waited - settings.after_seconds) // settings.period_seconds)
    return periods & (periods - 1) == 0  # 0 or a power of two


def ticket_event(bucket: str, key: str, now: float | None = None) -> dict[str, Any]:
    """The S3 notification of a ticket as S3 sends it (the key URL-encoded as S3 does)."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return {"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "eventTime": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "sagegate-job-redrive",
               "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
               "object": {"key": urllib.parse.quote_plus(key, safe="/")}}}]}


@dataclasses.dataclass
class Redriven:
    """What one run did."""

    redriven: list[str] = dataclasses.field(default_factory=list)
    not_due: int = 0
    """Not due in this run, or past :data:`MAX_DELIVERED`."""
    moved: int = 0
    """Listed as queued, but claimed or gone by the time they were read."""
    no_ticket: int = 0
    """Queued without a ticket (the API failed before writing it, its client got no 202):
    nothing can run such a job."""
    failed: int = 0
    """Deliveries that raised (due again in a later run)."""

    def view(self) -> dict[str, Any]:
        return {"redriven": list(self.redriven), "not_due": self.not_due, "moved": self.moved,
                "no_ticket": self.no_ticket, "failed": self.failed}


@dataclasses.dataclass(frozen=True)
class Tickets:
    """Where the stage's tickets are."""

    s3: Any
    bucket: str
    prefix: str

    def exists(self, job_id: str) -> bool:
        """Whether the job's ticket object is there (a HEAD; other errors than not-found
        raise)."""
        return head_upload(self.s3, self.bucket, self.key(job_id)) is not None

    def event(self, job_id: str, now: float) -> dict[str, Any]:
        return ticket_event(self.bucket, self.key(job_id), now)

    def key(self, job_id: str) -> str:
        # deferred: the settings above are read by sagegate's tools, which load no inference
        from chalicelib.jobs.service import ticket_key

        return ticket_key(self.prefix, job_id)


def redrive(store: JobStore, tickets: Tickets, deliver: Deliver, settings: RedriveSettings,
            now: float) -> Redriven:
    """Re-deliver the tickets of the queued jobs that are due.

    Args:
        now: the run's scheduled time (a late run re-drives what the run on time would have).

    Raises:
        botocore's errors listing the jobs (the run fails; the next one starts over).
    """
    from chalicelib.jobs.service import QUEUED_PATIENCE_SECONDS  # deferred, as in Tickets.key

    done = Redriven()
    listed = store.queued_between(now - QUEUED_PATIENCE_SECONDS, now - settings.after_seconds,
                                  MAX_LISTED)
    for job_id, created_at in listed:
        if not due(now - created_at, settings) or len(done.redriven) >= MAX_DELIVERED:
            done.not_due += 1
        else:
            _redrive_one(store, tickets, deliver, job_id, now, done)
    return done


def _redrive_one(store: JobStore, tickets: Tickets, deliver: Deliver, job_id: str, now: float,
                 done: Redriven) -> None:
    job = store.get(job_id)  # the listing may lag; the record is read consistently
    if job is None or job.state is not JobState.QUEUED:
        done.moved += 1
        return
    if not tickets.exists(job_id):
        done.no_ticket += 1
        return
    try:
        deliver(tickets.event(job_id, now))
    except Exception as error:  # one job's failed delivery must not stop the others'
        done.failed += 1
        logger.warning("job %s: re-drive failed (%s)", job_id, type(error).__name__,
                       exc_info=error)
        return
    done.redriven.append(job_id)
    logger.info("job re-driven", extra={"job_id": job_id, "queued_s": round(now - job.created_at)})


def scheduled_time(text: str, clock: Callable[[], float] = time.time) -> float:
    """The epoch time of a schedule event's ``time`` (``2026-11-25T17:05:00Z``), or the
    clock's when it has none or an unreadable one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return clock()
    return moment.timestamp() if moment.tzinfo is not None else clock()


def invoke_runner(client: Any, function_name: str) -> Deliver:
    """Deliveries as ``Event`` invocations of the runner, as S3 invokes it (so Lambda
    queues, retries and dead-letters them the same way)."""
    def deliver(event: dict[str, Any]) -> None:
        client.invoke(FunctionName=function_name, InvocationType="Event",
                      Payload=json.dumps(event).encode())

    return deliver


def lambda_client() -> Any:
    """A Lambda client with short timeouts (an asynchronous invocation answers at once)."""
    return awsclients.build("lambda", aws.JOBS_REDRIVE)


def run_scheduled(context: JobsContext, scheduled: str, function_name: str,
                  deliver: Deliver | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One scheduled run of the re-drive: what ``app.job_redrive`` does.

    Args:
        scheduled: the schedule event's ``time`` (ISO; empty: now).
        function_name: this function's own name (``<app>-<stage>-job_redrive``): the runner
            is its sibling ``<app>-<stage>-job_runner``, as Chalice names them.
        deliver: default an asynchronous invocation of the runner.
        environ: default the process's environment, read now.
    """
    if deliver is None:
        runner = function_name.removesuffix(REDRIVE_FUNCTION) + RUNNER_FUNCTION
        deliver = invoke_runner(lambda_client(), runner)
    done = redrive(context.store, Tickets(context.s3, context.bucket, context.prefix), deliver,
                   RedriveSettings.from_env(environment.variables() if environ is None
                                            else environ),
                   scheduled_time(scheduled))
    return done.view()
