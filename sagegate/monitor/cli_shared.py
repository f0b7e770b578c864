"""What the ``sagegate monitor`` commands share (:mod:`sagegate.monitor.cli` and
:mod:`sagegate.monitor.compare_cli`): the exit statuses (the cli module's docstring), the
usage error, the output, window and reading options, and the outputs written and summed up.
"""
from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

from chalicelib.monitor.records import MAX_COLUMNS, Tally
from chalicelib.monitor.user_workers import PREPROCESS_DEADLINE
from sagegate.monitor import files, workers

EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, EXIT_EMPTY, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
EXIT_FAILED = 1
"""A worker died or a preprocessor was stopped at its deadline: as a crash of the command itself."""
Window = tuple[datetime.datetime, datetime.datetime]
_DEADLINE = PREPROCESS_DEADLINE


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


def add_output_arguments(parser: argparse.ArgumentParser, window_default: str,
                         workers: bool = True) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="folder for the output files (created)")
    parser.add_argument("--start", metavar="WHEN", help=f"window start: an ISO 8601 time "
                        f"(UTC unless a zone is given), 'now', or a duration relative to now "
                        f"as Model Monitor's schedules write it (-PT1H, -P1D) (default: "
                        f"{window_default})")
    parser.add_argument("--end", metavar="WHEN", help="window end, exclusive (the same forms)")
    parser.add_argument("--preprocess-handler", metavar="FILE",
                        help="a Model Monitor record preprocessor (preprocess_handler), "
                        "run unchanged on each capture record")
    parser.add_argument("--preprocess-timeout", type=seconds,
                        default=_DEADLINE, metavar="SECONDS",
                        help=f"stop the run (exit 1) when the preprocessor reads no record for "
                        f"SECONDS: one record's call, or its import, that never returns "
                        f"(default: {_DEADLINE:g})")
    parser.add_argument("--exclude-cache-hits", action="store_true",
                        help="leave out records of answers served from the cache")
    parser.add_argument("--max-columns", type=_positive, default=MAX_COLUMNS, metavar="N",
                        help=f"refuse a record or row of more than N columns (default: "
                        f"{MAX_COLUMNS}; a wider one needs a --preprocess-handler that returns "
                        f"the features to monitor)")
    if not workers:
        return
    parser.add_argument("--workers", type=_workers, default=1, metavar="N",
                        help="read the files (or the dataset) with N processes and merge "
                        "their statistics: one process's counts and moments, sketches within "
                        "their error (default: 1; 0 or 'auto': one per CPU)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text[:40]!r}") \
            from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text[:40]!r}") \
            from None
    if not 0 < value < 1e9:  # NaN and infinity too
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, not {text[:40]}")
    return value


def _workers(text: str) -> int:
    if text.strip().lower() in ("0", "auto"):
        return _cpus()
    return _positive(text)


def _cpus() -> int:
    count = getattr(os, "process_cpu_count", os.cpu_count)()  # process_cpu_count: 3.13
    return max(1, count or 1)


def refuse_all_bad(source: str, tally: Tally) -> None:
    """No row, and lines or objects were skipped as unreadable: the source is broken, not empty."""
    if tally.rows or not (tally.bad_lines or tally.bad_objects):
        return
    skipped = []
    if tally.bad_lines:
        skipped.append(f"{tally.bad_lines} bad line(s) skipped, the first {tally.first_bad}")
    if tally.bad_objects:
        skipped.append(f"{tally.bad_objects} bad object(s) skipped, the first "
                       f"{tally.first_bad_object}")
    raise UsageError(f"{source}: no readable record: {'; '.join(skipped)}")


def reader_options(args: argparse.Namespace, window: Window | None,
                   csv_names: list[str] | None = None) -> workers.ReaderOptions:
    return workers.ReaderOptions(args.preprocess_handler, not args.exclude_cache_hits, window,
                                 tuple(csv_names) if csv_names is not None else None,
                                 args.max_columns)


def write_outputs(folder: Path, outputs: dict[str, str]) -> None:
    """Write each output file (regular files only) in the folder, made if missing."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in outputs.items():
        with files.create_regular(folder / name) as file:
            file.write(text.encode("utf-8"))


def tally_text(tally: Tally) -> str:
    """What happened to the records read, as the summary line says it."""
    parts = [f"{tally.records} record(s) read", f"{tally.rows} row(s)"]
    for label, count in (("outside the window", tally.outside_window),
                         ("without a readable eventMetadata.inferenceTime", tally.untimed),
                         ("shadow skipped", tally.shadow),
                         ("cache hits excluded", tally.cache_hits_excluded),
                         ("dropped by the preprocessor", tally.dropped),
                         ("with nothing to flatten (use --preprocess-handler)", tally.empty)):
        if count:
            parts.append(f"{count} {label}")
    if tally.bad_lines:
        parts.append(f"{tally.bad_lines} bad line(s) skipped (the first {tally.first_bad})")
    if tally.bad_objects:
        parts.append(f"{tally.bad_objects} bad object(s) given up (the first "
                     f"{tally.first_bad_object})")
    return ", ".join(parts)


def span_text(window: Window) -> str:
    """The window as given (to the second when it has seconds), not as whole hours."""
    return f"{_when(window[0])} to {_when(window[1])}"


def _when(moment: datetime.datetime) -> str:
    shown = moment.replace(microsecond=0)
    return f"{shown:%Y-%m-%dT%H:%M:%SZ}" if shown.second else f"{shown:%Y-%m-%dT%H:%MZ}"
