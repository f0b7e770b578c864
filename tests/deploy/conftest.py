"""Deploy tier: the artifacts a deployment uploads, built by the Makefile, checked offline.

``make test`` builds them first (``deploy-check``); run alone, the fixtures build them with
the same ``make package`` (the layer is cached in build/layer, so that costs seconds).
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "events"


@dataclass(frozen=True)
class Package:
    """What ``make package STAGE=...`` produced for one stage."""

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
    # -o: never reinstall the virtualenv from inside a test run that is using it
    done = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "package",
                           f"STAGE={stage}", "PKG_FORMAT=cloudformation"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"make package STAGE={stage} failed:\n{done.stdout}{done.stderr}"
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
