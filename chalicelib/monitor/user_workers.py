"""Worker processes that alone run a user's code on the command line: a record preprocessor
(``sagegate monitor``, ``sagegate capture``) or a postprocessing script, never in the command's
own process.

Whatever the user's code does, it cannot end the command (``os._exit``), keep it from exiting (a
non-daemon thread: the worker is terminated), or speak for it: a worker's stdout and stderr
(prints, the handler's logger, a C library's writes) go to a file, at most :data:`OUTPUT_LIMIT`
bytes, copied to the command's stderr at the end, each line not the handler logger's prefixed
``preprocess_handler output:`` (or ``postprocess_handler output:``). A worker that ends without
an answer (exit, signal, out of memory) is :class:`WorkerDied`; one making no progress for the
deadline is stopped, :class:`PreprocessorStuck`. Work goes out in batches, never a round trip a
record.

The scheduled monitor (Lambda) calls a handler in its own process on purpose
(:mod:`chalicelib.monitor.deployed`): an invocation is already the process a failure ends.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import Any

from chalicelib.monitor.captured_data import CapturedData
from chalicelib.monitor.preprocessing import (
    LOG_FORMAT,
    Preprocessor,
    handler_logger,
    load_postprocessor,
)

FALLBACK_START = "spawn"
"""How workers start when this process runs other threads (a preprocessor's, another pool's
manager): a fork copies one thread and whatever locks the others held, so a fresh interpreter
instead (about 0.2 s a worker, against 0.01 s forked)."""
PREPROCESS_DEADLINE = 60.0
"""Seconds a user's code may make no progress before its worker is stopped
(``--preprocess-timeout``, ``--postprocess-timeout``)."""
EXIT_WAIT = 1.0
"""Seconds the workers get to end once their work is done before they are terminated (a user's
non-daemon thread would keep one alive for ever)."""
OUTPUT_LIMIT = 1024 * 1024
"""The bytes of the workers' output (a handler's prints and log lines) copied to stderr."""
OUTPUT_CAP = OUTPUT_LIMIT + 4096
"""The largest any file a worker writes may grow (``os.write``, a C library, a subprocess)."""
OUTPUT_PREFIX = "preprocess_handler output: "
"""A preprocessor's workers' output lines that are not the handler logger's get this on stderr."""
_POLL = 0.25


class WorkerDied(Exception):
    """A worker process ended without an answer (an exit, a signal, out of memory)."""


class PreprocessorStuck(WorkerDied):
    """A worker running a user's code made no progress for the deadline: stopped."""


@dataclasses.dataclass(frozen=True)
class UserCode:
    """What the workers run, as the messages name it."""

    function: str
    who: str
    """The code as a dead worker's line blames it."""
    option: str
    progress: str

    @property
    def prefix(self) -> str:
        return f"{self.function} output: "


PREPROCESS = UserCode("preprocess_handler", "the record preprocessor", "--preprocess-timeout",
                      "no record read")
POSTPROCESS = UserCode("postprocess_handler", "the postprocessing script",
                       "--postprocess-timeout", "it has not returned")

_IN_WORKER = False
_BEAT: Any = None
"""A worker's count of records read, shared with the command's process (the deadline's progress)."""
_PREPROCESSORS: dict[str, Preprocessor] = {}
_POSTPROCESSORS: dict[str, Callable[[], None]] = {}
"""A worker's user files, imported once per process."""


def preprocessor(path: str) -> Preprocessor:
    """The record preprocessor of ``path``; its logger prints to the worker's output file.

    Raises:
        HandlerError: the file is missing, unimportable or has no handler.
    """
    if not _IN_WORKER:
        return Preprocessor(path, handler_logger(sys.stderr))
    if path not in _PREPROCESSORS:
        _PREPROCESSORS[path] = Preprocessor(path, handler_logger(sys.stderr))
    return _PREPROCESSORS[path]


def load_preprocessor(path: str) -> None:
    """Import the record preprocessor in a worker before any source is listed, so its error comes
    first.

    Raises:
        HandlerError: the file is missing, unimportable or has no handler.
    """
    preprocessor(path)


def preprocess_batch(path: str, batch: Sequence[tuple[str, dict[str, Any]]]
                     ) -> list[dict[str, Any]]:
    """The preprocessor's rows of a batch of (where, record): a falsy result drops the record.

    Raises:
        HandlerFailed: the handler raised, exited or returned something that is not a row.
    """
    handler = preprocessor(path)
    rows = []
    for where, record in counted(batch):
        row = handler(CapturedData(record), where)
        if row is not None:
            rows.append(row)
    return rows


def preprocessor_postprocess(path: str) -> None:
    """The preprocessor file's own ``postprocess_handler()``, if it has one.

    Raises:
        HandlerFailed: it raised or exited.
    """
    preprocessor(path).postprocess()


def load_postprocess(path: str) -> None:
    """Import a postprocessing script (in a worker, before the analysis).

    Raises:
        HandlerError: missing, unimportable or without a postprocess_handler.
    """
    if path not in _POSTPROCESSORS:
        _POSTPROCESSORS[path] = load_postprocessor(path)


def postprocess(path: str) -> None:
    """Run a postprocessing script's ``postprocess_handler()`` in a worker.

    Raises:
        HandlerError: as :func:`load_postprocess`; HandlerFailed: it raised or exited.
    """
    load_postprocess(path)
    _POSTPROCESSORS[path]()


def counted(items: Iterable[Any]) -> Iterator[Any]:
    beat = _BEAT
    if beat is None:
        yield from items
        return
    for item in items:
        beat.value += 1  # not atomic across workers: progress is a change, not a count
        yield item


def _start_worker(beat: Any = None, output: str | None = None) -> None:
    """Each worker: SIGINT ignored (the command takes the user's Ctrl-C and ends the workers), its
    output sent to the file ``output``."""
    global _IN_WORKER, _BEAT
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _IN_WORKER = True
    _BEAT = beat
    if output is not None:
        descriptor = os.open(output, os.O_WRONLY | os.O_APPEND)
        for stream in (1, 2):  # a C library's writes and a subprocess's too
            os.dup2(descriptor, stream)
        os.close(descriptor)
        _cap_files(OUTPUT_CAP)
        sys.stdout = sys.stderr = _Output(OUTPUT_LIMIT)


def _cap_files(limit: int) -> None:
    """Cap every file this worker or its subprocesses write at ``limit`` bytes: descriptors 1 and 2
    are written past :class:`_Output`'s count (``os.write``, a C library, a subprocess). A write
    past it fails (EFBIG, SIGXFSZ ignored) instead of filling the disk or killing the worker."""
    import resource  # deferred: POSIX only, and only a worker needs it

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))


class _Output(io.TextIOBase):
    """A worker's ``sys.stdout`` and ``sys.stderr``: up to ``limit`` bytes to descriptor 1, then one
    line saying the rest was left out."""

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
            try:
                os.write(1, data)
            except OSError:  # the file is at its cap (EFBIG): the rest is left out
                self._left = 0
        return len(text)


class UserWorkers:
    """Worker processes that alone run a user's code (``user_file``: with one, the deadline
    applies and the output is copied to stderr; ``count``: at most, started as work needs them).
    On leaving the context, running workers get :data:`EXIT_WAIT` seconds, then are terminated
    (killed if that fails), and their output is copied to stderr."""

    def __init__(self, count: int, user_file: str | None = None,
                 deadline: float = PREPROCESS_DEADLINE, code: UserCode = PREPROCESS) -> None:
        self._count = count
        self._user_file = user_file
        self._code = code
        self._deadline = deadline if user_file else None
        self._beat: Any = multiprocessing.RawValue("Q", 0) if user_file else None
        handle, path = tempfile.mkstemp(prefix="sagegate-monitor-", suffix=".out")
        os.close(handle)
        self._output = Path(path)
        self._pool: ProcessPoolExecutor | None = None
        self._processes: dict[int, Any] = {}

    def __enter__(self) -> UserWorkers:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close(ended=error is not None)

    def check_import(self) -> None:
        """Import the user's file in a worker (nothing without one).

        Raises:
            HandlerError: missing, unimportable or no handler; WorkerDied: its import ended the
                worker; PreprocessorStuck: its import never ends.
        """
        if self._user_file:
            load = load_preprocessor if self._code is PREPROCESS else load_postprocess
            self.run(load, self._user_file, "while importing it", "importing " + self._code.who)

    def run(self, call: Callable[..., Any], *arguments: Any) -> Any:
        """``call(*arguments)`` in a worker; the two last arguments say where it stood, for a stuck
        or dead worker's line.

        Raises:
            whatever the call raised; WorkerDied; PreprocessorStuck.
        """
        *given, stuck, died = arguments
        return self.wait(self.submit(call, *given), stuck, died)

    def submit(self, call: Callable[..., Any], *arguments: Any) -> Future[Any]:
        if self._pool is None:
            for stream in (sys.stdout, sys.stderr):  # a forked worker would write them too
                stream.flush()
            self._pool = ProcessPoolExecutor(self._count, mp_context=_context(),
                                             initializer=_start_worker,
                                             initargs=(self._beat, str(self._output)))
        future: Future[Any] = self._pool.submit(call, *arguments)
        self._processes.update(getattr(self._pool, "_processes", None) or {})
        return future

    def wait(self, future: Future[Any], stuck: str, died: str) -> Any:
        """The future's result, the deadline watched while a user's code runs; ``stuck`` and
        ``died`` say where it stood (``on part 2 of 4``).

        Raises:
            whatever the call raised; WorkerDied; PreprocessorStuck.
        """
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
                raise PreprocessorStuck(self._stuck(stuck))
        try:
            return future.result()
        except BrokenProcessPool:
            raise WorkerDied(f"a worker process ended without an answer ({died}; "
                             f"{self._how_ended()})") from None

    def _beats(self) -> int:
        return int(self._beat.value) if self._beat is not None else 0

    def _stuck(self, where: str) -> str:
        code = self._code
        return (f"{Path(str(self._user_file)).name}: {code.function} ran past its deadline "
                f"{where}: {code.progress} for {self._deadline:g} s ({code.option}); its "
                f"worker process was stopped")

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
            blame = f": did {self._code.who} call os._exit?" if self._user_file else ""
            return f"it exited with status {code}{blame}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"it was killed by {name}" + (": out of memory?" if code == -signal.SIGKILL
                                             else "")

    def close(self, ended: bool = False) -> None:
        """End the workers (at once when ``ended`` by an error or Ctrl-C, else after
        :data:`EXIT_WAIT` seconds) and copy their output to stderr."""
        try:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._processes.update(getattr(self._pool, "_processes", None) or {})
                _end(list(self._processes.values()), 0.0 if ended else EXIT_WAIT)
                self._pool.shutdown(wait=True)
                self._pool = None
            _relay(self._output, sys.stderr, self._code.prefix)
        finally:
            self._output.unlink(missing_ok=True)


def _end(processes: list[Any], wait: float) -> None:
    """Join within ``wait`` s, then terminate, then kill (a user's handler may catch SIGTERM)."""
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
"""The handler logger's lines (``preprocess_handler LEVEL: ...``), copied as they are."""


def _relay(path: Path, stream: Any, prefix: str) -> None:
    try:
        with path.open("rb") as file:
            data = file.read(OUTPUT_CAP)
    except OSError:
        return
    lines = data.decode("utf-8", "replace").splitlines()
    if len(data) >= OUTPUT_CAP:  # written past Python's count (os.write, C, a subprocess)
        lines.append("(the rest of the workers' output was left out)")
    for line in lines:
        stream.write(f"{line}\n" if line.startswith(_LOGGED) else f"{prefix}{line}\n")
    stream.flush()


def _context() -> Any:
    """Fork if this process runs one thread, on Linux (macOS's system libraries do not survive a
    fork), else :data:`FALLBACK_START`."""
    if threading.active_count() == 1 and sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context(FALLBACK_START)
