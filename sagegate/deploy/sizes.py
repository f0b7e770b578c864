"""Print the deployment artifacts' sizes and check them against Lambda's limits (exit status 1
when one is broken):

* the function zip at most 5 MB, sagegate's own target, so ``chalice deploy`` uploads it directly
  (Lambda's direct-upload limit is 50 MB);
* function and layers together unzip to at most 250 MB, Lambda's hard limit.
"""
from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

MB = 1024 * 1024
FUNCTION_ZIP_TARGET = 5 * MB
DIRECT_UPLOAD_LIMIT = 50 * MB
UNZIPPED_LIMIT = 250 * MB


@dataclasses.dataclass(frozen=True)
class ZipSize:
    """One zip's size on disk and the total size of its files once extracted."""

    path: Path
    zipped: int
    unzipped: int
    files: int

    @classmethod
    def of(cls, path: Path) -> ZipSize:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
        return cls(path, path.stat().st_size, sum(info.file_size for info in infos), len(infos))


def _mb(size: int) -> str:
    return f"{size / MB:7.1f} MB"


def report(function: ZipSize, layers: list[ZipSize]) -> tuple[list[str], list[str]]:
    """Lines to print, and the limits broken (empty when all hold)."""
    lines = [f"{'artifact':<42} {'zipped':>10} {'unzipped':>10} {'files':>6}"]
    for item in (function, *layers):
        lines.append(f"{item.path!s:<42} {_mb(item.zipped)} {_mb(item.unzipped)} "
                     f"{item.files:>6}")
    total = function.unzipped + sum(layer.unzipped for layer in layers)
    lines.append(f"{'function + layers, unzipped':<42} {'':>10} {_mb(total)}  "
                 f"(Lambda's limit: {UNZIPPED_LIMIT // MB} MB)")
    broken = []
    if function.zipped > FUNCTION_ZIP_TARGET:
        broken.append(f"function zip is {_mb(function.zipped).strip()}, over the "
                      f"{FUNCTION_ZIP_TARGET // MB} MB target (direct upload limit "
                      f"{DIRECT_UPLOAD_LIMIT // MB} MB): heavy dependencies belong in the layer")
    if total > UNZIPPED_LIMIT:
        broken.append(f"function + layers unzip to {_mb(total).strip()}, over Lambda's "
                      f"{UNZIPPED_LIMIT // MB} MB")
    return lines, broken

