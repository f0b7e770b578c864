"""``python -m bench [--part frontend|e2e|...|monitor|jobs|all] [--quick]``:
sagegate beside the 2018 reference (parts 1 and 2), under load beside the emulator alone (part
3), for the non-image models beside a bare endpoint call (pipelines) and, shrinking on the
client, beside sending the original (clients), a prediction cache hit beside a miss (cache),
the request's capture stage inline beside after the response (capture),
the data-quality monitor's check of a capture window beside reading it (monitor), a job
beside the synchronous route for an input both take (jobs), a model whose every request is
copied to a 75 s shadow beside the same model without (experiments), a language model's
token stream through the OpenAI route beside boto3's stream straight from the emulator (llm),
and the cost per million requests on arm64 beside x86_64 (cost)."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable, Sequence

import cv2
import numpy as np

from bench import (
    cache,
    capture,
    clients,
    cost,
    e2e,
    experiments,
    frontend,
    images,
    imports,
    jobs,
    llm,
    load_report,
    monitor,
    pipelines,
    requestpath,
    table,
)
from bench.report import Report
from bench.timing import Budgets

PARTS = ("frontend", "e2e", "load", "pipelines", "clients", "cache", "capture", "monitor", "jobs",
         "experiments", "llm", "path", "cost", "all")


def parse_args(argv: Sequence[str] | None, prog: str = "python -m bench") -> argparse.Namespace:
    """Read the command line (``prog``: the program name its help shows)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--part", choices=PARTS, default="all",
                        help="frontend: CPU per request and cold import; e2e: through "
                             "chalice local and the emulator; load: 1 to 32 clients on make "
                             "run's stack, plot in bench/load.png; pipelines: the non-image "
                             "models' per-request overhead over a bare endpoint call; clients: "
                             "what shrinking on the client saves; cache: a cache hit against a "
                             "miss; capture: the request's capture stage inline and after the "
                             "response with a 50 ms sink; monitor: sagegate monitor check over "
                             "capture "
                             "records against reading them; jobs: a job's added latency over "
                             "the synchronous route; experiments: the callers' latency with a "
                             "shadow at the 75 s slow endpoint and without; llm: the time "
                             "to first token and per token the OpenAI route adds to "
                             "smollm2's stream; path: the calls, "
                             "functions, modules and module switches of one experiment "
                             "request; cost: the cost per million requests of the image, "
                             "tensor and LLM routes on x86_64 and arm64; all (default): the "
                             "thirteen")
    parser.add_argument("--quick", action="store_true",
                        help="few repetitions: a smoke run, not figures to quote")
    return parser.parse_args(argv)


def _banner(args: argparse.Namespace) -> str:
    mode = "quick" if args.quick else "full"
    return (f"sagegate bench ({mode}, part {args.part}): Python {platform.python_version()}, "
            f"NumPy {np.__version__}, OpenCV {cv2.__version__} ({cv2.getNumThreads()} threads), "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")


def _frontend(budgets: Budgets) -> Report:
    inputs = images.build(images.FRONTEND_INPUTS)
    out = frontend.report(inputs, budgets)
    out.say(table.section("Cold import (Lambda cold start, before the first request)"),
            imports.report(budgets.import_runs))
    return out


def _summary(out: Report) -> None:
    out.say(table.section("Summary"))
    if not out.missed:
        out.say("  every target met")
    for missed in out.missed:
        out.say(f"  target missed: {missed}")
    for failure in out.failures:
        out.say(f"  FAILED: {failure}")


def _parts(args: argparse.Namespace, budgets: Budgets) -> dict[str, Callable[[], Report]]:
    """Each part, run when called, in the order ``all`` runs them."""
    return {
        "frontend": lambda: _frontend(budgets),
        "e2e": lambda: e2e.report(images.build(images.E2E_INPUTS), budgets.e2e),
        # a smoke run does not overwrite the plot the README shows
        "load": lambda: load_report.report(
            quick=args.quick, plot_path=None if args.quick else load_report.PLOT_PATH),
        "pipelines": lambda: pipelines.report(budgets),
        "clients": lambda: clients.report(budgets.e2e),
        "cache": lambda: cache.report(budgets.e2e),
        "capture": lambda: capture.report(budgets.image),
        "monitor": lambda: monitor.report(quick=args.quick),
        "jobs": lambda: jobs.report(budgets.e2e),
        "experiments": lambda: experiments.report(quick=args.quick),
        "llm": lambda: llm.report(quick=args.quick),
        "path": requestpath.report,
        "cost": lambda: cost.report(quick=args.quick),
    }


def main(argv: Sequence[str] | None = None, prog: str = "python -m bench") -> int:
    """Run the chosen parts; exit 1 only if the two sides disagree on an answer."""
    args = parse_args(argv, prog)
    budgets = Budgets.quick() if args.quick else Budgets.full()
    out = Report()
    out.say(_banner(args))
    for name, run in _parts(args, budgets).items():
        if args.part in (name, "all"):
            out.merge(run())
    _summary(out)
    return 1 if out.failures else 0


if __name__ == "__main__":
    sys.exit(main())
