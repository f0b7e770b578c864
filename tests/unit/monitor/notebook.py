"""Model Monitor's introduction example (tests/fixtures/model_monitor_introduction): its
training data, and its monitored hour rebuilt as the notebook made it."""
from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "model_monitor_introduction"
TRAINING = FIXTURE / "training-dataset-with-header.csv"
TEST_INPUTS = FIXTURE / "test-dataset-input-cols.csv"
HOUR = datetime.datetime(2022, 4, 18, 0, tzinfo=datetime.UTC)
FIRST_BATCH, PASSES, LAST_PASS = 180, 5, 127
"""The hour's traffic: the notebook's first 180 rows (cell 12), then its endless loop over the
whole file (cell 39): 5 passes and 127 rows of a sixth fell in the hour, 1,977 records (the
real run's 99.64592817400101% is 1,970 / 1,977: the fractional first row was sent 7 times)."""


def real_run() -> dict[str, Any]:
    """What the notebook's saved outputs show of the real run."""
    document: dict[str, Any] = json.loads((FIXTURE / "real_run.json").read_text())
    return document


def _score(values: list[str]) -> str:
    """A churn probability for a row (the notebook's XGBoost model is not here): a logistic
    of a few columns, written as the endpoint wrote its answers (a double, never integral)."""
    day_mins, cust_serv = float(values[2]), float(values[10])
    z = 0.012 * (day_mins - 180.0) + 0.6 * (cust_serv - 1.5) - 1.8
    return repr(1.0 / (1.0 + math.exp(-z)))


def traffic() -> list[str]:
    """The CSV bodies sent in the monitored hour, in order."""
    rows = TEST_INPUTS.read_text().splitlines()
    return rows[:FIRST_BATCH] + rows * PASSES + rows[:LAST_PASS]


def capture_lines() -> Iterator[str]:
    """The hour's capture records, as the endpoint's data capture wrote them."""
    for index, body in enumerate(traffic()):
        when = HOUR + datetime.timedelta(seconds=index * 1.8)
        yield json.dumps({
            "captureData": {
                "endpointInput": {"observedContentType": "text/csv", "mode": "INPUT",
                                  "data": body, "encoding": "CSV"},
                "endpointOutput": {"observedContentType": "text/csv; charset=utf-8",
                                   "mode": "OUTPUT", "data": _score(body.split(",")),
                                   "encoding": "CSV"}},
            "eventMetadata": {"eventId": f"00000000-0000-4000-8000-{index:012d}",
                              "inferenceTime": when.strftime("%Y-%m-%dT%H:%M:%SZ")},
            "eventVersion": "0"})


def write_captures(root: Path, endpoint: str = "DEMO-xgb-churn-pred-model-monitor") -> Path:
    """The hour's records under ``root/<endpoint>/AllTraffic/2022/04/18/00/``, in files of
    a minute each as data capture writes them; returns the endpoint's folder."""
    folder = root / endpoint / "AllTraffic" / "2022" / "04" / "18" / "00"
    folder.mkdir(parents=True, exist_ok=True)
    by_minute: dict[int, list[str]] = {}
    for line in capture_lines():
        minute = int(json.loads(line)["eventMetadata"]["inferenceTime"][14:16])
        by_minute.setdefault(minute, []).append(line)
    for minute, lines in by_minute.items():
        (folder / f"{minute:02d}-00-000-{minute:08d}.jsonl").write_text("\n".join(lines) + "\n")
    return root / endpoint
