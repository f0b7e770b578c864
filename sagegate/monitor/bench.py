"""How fast ``sagegate monitor check`` reads a capture window, and how much memory it holds.

``python -m sagegate.monitor.bench [--records 100000]`` writes a window of CSV capture records
(four features and a score, 500 records a file, as the directory sink appends them) and a
baseline, then times ``check`` over the window without a preprocessor and with one (the
Developer Guide's CSV-flattening ``preprocess_handler``), each in a fresh process so that its
peak resident memory is its own, beside the floor: the same files read and each line
``json.loads``-ed, nothing else (what any reader of the window pays). The ``deployed`` mode is
the scheduled function's path (:func:`chalicelib.monitor.deployed.run`: listing, the fetch
threads, the check, the outputs) over a fifth of the records laid out as the S3 sink writes
them, one record an object, with a local folder standing in for S3 (:class:`LocalS3`): its
cost per object without the network's. It prints records per second and the peak memory of
each. ``--workers`` then checks a larger window (:data:`WORKERS_RECORDS`) with ``--workers 1``
and ``--workers 2``, each in a fresh process, alternated over :data:`WORKERS_ROUNDS` rounds,
and prints each one's records per second and the ratio. ``make bench`` runs it as its
``monitor`` part (:mod:`bench.monitor`). A benchmark, not a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

# sagegate.monitor.cli (numpy, the sketches) is imported where a check runs, not here: the
# floor's process holds Python and json alone, so its peak memory is the reading's

HOUR = datetime.datetime(2026, 11, 25, 9, tzinfo=datetime.UTC)
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
PREPROCESSOR = '''
def preprocess_handler(inference_record):
    input_data = inference_record.endpoint_input.data
    output_data = inference_record.endpoint_output.data.rstrip("\\n")
    data = output_data + "," + input_data
    return {str(i).zfill(20): d for i, d in enumerate(data.split(","))}
'''


def write_window(root: Path, records: int, per_file: int = 500) -> None:
    rng = random.Random(7)
    folder = root / "AllTraffic" / f"{HOUR:%Y/%m/%d/%H}"
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for index in range(records):
        when = HOUR + datetime.timedelta(seconds=index * 3600 / records)
        features = ",".join(f"{rng.gauss(m, 1):.3f}" for m in (5.8, 3.0, 3.8, 1.2))
        record = {"captureData": {
            "endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                              "data": features, "encoding": "CSV"},
            "endpointOutput": {"observedContentType": "text/csv; charset=utf-8",
                               "mode": "OUTPUT", "data": f"{rng.random():.4f}",
                               "encoding": "CSV"}},
            "eventMetadata": {"eventId": str(uuid.uuid4()),
                              "inferenceTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                              "inferenceId": f"req-{index}"},
            "eventVersion": "0"}
        lines.append(json.dumps(record, separators=(",", ":")))
        if len(lines) == per_file or index == records - 1:
            name = f"{when:%M-%S}-{when.microsecond // 1000:03d}-{uuid.uuid4()}.jsonl"
            (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
            lines = []


def write_batch(root: Path, instances: int) -> None:
    """One capture record of a TF Serving batch of ``instances`` rows, as a job's record is."""
    rng = random.Random(11)
    folder = root / "AllTraffic" / f"{HOUR:%Y/%m/%d/%H}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [[round(rng.gauss(0, 1), 3) for _ in range(7)] for _ in range(instances)]
    answers = [[round(rng.random(), 4)] for _ in range(instances)]
    record = {"captureData": {
        "endpointInput": {"observedContentType": "application/json", "mode": "INPUT",
                          "data": json.dumps({"instances": rows}), "encoding": "JSON"},
        "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT",
                           "data": json.dumps({"predictions": answers}), "encoding": "JSON"}},
        "eventMetadata": {"eventId": str(uuid.uuid4()),
                          "inferenceTime": f"{HOUR:%Y-%m-%dT%H}:30:00Z",
                          "inferenceId": "job"}, "eventVersion": "0"}
    del rows, answers
    (folder / f"30-00-000-{uuid.uuid4()}.jsonl").write_text(json.dumps(record) + "\n",
                                                           encoding="utf-8")


BATCH_SIZES = (20_000, 200_000)
MODES = ("floor", "flattened", "preprocessor", "deployed")
DEPLOYED_SHARE = 5


class LocalS3:
    """Just enough of a boto3 S3 client for the deployed monitor over a local folder
    (``<root>/<key>`` whatever the bucket): the deployed path's own cost per object, without the
    network's."""

    class exceptions:
        NoSuchKey = FileNotFoundError
        ClientError = OSError

    class Body:
        def __init__(self, path: Path) -> None:
            self.path = path

        def read(self, amt: int | None = None) -> bytes:
            data = self.path.read_bytes()
            return data if amt is None else data[:amt]

        def iter_lines(self) -> list[bytes]:
            return self.path.read_bytes().splitlines()

    def __init__(self, root: Path) -> None:
        self.root = root

    def get_paginator(self, name: str) -> LocalS3:
        return self

    def paginate(self, Bucket: str, Prefix: str,
                 Delimiter: str | None = None) -> list[dict[str, object]]:
        folder = self.root / Prefix
        if not folder.is_dir():
            return [{}]
        entries = sorted(folder.iterdir())
        if Delimiter:
            return [{"CommonPrefixes": [{"Prefix": f"{Prefix}{e.name}/"}
                                        for e in entries if e.is_dir()]}]
        return [{"Contents": [{"Key": f"{Prefix}{e.name}", "Size": e.stat().st_size}
                              for e in entries if e.is_file()]}]

    def get_object(self, Bucket: str, Key: str) -> dict[str, object]:
        return {"Body": self.Body(self.root / Key)}

    def put_object(self, Bucket: str, Key: str, Body: bytes,
                   ContentType: str) -> None:
        path = self.root / Key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(Body)


def deployed(folder: Path) -> dict[str, float]:
    from chalicelib.monitor import deployed as monitor  # deferred: as the check's, above
    from chalicelib.monitor import deployed_settings

    settings = deployed_settings.MonitorSettings.from_env({"MONITOR_BASELINE": "s3://b/base",
                                                 "CAPTURE_DESTINATION": "s3://b/c"})
    assert settings is not None
    started = time.perf_counter()
    [run] = monitor.run({"iris": []}, settings, "bench", s3=LocalS3(folder / "s3"),
                        now=HOUR + datetime.timedelta(minutes=65), emit=lambda line: None)
    elapsed = time.perf_counter() - started
    peak = peak_rss_mb()
    return {"status": 0 if run.status == "checked" else 1, "records": run.records,
            "objects": run.files_read, "seconds": elapsed,
            "records_per_second": run.records / elapsed, "peak_rss_mb": peak}


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB: Linux's ``VmHWM``, else ``ru_maxrss``, which
    Linux carries across exec (a child of a big parent would report the parent's size)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def floor(folder: Path) -> dict[str, float]:
    started = time.perf_counter()
    count = 0
    for path in sorted((folder / "iris").rglob("*.jsonl")):
        with path.open("rb") as lines:
            for line in lines:
                if line.strip():
                    json.loads(line)
                    count += 1
    elapsed = time.perf_counter() - started
    peak = peak_rss_mb()
    return {"status": 0, "records": count, "seconds": elapsed,
            "records_per_second": count / elapsed, "peak_rss_mb": peak}


def one(folder: Path, mode: str) -> dict[str, float]:
    """Time one check (or ``floor``, the reading alone) in this process: records per second and
    peak memory (a ``workers-N`` mode's is this process's, not its workers')."""
    if mode == "floor":
        return floor(folder)
    if mode == "deployed":
        return deployed(folder)
    captures = folder / (mode if mode.startswith("batch-") else "iris")
    args = ["check", str(captures), "--baseline", str(folder / "baseline"), "-o",
            str(folder / f"out-{mode}"), *WINDOW]
    if mode == "preprocessor":
        args += ["--preprocess-handler", str(folder / "preprocessor.py")]
    if mode.startswith("workers-"):
        args += ["--workers", mode.removeprefix("workers-")]
    started = time.perf_counter()
    from sagegate.monitor import cli  # deferred: see the note above HOUR (the floor's memory)

    with contextlib.redirect_stdout(sys.stderr):  # the violations' lines are no figure
        status = cli.main(args)
    elapsed = time.perf_counter() - started
    items = json.loads((folder / f"out-{mode}" / "statistics.json").read_text())
    count = items["dataset"]["item_count"]
    peak = peak_rss_mb()
    return {"status": status, "records": count, "seconds": elapsed,
            "records_per_second": count / elapsed, "peak_rss_mb": peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sagegate.monitor.bench",
                                     description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, nargs="*", default=list(BATCH_SIZES),
                        metavar="INSTANCES", help="the batch cases' sizes (instances in one "
                        "record; none: no batch case)")
    parser.add_argument("--workers-records", type=int, default=WORKERS_RECORDS,
                        metavar="RECORDS", help="the window --workers 1 and 2 check "
                        "(0: not measured)")
    parser.add_argument("--one", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(Path(args.one[1]), args.one[0])))
        return 0
    for mode, figures in measure(args.records).items():
        label = f"{figures['records']:.0f} records, {mode:<12}"
        label = f"floor (read + json.loads), {label}" if mode == "floor" else \
            f"deployed path, {label} (one an object)" if mode == "deployed" else \
            f"monitor check, {label}"
        print(f"{label}: {figures['records_per_second']:>9,.0f} records/s "
              f"({figures['seconds']:.2f} s), peak RSS {figures['peak_rss_mb']:.0f} MB")
    for size, figures in measure_batches(args.batch).items():
        print(f"batch record of {size:,} instances: {figures['records']:,.0f} rows, "
              f"{figures['records_per_second']:,.0f} rows/s ({figures['seconds']:.2f} s), "
              f"peak RSS {figures['peak_rss_mb']:.0f} MB (record {figures['record_mb']:.1f} MB)")
    if args.workers_records:
        runs = measure_workers(args.workers_records)
        for count, figures in best_runs(runs).items():
            print(f"monitor check --workers {count}, {figures['records']:.0f} records: "
                  f"{figures['records_per_second']:>9,.0f} records/s "
                  f"({figures['seconds']:.2f} s; runs: "
                  f"{', '.join(f'{r:,.0f}' for r in rates(runs, count))} records/s)")
        print(f"--workers {WORKER_COUNTS[-1]} over --workers {WORKER_COUNTS[0]}: "
              f"{speedup(runs):.2f}x")
    return 0


WORKERS_RECORDS = 300_000
WORKER_COUNTS = (1, 2)
WORKERS_ROUNDS = 3
"""Each worker count is run this many times, alternated: another program slows the runs of its
moment, not one count's; each count's fastest is kept."""


def measure_workers(records: int, rounds: int = WORKERS_ROUNDS,
                    counts: tuple[int, ...] = WORKER_COUNTS) -> list[dict[str, float]]:
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="monitor-bench-workers-") as temp:
        folder = Path(temp)
        write_window(folder / "iris", records)
        write_window(folder / "base-window", 10_000)
        _baseline_for(folder, "flattened")
        for _round in range(rounds):
            for count in counts:
                done = subprocess.run([sys.executable, "-m", "sagegate.monitor.bench", "--one",
                                       f"workers-{count}", str(folder)], capture_output=True,
                                      text=True, check=True)
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                figures["workers"] = count
                runs.append(figures)
    return runs


def rates(runs: list[dict[str, float]], count: int) -> list[float]:
    return [run["records_per_second"] for run in runs if run["workers"] == count]


def best_runs(runs: list[dict[str, float]]) -> dict[int, dict[str, float]]:
    best: dict[int, dict[str, float]] = {}
    for run in runs:
        count = int(run["workers"])
        if count not in best or run["records_per_second"] > best[count]["records_per_second"]:
            best[count] = run
    return best


def speedup(runs: list[dict[str, float]]) -> float:
    best = best_runs(runs)
    return best[max(best)]["records_per_second"] / best[min(best)]["records_per_second"]


def measure_batches(sizes: list[int]) -> dict[int, dict[str, float]]:
    """One record of each batch size, each in a fresh process: rows a second and peak memory
    (which must not grow with the batch beyond the record's own bytes)."""
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="monitor-bench-batch-") as temp:
        folder = Path(temp)
        write_batch(folder / "base-window", 2_000)
        _baseline_for(folder, "flattened")
        for size in sizes:
            write_batch(folder / f"batch-{size}", size)
            done = subprocess.run([sys.executable, "-m", "sagegate.monitor.bench", "--one",
                                   f"batch-{size}", str(folder)], capture_output=True,
                                  text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            record = next((folder / f"batch-{size}").rglob("*.jsonl"))
            figures["record_mb"] = record.stat().st_size / 1e6
            results[size] = figures
    return results


def measure(records: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="monitor-bench-") as temp:
        folder = Path(temp)
        write_window(folder / "iris", records)
        (folder / "preprocessor.py").write_text(PREPROCESSOR, encoding="utf-8")
        write_window(folder / "base-window", 10_000)
        # as the S3 sink writes them: one object a record
        write_window(folder / "s3" / "c" / "iris", records // DEPLOYED_SHARE, per_file=1)
        for mode in MODES:
            if mode != "floor":
                _baseline_for(folder, "flattened" if mode == "deployed" else mode)
            if mode == "deployed":
                (folder / "s3" / "base").mkdir()
                (folder / "baseline").rename(folder / "s3" / "base" / "iris")
            done = subprocess.run([sys.executable, "-m", "sagegate.monitor.bench", "--one",
                                   mode, str(folder)], capture_output=True, text=True,
                                  check=True)
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def _baseline_for(folder: Path, mode: str) -> None:
    args = ["--preprocess-handler", str(folder / "preprocessor.py")] \
        if mode == "preprocessor" else []
    from sagegate.monitor import cli  # deferred: see the note above HOUR (the floor's memory)

    with contextlib.redirect_stderr(io.StringIO()):  # its summary line is no figure
        status = cli.main(["baseline", str(folder / "base-window"), "-o",
                           str(folder / "baseline"), *args])
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    sys.exit(main())
