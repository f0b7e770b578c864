"""What ``sagegate predict`` sends: the files named, and a directory's image files (by
extension or by their first bytes); a directory's other files are skipped and said so."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".webp"})
IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")
SKIPPED_NAMED = 5
"""Skipped files named one a line; more are counted in one line."""
HOW_TO_SEND = "a directory gives its image files; name a data file itself, with --model, to send it"


class UsageError(Exception):
    """A command line that cannot run (exit code 2)."""


def looks_like_image(path: Path) -> bool:
    """Whether a file found in a directory is taken: an image's extension or first bytes (JPEG,
    PNG, WebP)."""
    if path.suffix.lower() in IMAGE_EXTENSIONS:
        return True
    try:
        with open(path, "rb") as file:
            head = file.read(12)
    except OSError:
        return False
    return head.startswith(IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


@dataclasses.dataclass(frozen=True)
class Found:

    files: list[Path]
    skipped: list[Path]


def find(paths: Iterable[str]) -> Found:
    """The files to classify: each file named (always taken), and the image files under each
    directory named (recursively, sorted).

    Raises:
        UsageError: a path does not exist, or nothing is left to classify.
    """
    found: list[Path] = []
    skipped: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                (found if looks_like_image(file) else skipped).append(file)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{name}: no such file or directory")
    taken = set(found)
    skipped = [file for file in dict.fromkeys(skipped) if file not in taken]
    if not found:
        others = f" (only {len(skipped):,} other file{'s' if len(skipped) > 1 else ''}: " \
            f"{HOW_TO_SEND})" if skipped else ""
        raise UsageError("no image files found in " + ", ".join(paths) + others)
    return Found(list(dict.fromkeys(found)), skipped)


def collect(paths: Iterable[str]) -> list[Path]:
    return find(paths).files


def skipped_lines(skipped: Sequence[Path]) -> list[str]:
    """What stderr says of a directory's files not sent: each by name (up to
    :data:`SKIPPED_NAMED`), a count of the rest, and how to send one."""
    lines = [f"skipped {path}: not an image" for path in skipped[:SKIPPED_NAMED]]
    rest = len(skipped) - SKIPPED_NAMED
    if rest > 0:
        lines.append(f"skipped {rest:,} more file{'s' if rest > 1 else ''} that "
                     f"{'are' if rest > 1 else 'is'} not an image")
    lines[-1] += f" ({HOW_TO_SEND})"
    return lines
