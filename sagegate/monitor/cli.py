"""``sagegate monitor``: Model Monitor's data quality analysis, run here in seconds.

``sagegate monitor baseline DATASET -o DIR`` writes ``statistics.json`` and
``constraints.json`` of a training dataset (CSV, header detected or named, or JSON Lines) or of
a capture folder or prefix. ``sagegate monitor check CAPTURES --baseline DIR -o DIR`` reads one
endpoint's captures of a window (default: the last full hour), runs the record preprocessor if
one is given, and writes ``statistics.json``, ``constraint_violations.json`` and
``report.html``, then runs the postprocessing script. docs/MONITOR.md has the details.

Exit status: 0 no violations; 3 violations found (CI and cron act on it); 4 nothing checked:
no records in the window (its own status, so a cron job never reads an empty window as a
clean one); 2 a usage or input error: one line on stderr, ``sagegate monitor: ...``, naming
the file (and the line or record), never a traceback; 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from chalicelib.monitor import analysis, documents, windows
from chalicelib.monitor.preprocessing import (
    CapturedData,
    HandlerError,
    HandlerFailed,
    Preprocessor,
    handler_logger,
    load_postprocessor,
    watching_interrupts,
)
from chalicelib.monitor.records import MAX_COLUMNS, Preprocess, RecordError, RecordReader, Tally
from chalicelib.monitor.statistics import FeatureLimitError
from sagegate.monitor import datasets, files, sources

EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, EXIT_EMPTY, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
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
                       "s3:// prefix (holding <variant>/yyyy/mm/dd/hh/*.jsonl)")
    check.add_argument("--baseline", required=True, metavar="DIR",
                       help="folder holding the baseline's statistics.json and "
                       "constraints.json (constraints.json as you may have edited it)")
    check.add_argument("--postprocess-handler", metavar="FILE",
                       help="a file defining postprocess_handler(), run after the analysis")
    check.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                       help="write report.html beside the JSON files (default: on)")
    _output(check, window_default="the last full hour")


def _output(parser: argparse.ArgumentParser, window_default: str) -> None:
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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text[:40]!r}") \
            from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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
            return _check(args)
    except KeyboardInterrupt:
        print("sagegate monitor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UsageError, files.SourceError, windows.WindowError, RecordError,
            documents.DocumentError, FeatureLimitError, HandlerError, HandlerFailed,
            OSError) as error:
        print(f"sagegate monitor: {error}", file=sys.stderr)
        return EXIT_USAGE


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
    reader = _reader(args, span)
    if capture:
        start, end = span or (None, None)
        captured = sources.capture_files(args.dataset, start, end, command="baseline")
        rows: Iterator[dict[str, Any]] = sources.capture_rows(reader, captured)
    else:
        rows = datasets.dataset_rows(args.dataset, args.header, reader, args.max_columns)
    files_out = analysis.baseline(rows, max_features=args.max_columns)
    if not json.loads(files_out[analysis.STATISTICS])["dataset"]["item_count"]:
        _refuse_all_bad(args.dataset, reader.tally)
        read = f" ({_tally(reader.tally)})" if reader.tally.records else ""
        raise UsageError(f"{args.dataset}: no rows to make a baseline of{read}")
    _write(Path(args.output), files_out)
    _summary(args.output, reader.tally, files_out, span)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    statistics, constraints = _load_baseline(Path(args.baseline))
    postprocess = _postprocessor(args.postprocess_handler)
    start, end = windows.window(args.start, args.end)
    # a headerless CSV capture's columns take the baseline's names, by position
    reader = _reader(args, (start, end), [f["name"] for f in statistics["features"]])
    rows = sources.capture_rows(reader, sources.capture_files(args.captures, start, end))
    result = analysis.check(rows, statistics, constraints, title=args.captures,
                            window=(start, end), with_report=args.report,
                            max_features=args.max_columns)
    if not result.statistics["dataset"]["item_count"]:
        _refuse_all_bad(args.captures, reader.tally)
        print(f"note: no records in {args.captures} from {_span((start, end))} "
              f"({_tally(reader.tally)}): nothing checked, no files written", file=sys.stderr)
        return EXIT_EMPTY
    _write(Path(args.output), result.files)
    _summary(args.output, reader.tally, result.files, (start, end))
    if postprocess is not None:
        postprocess()
    for violation in result.evaluation.violations["violations"]:
        print(f"{violation['feature_name']}: {violation['constraint_check_type']}: "
              f"{violation['description']}")
    return EXIT_VIOLATIONS if result.violation_count else EXIT_OK


def _refuse_all_bad(source: str, tally: Tally) -> None:
    """No row, and lines were skipped as unreadable: the source is broken, not empty."""
    if tally.bad_lines and not tally.rows:
        raise UsageError(f"{source}: no readable record: {tally.bad_lines} bad line(s) "
                         f"skipped, the first {tally.first_bad}")


def _reader(args: argparse.Namespace, window: Window | None,
            csv_names: list[str] | None = None) -> RecordReader:
    preprocess: Preprocess | None = None
    if args.preprocess_handler:
        # its logger's lines on stderr, as sagegate capture prints them
        handler = Preprocessor(args.preprocess_handler, handler_logger(sys.stderr))

        def preprocess(record: dict[str, Any], where: str) -> dict[str, Any] | None:
            return handler(CapturedData(record), where)

    return RecordReader(preprocess, include_cache_hits=not args.exclude_cache_hits,
                        window=window, csv_names=csv_names, max_columns=args.max_columns)


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
    return ", ".join(parts)


def _span(window: Window) -> str:
    """The window as given (to the second when it has seconds), not as whole hours."""
    return f"{_when(window[0])} to {_when(window[1])}"


def _when(moment: datetime.datetime) -> str:
    shown = moment.replace(microsecond=0)
    return f"{shown:%Y-%m-%dT%H:%M:%SZ}" if shown.second else f"{shown:%Y-%m-%dT%H:%MZ}"


def _summary(output: str, tally: Tally, outputs: dict[str, str], window: Window | None) -> None:
    read = _tally(tally) if tally.records or tally.bad_lines else "dataset read"
    span = f" from {_span(window)}" if window else ""
    print(f"{read}{span}; wrote {', '.join(sorted(outputs))} to {output}", file=sys.stderr)
