"""Deploy tier: the artifacts a deployment uploads, built by ``sagegate package``, checked offline.

``make test`` builds them first (``sagegate check``); run alone, the fixtures build them with
the same ``sagegate package`` (the layer is reused while its inputs are unchanged, so that costs
seconds). The tests run the packaged code on this machine's CPU, so :func:`package` builds each
stage for x86_64 (``--architecture x86_64``): an arm64 stage's x86_64 build goes to
``build/package-<stage>-x86_64``, beside the stage's own; ``tests/deploy/test_arm64.py`` checks
the arm64 build.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sagegate.deploy.package import package_dir
from sagegate.deploy.stages import load_stage

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "events"
HOST_ARCHITECTURE = "x86_64"  # this machine's, which runs the packaged code


@dataclass(frozen=True)
class Package:
    """What ``sagegate package --stage ...`` produced for one stage."""

    stage: str
    directory: Path

    @property
    def template(self) -> dict[str, Any]:
        return json.loads((self.directory / "sam.json").read_text())  # type: ignore[no-any-return]

    @property
    def function_zip(self) -> Path:
        return self.directory / "deployment.zip"

    @property
    def layer_zip(self) -> Path:
        return self.directory / "layer.zip"

    def resource(self, name: str) -> dict[str, Any]:
        return self.template["Resources"][name]  # type: ignore[no-any-return]


def _make_package(stage: str) -> Package:
    done = subprocess.run([sys.executable, "-m", "sagegate.cli", "package", "--stage", stage,
                           "--format", "cloudformation", "--architecture", HOST_ARCHITECTURE],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, \
        f"sagegate package --stage {stage} failed:\n{done.stdout}{done.stderr}"
    return Package(stage, package_dir(load_stage(stage), ROOT, HOST_ARCHITECTURE))


@pytest.fixture(scope="session")
def package() -> Callable[[str], Package]:
    """Build (once per session and stage) and return a stage's package, for x86_64."""
    built: dict[str, Package] = {}

    def get(stage: str) -> Package:
        if stage not in built:
            built[stage] = _make_package(stage)
        return built[stage]

    return get


def load_event(name: str) -> dict[str, Any]:
    """One stored API Gateway event (``tests/events/apigw-<name>.json``)."""
    return json.loads((EVENTS / f"apigw-{name}.json").read_text())  # type: ignore[no-any-return]
