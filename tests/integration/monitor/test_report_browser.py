"""The monitoring report opened in Chromium under the API's Content-Security-Policy: a chart
per feature is drawn (SVG in the DOM, pixels on the screenshot) with nothing fetched; a report
of 70 features opens on its summary, whose links scroll to their rows, and its category labels
are drawn whole, inside their charts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Browser, Page

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen
from tests.unit.monitor.test_report import LABELS, many_features_report

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
                     "2026-11-25T10:00Z"]) == cli_shared.EXIT_VIOLATIONS
    return folder / "out" / "report.html"


def test_the_report_draws_a_chart_per_feature_offline_under_a_strict_csp(
        browser: Browser, report: Path, tmp_path: Path) -> None:
    context = browser.new_context(offline=True, viewport={"width": 1200, "height": 1400})
    page = context.new_page()
    requests, violations = _watch(page)
    _serve(page, report.read_text(encoding="utf-8"))
    rows = page.locator("table.features > tbody > tr")
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


def test_a_report_of_70_features_opens_on_its_summary_and_links_to_its_rows(
        browser: Browser, tmp_path: Path) -> None:
    html, result = many_features_report()
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests, violations = _watch(page)
    _serve(page, html)
    summary = page.locator("#summary")
    assert summary.is_visible() and _in_view(page, "#summary")  # seen without scrolling
    counts = page.locator("table.checks")
    assert "baseline_drift_check" in counts.inner_text()
    assert "total" in counts.inner_text()
    assert page.locator("table.features > tbody > tr").count() == 70
    # a violated feature, then one of odd name without violations: each link shows its row
    first = result.evaluation.features[0].name
    for name, where in ((first, "ol.violated"), ("temp (°C)", "p.passed")):
        link = page.locator(where).get_by_role("link", name=name, exact=True)
        target = link.get_attribute("href") or ""
        link.click()
        page.wait_for_function("hash => location.hash === hash", arg=target)
        assert _in_view(page, f'[id="{target[1:]}"]')
        assert page.locator(f'[id="{target[1:]}"] th').first.inner_text().startswith(name)
    page.get_by_role("link", name="summary").first.click()
    page.wait_for_function("location.hash === '#summary'")
    # every category label whole, and inside its chart (nothing cut off at either side)
    labels = page.evaluate(_LABELS_DRAWN)
    assert set(LABELS) <= {label["text"] for label in labels}
    assert all(label["inside"] for label in labels), [x for x in labels if not x["inside"]]
    shot = tmp_path / "many.png"
    page.screenshot(path=str(shot), full_page=True)
    context.close()
    assert requests == ["http://127.0.0.1/report.html"]
    assert violations == []
    assert shot.stat().st_size > 50_000


_LABELS_DRAWN = """() => [...document.querySelectorAll("svg.chart text")]
    .filter(text => text.querySelector("tspan"))
    .map(text => {
        const svg = text.ownerSVGElement.getBoundingClientRect();
        const box = text.getBoundingClientRect();
        return {text: text.textContent, inside: box.width > 0 && box.left >= svg.left &&
                box.right <= svg.right && box.top >= svg.top && box.bottom <= svg.bottom};
    })"""


def _watch(page: Page) -> tuple[list[str], list[str]]:
    """The page's requests and the Content-Security-Policy messages of its console."""
    requests: list[str] = []
    violations: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text else None)
    return requests, violations


def _serve(page: Page, html: str) -> None:
    """Open ``html`` as the API would serve it: the page with its CSP header."""
    page.route("http://127.0.0.1/report.html", lambda route: route.fulfill(
        status=200, body=html,
        headers={"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP}))
    page.goto("http://127.0.0.1/report.html")


def _in_view(page: Page, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    height = page.viewport_size["height"] if page.viewport_size else 0
    return box is not None and 0 <= box["y"] < height and box["height"] > 0


def _assert_not_blank(png: bytes) -> None:
    import cv2

    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    blue = (image[:, :, 0] > 150) & (image[:, :, 2] < 80)  # the window's bars (#1f5fbf)
    grey = (np.abs(image.astype(int) - 0x7a).max(axis=2) < 10)  # the baseline's (#7a7a7a)
    assert blue.mean() > 0.01 and grey.mean() > 0.01
