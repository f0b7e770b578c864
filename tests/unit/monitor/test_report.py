"""The report page: self-contained (no script, no style, nothing fetched), a chart per feature,
violations first, every user-supplied name escaped; a summary whose links reach their rows;
category labels shown whole; every drift gauge on one scale, its threshold labelled."""
from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

from chalicelib.monitor import analysis, report, report_svg
from chalicelib.monitor.checks import DRIFT, Evaluation, FeatureResult, java_double

SVG = "{http://www.w3.org/2000/svg}"
LABELS = ["serving_default", "shadow_variant_with_a_really_long_name_for_the_canary_v2",
          "température moyenne — ünïcödé", "ラベル東京の長いカテゴリ名前です", '<b>&"quote\'', "x"]
ODD_NAMES = ["sensor reading 3", "temp (°C)", "a/b", "a b", "a-b", "<b>name&", "#x", ""]


def _page(shift: float) -> tuple[str, analysis.CheckResult]:
    rng = random.Random(1)
    base = [{"x": rng.gauss(0, 1), "<b>name": rng.choice("pq")} for _ in range(2000)]
    files = analysis.baseline(base)
    window = [{"x": rng.gauss(shift, 1), "<b>name": rng.choice("pq")} for _ in range(500)]
    result = analysis.check(window, json.loads(files[analysis.STATISTICS]),
                            json.loads(files[analysis.CONSTRAINTS]), title="iris & co")
    return result.files[analysis.REPORT], result


def _many_rows(count: int, seed: int, drifted: bool) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    shifted_weights = [1, 3, 5, 1, 1, 2]
    for _ in range(count):
        row: dict[str, Any] = {name: rng.gauss(0, 1) for name in ODD_NAMES}
        for j in range(44):
            row[f"feature_{j:02d}"] = rng.gauss(j + (1.0 if drifted and j % 7 == 0 else 0), 1)
        for j in range(14):
            weights = shifted_weights if drifted and j % 4 == 0 else [5, 3, 2, 1, 1, 1]
            row[f"category {j:02d}"] = rng.choices(LABELS, weights)[0]
        row["variant"] = rng.choices(LABELS, shifted_weights if drifted else [5, 3, 2, 1, 1, 1])[0]
        if not drifted or rng.random() > 0.3:
            row["sparse"] = rng.random()
        row["gone" if not drifted else "new column"] = "y"
        yield row


def many_features_report() -> tuple[str, analysis.CheckResult]:
    """A check of 70 features (as Model Monitor's introduction example has): odd names, long
    and non-ASCII category labels, drift (one ChiSquared), a completeness violation, a missing
    and an extra column. Shared with the browser test."""
    files = analysis.baseline(_many_rows(1500, 1, drifted=False))
    constraints = json.loads(files[analysis.CONSTRAINTS])
    for feature in constraints["features"]:
        if feature["name"] == "variant":
            feature["monitoringConfigOverrides"] = {
                "categorical_drift_method": "ChiSquared",
                "categorical_comparison_threshold": 0.05}
    result = analysis.check(_many_rows(600, 2, drifted=True),
                            json.loads(files[analysis.STATISTICS]), constraints,
                            title="<endpoint> & 70 features")
    return result.files[analysis.REPORT], result


@pytest.fixture(scope="module")
def many() -> tuple[str, analysis.CheckResult]:
    return many_features_report()


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find(self, match: Callable[[Node], bool]) -> Iterator[Node]:
        for child in self.children:
            if isinstance(child, Node):
                if match(child):
                    yield child
                yield from child.find(match)


VOID = frozenset({"br", "meta", "img", "hr", "input", "link", "wbr", "col", "area", "base",
                  "source"})


class _Tree(HTMLParser):
    """The page as a tree of ``Node`` (asserting every element it opens is closed in order)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def _tree(page: str) -> Node:
    parser = _Tree()
    parser.feed(page)
    parser.close()
    assert [n.tag for n in parser.stack] == ["#document"], "an element is left open"
    return parser.root


def _svgs(page: str, kind: str) -> list[ET.Element]:
    """Each ``<svg class=kind>`` of the page, parsed as XML (so well-formed, too)."""
    return [ET.fromstring(m) for m in re.findall(rf'<svg class="{kind}".*?</svg>', page, re.S)]


def _heading(cell: Node) -> str:
    """A row header's first line (the feature's name)."""
    parts: list[str] = []
    for child in cell.children:
        if isinstance(child, Node) and child.tag == "br":
            break
        parts.append(child if isinstance(child, str) else child.text())
    return "".join(parts)


def _has_class(kind: str) -> Callable[[Node], bool]:
    return lambda node: kind in node.attrs.get("class", "").split()


def _gauge(distance: float, threshold: float, method: str = "Robust",
           drifted: bool = False) -> FeatureResult:
    violations = [{"feature_name": "f", "constraint_check_type": DRIFT,
                   "description": "drift"}] if drifted else []
    return FeatureResult("f", None, None, distance, threshold, method, violations)


def _geometry(svg: ET.Element) -> tuple[float, float, float, float]:
    """A gauge's (track start, track length, distance bar length, threshold tick x)."""
    track = svg.find(f"{SVG}rect")
    bar = svg.find(f"{SVG}rect[@class='distance']")
    tick = svg.find(f"{SVG}line[@class='threshold']")
    assert track is not None and bar is not None and tick is not None
    assert tick.get("x1") == tick.get("x2")
    return (float(track.get("x", "")), float(track.get("width", "")),
            float(bar.get("width", "")), float(tick.get("x1", "")))


def test_the_report_needs_nothing_from_anywhere(many: tuple[str, analysis.CheckResult]) -> None:
    for page in (_page(1.0)[0], many[0]):
        assert "<script" not in page and "<style" not in page and "style=" not in page
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
        assert "@import" not in page and "url(" not in page
        nodes = list(_tree(page).find(lambda n: True))
        assert not {n.tag for n in nodes} & {"script", "style", "link", "img", "iframe",
                                             "object", "embed", "image", "use", "foreignobject"}
        assert all(not k.startswith("on") and k != "style" for n in nodes for k in n.attrs)
        assert all(n.attrs["href"].startswith("#") for n in nodes if "href" in n.attrs)
        assert not any("src" in n.attrs or "xlink:href" in n.attrs for n in nodes)


def test_one_chart_per_feature_and_violations_first() -> None:
    page, result = _page(1.0)
    assert page.count('<svg class="chart"') == len(result.evaluation.features) == 2
    assert page.index('id="feature-x"') < page.index('id="feature-b-name"')
    assert "baseline_drift_check" in page
    assert "distance 0." in page and "threshold 0.1" in page and "(Robust)" in page


def test_names_and_titles_are_escaped() -> None:
    page, _ = _page(0.0)
    assert "<b>name" not in page and "&lt;b&gt;name" in page
    assert "iris &amp; co" in page


def test_every_gauge_of_a_page_has_the_same_scale() -> None:
    rows = [_gauge(0.8, 0.1, drifted=True), _gauge(0.05, 0.1), _gauge(0.3, 0.1, drifted=True),
            _gauge(0.01, 0.05, "ChiSquared", drifted=True)]
    page = report.render(Evaluation({"violations": []}, rows), "t", None, 10)
    geometry = [_geometry(svg) for svg in _svgs(page, "gauge")]
    assert len(geometry) == 4
    assert len({(start, length) for start, length, _, _ in geometry}) == 1
    start, length = geometry[0][:2]
    for feature, (_, _, bar, tick) in zip(rows, geometry, strict=True):
        assert bar == pytest.approx(length * (feature.distance or 0), abs=0.1)  # scale 0 to 1
        assert tick - start == pytest.approx(length * (feature.threshold or 0), abs=0.1)
    assert geometry[0][3] == geometry[1][3] == geometry[2][3]  # the same threshold, one x
    assert geometry[0][2] / geometry[2][2] == pytest.approx(0.8 / 0.3, rel=0.01)


def test_the_scale_grows_past_1_for_a_larger_threshold() -> None:
    rows = [_gauge(0.5, 0.1), _gauge(0.5, 2.0)]
    page = report.render(Evaluation({"violations": []}, rows), "t", None, 10)
    (start, length, bar, _), (_, _, _, tick) = (_geometry(svg) for svg in _svgs(page, "gauge"))
    assert bar == pytest.approx(length / 4, abs=0.1) and tick == pytest.approx(start + length)
    assert "Drift vs threshold (0 to 2)" in page


def test_the_threshold_and_the_distance_are_labelled_and_the_drift_side_shaded() -> None:
    distance_svg, p_value_svg = (ET.fromstring(report_svg.gauge(feature, 1.0)) for feature in (
        _gauge(0.3050833333333333, 0.1, "LInfinity", drifted=True),
        _gauge(1.4243256888725734e-64, 0.05, "ChiSquared", drifted=True)))
    for svg, threshold, value, side in ((distance_svg, "0.1", "0.3051", "above"),
                                        (p_value_svg, "0.05", "1.424e-64", "below")):
        texts = {t.get("class"): "".join(t.itertext()) for t in svg.iter(f"{SVG}text")}
        assert texts["threshold"] == f"threshold {threshold}" and texts["value"] == value
        assert f"drift when {side} the threshold" in (svg.findtext(f"{SVG}title") or "")
        start, length, _, tick = _geometry(svg)
        zone = svg.findall(f"{SVG}rect")[1]  # the shaded side
        zone_x, zone_width = float(zone.get("x", "")), float(zone.get("width", ""))
        if side == "above":
            assert zone_x == pytest.approx(tick)
            assert zone_x + zone_width == pytest.approx(start + length, abs=0.15)
        else:
            assert zone_x == start and zone_x + zone_width == pytest.approx(tick, abs=0.15)
    # in full, as the description prints it
    assert "p-value 1.4243256888725734E-64" in "".join(p_value_svg.itertext())
    assert "distance 0.3050833333333333" in "".join(distance_svg.itertext())


def test_a_distance_past_its_threshold_but_not_flagged_says_why() -> None:
    noise = _gauge(0.12, 0.1, "Robust")
    wrong_type = _gauge(0.86, 0.1, "Robust")
    wrong_type.violations.append({"feature_name": "f", "constraint_check_type":
                                  "data_type_check", "description": "type"})
    texts = ["".join(ET.fromstring(report_svg.gauge(f, 1.0)).itertext())
             for f in (noise, wrong_type, _gauge(0.05, 0.1), _gauge(0.3, 0.1, drifted=True))]
    assert "not flagged: within sampling noise (Robust)" in texts[0]
    assert "not flagged: the data type check failed (Robust)" in texts[1]
    assert texts[2].endswith("no drift (Robust)") and texts[3].endswith("drift (Robust)")


def test_the_gauges_print_the_numbers_of_the_descriptions(
        many: tuple[str, analysis.CheckResult]) -> None:
    page, result = many
    rows = list(_tree(page).find(lambda n: n.tag == "tr" and "id" in n.attrs))
    drifted = 0
    for feature, row in zip(result.evaluation.features, rows, strict=True):
        for violation in feature.violations:
            if violation["constraint_check_type"] == DRIFT:
                drifted += 1
                full = java_double(feature.distance or 0.0)
                assert full in violation["description"]
                word = "p-value" if feature.method == "ChiSquared" else "distance"
                texts = [n.text() for n in row.find(lambda n: n.tag == "text")]
                assert f"{word} {full}" in texts  # the gauge's caption, in full
                assert f"{feature.distance:.4g}" in texts  # the bar's label, short
    assert drifted >= 5
    assert {f.method for f in result.evaluation.features} >= {"Robust", "LInfinity",
                                                              "ChiSquared"}


def test_category_labels_are_shown_whole(many: tuple[str, analysis.CheckResult]) -> None:
    page, _ = many
    shown: set[str] = set()
    titles: list[str] = []
    for svg in _svgs(page, "chart"):
        for text in svg.iter(f"{SVG}text"):
            if text.find(f"{SVG}tspan") is not None:
                shown.add("".join(t.text or "" for t in text.iter(f"{SVG}tspan")))
        titles += [t.text or "" for t in svg.iter(f"{SVG}title")]
    assert set(LABELS) <= shown
    for label in LABELS:
        assert any(title.startswith(f"{label}: baseline ") for title in titles)


def test_a_long_label_wraps_at_its_separators_and_a_wide_one_by_its_width() -> None:
    assert report_svg.wrap("shadow_variant_with_a_really_long_name", 22) == [
        "shadow_variant_with_a_", "really_long_name"]
    wide = report_svg.wrap("ラベル東京の長いカテゴリ名前です", 22)
    assert "".join(wide) == "ラベル東京の長いカテゴリ名前です" and [len(x) for x in wide] == [11, 5]
    assert report_svg.wrap("x" * 50, 22) == ["x" * 22, "x" * 22, "x" * 6]
    assert report_svg.wrap("", 22) == [""]


def test_more_values_than_shown_are_counted() -> None:
    buckets = [{"value": f"v{i}", "count": 100 - i} for i in range(14)]
    stats = {"string_statistics": {"distribution": {"categorical": {"buckets": buckets}}}}
    svg = ET.fromstring(report_svg.chart(FeatureResult("c", stats, stats)))
    text = "".join(svg.itertext())
    assert "and 4 less frequent value(s)" in text and "v13 (baseline " in text


def test_the_summary_counts_violations_by_check_and_links_to_every_row(
        many: tuple[str, analysis.CheckResult]) -> None:
    page, result = many
    tree = _tree(page)
    expected = Counter(v["constraint_check_type"]
                       for v in result.evaluation.violations["violations"])
    assert {DRIFT, "completeness_check", "missing_column_check",
            "extra_column_check"} <= set(expected)
    table = next(tree.find(_has_class("checks")))
    cells = [[c.text().strip() for c in row.find(lambda n: n.tag in ("th", "td"))]
             for row in table.find(lambda n: n.tag == "tr")][1:]
    assert {row[0]: int(row[1]) for row in cells[:-1]} == dict(expected)
    assert cells[-1][:2] == ["total", str(sum(expected.values()))]
    violated = [f.name for f in result.evaluation.features if f.violations]
    listed = [a.text() for a in next(tree.find(_has_class("violated"))).find(
        lambda n: n.tag == "a")]
    compact = [a.text() for a in next(tree.find(_has_class("passed"))).find(
        lambda n: n.tag == "a")]
    assert listed == violated
    assert sorted(listed + compact) == sorted(f.name or "(no name)"
                                              for f in result.evaluation.features)
    items = [li.text() for li in next(tree.find(_has_class("violated"))).find(
        lambda n: n.tag == "li")]
    assert any(re.fullmatch(r".*: baseline_drift_check \(distance 0\.\d+, threshold 0\.1\)", item)
               for item in items)
    assert page.index('<h2 id="summary">') < page.index('<table class="features"')


def test_every_link_reaches_one_row_whatever_the_names(
        many: tuple[str, analysis.CheckResult]) -> None:
    page, result = many
    nodes = list(_tree(page).find(lambda n: True))
    ids = [n.attrs["id"] for n in nodes if "id" in n.attrs]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", i) for i in ids)
    rows = {n.attrs["id"]: n for n in nodes if n.tag == "tr" and "id" in n.attrs}
    assert len(rows) == len(result.evaluation.features) == 70
    links = [n for n in nodes if n.tag == "a" and n.attrs["href"] != "#summary"]
    assert len(links) == 70
    for link in links:  # the link's text is the name its row is headed with
        row = rows[link.attrs["href"][1:]]
        assert _heading(next(row.find(lambda n: n.tag == "th"))) == link.text()
    assert {name or "(no name)" for name in ODD_NAMES} <= {link.text() for link in links}


def test_ids_are_unique_stable_and_safe() -> None:
    names = ["a b", "a-b", "a/b", "a-b-2", "température", "ラベル", "", "x", "x"]
    ids = report.anchors(names)
    assert len(set(ids)) == len(ids)
    assert ids[:5] == ["feature-a-b", "feature-a-b-2", "feature-a-b-3", "feature-a-b-2-2",
                       "feature-temperature"]
    assert ids[5:] == ["feature-unnamed-2", "feature-unnamed", "feature-x", "feature-x-2"]
    assert report.anchors(names[::-1])[::-1][:5] == ids[:5]  # by name, not by position


def test_the_facts_line_has_no_dangling_separator() -> None:
    page = report.render(Evaluation({"violations": []}, []), "t", None, 3)
    assert "<p>3 record(s) analysed &middot; <strong>0 violation(s)" in page
    assert "No violations: every check passed." in page
