"""The scheduled monitor: each endpoint's previous hour of captures, checked in S3.

A stage enables it with ``MONITOR_BASELINE=s3://bucket/prefix/`` (settings:
:mod:`chalicelib.monitor.deployed_settings`); ``app.py`` then declares a scheduled Lambda
function whose handler calls :func:`run`. For every endpoint:

* the baseline is ``<MONITOR_BASELINE>/<endpoint>/statistics.json`` and ``constraints.json`` (an
  endpoint without one is skipped, with a log line);
* a model folder's ``preprocessor.py`` is its endpoint's record preprocessor, run as ``sagegate
  monitor check --preprocess-handler`` runs it; without one the records are flattened. Two models
  of one endpoint with different files is that endpoint's error (a window has one preprocessor);
* the captures are the objects of the window's hour folders (and a Firehose stream's
  ``.jsonl.gz`` of the hour on each side: :mod:`chalicelib.monitor.capture_format`), fetched
  ahead of the check; a ``.jsonl.gz`` that is not GZIP, damaged or truncated is a bad object,
  counted in the log line;
* the time: each endpoint gets an equal share of the invocation's remaining time (less
  :data:`RESERVE_SECONDS`) among the endpoints left, so one done early passes its time on; an
  endpoint whose share runs out is checked on the files read so far and is ``partial``
  (``partial_window`` metric 1), rather than the invocation timing out with nothing written;
* the outputs go to ``<MONITOR_OUTPUT>/<endpoint>/yyyy/mm/dd/hh/`` (the window's hour):
  ``statistics.json``, ``constraint_violations.json``, ``report.html`` and the
  ``constraints.json`` used;
* the metrics are CloudWatch EMF lines in the function's log, in Model Monitor's namespace and
  names (:mod:`chalicelib.monitor.metrics`).

Like the rest of this room it imports nothing else of chalicelib's; boto3 is handed in by the
caller or created here on first use.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from chalicelib.core.aws import S3Uri
from chalicelib.monitor import analysis, documents, partial, windows
from chalicelib.monitor.capture_objects import Reading, capture_files, never
from chalicelib.monitor.captured_data import CapturedData
from chalicelib.monitor.deployed_settings import (
    MonitorConfigError,
    MonitorSettings,
)
from chalicelib.monitor.metrics import emf_lines
from chalicelib.monitor.partial import PartialAnalysis
from chalicelib.monitor.preprocessing import Preprocessor
from chalicelib.monitor.records import Preprocess, RecordReader, Window

USED_CONSTRAINTS = analysis.CONSTRAINTS
PREPROCESSOR_FILE = "preprocessor.py"  # in a model's folder: its endpoint's preprocessor
_DENIED = ("AccessDenied", "403", "Forbidden")  # GetObject's 403, as botocore names it
BASELINE_BYTES = 64 * 1024 * 1024
"""The largest baseline document read (a 70-feature baseline is a few hundred KB)."""
RESERVE_SECONDS = 60.0
"""Of the invocation's remaining time, kept for the last endpoint's check and writes."""


@dataclasses.dataclass
class EndpointRun:

    endpoint: str
    status: str
    """``checked``, ``partial`` (its time ran out), ``no-records``, ``no-baseline`` (``error``
    says why when S3 denied the read), ``skipped`` (no time left) or ``failed``."""
    records: int = 0
    violations: int = 0
    written: list[str] = dataclasses.field(default_factory=list)
    error: str = ""
    files_read: int = 0
    files_left: int = 0
    """Capture files listed but not read (``partial``)."""
    bad_lines: int = 0
    bad_objects: int = 0
    """Capture objects given up (a ``.jsonl.gz`` not GZIP, damaged, truncated)."""
    first_bad: str = ""
    """The first bad line's, then the first bad object's ``WHERE: reason``."""


Emit = Callable[[str], None]


def endpoint_preprocessors(models: Iterable[tuple[str, Path]]) -> dict[str, list[Path]]:
    """By endpoint, the ``preprocessor.py`` files of its models' folders (``models``: (endpoint,
    folder) pairs)."""
    found: dict[str, list[Path]] = {}
    for endpoint, folder in models:
        files = found.setdefault(endpoint, [])
        path = folder / PREPROCESSOR_FILE
        if path.is_file() and path not in files:
            files.append(path)
    return found


def run(endpoints: Mapping[str, Sequence[Path]], settings: MonitorSettings,
        schedule_name: str,
        now: datetime.datetime | None = None, *, s3: Any,
        emit: Emit = print,
        remaining: Callable[[], float] | None = None) -> list[EndpointRun]:
    """Check the last full hour before ``now`` of each endpoint's captures.

    One endpoint's failure is logged and the next is checked; the function never raises for data,
    so the scheduled invocation is not retried on a window that would fail again.

    Args:
        endpoints: each with its preprocessor file (at most one; :func:`endpoint_preprocessors`).
        schedule_name: the ``MonitoringSchedule`` dimension (the function's name).
        s3: the caller's client (this room builds none).
        emit: where the EMF and log lines go (stdout: the function's log).
        remaining: the invocation's remaining seconds (None: no limit), shared as the module
            docstring says.
    """
    window = windows.window(None, None, now)
    runs = []
    names = sorted(endpoints)
    for index, endpoint in enumerate(names):
        share, stop = _share(remaining, len(names) - index)
        if share <= 0:
            outcome = EndpointRun(endpoint, "skipped",
                                  error="no time left in this invocation")
        else:
            try:
                outcome = _check_endpoint(s3, settings, endpoint, endpoints[endpoint],
                                          window, schedule_name, emit, stop)
            except Exception as error:  # one endpoint's data must not stop the others
                outcome = EndpointRun(endpoint, "failed", error=f"{type(error).__name__}: "
                                                                f"{str(error)[:500]}")
        runs.append(outcome)
        emit(log_line(outcome, window[0]))
    return runs


def _share(remaining: Callable[[], float] | None,
           left: int) -> tuple[float, Callable[[], bool]]:
    """The next endpoint's share of the remaining time (less :data:`RESERVE_SECONDS`, over the
    ``left`` endpoints) and the ``stop`` that says when it is spent."""
    if remaining is None:
        return math.inf, never
    share = (remaining() - RESERVE_SECONDS) / left
    until = time.monotonic() + share

    def stop() -> bool:
        return time.monotonic() >= until

    return share, stop


def log_line(outcome: EndpointRun, start: datetime.datetime) -> str:
    return json.dumps({"message": "monitor", "endpoint": outcome.endpoint,
                       "status": outcome.status, "window_start": f"{start:%Y-%m-%dT%H:%MZ}",
                       "records": outcome.records, "violations": outcome.violations,
                       "files_read": outcome.files_read, "files_left": outcome.files_left,
                       "partial": outcome.status == "partial",
                       "bad_lines": outcome.bad_lines, "bad_objects": outcome.bad_objects,
                       "first_bad": outcome.first_bad or None,
                       "written": outcome.written, "error": outcome.error or None})


Baseline = tuple[dict[str, Any], dict[str, Any]]
"""An endpoint's baseline: its ``statistics.json`` and ``constraints.json``."""


def _check_endpoint(s3: Any, settings: MonitorSettings, endpoint: str,
                    preprocessors: Sequence[Path], window: Window, schedule_name: str,
                    emit: Emit, stop: Callable[[], bool] = never) -> EndpointRun:
    baseline = load_baseline(s3, settings.baseline, endpoint)
    if isinstance(baseline, str):
        return EndpointRun(endpoint, "no-baseline", error=baseline)
    reader = endpoint_reader(endpoint, preprocessors, baseline[0], window)
    reading = Reading()
    files = capture_files(s3, settings.captures, endpoint, *window, stop=stop, reading=reading)
    window_part = partial.analyse_objects(reader, files)
    return check_and_write(s3, settings, endpoint, window, baseline, window_part,
                           schedule_name, emit, files_read=reading.files_read,
                           files_left=reading.files_left)


def endpoint_reader(endpoint: str, preprocessors: Sequence[Path],
                    baseline_statistics: Mapping[str, Any], window: Window) -> RecordReader:
    """The reader of an endpoint's capture records: its preprocessor (or flattened), the window's
    records only, a headerless CSV's columns named as the baseline's features.

    Raises:
        MonitorConfigError: the endpoint's models bring two preprocessors.
        HandlerError: the preprocessor cannot be loaded.
    """
    return RecordReader(_preprocess(endpoint, preprocessors), window=window,
                        csv_names=csv_names(baseline_statistics))


def csv_names(baseline_statistics: Mapping[str, Any]) -> list[str]:
    """The baseline's feature names in order: a headerless CSV capture's columns."""
    return [str(feature["name"]) for feature in baseline_statistics["features"]]


def check_and_write(s3: Any, settings: MonitorSettings, endpoint: str, window: Window,
                    baseline: Baseline, window_part: PartialAnalysis, schedule_name: str,
                    emit: Emit, *, files_read: int = 0, files_left: int = 0) -> EndpointRun:
    """The window's statistics checked against the baseline: Model Monitor's files and the report
    written to the window's hour folder, the metrics emitted. Shared by the single-function run
    and a distributed run's reduce; ``files_left`` (listed, not read) makes the run ``partial``."""
    statistics, constraints = baseline
    result = analysis.check_statistics(window_part.statistics, statistics, constraints,
                                       title=settings.captures.location + f"/{endpoint}",
                                       window=window)
    cut_short = files_left > 0
    status = "partial" if cut_short else "checked"
    tally = window_part.tally
    done = EndpointRun(endpoint, status, records=tally.records, files_read=files_read,
                       files_left=files_left, bad_lines=tally.bad_lines,
                       bad_objects=tally.bad_objects,
                       first_bad=tally.first_bad or tally.first_bad_object)
    if not result.statistics["dataset"]["item_count"]:
        return dataclasses.replace(done, status=status if cut_short else "no-records")
    outputs = {**result.files, USED_CONSTRAINTS: analysis.dumps(constraints)}
    written = _write_outputs(s3, settings.output, endpoint, window, outputs)
    for line in emf_lines(result, endpoint, schedule_name, window[1], partial=cut_short):
        emit(line)
    return dataclasses.replace(done, violations=result.violation_count, written=written)


def _write_outputs(s3: Any, output: S3Uri, endpoint: str, window: Window,
                   outputs: Mapping[str, str]) -> list[str]:
    folder = output.child(endpoint, windows.hour_folder(window[0])).key
    written = []
    for name, text in outputs.items():
        key = f"{folder}/{name}"
        content_type = "text/html; charset=utf-8" if name.endswith(".html") \
            else "application/json"
        s3.put_object(Bucket=output.bucket, Key=key, Body=text.encode("utf-8"),
                      ContentType=content_type)
        written.append(str(output.join(key)))
    return written


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


def load_baseline(s3: Any, location: S3Uri, endpoint: str) -> Baseline | str:
    """The endpoint's baseline documents, or why there are none. S3 answers a missing key with
    404 to a role that may list the prefix and 403 to one that may not (a bucket policy or a
    narrower role can deny), so a 403 is reported like a missing baseline, not as the run's
    failure."""
    loaded = []
    for name, load in ((analysis.STATISTICS, documents.load_statistics),
                       (analysis.CONSTRAINTS, documents.load_constraints)):
        uri = f"{location.location}/{endpoint}/{name}"
        try:
            body = s3.get_object(Bucket=location.bucket, Key=location.child(endpoint, name).key)
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
