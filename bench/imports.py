"""Cold import time: ``import app`` in a fresh interpreter, beside its dependencies alone.

Each figure is measured inside a new ``python -c`` process with ``perf_counter`` around the
import statement only, so interpreter start-up is left out, and the median of a few runs is
kept. Lambda pays this on every cold start, before the first request is read.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench import table

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_APP = Path(__file__).resolve().parent / "reference_app"
_OWN = frozenset({"app", "chalicelib", "bench", "emulator", "scripts"})

_TIMED = "import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
_DEPENDENCIES = """
import sys
before = set(sys.modules)
import app
own = {own!r}
names = sorted(n for n in set(sys.modules) - before
               if n.split(".")[0] not in sys.stdlib_module_names and n.split(".")[0] not in own)
import json; print(json.dumps(names))
"""


def _run(code: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    completed = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                               text=True, check=True, env=dict(env) if env else None)
    return completed.stdout.strip().splitlines()[-1]


def time_import(statement: str, runs: int, cwd: Path = ROOT,
                env: Mapping[str, str] | None = None) -> float:
    """Median seconds ``statement`` takes in a fresh interpreter started in ``cwd``."""
    code = _TIMED.format(statement=statement)
    return statistics.median(float(_run(code, cwd, env)) for _ in range(runs))


def app_dependencies() -> list[str]:
    """Every third-party module that ``import app`` loads (its whole dependency closure)."""
    return list(json.loads(_run(_DEPENDENCIES.format(own=set(_OWN)), ROOT)))


def _import_all(modules: Sequence[str]) -> str:
    # Some entries in sys.modules are aliases that cannot be imported by name; skip those.
    return (f"import importlib\nfor m in {list(modules)!r}:\n"
            "    try: importlib.import_module(m)\n    except Exception: pass")


def _by_package(modules: Sequence[str]) -> dict[str, list[str]]:
    packages: dict[str, list[str]] = {}
    for name in modules:
        packages.setdefault(name.split(".")[0], []).append(name)
    return packages


def report(runs: int) -> str:
    """The cold-import table."""
    modules = app_dependencies()
    packages = _by_package(modules)
    app_s = time_import("import app", runs)
    deps_s = time_import("exec(" + repr(_import_all(modules)) + ")", runs)
    rows = [["import app (sagegate)", f"{app_s * 1000:.0f}", ""],
            [f"its third-party imports alone ({len(packages)} packages)", f"{deps_s * 1000:.0f}",
             f"so {(app_s - deps_s) * 1000:.0f} ms is sagegate's own"]]
    for package in sorted(packages):
        seconds = time_import("exec(" + repr(_import_all(packages[package])) + ")", runs)
        rows.append([f"  {package} alone ({len(packages[package])} modules)",
                     f"{seconds * 1000:.0f}", ""])
    ref_env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1",
               "ENDPOINT_NAME": "efficientnet-lite0"}
    ref_s = time_import("import app", runs, cwd=REFERENCE_APP, env=ref_env)
    rows.append(["import app (2018 reference, boto3 client at import)", f"{ref_s * 1000:.0f}",
                 "for comparison"])
    return table.render(["import (fresh interpreter)", f"ms (median of {runs})", "note"], rows,
                        left=1)
