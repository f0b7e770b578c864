"""The scheduled monitor's settings: where it reads baselines and captures and writes its files.

``MONITOR_BASELINE=s3://bucket/prefix/`` enables it. Captures are read from ``MONITOR_CAPTURES``
(an ``s3://`` prefix, where a Firehose stream delivers, say), by default ``CAPTURE_DESTINATION``
(then ``s3://`` only: a directory or a stream cannot be listed by hour). Outputs go to
``MONITOR_OUTPUT``, by default ``monitoring`` beside the capture prefix. ``MONITOR_SCHEDULE`` is
the EventBridge schedule. ``MONITOR_ENGINE`` is ``lambda`` (the default, one scheduled function)
or ``stepfunctions``, a state machine fanning the window's objects out over a Distributed Map
(:mod:`chalicelib.monitor.fanout`), whose runs keep their work under
:attr:`MonitorSettings.runs`.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from chalicelib.core.aws import S3_SCHEME, S3Uri

MONITOR_BASELINE, MONITOR_OUTPUT, MONITOR_SCHEDULE, MONITOR_CAPTURES = (
    "MONITOR_BASELINE", "MONITOR_OUTPUT", "MONITOR_SCHEDULE", "MONITOR_CAPTURES")
MONITOR_ENGINE = "MONITOR_ENGINE"
ENGINE_LAMBDA, ENGINE_STEPFUNCTIONS = "lambda", "stepfunctions"
ENGINES = (ENGINE_LAMBDA, ENGINE_STEPFUNCTIONS)
RUNS_SUFFIX = "-runs"
CAPTURE_DESTINATION = "CAPTURE_DESTINATION"
DEFAULT_SCHEDULE = "cron(5 * * * ? *)"
"""Hourly, five minutes past the hour (late capture files of the hour have landed)."""
_SCHEDULE = re.compile(r"^(cron|rate)\([^()]+\)\Z")


class MonitorConfigError(ValueError):
    """The stage's monitor settings are incomplete or contradictory."""


@dataclasses.dataclass(frozen=True)
class MonitorSettings:
    """Where the scheduled monitor reads and writes."""

    baseline: S3Uri
    captures: S3Uri
    output: S3Uri
    schedule: str = DEFAULT_SCHEDULE
    engine: str = ENGINE_LAMBDA

    @property
    def fanned_out(self) -> bool:
        return self.engine == ENGINE_STEPFUNCTIONS

    @property
    def runs(self) -> S3Uri:
        """Where a distributed run keeps its work (``jobs/``, ``parts/``, ``results/`` each run):
        the output prefix with :data:`RUNS_SUFFIX` (``s3://b/monitoring-runs``)."""
        return S3Uri(self.output.bucket,
                          f"{self.output.prefix or 'monitor'}{RUNS_SUFFIX}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MonitorSettings | None:
        """The stage's monitor settings; None when ``MONITOR_BASELINE`` is unset.

        Raises:
            MonitorConfigError: neither ``MONITOR_CAPTURES`` nor ``CAPTURE_DESTINATION`` is an
                ``s3://`` prefix, a setting is not an ``s3://`` URI, ``MONITOR_SCHEDULE`` is not
                a schedule expression, or ``MONITOR_ENGINE`` is not one of :data:`ENGINES`.
        """
        baseline_uri = env.get(MONITOR_BASELINE, "").strip()
        if not baseline_uri:
            return None
        captures = _captures(env)
        output_uri = env.get(MONITOR_OUTPUT, "").strip()
        output = location(output_uri, MONITOR_OUTPUT) if output_uri \
            else default_output(captures)
        schedule = env.get(MONITOR_SCHEDULE, "").strip() or DEFAULT_SCHEDULE
        if not _SCHEDULE.match(schedule):
            raise MonitorConfigError(f"{MONITOR_SCHEDULE} must be an EventBridge schedule "
                                     f"expression, cron(...) or rate(...), not "
                                     f"{schedule[:80]!r}")
        engine = env.get(MONITOR_ENGINE, "").strip().lower() or ENGINE_LAMBDA
        if engine not in ENGINES:
            raise MonitorConfigError(f"{MONITOR_ENGINE} must be one of {', '.join(ENGINES)}, "
                                     f"not {engine[:40]!r}")
        return cls(baseline=location(baseline_uri, MONITOR_BASELINE),
                   captures=captures, output=output, schedule=schedule, engine=engine)


def _captures(env: Mapping[str, str]) -> S3Uri:
    """``MONITOR_CAPTURES``, else ``CAPTURE_DESTINATION`` when it is an ``s3://`` prefix."""
    read_from = env.get(MONITOR_CAPTURES, "").strip()
    if read_from:
        return location(read_from, MONITOR_CAPTURES)
    destination = env.get(CAPTURE_DESTINATION, "").strip()
    if not destination.startswith(S3_SCHEME):
        raise MonitorConfigError(
            f"{MONITOR_BASELINE} is set, so {CAPTURE_DESTINATION} must be the s3:// "
            f"prefix the captures are written to, not {destination[:80]!r} (or set "
            f"{MONITOR_CAPTURES} to the s3:// prefix they are delivered to)")
    return location(destination, CAPTURE_DESTINATION)


def location(uri: str, setting: str) -> S3Uri:
    """``s3://bucket/prefix`` as a bucket and a prefix without slashes at either end
    (``setting`` names it in the error).

    Raises:
        MonitorConfigError: not an ``s3://`` URI with a bucket.
    """
    text = uri.strip()
    try:
        parsed = S3Uri.parse(text)
    except ValueError:
        raise MonitorConfigError(f"{setting} must be an s3://bucket/prefix URI, "
                                 f"not {text[:80]!r}") from None
    return S3Uri(parsed.bucket, parsed.prefix)


def default_output(captures: S3Uri) -> S3Uri:
    """``monitoring`` beside the capture prefix (``s3://b/captures`` -> ``s3://b/monitoring``)."""
    parent = captures.prefix.rpartition("/")[0]
    return S3Uri(captures.bucket, f"{parent}/monitoring" if parent else "monitoring")
