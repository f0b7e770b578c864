"""The Lambda layer: numpy, OpenCV and the other compiled dependencies, built for Lambda.

:func:`build` writes ``build/layer-<architecture>/layer.zip`` (``x86_64`` or ``arm64``, the
stage's ``lambda_architecture``):

1. ``pip install --require-hashes --only-binary=:all:`` for Lambda's Python and platforms (from
   the runtime's glibc and the architecture: :mod:`sagegate.deploy.runtime`);
2. test suites, ``bin`` and ``RECORD`` files go: never used at run time, and ``RECORD`` hashes
   the interpreter path, which would make the zip differ between checkouts;
3. every module compiled with ``--invalidation-mode unchecked-hash``: ``/opt`` is read-only on
   Lambda, and without ``.pyc`` every cold start compiles numpy again;
4. a reproducible zip (:mod:`sagegate.deploy.zipdir`).

Skipped when the fingerprint of its inputs (``requirements-layer.txt``, ``.python-version``, the
architecture, this source) is the last build's. The ``.pyc`` files are the same for both
architectures; only the wheels' compiled extensions differ.

``sagegate layer --stage prod --bucket B`` publishes it:
``s3://B/sagegate/prod/layer-<md5>.zip``, ``PublishLayerVersion`` (compatible with the stage's
architecture), and its ARN becomes the stage's only ``layers`` entry (what ``chalice deploy``
uses).
"""
from __future__ import annotations

import argparse
import compileall
import hashlib
import py_compile
import shutil
import sys
from pathlib import Path

from sagegate.deploy import runtime, zipdir
from sagegate.deploy.runtime import add_architecture_option
from sagegate.deploy.shell import (
    DeployError,
    Runner,
    add_stage_option,
    build_dir,
    guarded,
    run,
    stage_for,
)
from sagegate.deploy.stages import ROOT

REQUIREMENTS = "requirements-layer.txt"
PYTHON_VERSION_FILE = ".python-version"
# The builder's own source: a change to how the layer is built rebuilds it.
BUILDER = tuple(Path(__file__).resolve().parent / name
                for name in ("layer.py", "runtime.py", "zipdir.py"))
FINGERPRINT = "inputs.sha256"


def layer_dir(architecture: str, root: Path = ROOT) -> Path:
    """``build/layer-<architecture>``: the installed tree (``python/``), the zip and its
    fingerprint."""
    return build_dir(root) / f"layer-{architecture}"


def layer_zip(architecture: str, root: Path = ROOT) -> Path:
    return layer_dir(architecture, root) / "layer.zip"


def python_version(root: Path = ROOT) -> str:
    """The project's Python (``.python-version``), which the layer's wheels and .pyc target."""
    return (root / PYTHON_VERSION_FILE).read_text(encoding="utf-8").strip()


def fingerprint(architecture: str, root: Path = ROOT) -> str:
    digest = hashlib.sha256(f"{architecture}\0".encode())
    for path in (root / REQUIREMENTS, root / PYTHON_VERSION_FILE, *BUILDER):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def pip_command(python: str, version: str, target: Path, requirements: Path,
                architecture: str) -> list[str]:
    """Wheels for Lambda's platform only; ``--no-deps``: the lock is the whole layer, packages it
    leaves out on purpose included (``requirements-layer.exclude``)."""
    platforms = runtime.runtime_for(version).manylinux_platforms(architecture)
    return [python, "-m", "pip", "install", "--quiet", "--no-compile", "--require-hashes",
            "--no-deps",
            "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
            *[flag for platform in platforms for flag in ("--platform", platform)],
            "--target", str(target), "-r", str(requirements)]


def prune(tree: Path) -> None:
    for directory in sorted(tree.rglob("tests"), key=lambda p: len(p.parts), reverse=True):
        if directory.is_dir():
            shutil.rmtree(directory)
    shutil.rmtree(tree / "bin", ignore_errors=True)
    for record in tree.glob("*.dist-info/RECORD"):
        record.unlink()


def compile_tree(tree: Path) -> None:
    """Compile every module to ``.pyc`` that Python never re-checks against its source.

    Raises:
        DeployError: a module does not compile.
    """
    if not compileall.compile_dir(tree, quiet=1, workers=0,
                                  invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH):
        raise DeployError(f"compileall failed in {tree}")


def up_to_date(architecture: str, root: Path = ROOT) -> bool:
    stamp = layer_dir(architecture, root) / FINGERPRINT
    return (layer_zip(architecture, root).is_file() and stamp.is_file()
            and stamp.read_text(encoding="utf-8").strip() == fingerprint(architecture, root))


def build(architecture: str, root: Path = ROOT, runner: Runner = run,
          force: bool = False) -> Path:
    """Build ``build/layer-<architecture>/layer.zip`` unless it is up to date; return its path.

    Raises:
        DeployError: this interpreter is not the project's Python (the .pyc would not load), or a
            step failed.
    """
    archive = layer_zip(architecture, root)
    if not force and up_to_date(architecture, root):
        print(f"{archive.relative_to(root)}: up to date ({REQUIREMENTS}, {PYTHON_VERSION_FILE} "
              "and the builder unchanged)")
        return archive
    version = python_version(root)
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != version:
        raise DeployError(f"the layer's .pyc files need Python {version} "
                          f"({PYTHON_VERSION_FILE}); this is Python {running}")
    directory = layer_dir(architecture, root)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    tree = directory / "python"
    runner(pip_command(sys.executable, version, tree, root / REQUIREMENTS, architecture),
           cwd=root)
    prune(tree)
    compile_tree(tree)
    count = zipdir.zip_tree(archive, directory, "python")
    (directory / FINGERPRINT).write_text(fingerprint(architecture, root) + "\n",
                                         encoding="utf-8")
    print(f"{archive.relative_to(root)}: {count} files ({architecture})")
    return archive


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Build the Lambda layer zip (numpy, OpenCV, ...) for Lambda's "
        "platform and the stage's architecture, offline, into build/layer-<architecture>, "
        "skipped when its inputs are unchanged. With --stage and --bucket, "
        "also publish it (needs AWS): upload to S3, PublishLayerVersion, and record the ARN "
        "as the stage's layer in .chalice/config.json (for chalice-deploy).")
    add_stage_option(parser, default="prod")
    add_architecture_option(parser)
    parser.add_argument("--bucket", help="S3 bucket to upload the layer to (publishes it)")
    parser.add_argument("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION "
                                         "or the AWS configuration)")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    if args.bucket is not None and not args.bucket.strip():
        parser.error("--bucket is empty: name the S3 bucket to publish through "
                     "(make layer STAGE=prod BUCKET=<bucket>)")

    if args.bucket is not None and args.architecture is not None:
        parser.error("--architecture builds a layer the stage does not use: publish the "
                     "stage's own (set its lambda_architecture instead)")

    def body() -> None:
        stage = stage_for(args.stage).built_for(args.architecture)
        archive = build(stage.architecture, force=args.force)
        if args.bucket is None:
            return
        from sagegate.deploy import aws

        session = aws.session(args.region)
        arn = aws.publish_layer(stage, archive, args.bucket, session.client("s3"),
                                session.client("lambda"))
        print(f".chalice/config.json: stages.{stage.name}.layers = [{arn}]")

    return guarded(body)
