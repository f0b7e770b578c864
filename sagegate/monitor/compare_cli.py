"""``sagegate monitor compare CAPTURES_A CAPTURES_B -o DIR``: the verdict between two models'
captures of a window (:mod:`chalicelib.monitor.compare`), its options and its run; the
``monitor`` command (:mod:`sagegate.monitor.cli`) registers it. Exit status: 0 within every
threshold given, 3 B worse than a threshold, 4 nothing compared: no records on a side (no
files written), or records but no figure computed (no column's distance, no pair, no latency,
no error rate; the files say why).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from chalicelib.core.config import Settings
from chalicelib.core.errors import SagegateError
from chalicelib.inference import predictions
from chalicelib.monitor import analysis, compare, compare_report, compare_sides, partial, windows
from chalicelib.registry.loading import load_registry
from sagegate.monitor import sources, workers
from sagegate.monitor.cli_shared import (
    EXIT_EMPTY,
    UsageError,
    add_output_arguments,
    reader_options,
    refuse_all_bad,
    span_text,
    tally_text,
    write_outputs,
)


def configure(commands: Any) -> None:
    parser = commands.add_parser(
        "compare", help="the verdict between two models' captures: distances, agreement, "
        "latency, errors (exit 3: B worse than a threshold)")
    parser.add_argument("captures_a", metavar="CAPTURES_A", help="the primary's (champion's) "
                        "capture folder or s3:// prefix (its shadow records are skipped)")
    parser.add_argument("captures_b", metavar="CAPTURES_B", help="the challenger's, or the "
                        "primary's shadow's, capture folder or s3:// prefix (every record)")
    parser.add_argument("--arm-a", metavar="NAME", help="only A's records of this arm or "
                        "shadow (eventMetadata.sagegateArm): one experiment's, where other "
                        "traffic shares the endpoint's folder")
    parser.add_argument("--arm-b", metavar="NAME", help="only B's records of this arm or "
                        "shadow (as --arm-a)")
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
    parser.add_argument("--labels", metavar="NAME", help="the report names classes from this "
                        "label file in chalicelib/labels ('' for class indices; default: the "
                        "labels of the registered models calling A's endpoint, else B's)")
    parser.add_argument("--stage", default="local", help="the stage whose variables the "
                        "model registry is read with, for the default labels (default local)")
    add_output_arguments(parser, window_default="the last full hour", workers=False)


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


def _side(pool: workers.Workers | None, source: str, names: list[str],
          options: workers.ReaderOptions, side: compare_sides.Side) -> compare_sides.SideRead:
    """One side read, B keeping shadow records, ``side`` seeing each record kept: here, or in the
    pool's worker with a preprocessor (the side comes back from it)."""
    include_shadow = side.name == "b"
    if pool is None:
        reader = workers.reader(options, include_shadow=include_shadow, observe=side)
        result = partial.analyse_objects(reader, sources.open_captures(source, names),
                                         options.max_columns)
    else:
        part = workers.CapturePart(source, tuple(names), options, include_shadow, side)
        result, observed = pool.analyse([part] if names else [], options.max_columns)
        side = observed[0] if observed else side
    return compare_sides.SideRead(source, side, result.statistics.to_json(), result.tally)


def _labels(name: str | None, stage: str, sources_ab: tuple[str, str]) -> compare_report.Labels:
    """The class names the report shows: ``--labels``' file, or those of the registered models
    calling A's endpoint (its folder's last name), else B's; None when neither is known.

    Raises:
        UsageError: ``--labels`` names no label file.
    """
    if name is not None:
        try:
            return predictions.load_labels(name)
        except SagegateError:
            raise UsageError(f"--labels {name!r}: no such non-empty label file in "
                             f"chalicelib/labels ('' for class indices)") from None
    by_endpoint = _registry_labels(stage)
    for source in sources_ab:
        found = by_endpoint.get(source.rstrip("/").rsplit("/", 1)[-1], set())
        if len(found) == 1:  # the models calling it agree on their labels
            return found.pop()
    return None


def _registry_labels(stage: str) -> dict[str, set[tuple[str, ...]]]:
    """``endpoint -> {labels}`` of the registered models, read with ``stage``'s variables; empty
    when unreadable (class indices shown)."""
    from sagegate.deploy.stages import load_stage  # deferred: only a report with labels

    try:
        env = {**os.environ, **load_stage(stage).env}
        settings = Settings.from_env(env)
        registry = load_registry(settings, {**env, "ENDPOINT_NAME": settings.endpoint_name},
                                 labels=predictions.load_labels(settings.labels))
    except (SagegateError, KeyError, OSError, ValueError):
        return {}
    found: dict[str, set[tuple[str, ...]]] = {}
    for name in registry.names():
        model = registry.models[name]
        if model.labels:
            found.setdefault(model.endpoint, set()).add(tuple(model.labels))
    return found


def run(args: argparse.Namespace) -> int:
    """Read B (every record, its ids kept), then A (pairing with B's), compare, write
    compare.json and compare.html, print the figures and verdict."""
    start, end = windows.window(args.start, args.end)
    thresholds = compare.Thresholds(args.max_distance, args.min_agreement,
                                    args.max_error_rate, args.max_latency_ratio,
                                    args.comparison_method)
    options = reader_options(args, (start, end))
    preprocessor = options.preprocess_handler
    with workers.Workers(1, preprocessor, args.preprocess_timeout) as pool:
        pool.check_import()  # before the sources are listed: as check
        listed = {name: sources.capture_objects(source, start, end, "compare")
                  for name, source in (("a", args.captures_a), ("b", args.captures_b))}
        pairing = compare_sides.Pairing()
        read: dict[str, compare_sides.SideRead] = {}
        for name, source in (("b", args.captures_b), ("a", args.captures_a)):
            side = compare_sides.Side(name, pairing, output_columns=not preprocessor,
                                max_columns=args.max_columns,
                                arm=getattr(args, f"arm_{name}"))
            read[name] = _side(pool if preprocessor else None, source,
                               [item for item, _size in listed[name]], options, side)
            pairing = read[name].side.pairing  # a worker's side brings its pairing back
    empty = [name for name in ("a", "b") if not read[name].side.records]
    for name in empty:  # a side of bad lines only is broken, not empty
        refuse_all_bad(read[name].source, read[name].tally)
    if empty:
        for name in empty:
            arm = read[name].side.arm
            chosen = f" of arm {arm!r} ({read[name].side.other_arms} of other arms)" \
                if arm is not None else ""
            print(f"note: no records{chosen} in {name.upper()} ({read[name].source}) from "
                  f"{span_text((start, end))} ({tally_text(read[name].tally)}): nothing compared, "
                  f"no files written", file=sys.stderr)
        return EXIT_EMPTY
    document = compare.compare(read["a"], read["b"], pairing, thresholds, (start, end),
                               preprocessed=preprocessor is not None)
    outputs = {compare_report.JSON: analysis.dumps(document),
               compare_report.STATISTICS_A: analysis.dumps(read["a"].statistics),
               compare_report.STATISTICS_B: analysis.dumps(read["b"].statistics)}
    if args.report:
        outputs[compare_report.HTML] = compare_report.render(
            document, read["a"].statistics, read["b"].statistics,
            _labels(args.labels, args.stage, (args.captures_a, args.captures_b)))
    write_outputs(Path(args.output), outputs)
    for name in ("a", "b"):
        print(f"{name.upper()}: {tally_text(read[name].tally)}", file=sys.stderr)
    print(f"compared {span_text((start, end))}; wrote {', '.join(sorted(outputs))} to "
          f"{args.output}", file=sys.stderr)
    for line in compare.lines(document):
        print(line)
    status: int = document["verdict"]["exit_status"]  # 0, 3, or 4: nothing compared
    return status
