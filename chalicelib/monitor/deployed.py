"""The scheduled monitor: each endpoint's previous hour of captures, checked in S3.

A stage enables it with ``MONITOR_BASELINE=s3://bucket/prefix/``; ``app.py`` then declares a
scheduled Lambda function whose handler calls :func:`run`. For every endpoint it is given:

* the baseline is ``<MONITOR_BASELINE>/<endpoint>/statistics.json`` and ``constraints.json``
  (an endpoint without one is skipped, with a log line);
* a model folder holding ``preprocessor.py`` (``chalicelib/models/<name>/preprocessor.py``)
  gives its endpoint's record preprocessor, run unchanged as ``sagegate monitor check
  --preprocess-handler`` runs it (:mod:`chalicelib.monitor.preprocessing`); without one the
  records are flattened. Two models of one endpoint with different files is that endpoint's
  error (a window has one preprocessor);
* the captures are those under ``MONITOR_CAPTURES`` (an ``s3://`` prefix: where a Firehose
  stream delivers them, say), by default ``CAPTURE_DESTINATION`` (then ``s3://`` only):
  ``<capture prefix>/<endpoint>/<variant>/yyyy/mm/dd/hh/*.jsonl``, the hour's folders only,
  fetched :data:`FETCHERS` objects at a time (at most :data:`PREFETCH_BYTES` held ahead);
* the time: given the invocation's remaining time, each endpoint gets an equal share of what
  is left (less :data:`RESERVE_SECONDS` for the last check and its writes); an endpoint
  whose share runs out is checked on the files read so far, and its run is ``partial``
  (the log line says how many files were left, the ``partial_window`` metric is 1), rather
  than the whole invocation timing out with nothing written;
* the outputs go to ``<MONITOR_OUTPUT>/<endpoint>/yyyy/mm/dd/hh/`` (the window's hour):
  ``statistics.json``, ``constraint_violations.json``, ``report.html`` and the
  ``constraints.json`` the check used. ``MONITOR_OUTPUT`` defaults to ``monitoring/`` beside
  the capture prefix (``s3://b/captures`` -> ``s3://b/monitoring``);
* the metrics are one CloudWatch Embedded Metric Format line per endpoint (more when it has
  over 100 metrics), printed to the function's log, in Model Monitor's namespace
  (``aws/sagemaker/Endpoints/data-metrics``) with its dimensions (``Endpoint``,
  ``MonitoringSchedule``) and names: ``feature_baseline_drift_<feature>`` (the distance) and
  ``feature_non_null_<feature>`` (completeness); sagegate adds ``constraint_violations`` (the
  window's count), ``feature_violations_<feature>`` and ``partial_window`` (1: the time ran
  out before every file was read).

Like the rest of this room it imports nothing else of chalicelib's; boto3 (the Lambda
runtime's) is handed in by the caller or created here on first use.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chalicelib.monitor import analysis, documents, windows
from chalicelib.monitor.preprocessing import CapturedData, Preprocessor
from chalicelib.monitor.records import Preprocess, RecordReader

MONITOR_BASELINE, MONITOR_OUTPUT, MONITOR_SCHEDULE, MONITOR_CAPTURES = (
    "MONITOR_BASELINE", "MONITOR_OUTPUT", "MONITOR_SCHEDULE", "MONITOR_CAPTURES")
CAPTURE_DESTINATION = "CAPTURE_DESTINATION"
DEFAULT_SCHEDULE = "cron(5 * * * ? *)"
"""Hourly, five minutes past the hour (late capture files of the hour have landed)."""
NAMESPACE = "aws/sagemaker/Endpoints/data-metrics"
DIMENSIONS = ("Endpoint", "MonitoringSchedule")
USED_CONSTRAINTS = analysis.CONSTRAINTS
PREPROCESSOR_FILE = "preprocessor.py"  # in a model's folder: its endpoint's preprocessor
_S3 = "s3://"
_YEAR = re.compile(r"^\d{4}\Z")
_SCHEDULE = re.compile(r"^(cron|rate)\([^()]+\)\Z")
_EMF_MAX_METRICS = 100  # CloudWatch's limit per metric directive
_DENIED = ("AccessDenied", "403", "Forbidden")  # GetObject's 403, as botocore names it
FETCHERS = 10
"""Capture objects fetched at once (botocore's default connection pool size): each
``GetObject`` is a round trip of tens of milliseconds, and the S3 sink writes one small
object per request."""
PREFETCH_BYTES = 64 * 1024 * 1024
"""At most this much of objects fetched ahead of the check; a larger object is streamed."""
BASELINE_BYTES = 64 * 1024 * 1024
"""The largest baseline document read (a 70-feature baseline is a few hundred KB)."""
RESERVE_SECONDS = 60.0
"""Of the invocation's remaining time, kept for the last endpoint's check and writes."""


class MonitorConfigError(ValueError):
    """The stage's monitor settings are incomplete or contradictory."""


@dataclasses.dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix (no slash at either end; may be empty)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, uri: str, setting: str) -> S3Location:
        """``s3://bucket/prefix`` as a location.

        Raises:
            MonitorConfigError: not an ``s3://`` URI with a bucket.
        """
        text = uri.strip()
        bucket, _, prefix = text[len(_S3):].partition("/")
        if not text.startswith(_S3) or not bucket:
            raise MonitorConfigError(f"{setting} must be an s3://bucket/prefix URI, "
                                     f"not {text[:80]!r}")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        """The key of ``parts`` under the prefix."""
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def folder(self, *parts: str) -> str:
        """:meth:`key` with a trailing slash (a listing prefix); empty at the bucket's root."""
        key = self.key(*parts)
        return f"{key}/" if key else ""

    @property
    def uri(self) -> str:
        """``s3://bucket/prefix``."""
        return f"{_S3}{self.bucket}/{self.prefix}".rstrip("/")


@dataclasses.dataclass(frozen=True)
class MonitorSettings:
    """Where the scheduled monitor reads and writes."""

    baseline: S3Location
    captures: S3Location
    output: S3Location
    schedule: str = DEFAULT_SCHEDULE

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MonitorSettings | None:
        """The stage's monitor settings; None when ``MONITOR_BASELINE`` is unset.

        Raises:
            MonitorConfigError: monitoring is on but neither ``MONITOR_CAPTURES`` nor
                ``CAPTURE_DESTINATION`` is an ``s3://`` prefix (a directory or Firehose
                stream cannot be listed by hour), a setting is not an ``s3://`` URI, or
                ``MONITOR_SCHEDULE`` is not a schedule expression.
        """
        baseline_uri = env.get(MONITOR_BASELINE, "").strip()
        if not baseline_uri:
            return None
        read_from = env.get(MONITOR_CAPTURES, "").strip()
        if read_from:
            captures = S3Location.parse(read_from, MONITOR_CAPTURES)
        else:
            destination = env.get(CAPTURE_DESTINATION, "").strip()
            if not destination.startswith(_S3):
                raise MonitorConfigError(
                    f"{MONITOR_BASELINE} is set, so {CAPTURE_DESTINATION} must be the s3:// "
                    f"prefix the captures are written to, not {destination[:80]!r} (or set "
                    f"{MONITOR_CAPTURES} to the s3:// prefix they are delivered to)")
            captures = S3Location.parse(destination, CAPTURE_DESTINATION)
        output_uri = env.get(MONITOR_OUTPUT, "").strip()
        output = S3Location.parse(output_uri, MONITOR_OUTPUT) if output_uri \
            else default_output(captures)
        schedule = env.get(MONITOR_SCHEDULE, "").strip() or DEFAULT_SCHEDULE
        if not _SCHEDULE.match(schedule):
            raise MonitorConfigError(f"{MONITOR_SCHEDULE} must be an EventBridge schedule "
                                     f"expression, cron(...) or rate(...), not "
                                     f"{schedule[:80]!r}")
        return cls(baseline=S3Location.parse(baseline_uri, MONITOR_BASELINE),
                   captures=captures, output=output, schedule=schedule)


def default_output(captures: S3Location) -> S3Location:
    """``monitoring`` beside the capture prefix (in its parent folder, same bucket)."""
    parent = captures.prefix.rpartition("/")[0]
    return S3Location(captures.bucket, f"{parent}/monitoring" if parent else "monitoring")


@dataclasses.dataclass
class EndpointRun:
    """What one endpoint's check did."""

    endpoint: str
    status: str
    """``checked``, ``partial`` (checked on the files read before its time ran out),
    ``no-records``, ``no-baseline`` (``error`` says why when S3 denied the read), ``skipped``
    (no time left) or ``failed``."""
    records: int = 0
    violations: int = 0
    written: list[str] = dataclasses.field(default_factory=list)
    error: str = ""
    files_read: int = 0
    files_left: int = 0
    """Capture files listed but not read (``partial``: the time ran out)."""


@dataclasses.dataclass
class Reading:
    """How far :func:`capture_files` got: the files read, and those listed but left unread
    because ``stop`` said so."""

    files_read: int = 0
    files_left: int = 0


Emit = Callable[[str], None]


def endpoint_preprocessors(models: Iterable[tuple[str, Path]]) -> dict[str, list[Path]]:
    """Each endpoint's preprocessor files, from its models' (endpoint, folder) pairs: the
    ``preprocessor.py`` files present, none when no model of it has one."""
    found: dict[str, list[Path]] = {}
    for endpoint, folder in models:
        files = found.setdefault(endpoint, [])
        path = folder / PREPROCESSOR_FILE
        if path.is_file() and path not in files:
            files.append(path)
    return found


def run(endpoints: Mapping[str, Sequence[Path]], settings: MonitorSettings,
        schedule_name: str,
        now: datetime.datetime | None = None, s3: Any = None,
        emit: Emit = print,
        remaining: Callable[[], float] | None = None) -> list[EndpointRun]:
    """Check the last full hour before ``now`` of each endpoint's captures.

    One endpoint's failure (an unreadable baseline, a bad capture line) is logged and the
    next endpoint is checked; the function never raises for data, so the scheduled invocation
    is not retried on a window that would fail again.

    Args:
        endpoints: the endpoints to check, each with its preprocessor file (at most one;
            :func:`endpoint_preprocessors`).
        settings: where to read and write.
        schedule_name: the ``MonitoringSchedule`` dimension (the function's name).
        now: the time of the run (default: now).
        s3: a boto3 S3 client (default: a new one).
        emit: where the EMF lines and the log lines go (stdout: the function's log).
        remaining: the invocation's remaining time in seconds (Lambda's context; None: no
            limit): each endpoint reads for an equal share of it, less
            :data:`RESERVE_SECONDS`, then is checked on what it read (``partial``).
    """
    if s3 is None:
        import boto3  # deferred: paid only when no client is given (the Lambda runtime's)

        s3 = boto3.client("s3")
    start, end = windows.window(None, None, now)
    runs = []
    names = sorted(endpoints)
    for index, endpoint in enumerate(names):
        stop = _never
        share = math.inf
        if remaining is not None:
            share = (remaining() - RESERVE_SECONDS) / (len(names) - index)
            until = time.monotonic() + share

            def stop(until: float = until) -> bool:
                return time.monotonic() >= until
        if share <= 0:
            outcome = EndpointRun(endpoint, "skipped",
                                  error="no time left in this invocation")
        else:
            try:
                outcome = _check_endpoint(s3, settings, endpoint, endpoints[endpoint],
                                          (start, end), schedule_name, emit, stop)
            except Exception as error:  # one endpoint's data must not stop the others
                outcome = EndpointRun(endpoint, "failed", error=f"{type(error).__name__}: "
                                                                f"{str(error)[:500]}")
        runs.append(outcome)
        emit(json.dumps({"message": "monitor", "endpoint": endpoint, "status": outcome.status,
                         "window_start": f"{start:%Y-%m-%dT%H:%MZ}",
                         "records": outcome.records, "violations": outcome.violations,
                         "files_read": outcome.files_read, "files_left": outcome.files_left,
                         "partial": outcome.status == "partial",
                         "written": outcome.written, "error": outcome.error or None}))
    return runs


def _never() -> bool:
    return False


def _check_endpoint(s3: Any, settings: MonitorSettings, endpoint: str,
                    preprocessors: Sequence[Path],
                    window: tuple[datetime.datetime, datetime.datetime], schedule_name: str,
                    emit: Emit, stop: Callable[[], bool] = _never) -> EndpointRun:
    baseline = _baseline(s3, settings.baseline, endpoint)
    if isinstance(baseline, str):
        return EndpointRun(endpoint, "no-baseline", error=baseline)
    statistics, constraints = baseline
    reader = RecordReader(_preprocess(endpoint, preprocessors), window=window,
                          csv_names=[str(f["name"]) for f in statistics["features"]])
    reading = Reading()
    files = capture_files(s3, settings.captures, endpoint, *window, stop=stop, reading=reading)
    rows = (row for name, lines in files for row in reader.rows(name, lines))
    result = analysis.check(rows, statistics, constraints,
                            title=settings.captures.uri + f"/{endpoint}", window=window)
    partial = reading.files_left > 0
    status = "partial" if partial else "checked"
    done = EndpointRun(endpoint, status, records=reader.tally.records,
                       files_read=reading.files_read, files_left=reading.files_left)
    if not result.statistics["dataset"]["item_count"]:
        return dataclasses.replace(done, status=status if partial else "no-records")
    folder = settings.output.key(endpoint, windows.hour_folder(window[0]))
    outputs = {**result.files, USED_CONSTRAINTS: analysis.dumps(constraints)}
    written = []
    for name, text in outputs.items():
        key = f"{folder}/{name}"
        content_type = "text/html; charset=utf-8" if name.endswith(".html") \
            else "application/json"
        s3.put_object(Bucket=settings.output.bucket, Key=key, Body=text.encode("utf-8"),
                      ContentType=content_type)
        written.append(f"{_S3}{settings.output.bucket}/{key}")
    for line in emf_lines(result, endpoint, schedule_name, window[1], partial=partial):
        emit(line)
    return dataclasses.replace(done, violations=result.violation_count, written=written)


def _preprocess(endpoint: str, files: Sequence[Path]) -> Preprocess | None:
    if not files:
        return None
    if len(files) > 1:
        raise MonitorConfigError(f"endpoint {endpoint!r} has {len(files)} preprocessors ("
                                 f"{', '.join(f'{p.parent.name}/{p.name}' for p in files)}): "
                                 f"its models must share one file or only one may have it")
    handler = Preprocessor(files[0])

    def preprocess(record: dict[str, Any], where: str) -> dict[str, Any] | None:
        return handler(CapturedData(record), where)

    return preprocess


def _baseline(s3: Any, location: S3Location,
              endpoint: str) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """The endpoint's baseline documents, or why there are none: S3 answers a missing key
    with 404 to a role that may list its prefix and with 403 to one that may not (the
    monitor's policy lists the baseline prefix, but a bucket policy or a narrower role can
    still deny), so a 403 is reported like a missing baseline, not as the run's failure."""
    loaded = []
    for name, load in ((analysis.STATISTICS, documents.load_statistics),
                       (analysis.CONSTRAINTS, documents.load_constraints)):
        uri = f"{location.uri}/{endpoint}/{name}"
        try:
            body = s3.get_object(Bucket=location.bucket, Key=location.key(endpoint, name))
        except s3.exceptions.NoSuchKey:
            return ""
        except s3.exceptions.ClientError as error:
            if _error_code(error) not in _DENIED:
                raise
            return f"{uri}: access denied (no baseline there, or the role may not read it)"
        data = body["Body"].read(BASELINE_BYTES + 1)
        if len(data) > BASELINE_BYTES:
            raise documents.DocumentError(f"{uri}: larger than {BASELINE_BYTES:,} bytes")
        loaded.append(load(data, uri))  # DocumentError names the file and the bad part
    return loaded[0], loaded[1]


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None)
    if not isinstance(response, Mapping):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def capture_files(s3: Any, captures: S3Location, endpoint: str, start: datetime.datetime,
                  end: datetime.datetime, stop: Callable[[], bool] = _never,
                  reading: Reading | None = None) -> Iterator[tuple[str, Iterable[bytes]]]:
    """Each capture file of the window's hours (``<variant>/yyyy/mm/dd/hh/*.jsonl``), in key
    order, as (its URI, its lines): one listing per variant and hour, then up to
    :data:`FETCHERS` objects fetched at once and at most :data:`PREFETCH_BYTES` of them held
    ahead (an object larger than a fetcher's share of that is streamed when its turn comes).
    Before each file, ``stop()`` may end the reading: ``reading`` then counts the files left.
    """
    reading = reading if reading is not None else Reading()
    keys = list(_capture_keys(s3, captures, endpoint, start, end))
    large = PREFETCH_BYTES // FETCHERS
    pool = ThreadPoolExecutor(FETCHERS, thread_name_prefix="capture-fetch")
    pending: deque[tuple[str, int, Future[bytes] | None]] = deque()
    ahead = listed = 0
    try:
        while listed < len(keys) or pending:
            while listed < len(keys) and len(pending) < 2 * FETCHERS:
                key, size = keys[listed]
                if size > large:
                    pending.append((key, size, None))
                elif ahead + size <= PREFETCH_BYTES:
                    pending.append((key, size, pool.submit(_fetch, s3, captures.bucket, key)))
                    ahead += size
                else:
                    break
                listed += 1
            if stop():
                reading.files_left = len(keys) - reading.files_read
                return
            key, size, future = pending.popleft()
            if future is None:
                lines: Iterable[bytes] = s3.get_object(Bucket=captures.bucket,
                                                       Key=key)["Body"].iter_lines()
            else:
                lines = future.result().splitlines()
                ahead -= size
            reading.files_read += 1
            yield f"{_S3}{captures.bucket}/{key}", lines
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _fetch(s3: Any, bucket: str, key: str) -> bytes:
    data: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def _capture_keys(s3: Any, captures: S3Location, endpoint: str, start: datetime.datetime,
                  end: datetime.datetime) -> Iterator[tuple[str, int]]:
    root = captures.folder(endpoint)
    variants = _children(s3, captures.bucket, root)
    if any(_YEAR.match(v.rstrip("/").rsplit("/", 1)[-1]) for v in variants):
        variants = [root]  # the endpoint's folder has no variant level
    paginator = s3.get_paginator("list_objects_v2")
    for variant in variants:
        for hour in windows.hours(start, end):
            prefix = f"{variant}{windows.hour_folder(hour)}/"
            for page in paginator.paginate(Bucket=captures.bucket, Prefix=prefix):
                for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
                    if item["Key"].endswith(".jsonl"):
                        yield item["Key"], int(item.get("Size", 0))


def _children(s3: Any, bucket: str, folder: str) -> list[str]:
    children: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder,
                                                              Delimiter="/"):
        children.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
    return sorted(children)


def metrics(result: analysis.CheckResult, partial: bool = False) -> dict[str, float]:
    """The window's metrics by name (module docstring); ``partial_window`` is 1 when the
    window was checked on part of its files (the invocation's time ran out)."""
    values: dict[str, float] = {"constraint_violations": float(result.violation_count),
                                "partial_window": float(partial)}
    for feature in result.evaluation.features:
        name = feature.name
        if feature.distance is not None and math.isfinite(feature.distance):
            values[f"feature_baseline_drift_{name}"] = float(feature.distance)
        common = _common(feature.window)
        if common is not None:
            present = float(common.get("num_present", 0))
            total = present + float(common.get("num_missing", 0))
            values[f"feature_non_null_{name}"] = present / total if total else 0.0
        values[f"feature_violations_{name}"] = float(len(feature.violations))
    return values


def _common(feature: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not feature:
        return None
    for key in ("numerical_statistics", "string_statistics"):
        part = feature.get(key)
        if isinstance(part, Mapping) and isinstance(part.get("common"), Mapping):
            common: Mapping[str, Any] = part["common"]
            return common
    return None


def emf_lines(result: analysis.CheckResult, endpoint: str, schedule_name: str,
              when: datetime.datetime, partial: bool = False) -> list[str]:
    """The metrics as CloudWatch Embedded Metric Format lines (at most 100 metrics each)."""
    values = metrics(result, partial)
    names: Sequence[str] = list(values)
    lines = []
    for first in range(0, len(names), _EMF_MAX_METRICS):
        chunk = names[first:first + _EMF_MAX_METRICS]
        document: dict[str, Any] = {
            "_aws": {"Timestamp": int(when.timestamp() * 1000),
                     "CloudWatchMetrics": [{
                         "Namespace": NAMESPACE, "Dimensions": [list(DIMENSIONS)],
                         "Metrics": [{"Name": name, "Unit": "None"} for name in chunk]}]},
            "Endpoint": endpoint, "MonitoringSchedule": schedule_name,
            **{name: values[name] for name in chunk}}
        lines.append(json.dumps(document, allow_nan=False))
    return lines
