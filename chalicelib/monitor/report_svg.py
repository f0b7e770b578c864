"""The report's drawings: inline SVG with presentation attributes only.

No ``style`` attribute, stylesheet, font file or script: colours, sizes and the generic
``sans-serif`` family are attributes. Every shown value has a ``<title>`` with its full text.

- ``chart``: the baseline's and the window's distributions on one axis. Numbers: 20 equal bins
  over both ranges, vertical bars. Strings: the most frequent values as horizontal bars, each
  label whole (wrapped) beside its two bars and shares.
- ``gauge``: the drift distance (or p-value) against its threshold on the page's common scale
  (``drift_scale``), the side that means drift shaded.
- ``legend``: the colours.
"""
from __future__ import annotations

import html
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from chalicelib.monitor import sketches
from chalicelib.monitor.checks import DATA_TYPE, DRIFT, FeatureResult, java_double

WIDTH, HEIGHT, BINS, TOP_VALUES = 360, 120, 20, 10
BASE_COLOUR, WINDOW_COLOUR, ALERT_COLOUR, OK_COLOUR = "#7a7a7a", "#1f5fbf", "#b3261e", "#1e7b34"
DRIFT_ZONE_COLOUR, TRACK_COLOUR, TEXT_COLOUR = "#f3cfcb", "#e6e6e6", "#222"
FONT = 'font-family="sans-serif" fill="#222"'
LABEL_RIGHT, BAR_LEFT, BAR_LENGTH, LABEL_UNITS = 150, 156, 150, 22
"""Categorical chart: a label line holds about LABEL_UNITS narrow characters (a wide one counts
two)."""
HIDDEN_LISTED = 40
"""A categorical chart's tooltip lists this many of the values it does not draw."""
GAUGE_LEFT, GAUGE_LENGTH, GAUGE_WIDTH, GAUGE_HEIGHT = 22, 200, 250, 80


Labels = tuple[str, str]
LABELS: Labels = ("baseline", "window")


def chart(feature: FeatureResult, labels: Labels = LABELS) -> str:
    """One feature's two distributions as one SVG (``labels``: their names, for another pair)."""
    base, window = feature.baseline or {}, feature.window or {}
    base_cdf, window_cdf = _cdf(base), _cdf(window)
    if base_cdf is not None or window_cdf is not None:
        return _numeric_svg(feature.name, *_numeric_bins(base_cdf, window_cdf), labels)
    return _categorical_svg(feature.name, _shares(base), _shares(window), labels)


def drift_scale(features: Iterable[FeatureResult]) -> float:
    """The gauges' common scale, 0 to this: 1, or the page's largest distance or threshold."""
    values = [v for f in features for v in (f.distance, f.threshold)
              if v is not None and math.isfinite(v)]
    return max([1.0, *values])


def number(value: float) -> str:
    return java_double(value)


def percent(fraction: float) -> str:
    return f"{java_double(fraction * 100)}%"


def short(value: float) -> str:
    return f"{value:.4g}"


def short_percent(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def escape(text: Any) -> str:
    """Markup escaped, control characters replaced."""
    return html.escape(re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", "\ufffd", str(text)),
                       quote=True)


def _numeric_bins(base: sketches.WeightedCdf | None, window: sketches.WeightedCdf | None
                  ) -> tuple[np.ndarray, list[tuple[float, float]]]:
    present = [c for c in (base, window) if c is not None and c.n]
    if not present:
        return np.zeros(0), []
    low = min(float(c.values[0]) for c in present)
    high = max(float(c.values[-1]) for c in present)
    edges = np.linspace(low, high if high > low else low + 1.0, BINS + 1)

    def shares(cdf: sketches.WeightedCdf | None) -> list[float]:
        if cdf is None or not cdf.n:
            return [0.0] * BINS
        cumulative = cdf(edges)
        cumulative[0] = 0.0
        return [float(x) for x in np.diff(cumulative)]

    return edges, list(zip(shares(base), shares(window), strict=True))


def _numeric_svg(name: str, edges: np.ndarray, pairs: Sequence[tuple[float, float]],
                 labels: Labels = LABELS) -> str:
    top = max((max(pair) for pair in pairs), default=0.0) or 1.0
    slot = (WIDTH - 20) / BINS
    bar = slot / 2 - 1
    grey, blue = labels
    parts = [_svg_open("chart", WIDTH, HEIGHT + 30,
                       f"{name}: {grey} (grey) and {blue} (blue) distributions"),
             f'<line x1="10" y1="{HEIGHT}" x2="{WIDTH - 10}" y2="{HEIGHT}" stroke="#444"/>']
    for index, (base_share, window_share) in enumerate(pairs):
        x = 10 + index * slot
        parts.append(f"<g><title>{escape(short(edges[index]))} to "
                     f"{escape(short(edges[index + 1]))}: {escape(grey)} "
                     f"{percent(base_share)}, {escape(blue)} {percent(window_share)}</title>")
        for offset, share, colour in ((0.0, base_share, BASE_COLOUR),
                                      (bar, window_share, WINDOW_COLOUR)):
            height = (HEIGHT - 10) * share / top
            parts.append(f'<rect x="{x + offset:.1f}" y="{HEIGHT - height:.1f}" '
                         f'width="{bar:.1f}" height="{height:.1f}" fill="{colour}"/>')
        parts.append("</g>")
    if pairs:
        y = HEIGHT + 16
        parts.append(f'<text x="10" y="{y}" font-size="11" {FONT}>{short(edges[0])}</text>'
                     f'<text x="{WIDTH - 10}" y="{y}" font-size="11" {FONT} '
                     f'text-anchor="end">{short(edges[-1])}</text>')
    else:
        parts.append(_no_values(HEIGHT // 2))
    return "".join([*parts, "</svg>"])


def _categorical_svg(name: str, base: Mapping[str, float], window: Mapping[str, float],
                     labels: Labels = LABELS) -> str:
    values = sorted(set(base) | set(window),
                    key=lambda v: (-(base.get(v, 0.0) + window.get(v, 0.0)), v))
    shown = values[:TOP_VALUES]
    top = max([*base.values(), *window.values(), 1e-9])
    parts, y = [], 6.0
    for value in shown:
        row, height = _category_row(value, base.get(value, 0.0), window.get(value, 0.0),
                                    top, y, labels)
        parts.append(row)
        y += height + 6
    if not shown:
        parts.append(_no_values(30))
        y = 50.0
    if len(values) > len(shown):
        parts.append(_more_values(values[len(shown):], base, window, y, labels))
        y += 14
    head = _svg_open("chart", WIDTH, math.ceil(y + 4),
                     f"{name}: shares of its most frequent values, {labels[0]} (grey) and "
                     f"{labels[1]} (blue)")
    return "".join([head, *parts, "</svg>"])


def _more_values(hidden: Sequence[str], base: Mapping[str, float],
                 window: Mapping[str, float], y: float, labels: Labels = LABELS) -> str:
    grey, blue = labels
    listed = ", ".join(f"{v} ({grey} {percent(base.get(v, 0.0))}, {blue} "
                       f"{percent(window.get(v, 0.0))})" for v in hidden[:HIDDEN_LISTED])
    listed += ", …" if len(hidden) > HIDDEN_LISTED else ""
    return (f'<g><title>{escape(listed)}</title><text x="{BAR_LEFT}" y="{y + 8:.1f}" '
            f'font-size="11" {FONT}>and {len(hidden)} less frequent value(s)</text></g>')


def _category_row(value: str, base: float, window: float, top: float, y: float,
                  labels: Labels = LABELS) -> tuple[str, float]:
    lines = wrap(value or '""', LABEL_UNITS)
    height = max(22.0, 13.0 * len(lines) + 4)
    label = "".join(f'<tspan x="{LABEL_RIGHT}" dy="{0 if i == 0 else 13}">{escape(line)}'
                    f"</tspan>" for i, line in enumerate(lines))
    parts = [f"<g><title>{escape(value)}: {escape(labels[0])} {percent(base)}, "
             f"{escape(labels[1])} {percent(window)}"
             f'</title><text y="{y + 10:.1f}" font-size="11" text-anchor="end" {FONT}>'
             f"{label}</text>"]
    for offset, share, colour in ((0.0, base, BASE_COLOUR), (11.0, window, WINDOW_COLOUR)):
        length = BAR_LENGTH * share / top
        parts.append(f'<rect x="{BAR_LEFT}" y="{y + offset:.1f}" width="{length:.1f}" '
                     f'height="9" fill="{colour}"/><text x="{BAR_LEFT + length + 4:.1f}" '
                     f'y="{y + offset + 8:.1f}" font-size="9" {FONT}>{short_percent(share)}</text>')
    return "".join([*parts, "</g>"]), height


def wrap(text: str, units: int) -> list[str]:
    """``text`` in lines of about ``units`` narrow characters, broken after a space, ``_``,
    ``-``, ``/``, ``.`` or ``:`` where it can be, inside a word if not."""
    lines, width = [""], 0
    for chunk in re.findall(r"[^ _\-/.:]*[ _\-/.:]?", text):
        if width + _width(chunk) > units and lines[-1]:
            lines.append("")
            width = 0
        for char in chunk:
            if width + _width(char) > units and lines[-1]:
                lines.append("")
                width = 0
            lines[-1] += char
            width += _width(char)
    return lines


def gauge(feature: FeatureResult, top: float) -> str:
    """The drift distance (or p-value) as a bar, the threshold a labelled tick, on the page's
    scale 0 to ``top``; the side meaning drift shaded (above for a distance, below for a
    p-value)."""
    distance, threshold = feature.distance, feature.threshold
    if distance is None or threshold is None or not math.isfinite(distance):
        return "not compared"
    p_value = feature.method.lower() == "chisquared"
    word, side = ("p-value", "below") if p_value else ("distance", "above")
    drifted = any(v["constraint_check_type"] == DRIFT for v in feature.violations)
    length, mark = _x(distance, top), _x(threshold, top)
    zone = (GAUGE_LEFT, mark) if p_value else (mark, GAUGE_LEFT + GAUGE_LENGTH)
    summary = (f"{word} {number(distance)}, threshold {number(threshold)} "
               f"({feature.method}): drift when {side} the threshold")
    return "".join([
        _svg_open("gauge", GAUGE_WIDTH, GAUGE_HEIGHT, summary), f"<title>{escape(summary)}"
        f'</title><rect x="{GAUGE_LEFT}" y="16" width="{GAUGE_LENGTH}" height="14" '
        f'fill="{TRACK_COLOUR}"/><rect x="{zone[0]:.1f}" y="16" width="{zone[1] - zone[0]:.1f}" '
        f'height="14" fill="{DRIFT_ZONE_COLOUR}"/>',
        f'<rect class="distance" x="{GAUGE_LEFT}" y="19" width="{length - GAUGE_LEFT:.1f}" '
        f'height="8" fill="{ALERT_COLOUR if drifted else OK_COLOUR}"/>',
        f'<line class="threshold" x1="{mark:.1f}" y1="12" x2="{mark:.1f}" y2="34" '
        f'stroke="#000" stroke-width="2"/>',
        _gauge_text(mark, 10, f"threshold {short(threshold)}", "threshold"),
        _gauge_text(length, 45, short(distance), "value"),
        f'<text x="{GAUGE_LEFT - 4}" y="27" font-size="10" text-anchor="end" {FONT}>0</text>'
        f'<text x="{GAUGE_LEFT + GAUGE_LENGTH + 4}" y="27" font-size="10" {FONT}>'
        f"{short(top)}</text>",
        f'<text x="{GAUGE_LEFT}" y="62" font-size="10" {FONT}>{word} {number(distance)}</text>'
        f'<text x="{GAUGE_LEFT}" y="75" font-size="10" {FONT}>'
        f"{_verdict(feature, drifted, side)}</text></svg>"])


def _verdict(feature: FeatureResult, drifted: bool, side: str) -> str:
    method = escape(feature.method)
    distance, threshold = feature.distance or 0.0, feature.threshold or 0.0
    beyond = distance > threshold if side == "above" else distance < threshold
    if drifted or not beyond:
        return f"{'drift' if drifted else 'no drift'} ({method})"
    if any(v["constraint_check_type"] == DATA_TYPE for v in feature.violations):
        return f"not flagged: the data type check failed ({method})"
    return f"not flagged: within sampling noise ({method})"  # Robust's KS test


def _gauge_text(x: float, y: int, text: str, kind: str) -> str:
    anchor = "start" if x < GAUGE_LEFT + 20 else "end" if x > GAUGE_LEFT + GAUGE_LENGTH - 20 \
        else "middle"
    return (f'<text class="{kind}" x="{x:.1f}" y="{y}" font-size="10" text-anchor="{anchor}" '
            f"{FONT}>{escape(text)}</text>")


def legend() -> str:
    return (f'{_svg_open("legend", 200, 16, "legend: grey baseline, blue window")}'
            f'<rect x="0" y="3" width="12" height="10" fill="{BASE_COLOUR}"/>'
            f'<text x="16" y="12" font-size="12" {FONT}>baseline</text>'
            f'<rect x="90" y="3" width="12" height="10" fill="{WINDOW_COLOUR}"/>'
            f'<text x="106" y="12" font-size="12" {FONT}>window</text></svg>')


def _svg_open(kind: str, width: float, height: float, label: str) -> str:
    return (f'<svg class="{kind}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(label)}">')


def _x(value: float, top: float) -> float:
    return GAUGE_LEFT + GAUGE_LENGTH * min(max(value / top, 0.0), 1.0)


def _no_values(y: int) -> str:
    return f'<text x="20" y="{y}" font-size="12" {FONT}>no values</text>'


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _cdf(feature: Mapping[str, Any]) -> sketches.WeightedCdf | None:
    kll = (feature.get("numerical_statistics") or {}).get("distribution", {}).get("kll")
    return sketches.WeightedCdf(kll["sketch"]["data"]) if kll and "sketch" in kll else None


def _shares(feature: Mapping[str, Any]) -> dict[str, float]:
    buckets: list[Mapping[str, Any]] = (feature.get("string_statistics") or {}).get(
        "distribution", {}).get("categorical", {}).get("buckets", [])
    total = sum(float(b["count"]) for b in buckets) or 1.0
    return {str(b["value"]): float(b["count"]) / total for b in buckets}
