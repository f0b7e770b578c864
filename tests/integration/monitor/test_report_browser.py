"""The monitoring report opened in Chromium under the API's Content-Security-Policy: a chart
per feature is drawn (SVG in the DOM, pixels on the screenshot) with nothing fetched."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Browser

from sagegate.monitor import cli
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CSP = ("default-src 'none'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'none'; base-uri 'none'; form-action 'none'")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    dataset = capturegen.training_csv(folder / "train.csv", 2000, header=False)
    assert cli.main(["baseline", str(dataset), "-o", str(folder / "baseline")]) == 0
    captures = capturegen.write_window(folder / "iris", 800,
                                       capturegen.iris_like(shift={2: 1.0}))
    assert cli.main(["check", str(captures), "--baseline", str(folder / "baseline"), "-o",
                     str(folder / "out"), "--start", "2026-11-25T09:00Z", "--end",
                     "2026-11-25T10:00Z"]) == cli.EXIT_VIOLATIONS
    return folder / "out" / "report.html"


def test_the_report_draws_a_chart_per_feature_offline_under_a_strict_csp(
        browser: Browser, report: Path, tmp_path: Path) -> None:
    context = browser.new_context(offline=True, viewport={"width": 1200, "height": 1400})
    page = context.new_page()
    requests: list[str] = []
    violations: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text else None)
    # served as the API would serve it: the page's HTML with its CSP header
    page.route("http://127.0.0.1/report.html", lambda route: route.fulfill(
        status=200, body=report.read_text(encoding="utf-8"),
        headers={"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP}))
    page.goto("http://127.0.0.1/report.html")
    rows = page.locator("tbody tr")
    assert rows.count() == 5
    charts = page.locator("svg.chart")
    assert charts.count() == 5
    for index in range(5):
        box = charts.nth(index).bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100
        assert charts.nth(index).locator("rect").count() > 20  # the bars are there
    assert rows.first.get_attribute("id") == "feature-_c3"  # the drifted feature first
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    chart_shot = charts.first.screenshot()
    context.close()
    assert requests == ["http://127.0.0.1/report.html"]
    assert violations == []
    assert shot.stat().st_size > 10_000
    _assert_not_blank(chart_shot)


def _assert_not_blank(png: bytes) -> None:
    import cv2

    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    blue = (image[:, :, 0] > 150) & (image[:, :, 2] < 80)  # the window's bars (#1f5fbf)
    grey = (np.abs(image.astype(int) - 0x7a).max(axis=2) < 10)  # the baseline's (#7a7a7a)
    assert blue.mean() > 0.01 and grey.mean() > 0.01
