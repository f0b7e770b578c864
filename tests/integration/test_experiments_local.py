"""The experiments ``make run`` serves, on its own stack: the default emulator (the float
EfficientNet-Lite0 and its int8 quantization, each its own endpoint) and ``chalice local
--stage local``, run in a copy of the project so that its ``captures/`` is the copy's.

* ``efficientnet-lite0-ab``: 50/50, sticky by ``X-User-Id``. 300 distinct callers land
  within 40-60 % per arm; one caller's 15 requests meet one arm; the answer names its arm in
  ``X-Sagegate-Arm`` (exposed by CORS) and its body is the default model's, nothing added;
  each arm's traffic is captured under its own endpoint, marked with its arm.
* ``efficientnet-lite0-shadow``: the float model answers; after the answer, the int8 model
  gets a copy, captured as shadow traffic under the primary's inference id. ``sagegate
  monitor compare`` on the two endpoints' folders prints the agreement and the distances,
  exits 0 within loose thresholds and 3 past a strict one, and its report opens in Chromium.
"""
from __future__ import annotations

import collections
import datetime
import json
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import urllib3
from playwright.sync_api import Browser
from skimage import data

from emulator.process import free_port, start_emulator
from sagegate.local.processes import ApiProcess, copy_project, start_chalice_local

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FLOAT, INT8 = "efficientnet-lite0", "efficientnet-lite0-int8"
AB, SHADOWED = "efficientnet-lite0-ab", "efficientnet-lite0-shadow"
ROOT = Path(__file__).resolve().parents[2]
SAGEGATE = Path(sys.executable).parent / "sagegate"
CALLERS = 300
SHADOWED_REQUESTS = 40
"""Requests to the shadowed model: each answered by the float model, copied to int8."""


class Local:
    """make run's stack: chalice local (stage local) in front of the default emulator."""

    def __init__(self, api: ApiProcess, captures: Path) -> None:
        self.api = api
        self.captures = captures
        self.http = urllib3.PoolManager(maxsize=4, retries=False, timeout=60)

    def predict(self, model: str, image: bytes, **headers: str) -> urllib3.BaseHTTPResponse:
        return self.http.request("POST", f"{self.api.url}/models/{model}/predict?k=3",
                                 body=image, headers={"Content-Type": "image/jpeg", **headers})

    def records(self, endpoint: str) -> list[dict[str, Any]]:
        """Every capture record under one endpoint's folder, as far as its lines are whole
        (the writer may be appending one while the test polls)."""
        records: list[dict[str, Any]] = []
        for path in sorted((self.captures / endpoint).rglob("*.jsonl")):
            whole, _, _ = path.read_text(encoding="utf-8").rpartition("\n")
            records.extend(json.loads(line) for line in whole.split("\n") if line)
        return records


@pytest.fixture(scope="module")
def local() -> Iterator[Local]:
    with tempfile.TemporaryDirectory(prefix="sagegate-experiments-") as folder:
        root = Path(folder)
        copy_project(root)
        with open(root / "emulator.log", "w") as emulator_log, \
                start_emulator(echo_stderr=emulator_log) as emulator, \
                open(root / "api.log", "wb") as api_log:
            api = start_chalice_local(free_port(), emulator.url, project_dir=root,
                                      stage="local", log=api_log)
            try:
                yield Local(api, root / "captures")  # the local stage's CAPTURE_DESTINATION
            finally:
                api.stop()


def _jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    ok, buffer = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                              [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buffer.tobytes()


@pytest.fixture(scope="module")
def small() -> bytes:
    """One small photo (the callers' test needs many answers, not big decodes)."""
    return _jpeg(cv2.resize(data.chelsea(), (160, 120), interpolation=cv2.INTER_AREA))


def _unique(jpeg: bytes, text: str) -> bytes:
    """The same pixels in other bytes (a JPEG comment after SOI): not a cache hit."""
    payload = text.encode("ascii")
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def _photos(count: int) -> list[bytes]:
    """``count`` different real photos: crops of scikit-image's, 256x256 at varied places."""
    sources = [data.chelsea(), data.coffee(), data.astronaut(), data.rocket()]
    crops = []
    for index in range(count):
        image = sources[index % len(sources)]
        height, width = image.shape[:2]
        step = index // len(sources)
        top = (step * 37) % max(1, height - 256)
        left = (step * 53) % max(1, width - 256)
        crops.append(_jpeg(np.ascontiguousarray(image[top:top + 256, left:left + 256])))
    return crops


def test_300_distinct_callers_split_about_half_and_half(local: Local, small: bytes) -> None:
    arms: collections.Counter[str] = collections.Counter()
    for caller in range(CALLERS):
        response = local.predict(AB, small, **{"X-User-Id": f"user-{caller:04d}"})
        assert response.status == 200, response.data[:300]
        arms[response.headers["X-Sagegate-Arm"]] += 1
    assert set(arms) == {"float", "int8"}
    for count in arms.values():
        assert 0.40 * CALLERS <= count <= 0.60 * CALLERS, arms


def test_one_caller_meets_one_arm_and_the_answer_names_it(local: Local, small: bytes) -> None:
    for caller in ("ana", "bo", "chen"):
        seen = {local.predict(AB, small, **{"X-User-Id": caller}).headers["X-Sagegate-Arm"]
                for _ in range(15)}
        assert len(seen) == 1, (caller, seen)


def test_the_answer_is_the_models_own_and_browsers_may_read_the_arm(
        local: Local, small: bytes) -> None:
    plain = local.predict(FLOAT, small)
    tried = local.predict(AB, small, **{"X-User-Id": "user-0001", "Origin": "http://app.test"})
    assert plain.status == tried.status == 200
    assert "X-Sagegate-Arm" not in plain.headers
    assert set(json.loads(tried.data)) == set(json.loads(plain.data))
    exposed = [name.strip().lower() for name in
               tried.headers.get("Access-Control-Expose-Headers", "").split(",")]
    assert "x-sagegate-arm" in exposed


def test_each_arms_traffic_is_captured_under_its_endpoint(local: Local, small: bytes) -> None:
    served: collections.Counter[tuple[str, str]] = collections.Counter()
    for caller in range(20):
        response = local.predict(AB, _unique(small, f"capture-{caller}"),
                                 **{"X-User-Id": f"capture-{caller}"})
        assert response.headers["X-Cache"].startswith("miss")
        served[(response.headers["X-Sagegate-Arm"], response.headers["X-Request-Id"])] += 1
    by_id: dict[str, tuple[str, dict[str, Any]]] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # captures are stored after the answers
        by_id = {record["eventMetadata"]["inferenceId"]: (endpoint, record)
                 for endpoint in (FLOAT, INT8) for record in local.records(endpoint)}
        if all(request in by_id for _, request in served):
            break
        time.sleep(0.2)
    for arm, request in served:
        endpoint, record = by_id[request]
        assert endpoint == {"float": FLOAT, "int8": INT8}[arm]
        assert record["eventMetadata"]["sagegateArm"] == arm
        assert record["eventMetadata"]["sagegateLatencyMs"] > 0
        assert "invocationSource" not in record["eventMetadata"]


def _wait_for_shadows(local: Local, ids: list[str]) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + 60
    shadows: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        shadows = {record["eventMetadata"]["inferenceId"]: record
                   for record in local.records(INT8)
                   if record["eventMetadata"].get("invocationSource") == "ShadowExperiment"}
        if all(request in shadows for request in ids):
            break
        time.sleep(0.25)
    return shadows


@pytest.fixture(scope="module")
def shadowed(local: Local) -> list[str]:
    """The shadowed model's request ids, after its copies were captured."""
    ids = []
    for photo in _photos(SHADOWED_REQUESTS):
        response = local.predict(SHADOWED, photo)
        assert response.status == 200, response.data[:300]
        assert response.headers["X-Sagegate-Arm"] == "primary"
        ids.append(response.headers["X-Request-Id"])
    return ids


def test_shadow_answers_are_captured_and_paired_with_the_primarys(
        local: Local, shadowed: list[str]) -> None:
    shadows = _wait_for_shadows(local, shadowed)
    primaries = {record["eventMetadata"]["inferenceId"]: record
                 for record in local.records(FLOAT)}
    for request in shadowed:
        shadow, primary = shadows[request], primaries[request]
        assert shadow["eventMetadata"]["sagegateArm"] == "shadow-int8"
        assert primary["eventMetadata"]["sagegateArm"] == "primary"
        assert "invocationSource" not in primary["eventMetadata"]
        # both saw the same preprocessed image; each answered its own probabilities
        assert shadow["captureData"]["endpointInput"]["data"] == \
            primary["captureData"]["endpointInput"]["data"]
        probabilities = json.loads(shadow["captureData"]["endpointOutput"]["data"])
        assert len(probabilities) == 1000 and abs(sum(probabilities) - 1.0) < 1e-3


def _window() -> list[str]:
    now = datetime.datetime.now(datetime.UTC)
    return ["--start", (now - datetime.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%MZ"),
            "--end", (now + datetime.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%MZ")]


def _compare(local: Local, out: Path, *gates: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SAGEGATE), "monitor", "compare", str(local.captures / FLOAT),
         str(local.captures / INT8), "-o", str(out), *_window(), *gates,
         # the A/B test's arms share these endpoints' folders: the shadow test's records only
         "--arm-a", "primary", "--arm-b", "shadow-int8"],
        capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def verdict(local: Local, shadowed: list[str],
            tmp_path_factory: pytest.TempPathFactory) -> Path:
    """compare's output on the shadow's traffic, within loose thresholds."""
    assert _wait_for_shadows(local, shadowed).keys() >= set(shadowed)
    out = tmp_path_factory.mktemp("verdict")
    run = _compare(local, out, "--min-agreement", "0.6", "--max-error-rate", "0.05")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "agreement: " in run.stdout
    return out


def test_compare_prints_the_agreement_and_passes_loose_thresholds(verdict: Path) -> None:
    document = json.loads((verdict / "compare.json").read_text(encoding="utf-8"))
    agreement = document["agreement"]
    assert agreement["compared"] == SHADOWED_REQUESTS  # every shadow paired with its primary
    assert (agreement["unpaired_a"], agreement["unpaired_b"]) == (0, 0)
    assert document["b"]["errors"]["rate"] == 0.0
    assert 0.6 <= agreement["agreement"] <= 1.0
    distances = [column["distance"] for column in document["columns"]
                 if column["name"].startswith("prediction")]
    assert len(distances) == 1000 and max(distances) > 0  # int8 does move the probabilities


def test_compare_exits_3_past_a_strict_threshold(local: Local, verdict: Path,
                                                  tmp_path: Path) -> None:
    run = _compare(local, tmp_path / "strict", "--max-distance", "0.0001")
    assert run.returncode == 3, run.stdout + run.stderr
    assert "distance" in run.stdout


def test_the_report_of_make_run_traffic_opens_in_chromium(browser: Browser,
                                                          verdict: Path) -> None:
    context = browser.new_context(offline=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((verdict / "compare.html").as_uri())
    assert page.locator("#verdict").is_visible()
    assert page.locator("#verdict svg.badge").get_attribute("aria-label") == "PASS"
    assert page.locator("table.agreement").is_visible()
    assert page.locator("table.columns > tbody > tr").count() > 0
    assert not errors
    context.close()
