"""Monitor part: ``sagegate monitor check`` over a window of capture records, beside the floor.

A window of 100,000 CSV capture records (10,000 with ``--quick``; four features and a score,
500 records a file, as the directory sink appends them) and a baseline are written to a
temporary folder by :mod:`sagegate.monitor.bench`; then, each in a fresh process so that its
peak resident memory is its own:

* **floor**: the window's files read and each line ``json.loads``-ed, nothing else: what any
  reader of the window pays, the reference the checks are measured against;
* **flattened**: ``sagegate monitor check`` without a preprocessor (the records flattened as
  Model Monitor does);
* **preprocessor**: the same check through the Developer Guide's CSV-flattening
  ``preprocess_handler``, run unchanged on each record;
* **deployed**: the scheduled function's path (``chalicelib.monitor.deployed.run``: listing,
  the fetch threads, the check, the outputs) over a fifth of the records, one record an
  object as the S3 sink writes them, with a local folder standing in for S3.

Records per second (wall time of the whole check: reading, statistics, the checks, the three
files and the report), the peak RSS, and each check's time over the floor's. Then the batch
case: one capture record of a TF Serving batch of 20,000 and of 200,000 instances (2,000 and
20,000 with ``--quick``), each checked in a fresh process: rows a second and peak RSS, which
grows with the record's bytes only (one row per instance, read one instance at a time).

Last, ``--workers``: a window of 300,000 records (30,000 with ``--quick``) checked with
``--workers 1`` and ``--workers 2``, each in a fresh process, alternated three times (once
with ``--quick``): each count's fastest records per second, every run's, and the ratio.
"""
from __future__ import annotations

import os

from bench import table
from bench.report import Report
from sagegate.monitor import bench as monitor_bench

FULL_RECORDS, QUICK_RECORDS = 100_000, 10_000
WORKERS_QUICK_RECORDS = 30_000


def report(quick: bool = False) -> Report:
    """Run the part and print its table."""
    out = Report()
    records = QUICK_RECORDS if quick else FULL_RECORDS
    out.say(table.section("Monitor - sagegate monitor check over a capture window"),
            f"  {records:,} CSV capture records (4 features and a score, 500 a file), one "
            "hour; each mode in a fresh process;",
            "  floor = reading the files and json.loads of each line alone; x floor = the "
            "mode's time per record over the floor's.", "")
    results = monitor_bench.measure(records)
    floor_rate = results["floor"]["records_per_second"]
    rows = []
    for mode, figures in results.items():
        rows.append([mode, f"{figures['records']:,.0f}", f"{figures['records_per_second']:,.0f}",
                     f"{figures['seconds']:.2f}", f"{figures['peak_rss_mb']:.0f} MB",
                     "1.0x" if mode == "floor" else
                     table.times(floor_rate / figures["records_per_second"])])
        expected = results["floor"]["records"] // (
            monitor_bench.DEPLOYED_SHARE if mode == "deployed" else 1)
        if mode != "floor" and figures["records"] != expected:
            out.failures.append(f"monitor {mode}: {figures['records']:.0f} records checked "
                                f"of {expected:.0f} in the window")
    out.say(table.render(["mode", "records", "records/s", "s", "peak RSS", "x floor"], rows))
    deployed = results["deployed"]
    out.say("", f"  deployed = the scheduled function's path over {deployed['objects']:,.0f} "
            f"objects of one record (as the S3 sink writes them), a local folder for S3: "
            f"{deployed['objects'] / deployed['seconds']:,.0f} objects/s without the "
            "network; x floor is per record.")
    _batches(out, quick)
    _workers(out, quick)
    return out


def _workers(out: Report, quick: bool) -> None:
    """``--workers 1`` and ``--workers 2`` side by side on one window, in this run."""
    records = WORKERS_QUICK_RECORDS if quick else monitor_bench.WORKERS_RECORDS
    rounds = 1 if quick else monitor_bench.WORKERS_ROUNDS
    runs = monitor_bench.measure_workers(records, rounds)
    out.say("", table.section("Monitor - sagegate monitor check --workers N"),
            f"  {records:,} CSV capture records (as above, 500 a file); each run in a fresh "
            f"process, the counts alternated {rounds} time(s); the fastest run of each count "
            f"(wall time of the whole command: start, the workers, the merge, the files).", "")
    best = monitor_bench.best_runs(runs)
    one = best[min(best)]["records_per_second"]
    rows = [[str(count), f"{figures['records']:,.0f}",
             f"{figures['records_per_second']:,.0f}", f"{figures['seconds']:.2f}",
             ", ".join(f"{rate:,.0f}" for rate in monitor_bench.rates(runs, count)),
             table.times(figures["records_per_second"] / one)]
            for count, figures in best.items()]
    out.say(table.render(["workers", "records", "records/s", "s", "every run's records/s",
                          "x 1 worker"], rows))
    out.say("", f"  --workers {max(best)} over --workers {min(best)}: "
            f"{monitor_bench.speedup(runs):.2f}x on {_cpus()} CPU(s)")
    for run in runs:
        if run["records"] != records:
            out.failures.append(f"monitor --workers {run['workers']:.0f}: "
                                f"{run['records']:.0f} records checked of {records}")


def _cpus() -> int:
    return os.cpu_count() or 1


def _batches(out: Report, quick: bool) -> None:
    """One record of a TF Serving batch (a job's record): one row per instance, in memory
    that grows with the record's bytes only, not with its rows or columns."""
    sizes = [2_000, 20_000] if quick else list(monitor_bench.BATCH_SIZES)
    results = monitor_bench.measure_batches(sizes)
    out.say("", table.section("Monitor - one record of a TF Serving batch (7 features)"))
    rows = [[f"{size:,}", f"{figures['record_mb']:.1f} MB", f"{figures['records']:,.0f}",
             f"{figures['records_per_second']:,.0f}", f"{figures['peak_rss_mb']:.0f} MB"]
            for size, figures in results.items()]
    out.say(table.render(["instances", "record", "rows", "rows/s", "peak RSS"], rows))
    for size, figures in results.items():
        if figures["records"] != size:
            out.failures.append(f"monitor batch of {size:,}: {figures['records']:.0f} rows")
