"""Model Monitor's introduction example through the command, as a user would run it: the
training CSV baselined, the notebook's hour of captures checked, the real run's answer."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.monitor import notebook

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _monitor(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sagegate.monitor", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_notebooks_hour_gives_its_60_violations_from_the_command(tmp_path: Path) -> None:
    made = _monitor("baseline", str(notebook.TRAINING), "-o", str(tmp_path / "baseline"))
    assert made.returncode == 0, made.stderr
    captures = notebook.write_captures(tmp_path / "captures")
    checked = _monitor("check", str(captures), "--baseline", str(tmp_path / "baseline"),
                       "-o", str(tmp_path / "out"), "--start", "2022-04-18T00:00Z",
                       "--end", "2022-04-18T01:00Z")
    assert checked.returncode == 3, checked.stderr
    printed = checked.stdout.splitlines()
    assert len(printed) == 60 and "Traceback" not in checked.stderr
    assert ("Churn: data_type_check: Data type match requirement is not met. Expected data "
            "type: Integral, Expected match: 100.0%. Observed: Only 0.0% of data is "
            "Integral.") in printed
    real = notebook.real_run()["monitoring_run"]["violations_shown"]
    written = json.loads((tmp_path / "out" / "constraint_violations.json").read_text())
    assert all(shown in written["violations"] for shown in real)
    statistics = json.loads((tmp_path / "out" / "statistics.json").read_text())
    assert statistics["dataset"]["item_count"] == 1977
    assert statistics["features"][1]["name"] == "Account Length"


def test_the_folder_above_the_endpoints_is_refused_not_read_as_clean(tmp_path: Path) -> None:
    made = _monitor("baseline", str(notebook.TRAINING), "-o", str(tmp_path / "baseline"))
    assert made.returncode == 0, made.stderr
    notebook.write_captures(tmp_path / "captures")
    checked = _monitor("check", str(tmp_path / "captures"), "--baseline",
                       str(tmp_path / "baseline"), "-o", str(tmp_path / "out"),
                       "--start", "2022-04-18T00:00Z", "--end", "2022-04-18T01:00Z")
    assert checked.returncode == 2
    [line] = checked.stderr.splitlines()
    assert "DEMO-xgb-churn-pred-model-monitor" in line
