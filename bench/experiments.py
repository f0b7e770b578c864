"""Experiments part: what a shadow costs its callers, when the shadow is the slowest endpoint
there is.

``make run``'s stack (the default emulator, ``chalice local --stage local``), run in a copy of
the project whose registry holds two more models, each the ``iris`` model (its endpoint,
signature, labels and answers) in an experiment whose one arm is ``iris``: ``iris-armed``
without a shadow, and ``iris-shadowed`` whose shadow is the emulator's ``slow`` endpoint
(iris's graph, answering after 75 s), copied every request (``sample: 1``) with the longest
timeout a shadow may have (60 s). One caller, one keep-alive connection, side by side in one
run (the order rotating every round):

* **no experiment**: ``POST /models/iris/predict``;
* **arm, no shadow**: ``POST /models/iris-armed/predict``: what an experiment itself adds;
* **arm, shadow at slow**: ``POST /models/iris-shadowed/predict``, the same row, the same
  endpoint answering; after each answer a copy goes to ``slow``.

All with ``Cache-Control: no-cache`` (the endpoint is called every time). Each figure is the
wall time to the answer's last byte, median and p90; the ratio is each median over the
experiment's without the shadow, so the shadow's own cost is the last row's. A shadow target
runs 4 calls at once and holds at most 16 more: every copy past them is
dropped at once (counted as ``ShadowDropped``, read here from the API's log), so the run also
shows what a full pool costs the caller. An answer that differs between the three (their
model names and request ids aside), or an experiment's answer without ``X-Sagegate-Arm:
primary``, fails the run.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import urllib3

from bench import table
from bench.jobs import p90, rounds
from bench.report import Report
from bench.timing import Budget
from emulator.process import free_port, start_emulator
from sagegate.local.processes import ROOT, copy_project, start_chalice_local

PLAIN, ARMED, SHADOWED = "iris", "iris-armed", "iris-shadowed"
ROW = json.dumps({"instances": [[5.9, 3.0, 4.2, 1.5]]}).encode()
TARGET_RATIO = 1.10
"""The shadowed median at most this times the plain one: the caller does not see the shadow."""
SHADOW_TIMEOUT_S = 60
FULL = Budget(warmup=5, min_reps=200, max_reps=200, seconds=0.0)
QUICK = Budget(warmup=1, min_reps=20, max_reps=20, seconds=0.0)


class ExperimentError(RuntimeError):
    """An answer the run cannot accept (the message says which)."""


def experiment_model(shadow: bool) -> dict[str, Any]:
    """``iris`` in an experiment of one arm, ``iris`` itself; with ``shadow``, every request
    copied to the 75 s ``slow`` endpoint."""
    model: dict[str, Any] = json.loads((ROOT / "chalicelib" / "models" / PLAIN / "model.json")
                                       .read_text(encoding="utf-8"))
    model.pop("jobs", None)
    model["description"] = "iris in an experiment (bench)"
    model["experiment"] = {
        "arms": [{"name": "primary", "endpoint": "iris", "weight": 1}], "sticky": "none",
        "shadow": [{"name": "slow", "endpoint": "slow", "sample": 1.0,
                    "timeout_seconds": SHADOW_TIMEOUT_S}] if shadow else []}
    return model


def project_with_experiments(root: Path) -> None:
    """The Chalice project in ``root``, with the two experiment models registered."""
    copy_project(root)
    for name, shadow in ((ARMED, False), (SHADOWED, True)):
        folder = root / "chalicelib" / "models" / name
        shutil.copytree(root / "chalicelib" / "models" / PLAIN, folder)  # its labels.txt too
        (folder / "model.json").write_text(json.dumps(experiment_model(shadow), indent=2))


class Caller:
    """One caller of the three models over one keep-alive connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = urllib3.PoolManager(maxsize=1, retries=False, timeout=30)

    def way(self, model: str) -> Callable[[], Any]:
        """A call of ``model``'s predict route, returning its answer's body."""
        def call() -> Any:
            response = self.http.request(
                "POST", f"{self.url}/models/{model}/predict", body=ROW,
                headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
            if response.status != 200:
                raise ExperimentError(f"{model}: {response.status} {response.data[:300]!r}")
            arm = response.headers.get("X-Sagegate-Arm")
            if arm != (None if model == PLAIN else "primary"):
                raise ExperimentError(f"{model}: X-Sagegate-Arm {arm!r}")
            answer = json.loads(response.data)
            for own in ("model", "request_id"):  # each answer's own
                answer.pop(own)
            return answer
        return call


def _dropped(log: Path) -> int:
    """The shadow copies the API dropped (its EMF ``ShadowDropped`` counts)."""
    total = 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if '"ShadowDropped"' in line and line.startswith("{"):
            try:
                total += int(sum(json.loads(line).get("ShadowDropped", [0])))
            except (ValueError, TypeError):
                continue
    return total


HEADERS = ["path", "runs", "median ms", "p90 ms", "x arm, no shadow"]


def report(quick: bool = False) -> Report:
    """Run the part and print its table (``quick``: few rounds, a smoke run)."""
    budget = QUICK if quick else FULL
    out = Report()
    out.say(table.section("Experiments - a shadow at the slowest endpoint, seen by the caller"),
            "  make run's stack ('local' stage, the default emulator) in a copy of the project "
            f"with '{SHADOWED}':", f"  '{PLAIN}' whose every request is copied after the "
            f"answer to 'slow' (75 s; shadow timeout {SHADOW_TIMEOUT_S} s);",
            "  one caller, one keep-alive connection, the two side by side (order switching); "
            "wall ms to the answer.", "")
    with tempfile.TemporaryDirectory(prefix="sagegate-bench-experiments-") as folder:
        root = Path(folder)
        project_with_experiments(root)
        log_path = root / "api.log"
        with open(root / "emulator.log", "w") as emulator_log, \
                start_emulator(echo_stderr=emulator_log) as emulator, \
                open(log_path, "wb") as api_log:
            api = start_chalice_local(free_port(), emulator.url, project_dir=root,
                                      stage="local", log=api_log)
            try:
                caller = Caller(api.url)
                samples, different = rounds(
                    {"no experiment": caller.way(PLAIN), "arm, no shadow": caller.way(ARMED),
                     "arm, shadow at slow": caller.way(SHADOWED)}, budget)
                dropped = _dropped(log_path)
            finally:
                api.stop(timeout=5.0)
    plain = samples["arm, no shadow"].wall
    shadowed = samples["arm, shadow at slow"].wall
    rows = [[name, str(len(found.wall_ms)), table.ms(found.wall),
             table.ms(p90(found.wall_ms)), f"{found.wall / plain:.3f}x"]
            for name, found in samples.items()]
    met = shadowed / plain <= TARGET_RATIO
    copies = len(samples["arm, shadow at slow"].wall_ms) + budget.warmup
    out.say(table.render(HEADERS, rows, left=1), "",
            f"  shadow copies: {copies}, of which {dropped} dropped (past the target's 4 "
            "calls and 16 waiting, or waiting past the 60 s timeout; all of them to 'slow')",
            f"  target: the shadowed median <= {TARGET_RATIO:.2f}x the same experiment's "
            "without the shadow: "
            f"{table.verdict(met)} ({shadowed / plain:.3f}x)")
    if not met:
        out.missed.append(f"experiments: a shadow at slow made the callers' median "
                          f"{shadowed / plain:.2f}x the one without (target "
                          f"{TARGET_RATIO:.2f}x)")
    if different:
        out.failures.append(f"experiments: {different} answer(s) of the experiment models "
                            "differed from the plain model's")
    return out
