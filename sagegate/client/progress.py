"""``sagegate predict``'s progress on stderr: the files done, and for a file going through a job,
its upload (bytes) then its wait (state, time waited). Drawn with rich, as the command's table
is; nothing is drawn where not asked for (few files, stderr not a terminal)."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from sagegate.client.transfer import UploadProgress, WaitProgress


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


class Bars:
    """The bars of one run, drawn while the context lasts (``files``: 0 for no files bar;
    ``jobs``: a line per file going through a job)."""

    def __init__(self, files: int, jobs: bool) -> None:
        self._jobs = jobs
        self._progress: Progress | None = None
        self._files: TaskID | None = None
        self._lock = threading.Lock()
        if files or jobs:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.fields[detail]}"),
                                      console=Console(stderr=True), transient=True)
            if files:
                self._files = self._progress.add_task("classifying", total=files, detail="")

    def __enter__(self) -> Bars:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def lines(self) -> list[str]:
        """What the bars say now, one string a line (description, then detail)."""
        if self._progress is None:
            return []
        return [f"{task.description} {task.fields.get('detail', '')}".strip()
                for task in self._progress.tasks]

    def advance(self) -> None:
        if self._progress is not None and self._files is not None:
            self._progress.advance(self._files)

    @contextlib.contextmanager
    def job(self, name: str) -> Iterator[tuple[UploadProgress | None, WaitProgress | None]]:
        """The two callbacks of one file's job (None, None when jobs are not shown); its line
        appears at the first call and goes when the file is done."""
        progress = self._progress
        if progress is None or not self._jobs:
            yield None, None
            return
        line = _Line(progress, name, self._lock)
        try:
            yield line.uploaded, line.waited
        finally:
            line.remove()


class _Line:
    """One file's line: a bar of the bytes uploaded, then a pulsing one while the job runs."""

    def __init__(self, progress: Progress, name: str, lock: threading.Lock) -> None:
        self.progress, self.name, self.lock = progress, name, lock
        self.task: TaskID | None = None
        self.waiting = False

    def uploaded(self, sent: int, total: int) -> None:
        with self.lock:
            if self.task is None:
                self.task = self.progress.add_task(f"{self.name}: upload", total=total,
                                                   detail="")
            self.progress.update(self.task, completed=sent,
                                 detail=f"{megabytes(sent)} / {megabytes(total)}")

    def waited(self, job: Mapping[str, Any], elapsed: float) -> None:
        with self.lock:
            if not self.waiting:
                if self.task is not None:
                    self.progress.remove_task(self.task)
                self.task = self.progress.add_task(f"{self.name}: job", total=None, detail="")
                self.waiting = True
            assert self.task is not None
            self.progress.update(self.task, detail=f"{job.get('state')}, {elapsed:.0f} s")

    def remove(self) -> None:
        with self.lock:
            if self.task is not None:
                self.progress.remove_task(self.task)
                self.task = None
