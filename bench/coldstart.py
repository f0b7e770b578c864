"""Cold start the way Lambda pays it: the packaged function and layer in a bare interpreter.

``sagegate bench-coldstart [--runs N]`` (it runs ``sagegate package --stage prod`` first, so the
function zip is the code as it is now). Each run is a fresh ``python -I -S -B`` over a Lambda-
like tree (:mod:`sagegate.deploy.sandbox`): the function zip as ``/var/task``, a layer as
``/opt/python``, boto3 and ``snapshot_restore_py`` as the runtime's own packages, all compiled
for that Python as Lambda's read-only directories are. It imports ``app`` and serves two
requests (a 1080p JPEG as a binary API Gateway event) against the emulator. Rows:

* ``python3.11, lazy``: Lambda's previous runtime, with a layer built from main's pins
  (numpy<2.3, OpenCV 4.12, for Amazon Linux 2) and the pipeline built by the first request,
  as main did before init-time warm-up (no ``AWS_EXECUTION_ENV``, so sagegate does not know
  it is on Lambda).
* ``python3.13, lazy``: the same on the new runtime and layer.
* ``python3.13, init``: as deployed now: the import builds the pipeline and runs the image
  path once (Lambda's init phase).
* ``python3.13, SnapStart``: init as above, then the before-snapshot and after-restore hooks;
  what a restored copy pays is the after-restore hooks plus its first request. Restoring the
  snapshot's memory itself (Lambda's side, typically a few hundred ms) cannot be measured here.

The same function zip runs in every row (the code stays valid Python 3.11). Medians of N runs.
A benchmark: it prints figures and asserts nothing about time.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import images, table
from emulator.process import start_emulator
from sagegate.deploy import runtime as lambda_runtime
from sagegate.deploy import sandbox as lambda_sandbox
from sagegate.deploy.package import package_dir
from sagegate.deploy.sandbox import LambdaTree
from sagegate.deploy.stages import load_stage

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
# prod built for this machine's CPU (an arm64 prod's x86_64 build lands beside its own package)
HOST_ARCHITECTURE = "x86_64"
PACKAGE = package_dir(load_stage("prod"), ROOT, HOST_ARCHITECTURE)
CACHE = BUILD / "coldstart"
# main's layer pins for python3.11 (Amazon Linux 2) before the move to 3.13
MAIN_LAYER_311 = ("numpy>=2.0,<2.3", "opencv-python-headless==4.12.0.88", "orjson==3.13.0",
                  "pybase64==1.5.1")


def find_python(version: str) -> str | None:
    """The real path of a ``python<version>`` interpreter, or None (pyenv shims resolved)."""
    candidate = shutil.which(f"python{version}")
    if candidate is None:
        return None
    env = {**os.environ, "PYENV_VERSION": version}
    done = subprocess.run([candidate, "-c", "import sys; print(sys.executable)"], env=env,
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def _pip_target(python: str, target: Path, requirements: Sequence[str], runtime: str) -> None:
    """Install ``requirements`` as Lambda wheels for ``runtime`` into ``target``, compiled."""
    platforms = lambda_runtime.RUNTIMES[runtime].manylinux_platforms(HOST_ARCHITECTURE)
    version = lambda_runtime.RUNTIMES[runtime].python
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                    "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
                    *[arg for p in platforms for arg in ("--platform", p)],
                    "--target", str(target), *requirements], check=True)
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode",
                    "unchecked-hash", str(target)], check=True)


def _runtime_requirements() -> tuple[str, str]:
    """What Lambda's runtime provides, at the versions this environment has."""
    import boto3
    import snapshot_restore_py

    return (f"boto3=={boto3.__version__}",
            f"snapshot-restore-py=={snapshot_restore_py.__version__}")


def build_tree(python: str, runtime: str, layer: Path | None) -> LambdaTree:
    """A Lambda-like tree for ``runtime``: the function zip extracted anew, the layer and the
    runtime's packages cached under build/coldstart."""
    root = CACHE / runtime
    tree = LambdaTree(root / "task", root / "opt", root / "runtime")
    shutil.rmtree(tree.task, ignore_errors=True)
    with zipfile.ZipFile(PACKAGE / "deployment.zip") as zipped:
        zipped.extractall(tree.task)
    if not (root / "ready").exists():
        shutil.rmtree(tree.layer, ignore_errors=True)
        shutil.rmtree(tree.runtime, ignore_errors=True)
        if layer is None:
            _pip_target(python, tree.layer / "python", MAIN_LAYER_311, runtime)
        else:
            with zipfile.ZipFile(layer) as zipped:
                zipped.extractall(tree.layer)
        _pip_target(python, tree.runtime, _runtime_requirements(), runtime)
        (root / "ready").touch()
    return tree


def _event(image: bytes) -> dict[str, Any]:
    return {"resource": "/predict", "path": "/predict", "httpMethod": "POST",
            "headers": {"content-type": "image/jpeg", "x-api-key": "bench"},
            "multiValueHeaders": {"content-type": ["image/jpeg"]},
            "queryStringParameters": {"k": "3"}, "multiValueQueryStringParameters": {"k": ["3"]},
            "pathParameters": None, "stageVariables": None, "isBase64Encoded": True,
            "requestContext": {"resourcePath": "/predict", "httpMethod": "POST",
                               "requestId": "bench-coldstart", "stage": "api", "path": "/predict",
                               "identity": {"sourceIp": "127.0.0.1"}},
            "body": base64.b64encode(image).decode("ascii")}


def run_once(python: str, tree: LambdaTree, env: dict[str, str], event: dict[str, Any],
             workdir: Path) -> dict[str, Any]:
    """One fresh interpreter: its report (times in ms, answers)."""
    run = lambda_sandbox.invoke(tree, env, [event, event], workdir, python=python)
    statuses = [answer["statusCode"] for answer in run.answers]
    if statuses != [200, 200]:
        raise RuntimeError(f"the handler answered {statuses}:\n{run.logs[-2000:]}")
    return run.report


def _row(label: str, reports: list[dict[str, Any]]) -> list[str]:
    def median(key: str, index: int | None = None) -> float:
        values = [r[key][index] if index is not None else r[key] for r in reports]
        return statistics.median(values)

    restore = [r["snapstart"]["restore_ms"] for r in reports if r.get("snapstart")]
    imported, first = median("import_ms"), median("request_ms", 0)
    if restore:  # a restored copy pays the hooks and its first request, not the import
        paid = statistics.median(restore) + first
        return [label, "-", table.ms(statistics.median(restore)), table.ms(first),
                table.ms(median("request_ms", 1)), table.ms(paid)]
    return [label, table.ms(imported), "-", table.ms(first), table.ms(median("request_ms", 1)),
            table.ms(imported + first)]


def main(argv: Sequence[str] | None = None, prog: str = "python -m bench.coldstart") -> int:
    """Build the trees, time each configuration, print the table."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per row")
    args = parser.parse_args(argv)
    # the function zip of the code as it is now (the layer is rebuilt only when it changed)
    subprocess.run([sys.executable, "-m", "sagegate.cli", "package", "--stage", "prod",
                    "--architecture", HOST_ARCHITECTURE], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    current = lambda_runtime.current().name
    configurations: list[tuple[str, str, LambdaTree, dict[str, str]]] = []
    python311 = find_python("3.11")
    if python311 is None:
        print("python3.11 not found: the python3.11 row is left out")
    else:
        tree = build_tree(python311, "python3.11", None)
        configurations.append(("python3.11, lazy (main)", python311, tree, {"lazy": "1"}))
    tree = build_tree(sys.executable, current, PACKAGE / "layer.zip")
    configurations += [(f"{current}, lazy", sys.executable, tree, {"lazy": "1"}),
                       (f"{current}, init", sys.executable, tree, {}),
                       (f"{current}, SnapStart", sys.executable, tree, {"snapstart": "1"})]
    photo = images.make("coffee", 1920, 1080).data
    variables = json.loads((PACKAGE / "sam.json").read_text())["Resources"]["APIHandler"][
        "Properties"]["Environment"]["Variables"]
    rows = []
    with start_emulator() as emulator, tempfile.TemporaryDirectory() as scratch:
        for label, python, tree, mode in configurations:
            runtime = label.split(",")[0]
            env = lambda_sandbox.lambda_env(variables, "sagegate-prod", runtime, emulator.url,
                                            snapstart="snapstart" in mode)
            if "lazy" in mode:
                env.pop("AWS_EXECUTION_ENV")
                env.pop("LAMBDA_TASK_ROOT")
            reports = [run_once(python, tree, env, _event(photo), Path(scratch) / f"{label}{i}")
                       for i in range(args.runs)]
            rows.append(_row(label, reports))
            print(f"  measured {label}", flush=True)
    print(table.section(f"Cold start, packaged function + layer, median of {args.runs} "
                        "fresh interpreters (ms)"))
    print(table.render(["configuration", "import+init", "restore hooks", "1st request",
                        "2nd request", "cold total"], rows))
    print("  cold total: import+init + 1st request; for SnapStart: restore hooks + 1st request "
          "(Lambda's own snapshot restore not included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
