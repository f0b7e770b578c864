"""Label files: one class per line, read once and again only when the file changed."""
from __future__ import annotations

import functools
from pathlib import Path

from chalicelib.core.errors import ConfigurationError


def read_labels(path: Path, shown: str) -> tuple[str, ...]:
    """The class names of a label file, in index order: one a line, blank lines skipped.

    Args:
        shown: how messages name it (``models/iris/labels.txt``).

    Raises:
        ConfigurationError: the file cannot be read, is not UTF-8 or holds no class.
    """
    try:
        status = path.stat()
        labels = _read_labels(path, status.st_mtime_ns, status.st_size)
    except OSError as error:
        raise ConfigurationError(f"{shown} cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"{shown} is not UTF-8 text") from None
    if not labels:
        raise ConfigurationError(f"{shown} is empty")
    return labels


@functools.lru_cache(maxsize=64)
def _read_labels(path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    # utf-8-sig: a byte order mark (Windows editors write one) is not part of the first class
    text = path.read_text(encoding="utf-8-sig")
    return tuple(line.strip() for line in text.splitlines() if line.strip())
