"""Deploy tier: the artifacts a deployment uploads, built by ``sagegate package``, checked offline.

``make test`` builds them first (``sagegate check``); run alone, the fixtures build them with
the same ``sagegate package`` (the layer is reused while its inputs are unchanged, so that costs
seconds).
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

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "events"


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
                           "--format", "cloudformation"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, \
        f"sagegate package --stage {stage} failed:\n{done.stdout}{done.stderr}"
    return Package(stage, ROOT / "build" / f"package-{stage}")


@pytest.fixture(scope="session")
def package() -> Callable[[str], Package]:
    """Build (once per session and stage) and return a stage's package."""
    built: dict[str, Package] = {}

    def get(stage: str) -> Package:
        if stage not in built:
            built[stage] = _make_package(stage)
        return built[stage]

    return get


def load_event(name: str) -> dict[str, Any]:
    """One stored API Gateway event (``tests/events/apigw-<name>.json``)."""
    return json.loads((EVENTS / f"apigw-{name}.json").read_text())  # type: ignore[no-any-return]
