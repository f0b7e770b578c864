"""The request path's cold start: importing app.py (what every Lambda init does) loads none of
what only the job functions, the job routes or the scheduled monitor use."""
from __future__ import annotations

import subprocess
import sys

from sagegate.localstack import ROOT


def test_importing_app_loads_no_part_of_jobs_the_monitor_or_boto3() -> None:
    code = "import sys, app; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120, cwd=ROOT)
    modules = done.stdout.split()
    assert "app" in modules and "chalicelib.services" in modules  # it did import the app
    deferred = [m for m in modules if m.startswith(("chalicelib.jobs", "chalicelib.monitor"))
                or m.split(".")[0] in ("boto3", "moto", "datasketches", "s3transfer")]
    assert deferred == []
