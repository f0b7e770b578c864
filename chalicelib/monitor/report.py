"""The monitoring report: one self-contained HTML page, charts drawn as inline SVG.

Nothing is fetched and nothing runs: no script, no stylesheet, no font, no ``style``
attribute, only HTML and SVG presentation attributes, so the page works offline and under a
Content-Security-Policy of ``default-src 'self'`` (or ``'none'``). One row per feature,
violations first: its checks, the baseline's and the window's distributions side by side on
the same axis (numbers: 20 equal bins over both ranges; strings: the most frequent values),
and the drift distance drawn against its threshold.
"""
from __future__ import annotations

import datetime
import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chalicelib.monitor import sketches
from chalicelib.monitor.checks import Evaluation, FeatureResult

WIDTH, HEIGHT, BINS, TOP_VALUES = 360, 120, 20, 10
BASE_COLOUR, WINDOW_COLOUR, ALERT_COLOUR, OK_COLOUR = "#7a7a7a", "#1f5fbf", "#b3261e", "#1e7b34"


def render(evaluation: Evaluation, title: str, window: tuple[datetime.datetime,
                                                                datetime.datetime] | None,
           item_count: int) -> str:
    """The report page.

    Args:
        evaluation: the checks' results.
        title: what was checked (an endpoint or a capture folder).
        window: the window's bounds, if it is a time window.
        item_count: the rows analysed.
    """
    violated = sum(1 for f in evaluation.features if f.violations)
    span = f"{window[0]:%Y-%m-%d %H:%M} to {window[1]:%Y-%m-%d %H:%M} UTC" if window else ""
    rows = "\n".join(_row(feature) for feature in evaluation.features)
    summary = (f"{len(evaluation.violations['violations'])} violation(s) in {violated} of "
               f"{len(evaluation.features)} feature(s)")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Data quality: {_e(title)}</title></head>
<body>
<h1>Data quality: {_e(title)}</h1>
<p>{_e(span)} &middot; {item_count} record(s) analysed &middot; <strong>{_e(summary)}</strong></p>
<p>{_legend()}</p>
<table border="1" cellpadding="6" cellspacing="0">
<thead><tr><th scope="col">Feature</th><th scope="col">Checks</th>
<th scope="col">Baseline vs window</th><th scope="col">Drift distance vs threshold</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""


def _row(feature: FeatureResult) -> str:
    checks = "<br>".join(f"<strong>{_e(v['constraint_check_type'])}</strong>: "
                         f"{_e(v['description'])}" for v in feature.violations) or "all passed"
    kind = (feature.baseline or feature.window or {}).get("inferred_type", "")
    return (f'<tr id="feature-{_e(feature.name)}"><th scope="row">{_e(feature.name)}<br>'
            f"<small>{_e(kind)}</small></th><td>{checks}</td><td>{chart(feature)}</td>"
            f"<td>{gauge(feature)}</td></tr>")


def chart(feature: FeatureResult) -> str:
    """The baseline's and the window's distributions as one SVG of paired bars."""
    base, window = feature.baseline or {}, feature.window or {}
    base_kll, window_kll = _cdf(base), _cdf(window)
    if base_kll is not None or window_kll is not None:
        labels, pairs = _numeric_bars(base_kll, window_kll)
    else:
        labels, pairs = _categorical_bars(_categories(base), _categories(window))
    return _bars_svg(feature.name, labels, pairs)


def _numeric_bars(base: sketches.WeightedCdf | None, window: sketches.WeightedCdf | None
                  ) -> tuple[list[str], list[tuple[float, float]]]:
    present = [c for c in (base, window) if c is not None and c.n]
    if not present:
        return [], []
    low = min(float(c.values[0]) for c in present)
    high = max(float(c.values[-1]) for c in present)
    if high <= low:
        high = low + 1.0
    edges = np.linspace(low, high, BINS + 1)

    def shares(cdf: sketches.WeightedCdf | None) -> np.ndarray:
        if cdf is None or not cdf.n:
            return np.zeros(BINS)
        cumulative = cdf(edges)
        cumulative[0] = 0.0
        result: np.ndarray = np.diff(cumulative)
        return result

    b, w = shares(base), shares(window)
    return [f"{low:.4g}", f"{high:.4g}"], [(float(x), float(y)) for x, y in zip(b, w,
                                                                                  strict=True)]


def _categorical_bars(base: list[Mapping[str, Any]], window: list[Mapping[str, Any]]
                      ) -> tuple[list[str], list[tuple[float, float]]]:
    def shares(buckets: list[Mapping[str, Any]]) -> dict[str, float]:
        total = sum(float(b["count"]) for b in buckets) or 1.0
        return {str(b["value"]): float(b["count"]) / total for b in buckets}

    p, q = shares(base), shares(window)
    values = sorted(set(p) | set(q), key=lambda v: -(p.get(v, 0.0) + q.get(v, 0.0)))
    values = values[:TOP_VALUES]
    return values, [(p.get(v, 0.0), q.get(v, 0.0)) for v in values]


def _bars_svg(name: str, labels: Sequence[str], pairs: Sequence[tuple[float, float]]) -> str:
    top = max((max(pair) for pair in pairs), default=0.0) or 1.0
    slot = (WIDTH - 20) / max(len(pairs), 1)
    bar = max(slot / 2 - 1, 1.0)
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
             f'height="{HEIGHT + 30}" viewBox="0 0 {WIDTH} {HEIGHT + 30}" role="img" '
             f'aria-label="{_e(name)}: baseline (grey) and window (blue) distributions">',
             f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT + 30}" fill="#ffffff"/>',
             f'<line x1="10" y1="{HEIGHT}" x2="{WIDTH - 10}" y2="{HEIGHT}" stroke="#444"/>']
    for index, (base_share, window_share) in enumerate(pairs):
        x = 10 + index * slot
        for offset, share, colour in ((0.0, base_share, BASE_COLOUR),
                                      (bar, window_share, WINDOW_COLOUR)):
            height = (HEIGHT - 10) * share / top
            parts.append(f'<rect x="{x + offset:.1f}" y="{HEIGHT - height:.1f}" '
                         f'width="{bar:.1f}" height="{height:.1f}" fill="{colour}"/>')
    parts.append(_axis_labels(labels, len(pairs), slot))
    if not pairs:
        parts.append(f'<text x="20" y="{HEIGHT // 2}" font-size="12" fill="#222">'
                     f"no values</text>")
    parts.append("</svg>")
    return "".join(parts)


def _axis_labels(labels: Sequence[str], count: int, slot: float) -> str:
    y = HEIGHT + 16
    if len(labels) == 2 and count == BINS:  # numeric: the range's ends
        return (f'<text x="10" y="{y}" font-size="11" fill="#222">{_e(labels[0])}</text>'
                f'<text x="{WIDTH - 10}" y="{y}" font-size="11" fill="#222" '
                f'text-anchor="end">{_e(labels[1])}</text>')
    return "".join(f'<text x="{10 + (i + 0.5) * slot:.1f}" y="{y}" font-size="10" '
                   f'fill="#222" text-anchor="middle">{_e(label[:8])}</text>'
                   for i, label in enumerate(labels))


def gauge(feature: FeatureResult) -> str:
    """The drift distance as a bar, the threshold as a line across it."""
    if feature.distance is None or feature.threshold is None:
        return "not compared"
    is_p_value = feature.method.lower() == "chisquared"
    scale = max(feature.distance, feature.threshold, 1e-9) * 1.25
    length, mark = 200 * feature.distance / scale, 200 * feature.threshold / scale
    drifted = any(v["constraint_check_type"] == "baseline_drift_check"
                  for v in feature.violations)
    colour = ALERT_COLOUR if drifted else OK_COLOUR
    word = "p-value" if is_p_value else "distance"
    return (f'<svg class="gauge" xmlns="http://www.w3.org/2000/svg" width="220" height="44" '
            f'viewBox="0 0 220 44" role="img" aria-label="{word} {feature.distance:.4f}, '
            f'threshold {feature.threshold:.4g}">'
            f'<rect x="10" y="8" width="200" height="14" fill="#e6e6e6"/>'
            f'<rect x="10" y="8" width="{length:.1f}" height="14" fill="{colour}"/>'
            f'<line x1="{10 + mark:.1f}" y1="4" x2="{10 + mark:.1f}" y2="26" stroke="#000" '
            f'stroke-width="2"/><text x="10" y="40" font-size="11" fill="#222">{word} '
            f"{feature.distance:.4f} / {feature.threshold:.4g} ({_e(feature.method)})</text>"
            f"</svg>")


def _legend() -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="260" height="16" role="img" '
            f'aria-label="legend: grey baseline, blue window">'
            f'<rect x="0" y="3" width="12" height="10" fill="{BASE_COLOUR}"/>'
            f'<text x="16" y="12" font-size="12" fill="#222">baseline</text>'
            f'<rect x="90" y="3" width="12" height="10" fill="{WINDOW_COLOUR}"/>'
            f'<text x="106" y="12" font-size="12" fill="#222">window</text></svg>')


def _cdf(feature: Mapping[str, Any]) -> sketches.WeightedCdf | None:
    kll = (feature.get("numerical_statistics") or {}).get("distribution", {}).get("kll")
    return sketches.WeightedCdf(kll["sketch"]["data"]) if kll and "sketch" in kll else None


def _categories(feature: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    buckets: list[Mapping[str, Any]] = (feature.get("string_statistics") or {}).get(
        "distribution", {}).get("categorical", {}).get("buckets", [])
    return buckets


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)
