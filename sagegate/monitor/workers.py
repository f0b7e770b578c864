"""``sagegate monitor --workers N``: a window's capture files, or a dataset file's lines, read by
N processes, their statistics merged in order.

The capture files are cut into contiguous parts of about equal bytes, a few per worker
(:data:`PARTS_PER_WORKER`: a worker that starts late, or shares its core, takes fewer, so the
last to finish is not the one that started last); a dataset file into byte ranges
(:func:`sagegate.monitor.datasets.dataset_parts`). Each part is read in a worker into a
:class:`~chalicelib.monitor.partial.PartialAnalysis`, sent back as JSON bytes (a distributed
run's form), and merged in the files' order, so the statistics are one reader's.

A record preprocessor is the user's code: it runs in worker processes only, never in the
command's (one worker when ``--workers`` is 1, the whole window one part), each worker importing
it once; :mod:`chalicelib.monitor.user_workers` says what that keeps from the command and how a
dead or stuck worker is one line (exit status 1).

An error is the first failed part's in the files' order: the error the single pass would have
stopped on, raised as it raised it. The workers ignore SIGINT: the user's Ctrl-C interrupts this
process, which ends them.
"""
from __future__ import annotations

import bisect
import dataclasses
import datetime
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from chalicelib.monitor import partial, user_workers
from chalicelib.monitor.captured_data import CapturedData
from chalicelib.monitor.partial import PartialAnalysis
from chalicelib.monitor.records import MAX_COLUMNS, Observe, Preprocess, RecordReader
from chalicelib.monitor.user_workers import UserWorkers
from sagegate.monitor import datasets, sources

PARTS_PER_WORKER = 4
"""Parts per worker, at most (each at least :data:`MIN_PART_BYTES`, beyond one a worker)."""
MIN_PART_BYTES = 4 * 1024 * 1024
Window = tuple[datetime.datetime, datetime.datetime]
PartRead = tuple[bytes, Any]
"""A part's :class:`PartialAnalysis` as JSON bytes, and its observer after the reading."""


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
    """Capture files (paths or ``s3://`` URIs under ``source``) read by one worker; ``observe``
    (``compare``'s :class:`~chalicelib.monitor.compare_sides.Side`) comes back with the part."""

    source: str
    names: tuple[str, ...]
    options: ReaderOptions
    include_shadow: bool = False
    observe: Any = None


def reader(options: ReaderOptions, include_shadow: bool = False,
           observe: Observe | None = None,
           preprocess: Preprocess | None = None) -> RecordReader:
    """A record reader; a preprocessor's logger prints on stderr. ``preprocess``: the
    preprocessor already loaded, for two readers of one run.

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
    """The options' record preprocessor, imported (None: none given).

    Raises:
        HandlerError: the preprocessor file is missing, unimportable or has no handler.
    """
    if not options.preprocess_handler:
        return None
    handler = user_workers.preprocessor(options.preprocess_handler)

    def preprocess(record: dict[str, Any], where: str) -> dict[str, Any] | None:
        return handler(CapturedData(record), where)

    return preprocess


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
    """One part a worker, up to :data:`PARTS_PER_WORKER` each when the bytes make parts of
    :data:`MIN_PART_BYTES`."""
    return max(workers, min(workers * PARTS_PER_WORKER, total_bytes // MIN_PART_BYTES))


def capture_parts(source: str, objects: Sequence[tuple[str, int]], workers: int,
                  options: ReaderOptions) -> list[CapturePart]:
    """The listed capture files cut into parts for ``workers`` processes (one worker: one part,
    the single pass's statistics)."""
    sizes = [size for _name, size in objects]
    groups = split(sizes, part_count(sum(sizes), workers)) if workers > 1 \
        else [range(len(objects))] if objects else []
    return [CapturePart(source, tuple(objects[i][0] for i in group), options)
            for group in groups]


def analyse_part(part: CapturePart | datasets.DatasetPart) -> PartRead:
    """Read one part in a worker: its state as JSON bytes, and its observer.

    Raises:
        whatever the single pass raises for these files.
    """
    if isinstance(part, CapturePart):
        opened = sources.open_captures(part.source, part.names)
        result = partial.analyse_objects(
            reader(part.options, include_shadow=part.include_shadow, observe=part.observe),
            _beating(opened), part.options.max_columns)
        observed = part.observe
    else:
        records = RecordReader(max_columns=part.max_columns)
        result = partial.analyse_rows(datasets.part_rows(part, records), records.tally,
                                      part.max_columns)
        observed = None
    return result.to_bytes(), observed


def _beating(opened: Iterable[tuple[str, Iterable[str | bytes]]]
             ) -> Iterator[tuple[str, Iterable[str | bytes]]]:
    for name, lines in opened:
        yield name, user_workers.counted(lines)


def analyse(parts: Sequence[CapturePart | datasets.DatasetPart], workers: int,
            max_features: int) -> PartialAnalysis:
    """The parts read by up to ``workers`` processes in a pool of its own, merged in order.

    Raises:
        as :meth:`Workers.analyse`.
    """
    with Workers(min(workers, len(parts)) or 1) as pool:
        return pool.analyse(parts, max_features)[0]


class Workers(UserWorkers):
    """Worker processes that read parts, and alone run a record preprocessor (with one, the
    deadline applies and the workers' output is copied to stderr). A context manager
    (:class:`~chalicelib.monitor.user_workers.UserWorkers`)."""

    def __init__(self, count: int, preprocessor: str | None = None,
                 deadline: float = user_workers.PREPROCESS_DEADLINE) -> None:
        super().__init__(count, preprocessor, deadline)

    def __enter__(self) -> Workers:
        return self

    def analyse(self, parts: Sequence[CapturePart | datasets.DatasetPart],
                max_features: int) -> tuple[PartialAnalysis, list[Any]]:
        """The parts read by the workers, merged in order, and each part's observer.

        Raises:
            the first failed part's error, as the single pass raises it; WorkerDied;
                PreprocessorStuck; KeyboardInterrupt: the user's Ctrl-C (the workers are ended
                first).
        """
        futures = [self.submit(analyse_part, part) for part in parts]
        merged: PartialAnalysis | None = None
        observed = []
        for index, future in enumerate(futures):
            where = f"part {index + 1} of {len(parts)}"
            try:
                state, observer = self.wait(future, f"on {where}", where)
            except BaseException:
                for later in futures[index + 1:]:  # the parts after the error do not count
                    later.cancel()
                raise
            observed.append(observer)
            part = PartialAnalysis.from_bytes(state, max_features)
            if merged is None:
                merged = part
            else:
                merged.merge(part)
        if merged is None:
            merged = partial.merge_in_order([], max_features)
        return merged, observed
