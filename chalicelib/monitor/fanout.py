"""The scheduled monitor fanned out: the work of a Step Functions run's three functions.

A stage with ``MONITOR_ENGINE=stepfunctions`` runs the hourly check as a state machine
(``sagegate.deploy.monitor_template`` builds it; docs/MONITOR.md, "Deployed: fanned out"):

1. **plan** (:func:`plan`): the window is the full hour before the scheduled event's time. For
   each endpoint: its baseline is read (an endpoint without one is reported), its *job* written
   (the baseline's feature names, which a headerless CSV capture's columns take), and the hour
   prefixes to read listed: each variant's folder of the window's hour and the ones on each side
   (:func:`chalicelib.monitor.capture_format.listing_span`; an empty prefix left out).
2. **map**, per prefix a Distributed Map: its ``ItemReader`` lists the prefix
   (``s3:listObjectsV2``), its ``ItemBatcher`` hands each child a few objects, and each child
   runs :func:`map_objects`: the objects the window reads
   (:func:`~chalicelib.monitor.capture_format.wanted`) are read with the endpoint's preprocessor
   into a :class:`~chalicelib.monitor.partial.PartialAnalysis` written under the run's
   ``parts/``; the child returns the part's key and a few counts (a child's output must stay
   small), or the error that stopped the reading (a preprocessor that raised, a row too wide),
   which is the endpoint's, not the run's. The ``ResultWriter`` writes every child's output under
   ``results/``.
3. **reduce** (:func:`reduce_endpoint`), per endpoint: the ResultWriter's manifests are read, the
   parts loaded in the objects' order (prefix by prefix in the plan's order, then by first key)
   and merged (:func:`~chalicelib.monitor.partial.merge_in_order`: one pass's statistics), then
   checked and written as the single-function run does
   (:func:`chalicelib.monitor.deployed.check_and_write`). A prefix whose Distributed Map failed
   (a child lost after its retries: the Map tolerates no failure) makes the endpoint ``lost``:
   nothing is written for it and the run fails at its end, so a lost part never passes as a check
   of part of the window.

Like the rest of the room it imports nothing else of chalicelib's and builds no client: the
caller (:mod:`chalicelib.monitoring`) hands in S3 and the endpoints' preprocessors.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from chalicelib.monitor import capture_format, capture_objects, deployed, documents, windows
from chalicelib.monitor.deployed import Emit, EndpointRun
from chalicelib.monitor.deployed_settings import MonitorSettings
from chalicelib.monitor.partial import PartialAnalysis, analyse_objects, merge_in_order
from chalicelib.monitor.preprocessing import HandlerFailed

LOST = "lost"
"""An endpoint whose window could not be read whole: a prefix's Distributed Map failed."""
JOBS, PARTS, RESULTS = "jobs", "parts", "results"
"""A run's folders: the plan writes ``jobs/``, the map ``parts/``, the ResultWriter ``results/``;
each run under ``<folder>/yyyy/mm/dd/hh/<execution>/``."""
PART_BYTES = 256 * 1024 * 1024
"""The largest part state the reduce reads (1,000 features' sketches are a few megabytes)."""
MANIFEST_BYTES = 64 * 1024 * 1024
DATA_ERRORS = (ValueError, HandlerFailed)
"""What a window's data raises (a row too wide, a preprocessor that raised): the endpoint's
failure, as in the single-function run. Anything else (S3, the network) is the child's failure,
retried by the state machine, then the Map's."""


@dataclasses.dataclass(frozen=True)
class Run:
    """What every step of one run shares: its window and where it works."""

    window: tuple[datetime.datetime, datetime.datetime]
    run_id: str
    """``yyyy/mm/dd/hh/<execution name>``: a run of the same hour again works apart."""

    def to_state(self, settings: MonitorSettings) -> dict[str, Any]:
        return {"start": _iso(self.window[0]), "end": _iso(self.window[1]),
                "run_id": self.run_id, "captures_bucket": settings.captures.bucket,
                "runs_bucket": settings.runs.bucket}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Run:
        """The run :meth:`to_state` carried.

        Raises:
            ValueError: not such a state.
        """
        try:
            window = (_time(state["start"]), _time(state["end"]))
            run_id = str(state["run_id"])
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a monitor run's state: {error}") from None
        if not run_id or ".." in run_id or run_id.startswith("/"):
            raise ValueError(f"not a monitor run's id: {run_id[:80]!r}")
        return cls(window, run_id)


def plan(event: Mapping[str, Any], settings: MonitorSettings, endpoints: Iterable[str], *,
         s3: Any, emit: Emit = print) -> dict[str, Any]:
    """The run's plan: its window, the prefixes each endpoint's Distributed Maps read, and the
    endpoints to reduce.

    Args:
        event: ``{"event": the execution's input (the scheduled event, with its ``time``),
            "execution": the execution's name}``; a missing or unreadable time plans the hour
            before now (a run started by hand with ``{}``).
        emit: where an endpoint without a readable baseline is logged.

    Returns:
        ``{"run": ..., "reads": [{"endpoint", "prefix", "order", "results"}, ...], "endpoints":
            [{"endpoint"} or {"endpoint", "status", "error"}, ...]}``.
    """
    started = event.get("event")
    try:
        now: datetime.datetime | None = windows.parse_time(str(
            started.get("time") or "" if isinstance(started, Mapping) else ""))
    except windows.WindowError:
        now = None
    window = windows.window(None, None, now)
    execution = _safe_name(str(event.get("execution") or "run"))
    run = Run(window, f"{windows.hour_folder(window[0])}/{execution}")
    reads: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for endpoint in sorted(set(endpoints)):
        baseline = _baseline(s3, settings, endpoint)
        if isinstance(baseline, EndpointRun):  # none, or not one: nothing to read
            emit(deployed.log_line(baseline, window[0]))
            entries.append({"endpoint": endpoint, "status": baseline.status,
                            "error": baseline.error})
            continue
        job = {"endpoint": endpoint, "csv_names": deployed.csv_names(baseline[0])}
        s3.put_object(Bucket=settings.runs.bucket, Key=job_key(settings, run, endpoint),
                      Body=json.dumps(job).encode(), ContentType="application/json")
        for order, prefix in enumerate(_prefixes(s3, settings, endpoint, window)):
            reads.append({"endpoint": endpoint, "prefix": prefix, "order": order,
                          "results": settings.runs.folder(RESULTS, run.run_id, endpoint,
                                                          str(order))})
        entries.append({"endpoint": endpoint})
    return {"run": run.to_state(settings), "reads": reads, "endpoints": entries}


def _baseline(s3: Any, settings: MonitorSettings,
              endpoint: str) -> deployed.Baseline | EndpointRun:
    """The endpoint's baseline, or its outcome without one (``no-baseline``, or ``failed``)."""
    try:
        baseline = deployed.load_baseline(s3, settings.baseline, endpoint)
    except DATA_ERRORS as error:
        return EndpointRun(endpoint, "failed", error=_one_line(error))
    if isinstance(baseline, str):
        return EndpointRun(endpoint, "no-baseline", error=baseline)
    return baseline


def _prefixes(s3: Any, settings: MonitorSettings, endpoint: str,
              window: tuple[datetime.datetime, datetime.datetime]) -> Iterator[str]:
    for variant in capture_objects.variant_folders(s3, settings.captures, endpoint):
        for hour in windows.hours(*capture_format.listing_span(*window)):
            prefix = f"{variant}{windows.hour_folder(hour)}/"
            if s3.list_objects_v2(Bucket=settings.captures.bucket, Prefix=prefix,
                                  MaxKeys=1).get("KeyCount", 0):
                yield prefix


def job_key(settings: MonitorSettings, run: Run, endpoint: str) -> str:
    return settings.runs.child(JOBS, run.run_id, f"{endpoint}.json").key


def map_objects(event: Mapping[str, Any], settings: MonitorSettings,
                preprocessors: Mapping[str, Sequence[Path]], *, s3: Any) -> dict[str, Any]:
    """One child of a prefix's Distributed Map: its batch of objects read into a part.

    Args:
        event: ``{"BatchInput": {"run": ..., "read": ...}, "Items": [...]}``, the items as
            ``s3:listObjectsV2`` gives them (``LastModified`` in epoch seconds).
        preprocessors: each endpoint's preprocessor file (at most one).

    Returns:
        Small, as a child's output must be: ``{"endpoint", "order", "first", "objects",
            "records", "part"}`` (``part`` None when no object was the window's), or ``{...,
            "error"}`` when the window's data stopped the reading.

    Raises:
        whatever S3 raises (the child fails, the state machine retries it).
    """
    batch = event["BatchInput"]
    run, read = Run.from_state(batch["run"]), batch["read"]
    endpoint, order = str(read["endpoint"]), int(read["order"])
    items = sorted(event.get("Items") or [], key=lambda item: str(item["Key"]))
    first = str(items[0]["Key"]) if items else ""
    answer: dict[str, Any] = {"endpoint": endpoint, "order": order, "first": first,
                              "objects": 0, "records": 0, "part": None}
    keys = [(str(item["Key"]), int(item.get("Size") or 0)) for item in items
            if _wanted(item, run.window)]
    if not keys:
        return answer
    job = json.loads(_read(s3, settings.runs.bucket, job_key(settings, run, endpoint),
                           MANIFEST_BYTES))
    try:
        reader = deployed.endpoint_reader(endpoint, preprocessors.get(endpoint, ()),
                                          {"features": [{"name": name}
                                                        for name in job["csv_names"]]},
                                          run.window)
        part = analyse_objects(reader, capture_objects.fetch_objects(
            s3, settings.captures, keys))
    except DATA_ERRORS as error:
        return {**answer, "error": _one_line(error)}
    key = settings.runs.child(PARTS, run.run_id, endpoint, str(order),
                              f"{hashlib.sha256(first.encode()).hexdigest()[:32]}.json").key
    s3.put_object(Bucket=settings.runs.bucket, Key=key, Body=part.to_bytes(),
                  ContentType="application/json")
    return {**answer, "objects": part.objects, "records": part.tally.records, "part": key}


def _wanted(item: Mapping[str, Any], window: tuple[datetime.datetime, datetime.datetime]) -> bool:
    key = str(item["Key"])
    hour = capture_format.key_hour(key)
    return hour is not None and capture_format.wanted(key, hour, *window,
                                                      _modified(item.get("LastModified")))


def _modified(value: Any) -> datetime.datetime | None:
    """An item's ``LastModified`` (epoch seconds; an ISO time or a datetime accepted too); None
    when unreadable (the object is read)."""
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.datetime.fromtimestamp(value, datetime.UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            return _time(value)
        except ValueError:
            return None
    return None


def reduce_endpoint(event: Mapping[str, Any], settings: MonitorSettings,
                    schedule_name: str, *, s3: Any, emit: Emit = print) -> dict[str, Any]:
    """One endpoint's parts merged in order, checked and written.

    Args:
        event: ``{"run": ..., "endpoint": the plan's entry, "reads": each with its ``manifest``
            (``{"Bucket", "Key"}``) or ``lost`` (the Distributed Map's error)}``.
        schedule_name: the ``MonitoringSchedule`` dimension.
        emit: where the EMF lines and the log line go.

    Returns:
        ``{"endpoint", "status", "records", "violations"}`` (``status`` :data:`LOST` when a
            prefix's Map failed: the state machine fails the run at its end).

    Raises:
        whatever S3 raises (the state machine retries the step, then counts the endpoint lost).
    """
    run = Run.from_state(event["run"])
    entry = event["endpoint"]
    endpoint = str(entry["endpoint"])
    if entry.get("status"):  # the plan found no baseline, or an unreadable one
        return _answer(EndpointRun(endpoint, str(entry["status"]),
                                   error=str(entry.get("error") or "")))
    reads = sorted((read for read in event.get("reads") or []
                    if read.get("endpoint") == endpoint), key=lambda read: int(read["order"]))
    outcome = _reduce(s3, settings, endpoint, run, reads, schedule_name, emit)
    emit(deployed.log_line(outcome, run.window[0]))
    return _answer(outcome)


def _reduce(s3: Any, settings: MonitorSettings, endpoint: str, run: Run,
            reads: Sequence[Mapping[str, Any]], schedule_name: str, emit: Emit) -> EndpointRun:
    lost = [read for read in reads if read.get("lost") or not read.get("manifest")]
    if lost:
        return EndpointRun(endpoint, LOST, error=_lost(lost[0]))
    outputs: list[dict[str, Any]] = []
    for read in reads:
        children, unfinished = _children(s3, read["manifest"])
        if unfinished:
            return EndpointRun(endpoint, LOST, error=f"{read['prefix']}: {unfinished}")
        outputs.extend(sorted(children, key=lambda child: str(child.get("first", ""))))
    for child in outputs:  # the first error in the objects' order is the one pass's
        if child.get("error"):
            return EndpointRun(endpoint, "failed", error=str(child["error"]),
                               files_read=sum(int(c.get("objects", 0)) for c in outputs))
    baseline = _baseline(s3, settings, endpoint)
    if isinstance(baseline, EndpointRun):
        return baseline
    keys = [str(child["part"]) for child in outputs if child.get("part")]
    try:
        merged = merge_in_order(PartialAnalysis.from_bytes(
            _read(s3, settings.runs.bucket, key, PART_BYTES)) for key in keys)
        return deployed.check_and_write(s3, settings, endpoint, run.window, baseline, merged,
                                        schedule_name, emit, files_read=merged.objects)
    except DATA_ERRORS as error:  # too many features together, a part not of this version
        return EndpointRun(endpoint, "failed", error=_one_line(error))


def _children(s3: Any, manifest: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The outputs of a Map Run's children from its ResultWriter's manifest, and what failed or
    did not finish."""
    bucket = str(manifest["Bucket"])
    document = documents.parse(_read(s3, bucket, str(manifest["Key"]), MANIFEST_BYTES),
                               str(manifest["Key"]))
    files = document.get("ResultFiles") or {}
    unfinished = {status: len(files.get(status) or []) for status in ("FAILED", "PENDING")}
    if any(unfinished.values()):
        return [], ", ".join(f"{count} {status} result file(s)"
                             for status, count in unfinished.items() if count)
    outputs: list[dict[str, Any]] = []
    for result in files.get("SUCCEEDED") or []:
        key = str(result["Key"])
        for execution in documents.parse(_read(s3, bucket, key, MANIFEST_BYTES), key):
            if execution.get("Status", "SUCCEEDED") != "SUCCEEDED":
                return [], f"a child execution {execution.get('Status')} in {key}"
            output = execution.get("Output")
            outputs.append(json.loads(output) if isinstance(output, str) else dict(output))
    return outputs, ""


def _lost(read: Mapping[str, Any]) -> str:
    lost = read.get("lost") or {}
    cause = str(lost.get("Cause") or lost.get("Error") or "no result")[:400]
    return f"{read.get('prefix')}: its Distributed Map failed, a part of the window is " \
           f"missing: {' '.join(cause.split())}"


def _answer(outcome: EndpointRun) -> dict[str, Any]:
    return {"endpoint": outcome.endpoint, "status": outcome.status,
            "records": outcome.records, "violations": outcome.violations}


def _read(s3: Any, bucket: str, key: str, limit: int) -> bytes:
    data: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"s3://{bucket}/{key}: larger than {limit:,} bytes")
    return data


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat()


def _time(text: Any) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return moment.replace(tzinfo=datetime.UTC) if moment.tzinfo is None \
        else moment.astimezone(datetime.UTC)


def _safe_name(name: str) -> str:
    """An execution's name as a key's component (Step Functions names are 1 to 80 of letters,
    digits, ``-`` and ``_``)."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_"
                      for c in name)[:80]
    return cleaned or "run"


def _one_line(error: BaseException) -> str:
    """An error as the single-function run reports an endpoint's failure."""
    return f"{type(error).__name__}: {str(error)[:500]}"
