"""The monitor's benchmark runs end to end on a small window (its figures are not asserted)."""
from __future__ import annotations

import pytest

from sagegate.monitor import bench

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_the_benchmark_prints_every_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--records", "3000", "--batch", "2000", "--workers-records",
                       "4000"]) == 0
    printed = capsys.readouterr().out.splitlines()
    lines = [line for line in printed if line.startswith("monitor check,")]
    assert len(lines) == 2
    assert "3000 records, flattened" in lines[0] and "3000 records, preprocessor" in lines[1]
    # the scheduled function's path, over the S3 sink's layout: one record an object
    [deployed] = [line for line in printed if line.startswith("deployed path")]
    assert "600 records, deployed" in deployed and "(one an object)" in deployed
    assert all("records/s" in line and "peak RSS" in line for line in [*lines, deployed])
    # one record of a TF Serving batch: one row per instance
    [batch] = [line for line in printed if line.startswith("batch record")]
    assert "2,000 instances: 2,000 rows" in batch and "peak RSS" in batch
    # --workers 1 and 2 side by side on one window, every run's rate, and the ratio
    workers = [line for line in printed if line.startswith("monitor check --workers")]
    assert [line.split(",")[0] for line in workers] == ["monitor check --workers 1",
                                                        "monitor check --workers 2"]
    assert all("4000 records:" in line and line.count("records/s") == 2 for line in workers)
    [ratio] = [line for line in printed if line.startswith("--workers 2 over --workers 1: ")]
    assert float(ratio.rsplit(" ", 1)[1].rstrip("x")) > 0
