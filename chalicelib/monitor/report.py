"""The monitoring report: one self-contained HTML page, charts drawn as inline SVG.

No script, stylesheet, font or ``style`` attribute, only HTML and SVG presentation attributes, so
the page works offline and under a Content-Security-Policy of ``default-src 'self'`` (or
``'none'``).

A summary first (violations by check type, the violated features linked, the others compactly),
then one row per feature, violations first: its checks, the two distributions side by side
(``report_svg.chart``), and the drift distance against its threshold on one scale for the page
(``report_svg.gauge``).
"""
from __future__ import annotations

import datetime
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from chalicelib.monitor import report_svg
from chalicelib.monitor.checks import (
    CATEGORICAL,
    COMPLETENESS,
    DATA_TYPE,
    DRIFT,
    EXTRA,
    MISSING,
    Evaluation,
    FeatureResult,
)
from chalicelib.monitor.report_svg import escape as _e

CHECKS = {DATA_TYPE: "values of another type than the baseline's",
          COMPLETENESS: "more missing values than the baseline",
          DRIFT: "distribution drifted from the baseline's",
          MISSING: "feature absent from the window",
          EXTRA: "feature absent from the baseline",
          CATEGORICAL: "values outside the baseline's domain"}
"""The check types in the order the summary lists them, and what each means."""


def render(evaluation: Evaluation, title: str, window: tuple[datetime.datetime,
                                                                datetime.datetime] | None,
           item_count: int) -> str:
    """The report page (``title``: an endpoint or a capture folder; ``window`` if it is a time
    window)."""
    features = evaluation.features
    ids = anchors([f.name for f in features])
    top = report_svg.drift_scale(features)
    scale = f"0 to {report_svg.short(top)}"
    rows = "\n".join(_row(f, i, top) for f, i in zip(features, ids, strict=True))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Data quality: {_e(title)}</title></head>
<body>
<h1>Data quality: {_e(title)}</h1>
<p>{_facts(evaluation, window, item_count)}</p>
{_summary(evaluation, ids)}
<h2 id="features">Features</h2>
<p>{report_svg.legend()}<br>Drift: the bar is the distance (or p-value), on one scale for
every row, {scale}; the black tick is the threshold; the shaded side of the tick means drift
(above it for a distance, below it for a p-value). Red: drift found.</p>
<table class="features" border="1" cellpadding="6" cellspacing="0">
<thead><tr><th scope="col">Feature</th><th scope="col">Checks</th>
<th scope="col">Baseline vs window</th><th scope="col">Drift vs threshold ({scale})</th></tr>
</thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""


def anchors(names: Sequence[str]) -> list[str]:
    """One id per name: ``feature-`` and the name in letters, digits, ``_`` and ``-`` (accents
    dropped, anything else ``-``), numbered when two collide. Given in the names' sorted order,
    so a feature keeps its id from run to run whichever features are violated."""
    ids: list[str] = [""] * len(names)
    taken: set[str] = set()
    for index in sorted(range(len(names)), key=lambda i: (names[i], i)):
        base = "feature-" + (_slug(names[index]) or "unnamed")
        candidate, count = base, 1
        while candidate in taken:
            count += 1
            candidate = f"{base}-{count}"
        taken.add(candidate)
        ids[index] = candidate
    return ids


def _slug(name: str) -> str:
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9_]+", "-", ascii_name).strip("-")


def _facts(evaluation: Evaluation, window: tuple[datetime.datetime,
                                                 datetime.datetime] | None,
           item_count: int) -> str:
    violated = sum(1 for f in evaluation.features if f.violations)
    facts = [f"{window[0]:%Y-%m-%d %H:%M} to {window[1]:%Y-%m-%d %H:%M} UTC"] if window else []
    facts.append(f"{item_count} record(s) analysed")
    facts.append(f"<strong>{len(evaluation.violations['violations'])} violation(s) in "
                 f"{violated} of {len(evaluation.features)} feature(s)</strong>")
    return " &middot; ".join(facts)


def _summary(evaluation: Evaluation, ids: Sequence[str]) -> str:
    pairs = list(zip(evaluation.features, ids, strict=True))
    violated = [(f, i) for f, i in pairs if f.violations]
    passed = [(f, i) for f, i in pairs if not f.violations]
    parts = ['<h2 id="summary">Summary</h2>', _counts_table(evaluation)]
    if violated:
        items = "\n".join(f'<li>{_link(f, i)}: {_e(", ".join(_check_types(f)))}</li>'
                          for f, i in violated)
        parts.append(f'<h3>Features with violations ({len(violated)})</h3>\n'
                     f'<ol class="violated">\n{items}\n</ol>')
    if passed:
        links = ", ".join(_link(f, i) for f, i in passed)
        parts.append(f'<h3>Features without violations ({len(passed)})</h3>\n'
                     f'<p class="passed">{links}</p>')
    return "\n".join(parts)


def _counts_table(evaluation: Evaluation) -> str:
    counts = Counter(v["constraint_check_type"] for v in evaluation.violations["violations"])
    if not counts:
        return "<p>No violations: every check passed.</p>"
    order = [*CHECKS, *sorted(set(counts) - set(CHECKS))]
    rows = "\n".join(f'<tr><th scope="row" align="left">{_e(check)}</th>'
                     f'<td align="right">{counts[check]}</td>'
                     f"<td>{_e(CHECKS.get(check, ''))}</td></tr>"
                     for check in order if counts[check])
    return ('<h3>Violations by check</h3>\n<table class="checks" border="1" cellpadding="4" '
            'cellspacing="0">\n<thead><tr><th scope="col">Check</th><th scope="col">Violations'
            '</th><th scope="col">Meaning</th></tr></thead>\n'
            f'<tbody>\n{rows}\n<tr><th scope="row" align="left">total</th>'
            f'<td align="right">{sum(counts.values())}</td><td></td></tr>\n</tbody></table>')


def _check_types(feature: FeatureResult) -> list[str]:
    types = dict.fromkeys(v["constraint_check_type"] for v in feature.violations)
    return [_drift_note(feature) if check == DRIFT else check for check in types]


def _drift_note(feature: FeatureResult) -> str:
    if feature.distance is None or feature.threshold is None:
        return DRIFT
    word = "p-value" if feature.method.lower() == "chisquared" else "distance"
    return (f"{DRIFT} ({word} {report_svg.short(feature.distance)}, threshold "
            f"{report_svg.short(feature.threshold)})")


def _name(feature: FeatureResult) -> str:
    return _e(feature.name) if feature.name.strip() else "<em>(no name)</em>"


def _link(feature: FeatureResult, anchor: str) -> str:
    return f'<a href="#{anchor}">{_name(feature)}</a>'


def _row(feature: FeatureResult, anchor: str, top: float) -> str:
    checks = "<br>".join(f"<strong>{_e(v['constraint_check_type'])}</strong>: "
                         f"{_e(v['description'])}" for v in feature.violations) or "all passed"
    kind = (feature.baseline or feature.window or {}).get("inferred_type", "")
    return (f'<tr id="{anchor}"><th scope="row">{_name(feature)}<br>'
            f'<small>{_e(kind)}<br><a href="#summary">summary</a></small></th>'
            f"<td>{checks}</td><td>{report_svg.chart(feature)}</td>"
            f"<td>{report_svg.gauge(feature, top)}</td></tr>")
