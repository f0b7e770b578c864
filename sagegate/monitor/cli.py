"""``sagegate monitor``: Model Monitor's data quality analysis, run here in seconds.

``sagegate monitor baseline DATASET -o DIR`` writes ``statistics.json`` and
``constraints.json`` of a training dataset (CSV, header detected or named, or JSON Lines) or of
a capture folder or prefix. ``sagegate monitor check CAPTURES --baseline DIR -o DIR`` reads one
endpoint's captures of a window (default: the last full hour), runs the record preprocessor if
one is given, and writes ``statistics.json``, ``constraint_violations.json`` and
``report.html``, then runs the postprocessing script. ``sagegate monitor compare CAPTURES_A
CAPTURES_B -o DIR`` compares a primary's (A) and a challenger's or shadow's (B) captures of a
window: per column distances, top-1 agreement on the same inference ids, latency and error
rates, in ``compare.json`` and ``compare.html``; 3 when B is worse than a threshold given.
docs/MONITOR.md has the details.

Exit status: 0 no violations (compare: within every threshold given); 3 violations found
(compare: B worse than a threshold) (CI and cron act on it); 4 nothing checked:
no records in the window (its own status, so a cron job never reads an empty window as a
clean one); 2 a usage or input error: one line on stderr, ``sagegate monitor: ...``, naming
the file (and the line or record), never a traceback; 130 interrupted (Ctrl-C); 1 a worker
process (with ``--workers``, or the one a record preprocessor or the postprocessing script runs
in) ended without an answer (an exit, a signal, out of memory) or was stopped at
``--preprocess-timeout`` (``--postprocess-timeout``), one line. A record preprocessor's and a
postprocessing script's output (prints, its logger) is on stderr, never stdout
(:mod:`chalicelib.monitor.user_workers`).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chalicelib.monitor import analysis, documents, partial, windows
from chalicelib.monitor.partial import PartialAnalysis
from chalicelib.monitor.preprocessing import HandlerError, HandlerFailed, watching_interrupts
from chalicelib.monitor.records import RecordError, Tally
from chalicelib.monitor.statistics import FeatureLimitError
from chalicelib.monitor.user_workers import (
    POSTPROCESS,
    PREPROCESS_DEADLINE,
    UserWorkers,
    WorkerDied,
    postprocess,
)
from sagegate.monitor import compare_cli, datasets, files, sources, workers
from sagegate.monitor.cli_shared import (
    EXIT_EMPTY,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATIONS,
    UsageError,
    Window,
    add_output_arguments,
    reader_options,
    refuse_all_bad,
    seconds,
    span_text,
    tally_text,
    write_outputs,
)

HELP = "Model Monitor's data quality baseline and checks, on captures here or in S3"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    monitor: argparse.ArgumentParser = subparsers.add_parser(
        "monitor", help=HELP, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(monitor)
    return monitor


def configure(monitor: argparse.ArgumentParser) -> None:
    commands = monitor.add_subparsers(dest="monitor_command", metavar="<command>",
                                      required=True)
    baseline = commands.add_parser("baseline", help="statistics.json and constraints.json "
                                   "of a training dataset or a capture window")
    baseline.add_argument("dataset", metavar="DATASET", help="a CSV or JSON Lines file, or a "
                          "capture folder or s3:// prefix")
    baseline.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                          help="the CSV's first line is (or, --no-header, is not) a header "
                          "(default: detected)")
    add_output_arguments(baseline, window_default="every capture file")
    check = commands.add_parser("check", help="check a capture window against a baseline")
    check.add_argument("captures", metavar="CAPTURES", help="one endpoint's capture folder or "
                       "s3:// prefix (holding <variant>/yyyy/mm/dd/hh/*.jsonl or *.jsonl.gz)")
    check.add_argument("--baseline", required=True, metavar="DIR",
                       help="folder holding the baseline's statistics.json and "
                       "constraints.json (constraints.json as you may have edited it)")
    check.add_argument("--postprocess-handler", metavar="FILE",
                       help="a file defining postprocess_handler(), run after the analysis "
                       "(in a worker process: its output on stderr)")
    check.add_argument("--postprocess-timeout", type=seconds, default=PREPROCESS_DEADLINE,
                       metavar="SECONDS",
                       help=f"stop the run (exit 1) when postprocess_handler(), or its "
                       f"import, has not returned in SECONDS (default: "
                       f"{PREPROCESS_DEADLINE:g})")
    check.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                       help="write report.html beside the JSON files (default: on)")
    add_output_arguments(check, window_default="the last full hour")
    compare_cli.configure(commands)


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``monitor`` command; returns its exit status (module docstring). The user's
    Ctrl-C is watched for, so a KeyboardInterrupt a preprocessor raises itself is its failure
    (exit 2), and the user's own stops the run (exit 130), whenever it comes."""
    try:
        with watching_interrupts():
            if args.monitor_command == "baseline":
                return _baseline(args)
            if args.monitor_command == "compare":
                return compare_cli.run(args)
            return _check(args)
    except KeyboardInterrupt:
        print("sagegate monitor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UsageError, files.SourceError, windows.WindowError, RecordError,
            documents.DocumentError, FeatureLimitError, HandlerError, HandlerFailed,
            OSError) as error:
        print(f"sagegate monitor: {error}", file=sys.stderr)
        return EXIT_USAGE
    except WorkerDied as error:
        print(f"sagegate monitor: {error}", file=sys.stderr)
        return EXIT_FAILED


def main(argv: Sequence[str] | None = None, prog: str = "sagegate monitor") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(_attach_bounds(sys.argv[1:] if argv is None else argv)))


def _attach_bounds(argv: Sequence[str]) -> list[str]:
    """``--start -PT1H`` as ``--start=-PT1H``: argparse reads a value starting with ``-`` as an
    option, and Model Monitor's relative bounds all do."""
    joined: list[str] = []
    for item in argv:
        if joined and joined[-1] in _BOUNDS and item[:1] == "-" and item[1:2].upper() == "P":
            joined[-1] = f"{joined[-1]}={item}"
        else:
            joined.append(item)
    return joined


_BOUNDS = ("--start", "--end")


def _baseline(args: argparse.Namespace) -> int:
    capture = sources.is_capture_source(args.dataset)
    if not capture and (args.start or args.end or args.preprocess_handler
                        or args.exclude_cache_hits):
        raise UsageError(f"{args.dataset}: --start, --end, --preprocess-handler and "
                         f"--exclude-cache-hits apply to capture folders, not to a "
                         f"dataset file")
    span = windows.window(args.start, args.end) if capture and (args.start or args.end) \
        else None
    options = reader_options(args, span)
    if capture:
        start, end = span or (None, None)
        read = _captures(args, args.dataset, start, end, options, "baseline")
    else:
        read = _dataset(args, options)
    files_out = analysis.baseline_files(read.analysis.statistics)
    tally = read.analysis.tally
    if not json.loads(files_out[analysis.STATISTICS])["dataset"]["item_count"]:
        refuse_all_bad(args.dataset, tally)
        counted = f" ({tally_text(tally)})" if tally.records else ""
        raise UsageError(f"{args.dataset}: no rows to make a baseline of{counted}")
    write_outputs(Path(args.output), files_out)
    _summary(args.output, tally, files_out, span, read)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    """The check, the postprocessing script imported first and run last in a worker process of
    its own."""
    with UserWorkers(1, args.postprocess_handler, args.postprocess_timeout,
                     POSTPROCESS) as post:
        post.check_import()  # before the analysis: a broken script costs no run
        return _checked(args, post)


def _checked(args: argparse.Namespace, post: UserWorkers) -> int:
    statistics, constraints = _load_baseline(Path(args.baseline))
    start, end = windows.window(args.start, args.end)
    # a headerless CSV capture's columns take the baseline's names, by position
    options = reader_options(args, (start, end),
                             [str(f["name"]) for f in statistics["features"]])
    read = _captures(args, args.captures, start, end, options, "check")
    result = analysis.check_statistics(read.analysis.statistics, statistics, constraints,
                                       title=args.captures, window=(start, end),
                                       with_report=args.report)
    tally = read.analysis.tally
    if not result.statistics["dataset"]["item_count"]:
        refuse_all_bad(args.captures, tally)
        print(f"note: no records in {args.captures} from {span_text((start, end))} "
              f"({tally_text(tally)}): nothing checked, no files written", file=sys.stderr)
        return EXIT_EMPTY
    write_outputs(Path(args.output), result.files)
    _summary(args.output, tally, result.files, (start, end), read)
    if args.postprocess_handler:
        post.run(postprocess, args.postprocess_handler, "while running it",
                 "running postprocess_handler")
    for violation in result.evaluation.violations["violations"]:
        print(f"{violation['feature_name']}: {violation['constraint_check_type']}: "
              f"{violation['description']}")
    return EXIT_VIOLATIONS if result.violation_count else EXIT_OK


@dataclasses.dataclass
class _Read:
    """The source's statistics and tally, the parts and the workers that read them (0: one pass
    here)."""

    analysis: PartialAnalysis
    parts: int = 0
    workers: int = 0


def _captures(args: argparse.Namespace, source: str, start: datetime.datetime | None,
              end: datetime.datetime | None, options: workers.ReaderOptions,
              command: str) -> _Read:
    """A capture source's window, read here or by worker processes (with ``--workers`` N or a
    preprocessor: the user's code runs in workers only)."""
    preprocessor = options.preprocess_handler
    if args.workers <= 1 and not preprocessor:
        return _Read(partial.analyse_objects(
            workers.reader(options), sources.capture_files(source, start, end, command),
            args.max_columns))
    with workers.Workers(args.workers, preprocessor, args.preprocess_timeout) as pool:
        # imported before the source is listed: its error comes first, as the single pass's
        pool.check_import()
        objects = sources.capture_objects(source, start, end, command)
        if len(objects) < 2 and not preprocessor:
            opened = sources.open_captures(source, [name for name, _size in objects])
            return _Read(partial.analyse_objects(workers.reader(options), opened,
                                                 args.max_columns))
        parts = workers.capture_parts(source, objects, args.workers, options)
        analysed = pool.analyse(parts, args.max_columns)[0]
    shared = args.workers > 1 and len(parts) > 1
    return _Read(analysed, len(parts) if shared else 0,
                 min(args.workers, len(parts)) if shared else 0)


def _dataset(args: argparse.Namespace, options: workers.ReaderOptions) -> _Read:
    reader = workers.reader(options)
    parts = datasets.dataset_parts(args.dataset, args.header,
                                   workers.part_count(_size(args.dataset), args.workers),
                                   args.max_columns) if args.workers > 1 else []
    if len(parts) < 2:
        rows = datasets.dataset_rows(args.dataset, args.header, reader, args.max_columns)
        return _Read(partial.analyse_rows(rows, reader.tally, args.max_columns))
    return _Read(workers.analyse(parts, args.workers, args.max_columns), len(parts),
                 min(args.workers, len(parts)))


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # reading it says why, in one line
        return 0


def _load_baseline(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        statistics = files.read_regular(folder / analysis.STATISTICS)
        constraints = files.read_regular(folder / analysis.CONSTRAINTS)
    except files.MissingFile as error:
        raise UsageError(f"{error} (make it with sagegate monitor baseline)") from None
    return (documents.load_statistics(statistics, str(folder / analysis.STATISTICS)),
            documents.load_constraints(constraints, str(folder / analysis.CONSTRAINTS)))


def _summary(output: str, tally: Tally, outputs: dict[str, str], window: Window | None,
             read_by: _Read | None = None) -> None:
    read = tally_text(tally) if tally.records or tally.bad_lines or tally.bad_objects \
        else "dataset read"
    span = f" from {span_text(window)}" if window else ""
    shared = f" (in {read_by.parts} parts by {read_by.workers} worker processes)" \
        if read_by is not None and read_by.parts else ""
    print(f"{read}{span}{shared}; wrote {', '.join(sorted(outputs))} to {output}",
          file=sys.stderr)
