"""Zip a directory reproducibly: sorted entries, fixed timestamps, file modes kept.

The same input gives the same bytes, so ``aws cloudformation package`` (which names uploads
by their MD5) neither uploads an unchanged layer again nor makes CloudFormation publish a new
layer version for it (:mod:`sagegate.deploy.layer` zips the layer with it).
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold


def zip_tree(archive: Path, base: Path, top: str) -> int:
    """Write ``base/top`` into ``archive`` with paths relative to ``base``; return the count."""
    files = sorted(path for path in (base / top).rglob("*") if path.is_file())
    tmp = archive.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as out:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(base).as_posix(), date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (os.stat(path).st_mode & 0xFFFF) << 16
            with open(path, "rb") as source, out.open(info, "w") as target:
                while chunk := source.read(1 << 20):
                    target.write(chunk)
    tmp.replace(archive)
    return len(files)

