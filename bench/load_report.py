"""Part 3's run: ``make run``'s stack under 1 to 32 clients, the table and ``bench/load.png``.

The driver (request mix, clients, per-answer checks, the emulator-alone baseline) is
:mod:`bench.load`.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import table
from bench.load import (
    Case,
    LevelResult,
    calibrate,
    emulator_level,
    invalid_cases,
    mix,
    run_level,
    valid_cases,
)
from bench.report import Report


def plot(levels: Sequence[LevelResult], emulator_rps: Sequence[float], path: Path,
         valid_share: float = 0.75) -> None:
    """Latency percentiles and throughput against concurrency, as a PNG (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients = [level.clients for level in levels]
    figure, (latency, rate) = plt.subplots(1, 2, figsize=(11, 4.2))
    for q, style in ((50, "o-"), (95, "s--"), (99, "^:")):
        latency.plot(clients, [level.percentile(q) for level in levels], style, label=f"p{q}")
    latency.set(xscale="log", xlabel="concurrent keep-alive clients", ylabel="latency (ms)",
                title="sagegate latency (mixed valid/invalid)")
    rate.plot(clients, [level.throughput for level in levels], "o-", label="sagegate (mixed)")
    rate.plot(clients, [level.throughput * valid_share for level in levels], "o:",
              label="sagegate (its valid answers)")
    rate.plot(clients, list(emulator_rps), "s--", label="emulator alone (valid, boto3)")
    rate.set(xscale="log", xlabel="concurrent keep-alive clients", ylabel="answers per second",
             title="throughput")
    for axis in (latency, rate):
        axis.set_xticks(clients, [str(c) for c in clients])
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def valid_throughput(level: LevelResult, cases: Sequence[Case]) -> float:
    """Valid requests answered per second in a mixed level."""
    share = sum(1 for case in cases if not case.code) / len(cases)
    return level.throughput * share


def summary_row(level: LevelResult, emulator_rps: float, cases: Sequence[Case]) -> list[str]:
    """One table row."""
    valid = valid_throughput(level, cases)
    return [str(level.clients), str(level.requests), f"{level.throughput:.1f}",
            f"{level.percentile(50):.1f}", f"{level.percentile(95):.1f}",
            f"{level.percentile(99):.1f}", str(level.resets), str(len(level.wrong)),
            str(level.server_errors), f"{level.rss_mb:.0f}", f"{emulator_rps:.1f}",
            f"{100 * valid / emulator_rps:.0f}%" if emulator_rps else "-"]


HEADERS = ["clients", "requests", "req/s", "p50 ms", "p95 ms", "p99 ms", "resets", "wrong",
           "5xx", "RSS MB", "emulator req/s", "valid share"]


def summarize(levels: Sequence[LevelResult]) -> dict[str, Any]:
    """Totals across levels (for the summary lines)."""
    return {"resets": sum(level.resets for level in levels),
            "wrong": sum(len(level.wrong) for level in levels),
            "server_errors": sum(level.server_errors for level in levels),
            "rss_growth_mb": (levels[-1].rss_mb - levels[0].rss_mb) if levels else 0.0}


LEVELS = (1, 2, 4, 8, 16, 32)
PLOT_PATH = Path(__file__).resolve().parent / "load.png"


def report(quick: bool = False, plot_path: Path | None = PLOT_PATH) -> Report:
    """Start ``make run``'s stack (ports picked free), run every level, print the table and
    save the plot; wrong answers, resets and 5xx are failures of the run."""
    from emulator.process import free_port, start_emulator
    from sagegate.local.processes import rss_mb, start_api

    out = Report()
    out.say(table.section("Part 3 - load: 1 to 32 keep-alive clients on make run's stack "
                          "(3 valid : 1 invalid), beside the emulator alone"))
    valid = valid_cases()
    cases = mix(valid, invalid_cases())
    per_client = 10 if quick else 40
    levels = LEVELS[::2] if quick else LEVELS
    results: list[LevelResult] = []
    emulator_rps: list[float] = []
    with open(os.devnull, "w") as quiet, start_emulator(echo_stderr=quiet) as emulator, \
            open(os.devnull, "wb") as quiet_api:
        api = start_api(free_port(), emulator.url, log=quiet_api)
        try:
            expected = calibrate(api.url, valid)
            rss = functools.partial(rss_mb, api.pid)
            run_level(api.url, cases, expected, 4, 8 * len(cases))  # warm-up, not reported
            for clients in levels:
                requests = max(120, per_client * clients)
                results.append(run_level(api.url, cases, expected, clients, requests, rss))
                emulator_rps.append(emulator_level(emulator.url, valid, clients, requests))
                out.say(f"  {clients} clients done")
        finally:
            api.stop()
    out.say(table.render(HEADERS, [summary_row(level, rps, cases)
                                   for level, rps in zip(results, emulator_rps, strict=True)]))
    totals = summarize(results)
    out.say("", f"  resets {totals['resets']}, wrong answers {totals['wrong']}, 5xx "
                f"{totals['server_errors']}; chalice local RSS {results[0].rss_mb:.0f} -> "
                f"{results[-1].rss_mb:.0f} MB",
            "  valid share = sagegate's valid answers per second / the emulator's alone")
    for level in results:
        out.failures.extend(f"load {level.clients} clients: {reason}"
                            for reason in level.wrong[:5])
    if plot_path is not None:
        share = sum(1 for case in cases if not case.code) / len(cases)
        plot(results, emulator_rps, plot_path, share)
        out.say(f"  plot: {plot_path.relative_to(plot_path.parent.parent)}")
    return out

