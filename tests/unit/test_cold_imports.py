"""The request path's cold start: importing app.py (what every Lambda init does) loads none of
what only the job functions, the job routes or the scheduled monitor use: no module of
``chalicelib.jobs`` or ``chalicelib.monitor`` and nothing of boto3, s3transfer or datasketches
(its compiled ``_datasketches`` too), under whatever name a module is loaded: each loaded
module is judged by its file as well as its name.

app.py is imported for real in a fresh interpreter, as each place imports it: with no stage,
under each stage's environment of ``.chalice/config.json`` (jobs on, the cache's table, capture
on: what a test without them would never see), and as Lambda's init runs it, warm-up included
(there boto3 is the endpoint client's, built on purpose; the rest stays deferred). And the
check itself is shown to fail: the same probe with those imports added finds each of them.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sagegate.deploy.stages import load_config, load_stage
from sagegate.local.processes import ROOT

DEFERRED_PACKAGES = ("chalicelib/jobs", "chalicelib/monitor")
"""Folders of the project none of whose files app.py may load."""
DEFERRED_DISTRIBUTIONS = ("boto3", "s3transfer", "datasketches", "moto")
"""Installed distributions none of whose modules app.py may load (boto3's own dependency,
s3transfer, is named: it is what a boto3 import drags in)."""
LAMBDA_ALLOWED = ("boto3", "s3transfer")
"""What Lambda's init may load: its warm-up builds the endpoint's boto3 client."""
STAGES = sorted(load_config()["stages"])
LAMBDA_ENV = {"AWS_LAMBDA_FUNCTION_NAME": "sagegate-dev",
              "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13", "AWS_REGION": "us-east-1",
              "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "cold",
              "AWS_SECRET_ACCESS_KEY": "cold"}
PROBE = ("import json, sys, app\n{extra}\n"
         "print(json.dumps({{name: getattr(module, '__file__', None)\n"
         "                  for name, module in list(sys.modules.items())}}))")


def loaded(env: dict[str, str], extra: str = "") -> dict[str, str | None]:
    """Every module (name -> file) loaded in a fresh interpreter by ``import app``, then
    ``extra``."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    modules: dict[str, str | None] = json.loads(done.stdout.splitlines()[-1])
    return modules


def _distribution_names(allowed: tuple[str, ...]) -> tuple[set[str], set[Path]]:
    """The top-level module names and the files of the deferred distributions."""
    names: set[str] = set()
    files: set[Path] = set()
    for name in DEFERRED_DISTRIBUTIONS:
        if name in allowed:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed: nothing of it can be loaded
        for file in distribution.files or ():
            if file.suffix in (".py", ".so", ".pyd"):
                names.add(file.parts[0].split(".")[0].removesuffix(".py"))
                files.add(Path(str(distribution.locate_file(file))).resolve())
    return names - {"..", ""}, files


def deferred(modules: dict[str, str | None], allowed: tuple[str, ...] = ()) -> list[str]:
    """The modules among ``modules`` that app.py must not load, by name or by file."""
    names, files = _distribution_names(allowed)
    folders = [(ROOT / package).resolve() for package in DEFERRED_PACKAGES]
    dotted = tuple(package.replace("/", ".") for package in DEFERRED_PACKAGES)
    found = []
    for name, file in modules.items():
        path = Path(file).resolve() if file else None
        if name.startswith(dotted) or name.split(".")[0] in names or (path is not None and (
                path in files or any(path.is_relative_to(folder) for folder in folders))):
            found.append(name)
    return sorted(found)


def base_env() -> dict[str, str]:
    """This process's environment without what would make the import Lambda's, or a stage's."""
    return {name: value for name, value in os.environ.items()
            if not name.startswith(("AWS_LAMBDA_", "AWS_EXECUTION_ENV", "LAMBDA_"))}


def test_importing_app_with_no_stage_loads_none_of_it() -> None:
    modules = loaded(base_env())
    assert "app" in modules
    assert deferred(modules) == []


@pytest.mark.parametrize("stage", STAGES)
def test_importing_app_under_each_stage_loads_none_of_it(stage: str) -> None:
    assert deferred(loaded({**base_env(), **load_stage(stage).env})) == []


def test_lambdas_init_with_its_warm_up_loads_no_jobs_monitor_or_sketches() -> None:
    env = {**base_env(), **load_stage("dev").env, **LAMBDA_ENV}
    modules = loaded(env)
    assert "boto3" in modules  # the warm-up did run: it builds the endpoint's client
    assert deferred(modules, allowed=LAMBDA_ALLOWED) == []


def test_the_check_finds_each_thing_it_guards_whatever_its_name() -> None:
    """The bug each test above would miss if the check were blind: app.py loading jobs, the
    monitor (by its file, under another name), boto3, or datasketches' compiled module."""
    monitor = next(path for path in sorted((ROOT / "chalicelib" / "monitor").glob("*.py"))
                   if path.name != "__init__.py")
    extra = ("import chalicelib.jobs.records, boto3, _datasketches, importlib.util\n"
             f"spec = importlib.util.spec_from_file_location('renamed', {str(monitor)!r})\n"
             "sys.modules['renamed'] = importlib.util.module_from_spec(spec)")
    found = deferred(loaded(base_env(), extra))
    assert "chalicelib.jobs.records" in found and "boto3" in found
    assert "_datasketches" in found and "renamed" in found
