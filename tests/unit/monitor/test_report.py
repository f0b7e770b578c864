"""The report page: self-contained (no script, no style, nothing fetched), a chart per feature,
violations first, and every user-supplied name escaped."""
from __future__ import annotations

import json
import random
import re

from chalicelib.monitor import analysis


def _page(shift: float) -> tuple[str, analysis.CheckResult]:
    rng = random.Random(1)
    base = [{"x": rng.gauss(0, 1), "<b>name": rng.choice("pq")} for _ in range(2000)]
    files = analysis.baseline(base)
    window = [{"x": rng.gauss(shift, 1), "<b>name": rng.choice("pq")} for _ in range(500)]
    result = analysis.check(window, json.loads(files[analysis.STATISTICS]),
                            json.loads(files[analysis.CONSTRAINTS]), title="iris & co")
    return result.files[analysis.REPORT], result


def test_the_report_needs_nothing_from_anywhere() -> None:
    page, _ = _page(1.0)
    assert "<script" not in page and "<style" not in page and " style=" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "@import" not in page and "url(" not in page


def test_one_chart_per_feature_and_violations_first() -> None:
    page, result = _page(1.0)
    assert page.count('<svg class="chart"') == len(result.evaluation.features) == 2
    assert page.index('id="feature-x"') < page.index('id="feature-&lt;b&gt;name"')
    assert "baseline_drift_check" in page
    assert "distance 0." in page and "/ 0.1 (Robust)" in page


def test_names_and_titles_are_escaped() -> None:
    page, _ = _page(0.0)
    assert "<b>name" not in page and "&lt;b&gt;name" in page
    assert "iris &amp; co" in page
