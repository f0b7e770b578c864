"""Extract the 1000 ImageNet-1k class names from the torchvision wheel.

One-off helper that (re)generates ``chalicelib/labels/imagenet1k.txt``: one class
name per line, in class-index order, UTF-8.

The names come from ``_IMAGENET_CATEGORIES`` in ``torchvision/models/_meta.py`` of
torchvision 0.29.1 (BSD-3-Clause). The wheel is fetched with
``pip download --no-deps`` and read as a zip archive: torchvision is never installed
and none of its code is executed. The list literal is located with :mod:`ast` and
evaluated with :func:`ast.literal_eval` only.

Usage, from the repository root::

    python scripts/make_labels.py                    # pip-downloads the wheel to a temp dir
    python scripts/make_labels.py --wheel PATH.whl   # use an already-downloaded wheel
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TORCHVISION_VERSION = "0.29.1"
META_MEMBER = "torchvision/models/_meta.py"
LIST_NAME = "_IMAGENET_CATEGORIES"
NUM_CLASSES = 1000
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "chalicelib" / "labels" / "imagenet1k.txt"


def download_wheel(dest: Path, version: str = TORCHVISION_VERSION) -> Path:
    """Download the torchvision wheel (without dependencies) into ``dest``."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        f"torchvision=={version}",
        "-d",
        str(dest),
    ]
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob(f"torchvision-{version}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip did not leave a torchvision {version} wheel in {dest}")
    return wheels[0]


def read_meta_source(wheel: Path) -> str:
    """Return the text of ``torchvision/models/_meta.py`` from inside ``wheel``."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(META_MEMBER).decode("utf-8")


def extract_categories(source: str, name: str = LIST_NAME) -> list[str]:
    """Find the module-level assignment ``name = [...]`` and literal-evaluate it."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{name} is not a list of strings")
            return value
    raise LookupError(f"no top-level assignment to {name}")


def validate(categories: list[str]) -> None:
    """Check the count and that every name fits on one line."""
    if len(categories) != NUM_CLASSES:
        raise ValueError(f"expected {NUM_CLASSES} categories, got {len(categories)}")
    for index, label in enumerate(categories):
        if not label or label != label.strip() or "\n" in label or "\r" in label:
            raise ValueError(f"category {index} is not a clean single-line name: {label!r}")


def write_labels(categories: list[str], out: Path) -> None:
    """Write one name per line, UTF-8, with a trailing newline."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(categories) + "\n", encoding="utf-8", newline="\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wheel",
        type=Path,
        help=f"an already-downloaded torchvision {TORCHVISION_VERSION} wheel",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="labels file to write")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel if args.wheel else download_wheel(Path(tmp))
        categories = extract_categories(read_meta_source(wheel))
    validate(categories)
    write_labels(categories, args.out)
    print(f"wrote {len(categories)} labels from {wheel.name} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
