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

A record preprocessor is the user's code: it runs in worker processes only, never in the
command's (:class:`Workers`: with one worker when ``--workers`` is 1, the whole window one
part, so the statistics are the single pass's), each worker importing it once, whatever its
parts. So whatever it does, it cannot end the command (``os._exit``), keep it from exiting (a
thread that is not a daemon: a worker left running after its parts is terminated), or speak
for it: a worker's standard output and error (``print``, the handler's logger, even a C
library's writes) go to a file, at most :data:`OUTPUT_LIMIT` bytes of them, that this process
copies to its standard error at the end, each line that is not already the handler logger's
prefixed ``preprocess_handler output:``; the command's standard output stays its own. A worker
that ends without an answer (an exit, a signal, out of memory) is one line (:class:`WorkerDied`,
exit status 1) saying how it ended; one that reads no record for the deadline
(``--preprocess-timeout``, :data:`PREPROCESS_DEADLINE` seconds by default: one record's
handler call, or an import, that never returns) is stopped, one line
(:class:`PreprocessorStuck`, exit status 1).

An error is the first part's, in the files' order, that failed: the error the single pass
would have stopped on, raised here as it raised it (the command prints one line). The
workers ignore SIGINT: the user's Ctrl-C interrupts this process, which ends them.
"""
from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import datetime
import io
import itertools
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import Any

from chalicelib.monitor import partial
from chalicelib.monitor.partial import PartialAnalysis
from chalicelib.monitor.preprocessing import (
    LOG_FORMAT,
    CapturedData,
    Preprocessor,
    handler_logger,
)
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
PREPROCESS_DEADLINE = 60.0
"""Seconds a worker running a record preprocessor may read no record (``--preprocess-timeout``)
before it is stopped: one handler call (or its import) that long is stuck."""
EXIT_WAIT = 1.0
"""Seconds the workers get to end once their parts are done, before they are terminated (a
thread of the preprocessor's that is not a daemon would keep one alive for ever)."""
OUTPUT_LIMIT = 1024 * 1024
"""The bytes of the workers' own output (a preprocessor's prints and log lines) kept and
copied to the command's standard error."""
OUTPUT_PREFIX = "preprocess_handler output: "
"""Each line of the workers' output that is not the handler logger's own, on stderr."""
_POLL = 0.25
"""Seconds between looks at a running part (the deadline's progress)."""
Window = tuple[datetime.datetime, datetime.datetime]
PartRead = tuple[bytes, Any]
"""A part's :class:`PartialAnalysis` as JSON bytes, and its observer after the reading."""


class WorkerDied(Exception):
    """A worker process ended without an answer (an exit, a signal, out of memory)."""


class PreprocessorStuck(WorkerDied):
    """A worker running a record preprocessor read no record for the deadline: stopped."""


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
    """Capture files (paths or ``s3://`` URIs under ``source``) read by one worker;
    ``include_shadow`` and ``observe`` are the reader's (``sagegate monitor compare``: the
    observer, a :class:`~chalicelib.monitor.compare_sides.Side`, comes back with the part)."""

    source: str
    names: tuple[str, ...]
    options: ReaderOptions
    include_shadow: bool = False
    observe: Any = None


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
    """The listed capture files (name, size) cut into parts for ``workers`` processes (one
    worker: one part, the single pass's statistics)."""
    sizes = [size for _name, size in objects]
    groups = split(sizes, part_count(sum(sizes), workers)) if workers > 1 \
        else [range(len(objects))] if objects else []
    return [CapturePart(source, tuple(objects[i][0] for i in group), options)
            for group in groups]


def analyse_part(part: CapturePart | datasets.DatasetPart) -> PartRead:
    """Read one part (in a worker): its :class:`PartialAnalysis` as JSON bytes, and its
    observer as the reading left it.

    Raises:
        whatever the single pass raises for these files (a bad file, a preprocessor's
        failure, a row too wide, too many features).
    """
    if isinstance(part, CapturePart):
        opened = sources.open_captures(part.source, part.names)
        result = partial.analyse_objects(
            reader(part.options, include_shadow=part.include_shadow, observe=part.observe),
            _beating(opened) if _BEAT is not None else opened, part.options.max_columns)
        observed = part.observe
    else:
        records = RecordReader(max_columns=part.max_columns)
        result = partial.analyse_rows(datasets.part_rows(part, records), records.tally,
                                      part.max_columns)
        observed = None
    return result.to_bytes(), observed


def load_preprocessor(path: str) -> None:
    """Import the record preprocessor (in a worker, before any source is listed: its error
    comes first, as the single pass reported it).

    Raises:
        HandlerError: the file is missing, unimportable or has no handler.
    """
    _preprocessor(path)


_BEAT: Any = None
"""A worker's count of lines read (shared with the command's process: the deadline's
progress), when a preprocessor runs."""


def _beating(opened: Iterable[tuple[str, Iterable[str | bytes]]]
             ) -> Iterator[tuple[str, Iterable[str | bytes]]]:
    """The files, each line read counted in :data:`_BEAT`."""
    for name, lines in opened:
        yield name, _counted(lines)


def _counted(lines: Iterable[str | bytes]) -> Iterator[str | bytes]:
    beat = _BEAT
    for line in lines:
        beat.value += 1  # not atomic across workers: progress is a change, not a count
        yield line


def _start_worker(beat: Any = None, output: str | None = None) -> None:
    """Each worker: SIGINT ignored (the command's process takes the user's Ctrl-C and ends
    the workers), its preprocessors kept, its lines read counted in ``beat``, its standard
    output and error sent to the file ``output`` (:class:`_Output`)."""
    global _IN_WORKER, _BEAT
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _IN_WORKER = True
    _BEAT = beat
    if output is not None:
        descriptor = os.open(output, os.O_WRONLY | os.O_APPEND)
        for stream in (1, 2):  # a C library's writes and a subprocess's too
            os.dup2(descriptor, stream)
        os.close(descriptor)
        sys.stdout = sys.stderr = _Output(OUTPUT_LIMIT)


class _Output(io.TextIOBase):
    """A worker's ``sys.stdout`` and ``sys.stderr``: written through to its descriptor 1 (the
    output file), up to ``limit`` bytes, then one line saying the rest was left out."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._left = limit

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._left > 0:
            data = text.encode("utf-8", "replace")[:self._left]
            self._left -= len(data)
            if self._left <= 0:
                data += b"\n(the rest of this worker's output was left out)\n"
            os.write(1, data)
        return len(text)


def analyse(parts: Sequence[CapturePart | datasets.DatasetPart], workers: int,
            max_features: int) -> PartialAnalysis:
    """The parts read by up to ``workers`` processes, merged in order (:meth:`Workers.analyse`
    in a pool of its own).

    Raises:
        as :meth:`Workers.analyse`.
    """
    with Workers(min(workers, len(parts)) or 1) as pool:
        return pool.analyse(parts, max_features)[0]


class Workers:
    """Worker processes that read parts, and that alone run a record preprocessor.

    Args:
        count: the processes, at most (started as parts need them).
        preprocessor: the record preprocessor's file the parts run, if any: the deadline
            applies, the workers' output is copied to stderr.
        deadline: seconds a worker may read no record while a preprocessor runs.

    Used as a context manager: on leaving it, the workers still running are given
    :data:`EXIT_WAIT` seconds, then terminated (killed if that does not end them), and their
    output is copied to stderr.
    """

    def __init__(self, count: int, preprocessor: str | None = None,
                 deadline: float = PREPROCESS_DEADLINE) -> None:
        self._count = count
        self._preprocessor = preprocessor
        self._deadline = deadline if preprocessor else None
        self._beat: Any = multiprocessing.RawValue("Q", 0) if preprocessor else None
        handle, path = tempfile.mkstemp(prefix="sagegate-monitor-", suffix=".out")
        os.close(handle)
        self._output = Path(path)
        self._pool: ProcessPoolExecutor | None = None
        self._processes: dict[int, Any] = {}

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close(ended=error is not None)

    def check_preprocessor(self) -> None:
        """Import the preprocessor in a worker (nothing without one).

        Raises:
            HandlerError: it is missing, unimportable or has no handler; WorkerDied: its
                import ended the worker; PreprocessorStuck: its import never ends.
        """
        if self._preprocessor:
            self._wait(self._submit(load_preprocessor, self._preprocessor), 0, 0)

    def analyse(self, parts: Sequence[CapturePart | datasets.DatasetPart],
                max_features: int) -> tuple[PartialAnalysis, list[Any]]:
        """The parts read by the workers, merged in order, and each part's observer after it.

        Raises:
            the first failed part's error, in the parts' order (its type and message as the
            single pass raises them); WorkerDied: a worker ended without an answer;
            PreprocessorStuck: one read no record for the deadline; KeyboardInterrupt: the
            user's Ctrl-C (the workers are ended first).
        """
        futures = [self._submit(analyse_part, part) for part in parts]
        merged: PartialAnalysis | None = None
        observed = []
        for index, future in enumerate(futures):
            try:
                state, observer = self._wait(future, index + 1, len(parts))
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

    def _submit(self, call: Any, argument: Any) -> Future[Any]:
        if self._pool is None:
            for stream in (sys.stdout, sys.stderr):  # a forked worker would write them too
                stream.flush()
            self._pool = ProcessPoolExecutor(self._count, mp_context=_context(),
                                             initializer=_start_worker,
                                             initargs=(self._beat, str(self._output)))
        future: Future[Any] = self._pool.submit(call, argument)
        self._processes.update(getattr(self._pool, "_processes", None) or {})
        return future

    def _wait(self, future: Future[Any], part: int, parts: int) -> Any:
        """The future's result, the deadline watched while a preprocessor runs."""
        beat, since = self._beats(), time.monotonic()
        while True:
            done, _pending = concurrent.futures.wait([future], timeout=_POLL)
            if done:
                break
            if self._deadline is None:
                continue
            now = self._beats()
            if now != beat:
                beat, since = now, time.monotonic()
            elif time.monotonic() - since > self._deadline:
                raise PreprocessorStuck(self._stuck(part, parts))
        try:
            return future.result()
        except BrokenProcessPool:
            raise WorkerDied(self._died(part, parts)) from None

    def _beats(self) -> int:
        return int(self._beat.value) if self._beat is not None else 0

    def _stuck(self, part: int, parts: int) -> str:
        where = "while importing it" if not part else f"on part {part} of {parts}"
        return (f"{Path(str(self._preprocessor)).name}: preprocess_handler ran past its "
                f"deadline {where}: no record read for {self._deadline:g} s "
                f"(--preprocess-timeout); its worker process was stopped")

    def _died(self, part: int, parts: int) -> str:
        where = "importing the record preprocessor" if not part \
            else f"part {part} of {parts}"
        return f"a worker process ended without an answer ({where}; {self._how_ended()})"

    def _how_ended(self) -> str:
        """How the worker that broke the pool ended, as its exit code says."""
        deadline = time.monotonic() + EXIT_WAIT
        for process in self._processes.values():  # its pipe closes a moment before it ends
            process.join(max(0.0, deadline - time.monotonic()))
        codes = [p.exitcode for p in self._processes.values() if p.exitcode is not None]
        own = [code for code in codes if code != -signal.SIGTERM] or codes
        if not own:
            return "killed, or out of memory?"
        code = own[0]
        if code >= 0:
            blame = ": did the record preprocessor call os._exit?" if self._preprocessor \
                else ""
            return f"it exited with status {code}{blame}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"it was killed by {name}" + (": out of memory?" if code == -signal.SIGKILL
                                             else "")

    def close(self, ended: bool = False) -> None:
        """End the workers (at once when ``ended``: an error or Ctrl-C; else after
        :data:`EXIT_WAIT` seconds) and copy their output to stderr."""
        try:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._processes.update(getattr(self._pool, "_processes", None) or {})
                _end(list(self._processes.values()), 0.0 if ended else EXIT_WAIT)
                self._pool.shutdown(wait=True)
                self._pool = None
            _relay(self._output, sys.stderr)
        finally:
            self._output.unlink(missing_ok=True)


def _end(processes: list[Any], wait: float) -> None:
    """Join the processes within ``wait`` seconds; terminate those still running, then kill
    those a SIGTERM did not end (a handler of the user's may catch it)."""
    deadline = time.monotonic() + wait
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(EXIT_WAIT)
        if process.is_alive():
            process.kill()
            process.join(EXIT_WAIT)


_LOGGED = LOG_FORMAT.split("%", 1)[0]
"""The handler logger's lines start so (``preprocess_handler LEVEL: ...``): copied as they
are."""


def _relay(path: Path, stream: Any) -> None:
    """The workers' output, each line on ``stream``: the handler logger's as they are, any
    other prefixed :data:`OUTPUT_PREFIX` (never the command's own output)."""
    try:
        with path.open("rb") as file:
            data = file.read(OUTPUT_LIMIT + 4096)
    except OSError:
        return
    for line in data.decode("utf-8", "replace").splitlines():
        stream.write(f"{line}\n" if line.startswith(_LOGGED) else f"{OUTPUT_PREFIX}{line}\n")
    stream.flush()


def _context() -> Any:
    """Fork if this process runs one thread, on Linux (macOS's system libraries do not
    survive a fork), else :data:`FALLBACK_START`."""
    if threading.active_count() == 1 and sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context(FALLBACK_START)
