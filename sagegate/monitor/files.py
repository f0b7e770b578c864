"""Files ``sagegate monitor`` reads and writes, regular files only: a FIFO, device, socket or
directory is refused with one line naming it, checked before it is opened, and opened so that one
swapped in since cannot block (a FIFO would wait for ever)."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

MAX_BASELINE_BYTES = 512 * 1024 * 1024
"""The largest baseline document read (a thousand features' sketches are a few megabytes)."""


class SourceError(ValueError):
    """A dataset or capture source cannot be read; the message says which and why."""


class MissingFile(SourceError):
    """A file to read does not exist."""


def open_regular(path: str | Path) -> IO[bytes]:
    """``path`` opened for reading in binary, if it is a regular file (or a link to one).

    Raises:
        SourceError: missing, unopenable, or not a regular file (one line naming it).
    """
    try:
        kind = _file_kind(os.stat(path).st_mode)
        if kind:  # refused before it is opened: opening a FIFO may block
            raise SourceError(f"{path}: {kind}, not a regular file")
        # O_NONBLOCK: a FIFO swapped in after the check opens at once (then is refused below)
        # instead of waiting for a writer; on a regular file the flag changes nothing
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise MissingFile(f"{path}: no such file") from None
    except OSError as error:
        raise SourceError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        kind = _file_kind(os.fstat(descriptor).st_mode)
        if kind:
            raise SourceError(f"{path}: {kind}, not a regular file")
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _file_kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return ""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


def create_regular(path: str | Path) -> IO[bytes]:
    """``path`` created, or truncated if a regular file, for writing in binary.

    Raises:
        SourceError: a FIFO, device, socket or directory (a FIFO is opened without blocking and
            refused at once).
    """
    try:
        kind = _file_kind(os.stat(path).st_mode)
    except FileNotFoundError:
        kind = ""
    except OSError as error:
        raise SourceError(f"{path}: cannot be written ({error.strerror})") from None
    if kind:
        raise SourceError(f"{path}: {kind}, not a regular file")
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as error:
        raise SourceError(f"{path}: cannot be written ({error.strerror})") from None
    try:
        kind = _file_kind(os.fstat(descriptor).st_mode)
        if kind:
            raise SourceError(f"{path}: {kind}, not a regular file")
        os.ftruncate(descriptor, 0)  # only now: truncating is for regular files
        return os.fdopen(descriptor, "wb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: str | Path, limit: int = MAX_BASELINE_BYTES) -> bytes:
    """The content of a regular file of at most ``limit`` bytes.

    Raises:
        SourceError: as :func:`open_regular`, or the file is larger.
    """
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{path}: larger than {limit // (1024 * 1024)} MiB")
    return data
