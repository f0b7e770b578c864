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
the file (and the line or record), never a traceback; 130 interrupted (Ctrl-C); 1 (with
``--workers``) a worker process ended without an answer (killed, out of memory), one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chalicelib.monitor import analysis, compare, compare_report, documents, partial, windows
from chalicelib.monitor.partial import PartialAnalysis
from chalicelib.monitor.preprocessing import (
    HandlerError,
    HandlerFailed,
    load_postprocessor,
    watching_interrupts,
)
from chalicelib.monitor.records import MAX_COLUMNS, RecordError, Tally
from chalicelib.monitor.statistics import FeatureLimitError
from sagegate.monitor import datasets, files, sources, workers

EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, EXIT_EMPTY, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
EXIT_FAILED = 1
"""A worker process died (killed, out of memory): as a crash of the command itself would."""
Window = tuple[datetime.datetime, datetime.datetime]
HELP = "Model Monitor's data quality baseline and checks, on captures here or in S3"


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Declare ``monitor`` and its ``baseline``/``check`` commands on a subparsers object."""
    monitor: argparse.ArgumentParser = subparsers.add_parser(
        "monitor", help=HELP, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(monitor)
    return monitor


def configure(monitor: argparse.ArgumentParser) -> None:
    """Add the ``baseline`` and ``check`` subcommands to a parser."""
    commands = monitor.add_subparsers(dest="monitor_command", metavar="<command>",
                                      required=True)
    baseline = commands.add_parser("baseline", help="statistics.json and constraints.json "
                                   "of a training dataset or a capture window")
    baseline.add_argument("dataset", metavar="DATASET", help="a CSV or JSON Lines file, or a "
                          "capture folder or s3:// prefix")
    baseline.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                          help="the CSV's first line is (or, --no-header, is not) a header "
                          "(default: detected)")
    _output(baseline, window_default="every capture file")
    check = commands.add_parser("check", help="check a capture window against a baseline")
    check.add_argument("captures", metavar="CAPTURES", help="one endpoint's capture folder or "
                       "s3:// prefix (holding <variant>/yyyy/mm/dd/hh/*.jsonl or *.jsonl.gz)")
    check.add_argument("--baseline", required=True, metavar="DIR",
                       help="folder holding the baseline's statistics.json and "
                       "constraints.json (constraints.json as you may have edited it)")
    check.add_argument("--postprocess-handler", metavar="FILE",
                       help="a file defining postprocess_handler(), run after the analysis")
    check.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                       help="write report.html beside the JSON files (default: on)")
    _output(check, window_default="the last full hour")
    _configure_compare(commands)


def _configure_compare(commands: Any) -> None:
    parser = commands.add_parser(
        "compare", help="the verdict between two models' captures: distances, agreement, "
        "latency, errors (exit 3: B worse than a threshold)")
    parser.add_argument("captures_a", metavar="CAPTURES_A", help="the primary's (champion's) "
                        "capture folder or s3:// prefix (its shadow records are skipped)")
    parser.add_argument("captures_b", metavar="CAPTURES_B", help="the challenger's, or the "
                        "primary's shadow's, capture folder or s3:// prefix (every record)")
    parser.add_argument("--max-distance", type=_fraction, metavar="X", help="each output "
                        "column's distance between A and B at most X (0 to 1; as the drift "
                        "check's, --comparison-method's)")
    parser.add_argument("--comparison-method", choices=compare.METHODS, default="Robust",
                        help="numbers: Robust (default: beyond X and the KS test's critical "
                        "distance, as the check's default) or Simple (beyond X)")
    parser.add_argument("--min-agreement", type=_fraction, metavar="X", help="B's top-1 "
                        "answers equal to A's on at least X of the pairs (same inferenceId)")
    parser.add_argument("--max-error-rate", type=_fraction, metavar="X",
                        help="B's error rate (failed shadow calls' records) at most X")
    parser.add_argument("--max-latency-ratio", type=_ratio, metavar="X", help="B's p50, p90 "
                        "and p99 latency (sagegateLatencyMs) each at most X times A's")
    parser.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                        help="write compare.html beside compare.json (default: on)")
    _output(parser, window_default="the last full hour", workers=False)


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text[:40]}")
    return value


def _ratio(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text[:40]}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text[:40]!r}")
    return value


def _output(parser: argparse.ArgumentParser, window_default: str,
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


def _workers(text: str) -> int:
    if text.strip().lower() in ("0", "auto"):
        return _cpus()
    return _positive(text)


def _cpus() -> int:
    """The CPUs this process may run on."""
    count = getattr(os, "process_cpu_count", os.cpu_count)()  # process_cpu_count: 3.13
    return max(1, count or 1)


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``monitor`` command; returns its exit status (module docstring).

    The user's Ctrl-C is watched for while it runs, so a KeyboardInterrupt a record
    preprocessor raises itself is that handler's failure (exit 2, one line), and the user's
    own Ctrl-C stops the run (exit 130, one line), whenever it comes.
    """
    try:
        with watching_interrupts():
            if args.monitor_command == "baseline":
                return _baseline(args)
            if args.monitor_command == "compare":
                return _compare(args)
            return _check(args)
    except KeyboardInterrupt:
        print("sagegate monitor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UsageError, files.SourceError, windows.WindowError, RecordError,
            documents.DocumentError, FeatureLimitError, HandlerError, HandlerFailed,
            OSError) as error:
        print(f"sagegate monitor: {error}", file=sys.stderr)
        return EXIT_USAGE
    except workers.WorkerDied as error:
        print(f"sagegate monitor: {error}", file=sys.stderr)
        return EXIT_FAILED


def main(argv: Sequence[str] | None = None, prog: str = "sagegate monitor") -> int:
    """``sagegate monitor ...`` as its own program (``python -m sagegate.monitor``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(_attach_bounds(sys.argv[1:] if argv is None else argv)))


def _attach_bounds(argv: Sequence[str]) -> list[str]:
    """``--start -PT1H`` as ``--start=-PT1H``: argparse reads a value that starts with ``-``
    as an option, and Model Monitor's relative bounds all do."""
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
    options = _options(args, span)
    if capture:
        start, end = span or (None, None)
        read = _captures(args, args.dataset, start, end, options, "baseline")
    else:
        read = _dataset(args, options)
    files_out = analysis.baseline_files(read.analysis.statistics)
    tally = read.analysis.tally
    if not json.loads(files_out[analysis.STATISTICS])["dataset"]["item_count"]:
        _refuse_all_bad(args.dataset, tally)
        counted = f" ({_tally(tally)})" if tally.records else ""
        raise UsageError(f"{args.dataset}: no rows to make a baseline of{counted}")
    _write(Path(args.output), files_out)
    _summary(args.output, tally, files_out, span, read)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    statistics, constraints = _load_baseline(Path(args.baseline))
    postprocess = _postprocessor(args.postprocess_handler)
    start, end = windows.window(args.start, args.end)
    # a headerless CSV capture's columns take the baseline's names, by position
    options = _options(args, (start, end), [str(f["name"]) for f in statistics["features"]])
    read = _captures(args, args.captures, start, end, options, "check")
    result = analysis.check_statistics(read.analysis.statistics, statistics, constraints,
                                       title=args.captures, window=(start, end),
                                       with_report=args.report)
    tally = read.analysis.tally
    if not result.statistics["dataset"]["item_count"]:
        _refuse_all_bad(args.captures, tally)
        print(f"note: no records in {args.captures} from {_span((start, end))} "
              f"({_tally(tally)}): nothing checked, no files written", file=sys.stderr)
        return EXIT_EMPTY
    _write(Path(args.output), result.files)
    _summary(args.output, tally, result.files, (start, end), read)
    if postprocess is not None:
        postprocess()
    for violation in result.evaluation.violations["violations"]:
        print(f"{violation['feature_name']}: {violation['constraint_check_type']}: "
              f"{violation['description']}")
    return EXIT_VIOLATIONS if result.violation_count else EXIT_OK


def _compare(args: argparse.Namespace) -> int:
    """Read B (every record, its ids kept), then A (pairing its records with B's), compare,
    write compare.json (and compare.html), print the figures and the verdict."""
    start, end = windows.window(args.start, args.end)
    thresholds = compare.Thresholds(args.max_distance, args.min_agreement,
                                    args.max_error_rate, args.max_latency_ratio,
                                    args.comparison_method)
    options = _options(args, (start, end))
    preprocess = workers.record_preprocessor(options)  # once, before the sources: as check
    listed = {name: sources.capture_objects(source, start, end, "compare")
              for name, source in (("a", args.captures_a), ("b", args.captures_b))}
    pairing = compare.Pairing()
    read: dict[str, compare.SideRead] = {}
    for name, source in (("b", args.captures_b), ("a", args.captures_a)):
        side = compare.Side(name, pairing, output_columns=preprocess is None,
                            max_columns=args.max_columns)
        reader = workers.reader(options, include_shadow=name == "b", observe=side,
                                preprocess=preprocess)
        opened = sources.open_captures(source, [item for item, _size in listed[name]])
        result = partial.analyse_objects(reader, opened, args.max_columns)
        read[name] = compare.SideRead(source, side, result.statistics.to_json(), result.tally)
    empty = [name for name in ("a", "b") if not read[name].side.records]
    for name in empty:  # a side of bad lines only is broken, not empty
        _refuse_all_bad(read[name].source, read[name].tally)
    if empty:
        for name in empty:
            print(f"note: no records in {name.upper()} ({read[name].source}) from "
                  f"{_span((start, end))} ({_tally(read[name].tally)}): nothing compared, "
                  f"no files written", file=sys.stderr)
        return EXIT_EMPTY
    document = compare.compare(read["a"], read["b"], pairing, thresholds, (start, end),
                               preprocessed=preprocess is not None)
    outputs = {compare_report.JSON: analysis.dumps(document),
               compare_report.STATISTICS_A: analysis.dumps(read["a"].statistics),
               compare_report.STATISTICS_B: analysis.dumps(read["b"].statistics)}
    if args.report:
        outputs[compare_report.HTML] = compare_report.render(
            document, read["a"].statistics, read["b"].statistics)
    _write(Path(args.output), outputs)
    for name in ("a", "b"):
        print(f"{name.upper()}: {_tally(read[name].tally)}", file=sys.stderr)
    print(f"compared {_span((start, end))}; wrote {', '.join(sorted(outputs))} to "
          f"{args.output}", file=sys.stderr)
    for line in compare.lines(document):
        print(line)
    return EXIT_VIOLATIONS if document["verdict"]["worse"] else EXIT_OK


def _refuse_all_bad(source: str, tally: Tally) -> None:
    """No row, and lines or objects were skipped as unreadable: the source is broken, not
    empty."""
    if tally.rows or not (tally.bad_lines or tally.bad_objects):
        return
    skipped = []
    if tally.bad_lines:
        skipped.append(f"{tally.bad_lines} bad line(s) skipped, the first {tally.first_bad}")
    if tally.bad_objects:
        skipped.append(f"{tally.bad_objects} bad object(s) skipped, the first "
                       f"{tally.first_bad_object}")
    raise UsageError(f"{source}: no readable record: {'; '.join(skipped)}")


def _options(args: argparse.Namespace, window: Window | None,
             csv_names: list[str] | None = None) -> workers.ReaderOptions:
    return workers.ReaderOptions(args.preprocess_handler, not args.exclude_cache_hits, window,
                                 tuple(csv_names) if csv_names is not None else None,
                                 args.max_columns)


@dataclasses.dataclass
class _Read:
    """The source's statistics and tally, how many parts the workers read and how many
    workers read them (0: one pass here)."""

    analysis: PartialAnalysis
    parts: int = 0
    workers: int = 0


def _captures(args: argparse.Namespace, source: str, start: datetime.datetime | None,
              end: datetime.datetime | None, options: workers.ReaderOptions,
              command: str) -> _Read:
    """A capture source's window, read here or, ``--workers`` N, by N processes."""
    # the preprocessor is imported here first, whatever the workers: its error comes before
    # the source's, as the single pass reports them
    reader = workers.reader(options)
    if args.workers <= 1:
        return _Read(partial.analyse_objects(
            reader, sources.capture_files(source, start, end, command), args.max_columns))
    objects = sources.capture_objects(source, start, end, command)
    if len(objects) < 2:
        opened = sources.open_captures(source, [name for name, _size in objects])
        return _Read(partial.analyse_objects(reader, opened, args.max_columns))
    parts = workers.capture_parts(source, objects, args.workers, options)
    return _Read(workers.analyse(parts, args.workers, args.max_columns), len(parts),
                 min(args.workers, len(parts)))


def _dataset(args: argparse.Namespace, options: workers.ReaderOptions) -> _Read:
    """A dataset file, read here or, ``--workers`` N, by N processes (cut into parts at
    lines' starts)."""
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
    """The baseline's two documents, read (regular files only) and checked."""
    try:
        statistics = files.read_regular(folder / analysis.STATISTICS)
        constraints = files.read_regular(folder / analysis.CONSTRAINTS)
    except files.MissingFile as error:
        raise UsageError(f"{error} (make it with sagegate monitor baseline)") from None
    return (documents.load_statistics(statistics, str(folder / analysis.STATISTICS)),
            documents.load_constraints(constraints, str(folder / analysis.CONSTRAINTS)))


def _postprocessor(path: str | None) -> Callable[[], None] | None:
    return load_postprocessor(path) if path else None


def _write(folder: Path, outputs: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in outputs.items():
        with files.create_regular(folder / name) as file:
            file.write(text.encode("utf-8"))


def _tally(tally: Tally) -> str:
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


def _span(window: Window) -> str:
    """The window as given (to the second when it has seconds), not as whole hours."""
    return f"{_when(window[0])} to {_when(window[1])}"


def _when(moment: datetime.datetime) -> str:
    shown = moment.replace(microsecond=0)
    return f"{shown:%Y-%m-%dT%H:%M:%SZ}" if shown.second else f"{shown:%Y-%m-%dT%H:%MZ}"


def _summary(output: str, tally: Tally, outputs: dict[str, str], window: Window | None,
             read_by: _Read | None = None) -> None:
    read = _tally(tally) if tally.records or tally.bad_lines or tally.bad_objects \
        else "dataset read"
    span = f" from {_span(window)}" if window else ""
    shared = f" (in {read_by.parts} parts by {read_by.workers} worker processes)" \
        if read_by is not None and read_by.parts else ""
    print(f"{read}{span}{shared}; wrote {', '.join(sorted(outputs))} to {output}",
          file=sys.stderr)
