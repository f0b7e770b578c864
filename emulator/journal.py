"""The asynchronous queue's journal: one JSON file per accepted InvokeEndpointAsync call in
a state directory, so the queue outlives the emulator's process as SageMaker's durable queue
outlives an instance.

A call's file is written before its 202 answer (``queued``), rewritten when a worker starts it
(``running``, with the attempt's number) and when it completes (``completed``, with the
notification still to send), and removed once that notification is sent. Every write is a
temporary file renamed over the old one (``os.replace``), so a reader finds the old document
or the new one, never half of one. The files survive the process (a SIGKILL, an out-of-memory
kill); they are not flushed to the disk itself, so a crash of the machine may lose the last
ones. A lock (``flock`` on ``<dir>/lock``, released by the kernel when the holder dies) keeps
a second emulator off a directory the first still serves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LOG = logging.getLogger("emulator")
QUEUED, RUNNING, COMPLETED = "queued", "running", "completed"
"""The phases of an entry."""
SUFFIX = ".json"
KEY = re.compile(r"[A-Za-z0-9-]{1,80}")
"""A key is a file name: made by the emulator, checked so no key can name another path."""
LOCK_NAME = "lock"


class JournalError(OSError):
    """The state directory cannot be used (not writable, or held by another emulator)."""


@dataclass
class Entry:
    """One invocation's document: its job (as :meth:`Job.to_document` wrote it), its phase,
    the attempts started, and once completed the notification still to send."""

    key: str
    job: dict[str, Any]
    phase: str = QUEUED
    attempts: int = 0
    completion: dict[str, Any] | None = None

    def to_document(self) -> dict[str, Any]:
        """The entry as its file holds it."""
        return {"key": self.key, "phase": self.phase, "attempts": self.attempts,
                "job": self.job, "completion": self.completion}  # fmt: skip

    @classmethod
    def from_document(cls, document: Any) -> Entry:
        """Reads a file's document.

        Raises:
            ValueError: not an entry.
        """
        if not isinstance(document, dict) or not isinstance(document.get("job"), dict):
            raise ValueError("not a journal entry")
        key, phase, attempts = document.get("key"), document.get("phase"), document.get("attempts")
        if not isinstance(key, str) or not KEY.fullmatch(key) or \
                phase not in (QUEUED, RUNNING, COMPLETED) or type(attempts) is not int:
            raise ValueError("not a journal entry")
        completion = document.get("completion")
        if phase == COMPLETED and not isinstance(completion, dict):
            raise ValueError("a completed entry without its notification")
        return cls(key, document["job"], phase, attempts, completion)


class Journal:
    """The entries of one state directory (``<dir>/async/<key>.json``), held by one process.

    Args:
        directory: the state directory (made if missing).

    Raises:
        JournalError: the directory cannot be made or written, or another live emulator holds
            it.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.entries_dir = directory / "async"
        try:
            self.entries_dir.mkdir(parents=True, exist_ok=True)
            self._lock_file = _hold_lock(directory / LOCK_NAME)
        except JournalError:
            raise
        except OSError as error:  # read-only, not a directory, no space
            raise JournalError(f"cannot use the state directory {directory}: {error}") from None

    def write(self, entry: Entry) -> None:
        """Writes (or replaces) an entry's file atomically.

        Raises:
            OSError: it could not be written (the old file, if any, is left as it was).
        """
        target = self._path(entry.key)
        temporary = target.with_name(f".{entry.key}.{os.getpid()}.{threading.get_ident()}.tmp")
        data = json.dumps(entry.to_document(), separators=(",", ":")).encode()
        try:
            with temporary.open("wb") as sink:
                sink.write(data)
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    def remove(self, key: str) -> None:
        """Removes an entry's file (gone already is fine)."""
        self._path(key).unlink(missing_ok=True)

    def load(self) -> list[Entry]:
        """Every entry on disk, oldest first (by the job's receipt, then key). A file that
        does not read as an entry is renamed ``<name>.unreadable`` and logged; a temporary
        file left by a write that was cut short is removed."""
        entries: list[Entry] = []
        for path in sorted(self.entries_dir.iterdir()):
            if path.name.startswith(".") and path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
            elif path.suffix == SUFFIX:
                entry = self._read(path)
                if entry is not None:
                    entries.append(entry)
        entries.sort(key=lambda entry: (_received(entry), entry.key))
        return entries

    def close(self) -> None:
        """Releases the directory's lock."""
        self._lock_file.close()

    def _read(self, path: Path) -> Entry | None:
        try:
            return Entry.from_document(json.loads(path.read_bytes()))
        except (OSError, ValueError) as error:
            LOG.error("state: %s is not a journal entry (%s); renamed to %s.unreadable",
                      path, error, path.name)  # fmt: skip
            with contextlib.suppress(OSError):  # left where it is, it is logged each start
                path.replace(path.with_name(path.name + ".unreadable"))
            return None

    def _path(self, key: str) -> Path:
        if not KEY.fullmatch(key):
            raise ValueError(f"bad journal key {key!r}")
        return self.entries_dir / f"{key}{SUFFIX}"


def _received(entry: Entry) -> float:
    value = entry.job.get("received_at")
    return float(value) if isinstance(value, int | float) else 0.0


def _hold_lock(path: Path) -> IO[str]:
    """Opens and locks ``path`` for this process's life (the kernel drops it at exit)."""
    try:
        import fcntl
    except ImportError:  # no flock (not POSIX): one emulator per directory is the user's care
        return path.open("a+")
    handle = path.open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise JournalError(f"the state directory {path.parent} is in use by another emulator "
                           f"(pid {holder}); give each emulator its own --state-dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
