"""compare.html opened in Chromium under the API's Content-Security-Policy, offline: the verdict
is on screen without scrolling, then the table of columns with each distance drawn against
the threshold, the agreement, latency and errors; nothing is fetched, nothing is refused."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Browser, Page

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import experimentgen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CSP = ("default-src 'none'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'none'; base-uri 'none'; form-action 'none'")
URL = "http://127.0.0.1/compare.html"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("compare")
    experiment = experimentgen.experiment(folder, 1000, shadow="wide", disagree_every=5,
                                          error_every=50)
    status = cli.main(["compare", str(experiment.primary.folder),
                       str(experiment.shadow.folder), "-o", str(folder / "out"),
                       *experimentgen.WINDOW, "--max-distance", "0.1", "--min-agreement",
                       "0.9", "--max-error-rate", "0.05"])
    assert status == cli_shared.EXIT_VIOLATIONS
    return folder / "out" / "compare.html"


def test_the_verdict_and_the_columns_table_are_drawn_offline_under_a_strict_csp(
        browser: Browser, report: Path, tmp_path: Path) -> None:
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests, violations = _watch(page)
    page.route(URL, lambda route: route.fulfill(
        status=200, body=report.read_text(encoding="utf-8"),
        headers={"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP}))
    page.goto(URL)
    verdict = page.locator("#verdict")
    assert verdict.is_visible() and _in_view(page, "#verdict")  # seen without scrolling
    assert "B is worse than A by 1 reason(s) (exit 3)" in verdict.inner_text()
    badge = verdict.locator("svg.badge")
    assert badge.get_attribute("aria-label") == "WORSE"
    reasons = page.locator("ol.reasons > li")
    assert reasons.count() == 1
    assert reasons.first.inner_text().startswith("agreement ")
    assert reasons.first.inner_text().endswith("is below --min-agreement 90.00%")
    assert _in_view(page, "ol.reasons")
    results = page.locator("table.thresholds > tbody > tr > td:last-child").all_inner_texts()
    assert results == ["within", "worse", "within", "not checked"]
    # the columns: the outputs first, each with its two distributions and its distance
    rows = page.locator("table.columns > tbody > tr")
    assert rows.count() == 7
    # the output's columns named by the classes of the model calling the endpoint (iris)
    names = [rows.nth(i).locator("th").inner_text().split("\n")[0].split(" (")[0]
             for i in range(7)]
    assert rows.first.locator("th").inner_text().startswith("prediction0 (setosa)")
    assert names == ["prediction0", "prediction1", "prediction2", "feature0", "feature1",
                     "feature2", "feature3"]
    rows.first.scroll_into_view_if_needed()
    assert page.locator("table.columns").is_visible()
    for index in range(7):
        chart = rows.nth(index).locator("svg.chart")
        box = chart.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100
        assert chart.locator("rect").count() > 20
        bar = rows.nth(index).locator("svg.distance rect.value")
        assert bar.count() == 1 and (bar.bounding_box() or {"width": 0})["width"] > 0
    # each bin's title gives A's and B's shares: a rotated fifth of the answers shows
    titles = rows.first.locator("svg.chart g > title").all_text_contents()
    shares = [re.fullmatch(r".* to .*: A ([0-9.]+)%, B ([0-9.]+)%", t) for t in titles]
    assert len(shares) == 20 and all(shares), titles[:3]
    assert max(abs(float(m.group(1)) - float(m.group(2))) for m in shares if m) > 2.0
    # the threshold is marked on the gated (output) columns only
    assert page.locator("table.columns svg.distance line.threshold").count() == 3
    assert rows.nth(3).locator("svg.distance line.threshold").count() == 0
    for table in ("table.agreement", "table.latency", "table.errors"):
        assert page.locator(table).is_visible()
    assert "80" in page.locator("table.agreement").inner_text()  # 79.x % of the pairs
    shot = rows.first.locator("svg.chart").screenshot()
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
    context.close()
    assert requests == [URL]
    assert violations == []
    _assert_both_sides_drawn(shot)


def _watch(page: Page) -> tuple[list[str], list[str]]:
    requests: list[str] = []
    violations: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text else None)
    return requests, violations


def _in_view(page: Page, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    height = page.viewport_size["height"] if page.viewport_size else 0
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


def _assert_both_sides_drawn(png: bytes) -> None:
    import cv2

    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    blue = (image[:, :, 0] > 150) & (image[:, :, 2] < 80)  # B's bars (#1f5fbf)
    grey = (np.abs(image.astype(int) - 0x7a).max(axis=2) < 10)  # A's (#7a7a7a)
    assert blue.mean() > 0.01 and grey.mean() > 0.01


@pytest.fixture(scope="module")
def image_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An image classifier's int8 shadow that fails --min-agreement and --max-distance: 1000
    output columns (40 charted, 960 in a folded table), its classes named by --labels."""
    folder = tmp_path_factory.mktemp("images")
    images = experimentgen.image_experiment(folder, 240)
    status = cli.main(["compare", str(images.primary.folder), str(images.shadow.folder),
                       "-o", str(folder / "out"), *experimentgen.WINDOW, "--min-agreement",
                       "0.99", "--max-distance", "0.01", "--comparison-method", "Simple",
                       "--labels", "imagenet1k"])
    assert status == cli_shared.EXIT_VIOLATIONS
    document = json.loads((folder / "out" / "compare.json").read_text(encoding="utf-8"))
    assert document["verdict"]["failed"] == ["max_distance", "min_agreement"]
    return folder / "out" / "compare.html", (
        Path(__file__).resolve().parents[3] / "chalicelib" / "labels" / "imagenet1k.txt"
    ).read_text(encoding="utf-8")


def test_the_evidence_comes_first_the_sections_are_linked_and_classes_named(
        browser: Browser, image_report: tuple[Path, str]) -> None:
    report, label_file = image_report
    names = label_file.splitlines()
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests, violations = _watch(page)
    page.route(URL, lambda route: route.fulfill(
        status=200, body=report.read_text(encoding="utf-8"),
        headers={"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": CSP}))
    page.goto(URL)

    def top(selector: str) -> float:
        box = page.locator(selector).first.bounding_box()
        assert box is not None, selector
        return box["y"]

    # the failing figures right under the verdict, before the 40 charts of every column
    charts = top("table.columns svg.chart")
    assert top("#verdict") < top("#beyond") < top("#agreement") < top("#thresholds") < charts
    assert top("table.agreement") < charts and top("table.beyond svg.chart") < charts
    assert page.locator("table.beyond > tbody > tr").count() == 10  # the largest beyond
    assert page.locator("ol.reasons > li").count() == 1000 + 1  # every reason, 10 in view
    assert page.locator("details.more-reasons li").first.is_visible() is False
    assert top("table.agreement") < 6 * 900  # within a few screens, not at the page's end
    # a table of contents whose every link reaches its section
    links = page.locator("nav#contents a")
    targets = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert targets == ["#verdict", "#beyond", "#agreement", "#thresholds", "#columns",
                       "#other-columns", "#latency", "#errors"]
    for index, target in enumerate(targets):
        assert target is not None
        links.nth(index).click()
        assert page.evaluate("location.hash") == target
        box = page.locator(target).bounding_box()
        assert box is not None and -2 <= box["y"] < 900 - 20, (target, box)  # scrolled to it
    # the 960 other columns folded until asked for
    other = page.locator("details.other-columns table.other-columns")
    assert other.count() == 1 and not other.is_visible()
    page.locator("details.other-columns > summary").click()
    assert other.is_visible()
    assert other.locator("tbody > tr").count() == 960
    # classes by the model's labels: the disagreements and the output's columns
    disagreements = page.locator("table.disagreements > tbody > tr > td").all_inner_texts()
    named = [cell for cell in disagreements if not cell.isdigit()]
    assert named and all(re.fullmatch(r".+ \(([0-9]+)\)", cell) for cell in named), named
    for cell in named:
        index = int(cell.rsplit("(", 1)[1].rstrip(")"))
        assert cell == f"{names[index]} ({index})"
    first = page.locator("table.columns > tbody > tr").first.locator("th").inner_text()
    column = first.split("\n")[0]
    index = int(column.split(" ")[0].removeprefix("prediction"))
    assert column == f"prediction{index} ({names[index]})"
    context.close()
    assert requests == [URL]
    assert violations == []
