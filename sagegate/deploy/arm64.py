"""``sagegate arm64-check``: a stage's arm64 package run by a real arm64 CPython, on this machine.

Lambda's arm64 (Graviton) functions load aarch64 wheels, which an x86_64 machine cannot import.
qemu's user-mode emulation (``qemu-aarch64``) runs arm64 Linux programs here, so this check runs
Debian 13's own arm64 ``python3.13`` (an arm64 tree extracted by ``mmdebstrap
--variant=extract``, cached in ``build/arm64-root``):

1. the stage is packaged for arm64 (``sagegate package --architecture arm64``; its own directory
   when the stage is arm64, else ``build/package-<stage>-arm64``);
2. the arm64 layer, extracted, has every top-level package it holds imported and each compiled
   library do real work (:mod:`sagegate.deploy.arm64_probe`), compared with this machine's
   results from the same inputs;
3. the packaged function (its zip, the layer and boto3, as in the deploy tests'
   :mod:`sagegate.deploy.sandbox`) answers ``GET /health`` and a ``POST /resize`` of a JPEG
   through ``app.app``, the Lambda handler, in that interpreter.

What it does not prove: Amazon Linux 2023's own system libraries (the tree is Debian's: glibc
2.41 and libstdc++ 14, newer than Lambda's glibc 2.34; that every wheel targets glibc 2.34 or
older is what pip's ``--platform`` list guarantees), Graviton's speed, and the answers of the
routes that call an endpoint. ``make arm64-tools`` (run by ``make test``) installs the two tools
from Debian's packages.
"""
from __future__ import annotations

import argparse
import base64
import compileall
import dataclasses
import json
import shlex
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sagegate.deploy import arm64_probe, package, sandbox
from sagegate.deploy.shell import (
    DeployError,
    Runner,
    add_stage_option,
    build_dir,
    guarded,
    run,
    stage_for,
)
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import ROOT

ARM64 = "arm64"
SUITE = "trixie"  # Debian 13: Python 3.13, the version of Lambda's python3.13 runtime
# the interpreter, and the C++ runtime manylinux wheels may take from the system (as on AL2023)
PACKAGES = ("python3.13", "libstdc++6")
TOOLS = {"qemu-aarch64": "qemu-user", "mmdebstrap": "mmdebstrap"}
PROBE = Path(arm64_probe.__file__).resolve()
VOCAB = ROOT / "chalicelib" / "models" / "sentiment" / "vocab.txt"
READY = ".ready"
# A JPEG decoded and resized on both machines may differ by a rounding step where the two
# architectures' SIMD paths differ; anything more is a wrong library.
PIXEL_TOLERANCE = 1
RESIZED = (64, 48)


@dataclasses.dataclass(frozen=True)
class Report:
    """What the check found (also printed)."""

    machine: str
    python: str
    imported: dict[str, str]
    pixel_difference: int
    answers: dict[str, int]
    seconds: dict[str, float]
    layer: Path
    """Where the arm64 layer was extracted (``opt/python``) for the probe."""


def tools(which: Callable[[str], str | None] = shutil.which) -> dict[str, str]:
    """The tools' paths.

    Raises:
        DeployError: (status 2) one is missing.
    """
    found = {name: which(name) for name in TOOLS}
    missing = [TOOLS[name] for name, path in found.items() if path is None]
    if missing:
        raise DeployError(f"{', '.join(missing)} missing: run make arm64-tools (make test "
                          "does), or apt-get install " + " ".join(missing), status=2)
    return {name: path for name, path in found.items() if path is not None}


def tree_dir(root: Path = ROOT) -> Path:
    return build_dir(root) / "arm64-root"


def ensure_tree(qemu: str, root: Path = ROOT, runner: Runner = run) -> Path:
    """The arm64 tree, extracted once (kept while its suite and packages are unchanged); return
    the path of a ``python3.13`` script that runs its interpreter under qemu."""
    directory = tree_dir(root)
    wanted = f"{SUITE} {' '.join(PACKAGES)}\n"
    stamp = directory / READY
    if not (stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted):
        shutil.rmtree(directory, ignore_errors=True)
        runner(["mmdebstrap", "--quiet", "--arch=arm64", "--variant=extract",
                f"--include={','.join(PACKAGES)}", SUITE, str(directory)], cwd=root)
        # merged /usr: the dynamic loader's path is /lib/ld-linux-aarch64.so.1
        (directory / "lib").symlink_to("usr/lib")
        # Debian compiles the standard library when it installs the package, which extraction
        # does not; .pyc files are the same on every CPU, so this Python 3.13 does it, once
        compileall.compile_dir(directory / "usr" / "lib" / "python3.13", quiet=2, workers=0)
        stamp.write_text(wanted, encoding="utf-8")
    script = directory / "python3.13"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(qemu)} -L {shlex.quote(str(directory))} "
                      f"{shlex.quote(str(directory / 'usr' / 'bin' / 'python3.13'))} \"$@\"\n",
                      encoding="utf-8")
    script.chmod(0o755)
    return script


def sample_jpeg() -> bytes:
    """A deterministic photo-like JPEG: gradients and a disc, made with this machine's OpenCV."""
    import cv2
    import numpy as np

    y, x = np.mgrid[0:240, 0:320]
    image = np.dstack([(x * 255 // 319), (y * 255 // 239), ((x + y) * 255 // 558)])
    image = image.astype(np.uint8)
    cv2.circle(image, (160, 120), 70, (30, 200, 90), -1)
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    if not ok:
        raise DeployError("OpenCV could not encode the sample JPEG")
    return bytes(encoded)


def probe_layer(python: Path, layer_python: Path, workdir: Path) -> dict[str, Any]:
    """Run the probe in the emulated interpreter; its report.

    Raises:
        DeployError: the probe failed (an import or a computation), its output in the message.
    """
    jpeg, out = workdir / "sample.jpg", workdir / "probe.json"
    jpeg.write_bytes(sample_jpeg())
    done = subprocess.run([str(python), "-I", "-S", "-B", str(PROBE), str(layer_python),
                           str(jpeg), str(VOCAB), str(out)], capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        raise DeployError(f"the arm64 layer's probe failed:\n{done.stdout}{done.stderr}")
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def compare(found: Mapping[str, Any], expected: Mapping[str, Any]) -> int:
    """The largest pixel difference of the resized image.

    Raises:
        DeployError: a result differs from this machine's (pixels: beyond the tolerance).
    """
    exact = {key: value for key, value in expected.items() if key != "resized"}
    differ = [key for key, value in exact.items() if found.get(key) != value]
    if differ:
        raise DeployError("the arm64 layer computed other results than this machine: "
                          + ", ".join(f"{key}: {found.get(key)!r} != {exact[key]!r}"
                                      for key in differ))
    pixels = max((abs(a - b) for a, b in zip(found["resized"], expected["resized"],
                                              strict=True)), default=0)
    if pixels > PIXEL_TOLERANCE:
        raise DeployError(f"the arm64 layer's resized JPEG differs by {pixels} levels from this "
                          f"machine's (tolerance {PIXEL_TOLERANCE})")
    return pixels


def events(jpeg: bytes) -> dict[str, dict[str, Any]]:
    """API Gateway proxy events: ``GET /health`` and a ``POST /resize`` of ``jpeg``."""
    def event(method: str, path: str, headers: dict[str, str], query: dict[str, str] | None,
              body: str | None) -> dict[str, Any]:
        return {"resource": path, "path": path, "httpMethod": method, "headers": headers,
                "multiValueHeaders": {name: [value] for name, value in headers.items()},
                "queryStringParameters": query,
                "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()}
                or None, "pathParameters": None, "stageVariables": None,
                "requestContext": {"resourcePath": path, "httpMethod": method, "stage": "api",
                                   "requestId": f"arm64-check{path.replace('/', '-')}",
                                   "path": f"/api{path}", "identity": {"sourceIp": "127.0.0.1"}},
                "body": body, "isBase64Encoded": body is not None}

    width, height = RESIZED
    return {
        "health": event("GET", "/health", {"accept": "application/json"}, None, None),
        "resize": event("POST", "/resize", {"content-type": "image/jpeg", "accept": "image/png",
                                            "x-api-key": "arm64-check"},
                        {"width": str(width), "height": str(height)},
                        base64.b64encode(jpeg).decode("ascii")),
    }


def run_handler(python: Path, built: Path, workdir: Path) -> dict[str, int]:
    """The packaged function's answers to :func:`events` in the emulated interpreter.

    Raises:
        DeployError: the handler failed, or answered other than 200 with the resized PNG.
    """
    shutil.rmtree(workdir / "lambda", ignore_errors=True)
    tree = sandbox.LambdaTree.build(workdir / "lambda", built / "deployment.zip",
                                    built / "layer.zip")
    # Lambda compiles the function's modules at each cold start; under emulation that alone
    # takes a minute, and .pyc files are the same on every CPU: compiled here, they are read
    compileall.compile_dir(tree.task, quiet=2, workers=0)
    template = json.loads((built / "sam.json").read_text(encoding="utf-8"))
    function = template["Resources"]["APIHandler"]["Properties"]
    # no endpoint is called: nothing listens on the discard port
    env = sandbox.lambda_env(function["Environment"]["Variables"], "sagegate-arm64-check",
                             function["Runtime"], "http://127.0.0.1:9")
    named = events(sample_jpeg())
    try:
        answered = sandbox.invoke(tree, env, list(named.values()), workdir / "invoke",
                                  python=str(python), timeout=900)
    except RuntimeError as error:
        raise DeployError(f"the packaged function failed on arm64: {error}") from None
    answers = dict(zip(named, answered.answers, strict=True))
    statuses = {name: int(answer["statusCode"]) for name, answer in answers.items()}
    if set(statuses.values()) != {200}:
        raise DeployError(f"the packaged function answered {statuses} on arm64:\n"
                          f"{answered.logs[-3000:]}")
    _check_png(base64.b64decode(answers["resize"]["body"]))
    return statuses


def _check_png(body: bytes) -> None:
    import cv2
    import numpy as np

    image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None or (image.shape[1], image.shape[0]) != RESIZED:
        raise DeployError(f"POST /resize on arm64 did not answer a {RESIZED[0]}x{RESIZED[1]} "
                          "PNG")


def check(stage: Stage, root: Path = ROOT, runner: Runner = run) -> Report:
    """Package ``stage`` for arm64 and run its layer and function under emulation.

    Raises:
        DeployError: a tool is missing, or any step failed.
    """
    seconds: dict[str, float] = {}
    started = time.monotonic()
    found = tools()
    python = ensure_tree(found["qemu-aarch64"], root, runner)
    seconds["tree"] = time.monotonic() - started
    mark = time.monotonic()
    built = package.package_sam(stage, root, runner, architecture=ARM64)
    seconds["package"] = time.monotonic() - mark
    workdir = build_dir(root) / f"arm64-check-{stage.name}"
    shutil.rmtree(workdir, ignore_errors=True)
    layer_python = workdir / "opt"
    with zipfile.ZipFile(built / "layer.zip") as zipped:
        zipped.extractall(layer_python)
    mark = time.monotonic()
    probed = probe_layer(python, layer_python / "python", workdir)
    pixels = compare(probed["results"], arm64_probe.compute(sample_jpeg(), str(VOCAB)))
    seconds["layer"] = time.monotonic() - mark
    if probed["machine"] != "aarch64":
        raise DeployError(f"the probe ran on {probed['machine']}, not aarch64")
    mark = time.monotonic()
    answers = run_handler(python, built, workdir)
    seconds["function"] = time.monotonic() - mark
    return Report(probed["machine"], probed["python"], probed["imported"], pixels, answers,
                  seconds, layer_python / "python")


def describe(report: Report, root: Path = ROOT) -> list[str]:
    lines = [f"arm64 check: CPython {report.python} on {report.machine} (qemu user-mode, "
             f"Debian {SUITE})"]
    for name, origin in sorted(report.imported.items()):
        where = Path(origin)
        lines.append(f"  imported {name:<14} {where.name}")
    lines.append(f"  computed alike: matmul, JPEG decode + resize (largest pixel difference "
                 f"{report.pixel_difference}), orjson, pybase64, KLL sketch, tokenizer")
    lines.append("  packaged function: " + ", ".join(f"{name} {status}"
                                                     for name, status in report.answers.items()))
    lines.append("  seconds: " + ", ".join(f"{step} {value:.1f}"
                                            for step, value in report.seconds.items()))
    return lines


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Prove a stage's arm64 package here: package it for arm64, then "
        "import every package of its layer and run the packaged function's handler in Debian's "
        "arm64 CPython 3.13 under qemu's user-mode emulation (the tree is cached in "
        "build/arm64-root). Needs qemu-user and mmdebstrap (make arm64-tools).")
    add_stage_option(parser, default="prod")
    args = parser.parse_args(argv)

    def body() -> None:
        print("\n".join(describe(check(stage_for(args.stage)))))

    return guarded(body)
