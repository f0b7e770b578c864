"""A Lambda-like tree from the packaged zips, and a bare interpreter to run the handler in it.

For the deploy tests and ``bench/coldstart.py``: the function and layer zips a deploy uploads are
extracted into ``var/task`` and ``opt/python``; ``var/runtime`` gets what Lambda's Python runtime
provides (boto3, ``snapshot_restore_py``), linked from this environment. :func:`invoke` runs
``sandbox_child.py`` by its path in a bare interpreter that cannot import this package.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CHILD = Path(__file__).resolve().parent / "sandbox_child.py"
# What Lambda's Python runtimes put on sys.path after the function and its layers.
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six",
                    "snapshot_restore_py")
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
                     "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                     "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEXAMPLETOKEN"}


@dataclasses.dataclass(frozen=True)
class LambdaTree:
    """Where the function code, the layer and the runtime's packages were put."""

    task: Path
    layer: Path
    runtime: Path

    @classmethod
    def build(cls, root: Path, function_zip: Path, layer_zip: Path) -> LambdaTree:
        tree = cls(root / "var" / "task", root / "opt", root / "var" / "runtime")
        for archive, target in ((function_zip, tree.task), (layer_zip, tree.layer)):
            with zipfile.ZipFile(archive) as zipped:
                zipped.extractall(target)
        _expose_runtime_packages(tree.runtime)
        return tree


def _expose_runtime_packages(target: Path) -> None:
    """Link boto3, what it needs and the SnapStart hooks library, nothing else."""
    target.mkdir(parents=True)
    for name in RUNTIME_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{name} is not installed: the Lambda runtime provides it")
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (target / source.name).symlink_to(source, target_is_directory=source.is_dir())


def lambda_env(variables: Mapping[str, str], function_name: str, runtime: str,
               endpoint_url: str, snapstart: bool = False) -> dict[str, str]:
    return {**variables, **DUMMY_CREDENTIALS,
            "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_LAMBDA_FUNCTION_NAME": function_name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1769", "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{runtime}", "LAMBDA_TASK_ROOT": "/var/task",
            "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start" if snapstart else "on-demand",
            "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": endpoint_url, "LANG": "en_US.UTF-8",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@dataclasses.dataclass(frozen=True)
class Run:
    """One bare-interpreter run: the handler's answers, the child's report, its output."""

    answers: list[dict[str, Any]]
    report: dict[str, Any]
    logs: str


def invoke(tree: LambdaTree, env: Mapping[str, str], events: Sequence[Mapping[str, Any]],
           workdir: Path, python: str = sys.executable, timeout: float = 120.0,
           handler: str = "app", function_timeout: float = 28.0) -> Run:
    """Replay ``events`` through the packaged handler in a fresh ``python -I -S -B``.

    ``handler`` is the name in app.py Lambda calls (``app``, ``job_runner``, ``monitor``); each
    invocation's context counts down from ``function_timeout``, as Lambda's.

    Raises:
        RuntimeError: the child failed (its output is in the message).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    events_path, out = workdir / "events.json", workdir / "answers.json"
    events_path.write_text(json.dumps(list(events)))
    done = subprocess.run(
        [python, "-I", "-S", "-B", str(CHILD), str(tree.task), str(tree.layer / "python"),
         str(tree.runtime), str(events_path), str(out), handler, str(function_timeout)],
        env=dict(env), cwd=workdir, capture_output=True, text=True, timeout=timeout,
        check=False)
    logs = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"the handler's interpreter exited {done.returncode}:\n{logs}")
    report = json.loads(out.read_text())
    return Run(report["answers"], report, logs)
