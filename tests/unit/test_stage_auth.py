"""A deployed stage names its authentication: packaging refuses an implicitly open API."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sagegate.deploy import stages

ROOT = Path(__file__).resolve().parents[2]


def config_with(tmp_path: Path, **prod_env: str | None) -> tuple[Path, dict[str, Any]]:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    env = config["stages"]["prod"]["environment_variables"]
    for name, value in prod_env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path, config


@pytest.mark.parametrize("auth,message", [
    (None, "sets no SAGEGATE_AUTH"),
    ("", "sets no SAGEGATE_AUTH"),
    ("  ", "sets no SAGEGATE_AUTH"),
    ("none", "SAGEGATE_AUTH=none, which deploys"),
])
def test_an_implicitly_open_deployed_stage_is_refused(tmp_path: Path, auth: str | None,
                                                      message: str) -> None:
    path, _ = config_with(tmp_path, SAGEGATE_AUTH=auth)
    with pytest.raises(ValueError, match=message):
        stages.load_stage("prod", path)


def test_an_open_stage_said_so_explicitly_is_allowed(tmp_path: Path) -> None:
    path, _ = config_with(tmp_path, SAGEGATE_AUTH="none", SAGEGATE_OPEN_API="true")
    stage = stages.load_stage("prod", path)
    assert stage.auth == "none" and stage.open_api


@pytest.mark.parametrize("auth", ["api-key", "iam", "API-KEY"])
def test_a_named_mode_packages(tmp_path: Path, auth: str) -> None:
    path, _ = config_with(tmp_path, SAGEGATE_AUTH=auth)
    assert stages.load_stage("prod", path).auth == auth.lower()


def test_sagegate_package_stops_before_anything_when_the_mode_is_deleted(tmp_path: Path) -> None:
    """`sagegate package --stage prod` (make package) on a copy of the project without the key:
    it stops before building the layer or running chalice (the copy has neither's inputs)."""
    project = tmp_path / "project"
    for package in ("sagegate", "chalicelib"):
        shutil.copytree(ROOT / package, project / package,
                        ignore=shutil.ignore_patterns("__pycache__", "labels"))
    (project / ".chalice").mkdir()
    config_path, _ = config_with(tmp_path, SAGEGATE_AUTH=None)
    shutil.copy(config_path, project / ".chalice" / "config.json")
    done = subprocess.run([sys.executable, "-m", "sagegate.cli", "package", "--stage", "prod"],
                          cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "sets no SAGEGATE_AUTH" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not (project / "build").exists()
