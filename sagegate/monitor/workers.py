"""``sagegate monitor --workers N``: a window's capture files, or a dataset file's lines, read
by N processes, their statistics merged in order.

The capture files are cut into contiguous parts of about equal bytes (:func:`split`), a few
per worker (:data:`PARTS_PER_WORKER`: a worker that starts late, or shares its core with
another program, takes fewer of them, so the last to finish is not the one that started
last); a dataset file into byte ranges (:func:`sagegate.monitor.datasets.dataset_parts`).
Each part is read in a worker process into a
:class:`~chalicelib.monitor.partial.PartialAnalysis`, sent back as its JSON bytes (the form a
distributed run keeps), and the parts are merged in the files' order, so the statistics are
one reader's (:mod:`chalicelib.monitor.partial` says how exactly).

A record preprocessor is imported in each worker (once, whatever its parts). An error is the
first part's, in the files' order, that failed: the error the single pass would have stopped
on, raised here as it raised it (the command prints one line). The workers ignore SIGINT: the
user's Ctrl-C interrupts this process, which ends them.
"""
from __future__ import annotations

import bisect
import dataclasses
import datetime
import itertools
import multiprocessing
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from chalicelib.monitor import partial
from chalicelib.monitor.partial import PartialAnalysis
from chalicelib.monitor.preprocessing import CapturedData, Preprocessor, handler_logger
from chalicelib.monitor.records import MAX_COLUMNS, Observe, Preprocess, RecordReader
from sagegate.monitor import datasets, sources

PARTS_PER_WORKER = 4
"""Parts per worker, at most (each at least :data:`MIN_PART_BYTES`, beyond one a worker)."""
MIN_PART_BYTES = 4 * 1024 * 1024
"""The smallest part worth a merge of its own, beyond one part per worker."""
FALLBACK_START = "spawn"
"""How workers start when this process runs threads besides its main one (a preprocessor
may start some when imported): a fork copies one thread and whatever locks the others held,
so a fresh interpreter instead, which imports the monitor again (about 0.2 s a worker, all
at once). Otherwise they are forked (about 0.01 s): a copy of this process, modules
imported."""
Window = tuple[datetime.datetime, datetime.datetime]


class WorkerDied(Exception):
    """A worker process ended without an answer (killed, out of memory)."""


@dataclasses.dataclass(frozen=True)
class ReaderOptions:
    """What a :class:`RecordReader` is made of, sent to the workers."""

    preprocess_handler: str | None = None
    include_cache_hits: bool = True
    window: Window | None = None
    csv_names: tuple[str, ...] | None = None
    max_columns: int = MAX_COLUMNS


@dataclasses.dataclass(frozen=True)
class CapturePart:
    """Capture files (paths or ``s3://`` URIs under ``source``) read by one worker."""

    source: str
    names: tuple[str, ...]
    options: ReaderOptions


def reader(options: ReaderOptions, include_shadow: bool = False,
           observe: Observe | None = None,
           preprocess: Preprocess | None = None) -> RecordReader:
    """A record reader; a preprocessor's logger prints on stderr, as ``sagegate capture``
    prints it. ``include_shadow`` and ``observe`` are the reader's (``sagegate monitor
    compare``); ``preprocess``: the options' preprocessor already loaded
    (:func:`record_preprocessor`), for two readers of one run.

    Raises:
        HandlerError: the preprocessor file is missing, unimportable or has no handler.
    """
    if preprocess is None:
        preprocess = record_preprocessor(options)
    return RecordReader(preprocess, include_cache_hits=options.include_cache_hits,
                        window=options.window,
                        csv_names=list(options.csv_names) if options.csv_names is not None
                        else None, max_columns=options.max_columns,
                        include_shadow=include_shadow, observe=observe)


def record_preprocessor(options: ReaderOptions) -> Preprocess | None:
    """The options' record preprocessor, imported, as a reader calls it (None: none given).

    Raises:
        HandlerError: the preprocessor file is missing, unimportable or has no handler.
    """
    if not options.preprocess_handler:
        return None
    handler = _preprocessor(options.preprocess_handler)

    def preprocess(record: dict[str, Any], where: str) -> dict[str, Any] | None:
        return handler(CapturedData(record), where)

    return preprocess


_LOADED: dict[str, Preprocessor] = {}
"""A worker's preprocessors, imported once per process (a worker reads several parts)."""


def _preprocessor(path: str) -> Preprocessor:
    if _IN_WORKER:
        if path not in _LOADED:
            _LOADED[path] = Preprocessor(path, handler_logger(sys.stderr))
        return _LOADED[path]
    return Preprocessor(path, handler_logger(sys.stderr))


_IN_WORKER = False


def split(sizes: Sequence[int], parts: int) -> list[range]:
    """Indexes of ``sizes`` cut into at most ``parts`` contiguous, non-empty groups of about
    equal total size (an empty file counts as one byte: it costs an open)."""
    count = len(sizes)
    parts = min(parts, count)
    if parts <= 1:
        return [range(count)] if count else []
    ends = list(itertools.accumulate(max(size, 1) for size in sizes))
    bounds = [0]
    for k in range(1, parts):
        target = ends[-1] * k / parts
        index = bisect.bisect_left(ends, target)  # ends[index] >= target
        # end the group after object index, or before it, whichever is nearer the target
        cut = index + 1 if index == 0 or ends[index] - target <= target - ends[index - 1] \
            else index
        bounds.append(min(max(cut, bounds[-1] + 1), count - (parts - k)))
    bounds.append(count)
    return [range(start, end) for start, end in itertools.pairwise(bounds)]


def part_count(total_bytes: int, workers: int) -> int:
    """How many parts ``workers`` processes read: one each, and up to
    :data:`PARTS_PER_WORKER` each when the bytes make parts of :data:`MIN_PART_BYTES`."""
    return max(workers, min(workers * PARTS_PER_WORKER, total_bytes // MIN_PART_BYTES))


def capture_parts(source: str, objects: Sequence[tuple[str, int]], workers: int,
                  options: ReaderOptions) -> list[CapturePart]:
    """The listed capture files (name, size) cut into parts for ``workers`` processes."""
    sizes = [size for _name, size in objects]
    groups = split(sizes, part_count(sum(sizes), workers))
    return [CapturePart(source, tuple(objects[i][0] for i in group), options)
            for group in groups]


def analyse_part(part: CapturePart | datasets.DatasetPart) -> bytes:
    """Read one part (in a worker): its :class:`PartialAnalysis` as JSON bytes.

    Raises:
        whatever the single pass raises for these files (a bad file, a preprocessor's
        failure, a row too wide, too many features).
    """
    if isinstance(part, CapturePart):
        result = partial.analyse_objects(reader(part.options),
                                         sources.open_captures(part.source, part.names),
                                         part.options.max_columns)
    else:
        records = RecordReader(max_columns=part.max_columns)
        result = partial.analyse_rows(datasets.part_rows(part, records), records.tally,
                                      part.max_columns)
    return result.to_bytes()


def _start_worker() -> None:
    """Each worker: SIGINT ignored (the command's process takes the user's Ctrl-C and ends
    the workers), its preprocessors kept."""
    global _IN_WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _IN_WORKER = True


def analyse(parts: Sequence[CapturePart | datasets.DatasetPart], workers: int,
            max_features: int, run: Callable[[Any], bytes] = analyse_part) -> PartialAnalysis:
    """The parts read by up to ``workers`` processes, merged in order.

    Raises:
        the first failed part's error, in the parts' order (its type and message as the
        single pass raises them); WorkerDied: a worker ended without an answer;
        KeyboardInterrupt: the user's Ctrl-C (the workers are ended first).
    """
    for stream in (sys.stdout, sys.stderr):  # a forked worker would write their buffers too
        stream.flush()
    pool = ProcessPoolExecutor(min(workers, len(parts)), mp_context=_context(),
                               initializer=_start_worker)
    futures: list[Future[bytes]] = []
    try:
        futures = [pool.submit(run, part) for part in parts]
        merged: PartialAnalysis | None = None
        for index, future in enumerate(futures):
            try:
                state = future.result()
            except BrokenProcessPool:
                raise WorkerDied(f"a worker process ended without an answer (part {index + 1} "
                                 f"of {len(parts)}; killed, or out of memory?)") from None
            except BaseException:
                for later in futures[index + 1:]:  # the parts after the error do not count
                    later.cancel()
                raise
            part = PartialAnalysis.from_bytes(state, max_features)
            if merged is None:
                merged = part
            else:
                merged.merge(part)
        return merged if merged is not None else partial.merge_in_order([], max_features)
    except BaseException:
        _end_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _context() -> Any:
    """Fork if this process runs one thread, on Linux (macOS's system libraries do not
    survive a fork), else :data:`FALLBACK_START`."""
    if threading.active_count() == 1 and sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context(FALLBACK_START)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's processes now (Ctrl-C, or an error: the other parts' work is of
    no use)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list(getattr(pool, "_processes", {}).values()):
        if process.is_alive():
            process.terminate()
