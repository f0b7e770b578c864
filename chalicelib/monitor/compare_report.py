"""The comparison's report (compare.html): one self-contained HTML page, as report.html is.

No script, stylesheet, font or ``style`` attribute, nothing fetched: tables and inline SVG with
presentation attributes, so it opens offline and under a strict Content-Security-Policy. A table
of contents links every section. The verdict comes first (a badge, each reason), then its
evidence (the figure of each failed threshold), then the thresholds against B's figures, one row
per column both sides have (A's distribution grey, B's blue, on one axis:
:func:`chalicelib.monitor.report_svg.chart`; the distance as a bar against the threshold), and
the other sections. Long tables are folded (``<details>``). Given the model's labels, a class
shows its name beside its index.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chalicelib.monitor import compare, compare_answers, compare_sides, report_svg
from chalicelib.monitor.checks import FeatureResult
from chalicelib.monitor.report import anchors
from chalicelib.monitor.report_svg import (
    ALERT_COLOUR,
    BASE_COLOUR,
    FONT,
    OK_COLOUR,
    TRACK_COLOUR,
    WINDOW_COLOUR,
)
from chalicelib.monitor.report_svg import escape as _e

JSON, HTML = "compare.json", "compare.html"
STATISTICS_A, STATISTICS_B = "statistics_a.json", "statistics_b.json"
LABELS = ("A", "B")
BAR_LEFT, BAR_LENGTH, BAR_WIDTH, BAR_HEIGHT = 12, 220, 260, 64
CHARTED_COLUMNS = 40
"""Past this many columns (an image classifier's 1000 probabilities), those
:func:`chalicelib.monitor.compare.ranked` puts first are charted, the others listed in a short
table."""
NEUTRAL_COLOUR = "#9a9a9a"
"""A column's distance bar when it is not gated (an input column)."""
EVIDENCE_COLUMNS = 10
"""Columns beyond --max-distance charted under the verdict, at most."""
SHOWN_REASONS = 10
"""Reasons listed under the verdict; the others are folded (a thousand would push its evidence
pages down)."""
Labels = Sequence[str] | None
"""The model's class names, in index order (None: classes shown as indices)."""


def render(document: Mapping[str, Any], statistics_a: Mapping[str, Any],
           statistics_b: Mapping[str, Any], labels: Labels = None) -> str:
    """The page of a comparison's document, the two sides' ``statistics.json`` (the charts) and
    the model's class names."""
    a, b = document["a"], document["b"]
    title = f"{a['source']} (A) vs {b['source']} (B)"
    features = ({str(f["name"]): f for f in statistics_a.get("features", [])},
                {str(f["name"]): f for f in statistics_b.get("features", [])})
    sections = _sections(document, features, labels)
    contents = "".join(f'<li><a href="#{anchor}">{_e(heading)}</a></li>'
                       for anchor, heading, _html in sections)
    body = "\n".join(html for _anchor, _heading, html in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Comparison: {_e(title)}</title></head>
<body>
<h1>Comparison: {_e(title)}</h1>
<p>{_facts(document)}</p>
<nav id="contents" aria-label="contents"><ol>{contents}</ol></nav>
{body}
</body></html>
"""


Features = tuple[Mapping[str, Any], Mapping[str, Any]]
Section = tuple[str, str, str]
_EVIDENCE = ("max_distance", "min_agreement", "max_latency_ratio", "max_error_rate")


def _sections(document: Mapping[str, Any], features: Features, labels: Labels
              ) -> list[Section]:
    named = _Names(labels)
    builders: dict[str, Callable[[], Section]] = {
        "min_agreement": lambda: ("agreement", "Agreement",
                                  _agreement(document["agreement"], named)),
        "max_latency_ratio": lambda: ("latency", "Latency", _latency(document)),
        "max_error_rate": lambda: ("errors", "Errors", _errors(document))}
    failed = document["verdict"]["failed"]
    sections: list[Section] = [("verdict", "Verdict", _verdict(document))]
    if "max_distance" in failed:
        sections.append(("beyond", "Columns beyond --max-distance",
                         _beyond(document, features, named)))
    sections.extend(builders[key]() for key in _EVIDENCE if key in failed and key in builders)
    sections.append(("thresholds", "Thresholds", _thresholds(document)))
    sections.append(("columns", "Columns", _columns(document, features, named)))
    if len(document["columns"]) > CHARTED_COLUMNS:
        sections.append(("other-columns", "Other columns",
                         _other_columns(compare.ranked(document["columns"])[CHARTED_COLUMNS:],
                                        named)))
    sections.extend(builders[key]() for key in ("min_agreement", "max_latency_ratio",
                                                "max_error_rate") if key not in failed)
    return sections


class _Names:

    def __init__(self, labels: Labels) -> None:
        self._labels = list(labels) if labels else []

    def label(self, value: Any) -> str:
        if isinstance(value, list):
            return ", ".join(self.label(item) for item in value)
        if type(value) is int and 0 <= value < len(self._labels):
            return f"{self._labels[value]} ({value})"
        return str(value)

    def column(self, name: str) -> str:
        """A column's name; ``predictionN`` with class N's."""
        index = name.removeprefix("prediction")
        if name.startswith("prediction") and index.isdigit() and int(index) < len(self._labels):
            return f"{name} ({self._labels[int(index)]})"
        return name


def _facts(document: Mapping[str, Any]) -> str:
    window = document.get("window")
    facts = [f"{_e(window['start'])} to {_e(window['end'])}"] if window else []
    for name in ("a", "b"):
        side = document[name]
        shadow = f", {side['shadow_records']} shadow" if side["shadow_records"] else ""
        arms = ", ".join(f"{arm}: {count}" for arm, count in side["arms"].items())
        chosen = f", arm {side['arm']} only" if side.get("arm") is not None else ""
        facts.append(f"{name.upper()} ({_e(side['role'] + chosen)}): {side['records']} record(s)"
                     f"{shadow}, {side['rows']} row(s){_e(f' (arms {arms})' if arms else '')}")
    return " &middot; ".join(facts)


def _verdict(document: Mapping[str, Any]) -> str:
    verdict = document["verdict"]
    if verdict.get("nothing_compared"):
        headline, colour, badge = (f"nothing compared: {compare.NOTHING_COMPARED} (exit 4)",
                                   ALERT_COLOUR, "NOTHING")
    elif not verdict["checked"]:
        headline, colour, badge = "no threshold given: figures only (exit 0)", \
            NEUTRAL_COLOUR, "NO GATE"
    elif verdict["worse"]:
        headline, colour, badge = (f"B is worse than A by {len(verdict['reasons'])} "
                                   f"reason(s) (exit 3)"), ALERT_COLOUR, "WORSE"
    else:
        headline, colour, badge = "B is within every threshold given (exit 0)", \
            OK_COLOUR, "PASS"
    svg = (f'<svg class="badge" xmlns="http://www.w3.org/2000/svg" width="96" height="28" '
           f'viewBox="0 0 96 28" role="img" aria-label="{badge}"><rect x="0" y="0" '
           f'width="96" height="28" rx="4" fill="{colour}"/><text x="48" y="19" '
           f'font-size="14" font-weight="bold" text-anchor="middle" font-family="sans-serif" '
           f'fill="#fff">{badge}</text></svg>')
    shown, folded = verdict["reasons"][:SHOWN_REASONS], verdict["reasons"][SHOWN_REASONS:]
    reasons = "".join(f"<li>{_e(reason)}</li>" for reason in shown)
    listed = f'\n<ol class="reasons">{reasons}</ol>' if reasons else ""
    if folded:
        more = "".join(f"<li>{_e(reason)}</li>" for reason in folded)
        listed += (f'\n<details class="more-reasons"><summary>{len(folded)} more reason(s)'
                   f'</summary><ol class="reasons" start="{SHOWN_REASONS + 1}">{more}</ol>'
                   f"</details>")
    return (f'<h2 id="verdict">{svg} Verdict: {_e(headline)}</h2>{listed}')


def _thresholds(document: Mapping[str, Any]) -> str:
    given = document["thresholds"]
    agreement, errors = document["agreement"], document["b"]["errors"]
    verdict = document["verdict"]
    rows = [
        ("max_distance", report_svg.short,
         f"largest gated distance {_largest(document)}"),
        ("min_agreement", compare.percent,
         _percent(agreement["agreement"]) if agreement["agreement"] is not None
         else agreement["note"]),
        ("max_error_rate", compare.percent,
         _percent(errors["rate"]) if errors["rate"] is not None else errors["note"]),
        ("max_latency_ratio", report_svg.short,
         "B/A " + "/".join(f"{_number(document['latency_ratio'][f'p{p}'])} (p{p})"
                           for p in compare_sides.PERCENTILES)),
    ]
    body = []
    for key, shown, figure in rows:
        limit = "not given" if given[key] is None else shown(given[key])
        result = "not checked" if key not in verdict["checked"] else "worse" \
            if key in verdict["failed"] else "within"
        option = "--" + key.replace("_", "-")
        body.append(f'<tr><th scope="row" align="left">{option}</th><td>{_e(limit)}</td>'
                    f"<td>{_e(figure)}</td><td>{result}</td></tr>")
    method = _e(given["comparison_method"])
    return ('<h2 id="thresholds">Thresholds</h2>\n<table class="thresholds" border="1" '
            'cellpadding="4" cellspacing="0">\n<thead><tr><th scope="col">Threshold</th>'
            '<th scope="col">Given</th><th scope="col">B\'s figure</th><th scope="col">Result'
            f'</th></tr></thead>\n<tbody>\n{chr(10).join(body)}\n</tbody></table>\n'
            f"<p>Distances of numbers by the {method} method; strings by LInfinity. "
            f"Gated columns: {_e(_gated(document))}.</p>")


def _gated(document: Mapping[str, Any]) -> str:
    return "the output's columns" if document["columns_gated"] == "output" \
        else "every column (the rows do not say which are the output's)"


def _largest(document: Mapping[str, Any]) -> str:
    distances = [c["distance"] for c in document["columns"]
                 if c["gated"] and c["distance"] is not None]
    return report_svg.short(max(distances)) if distances else "n/a"


def _agreement(agreement: Mapping[str, Any], named: _Names) -> str:
    figure = _percent(agreement["agreement"]) if agreement["agreement"] is not None \
        else agreement["note"]
    rows = [("top-1 agreement", figure),
            (f"pairs (same {agreement['key']})", agreement["pairs"]),
            ("compared (an answer on both sides)", agreement["compared"]),
            ("agreed", agreement["agreed"]),
            ("compared by argmax / first output column / mixed",
             " / ".join(str(agreement["by"][m]) for m in
                        (compare_answers.ARGMAX, compare_answers.FIRST_COLUMN,
                         compare_sides.MIXED))),
            ("pairs with a failed call", agreement["with_error"]),
            ("pairs with an undefined answer (NaN)", agreement.get("undefined", 0)),
            ("B records past the pairing cap, not kept", agreement.get("beyond_cap_b", 0)),
            ("pairs not comparable (no answer to compare)", agreement["not_comparable"]),
            ("A records without a B partner", agreement["unpaired_a"]),
            ("B records without an A partner", agreement["unpaired_b"]),
            ("B records of an id already seen", agreement["duplicate_ids_b"])]
    body = "\n".join(f'<tr><th scope="row" align="left">{_e(label)}</th>'
                     f'<td align="right">{_e(value)}</td></tr>' for label, value in rows)
    parts = ['<h2 id="agreement">Agreement</h2>',
             '<table class="agreement" border="1" cellpadding="4" cellspacing="0">\n'
             f"<tbody>\n{body}\n</tbody></table>"]
    if agreement["disagreements"]:
        items = "\n".join(f'<tr><td>{_e(named.label(d["a"]))}</td>'
                          f'<td>{_e(named.label(d["b"]))}</td>'
                          f'<td align="right">{d["count"]}</td></tr>'
                          for d in agreement["disagreements"])
        parts.append('<h3>Most frequent disagreements</h3>\n<table class="disagreements" '
                     'border="1" cellpadding="4" cellspacing="0">\n<thead><tr><th scope="col">'
                     'A\'s answer</th><th scope="col">B\'s answer</th><th scope="col">Pairs'
                     f"</th></tr></thead>\n<tbody>\n{items}\n</tbody></table>")
    return "\n".join(parts)


def _columns(document: Mapping[str, Any], features: Features, named: _Names) -> str:
    columns = document["columns"]
    charted = columns if len(columns) <= CHARTED_COLUMNS \
        else compare.ranked(columns)[:CHARTED_COLUMNS]
    order = "Every column both sides have, the output's first" if len(charted) == len(columns) \
        else (f"The {len(charted)} of {len(columns)} columns of largest distance (beyond the "
              f"threshold first; the others are listed under "
              f'<a href="#other-columns">Other columns</a>)')
    legend = (f'<svg class="legend" xmlns="http://www.w3.org/2000/svg" width="260" '
              f'height="16" viewBox="0 0 260 16" role="img" aria-label="legend: grey A, '
              f'blue B"><rect x="0" y="3" width="12" height="10" fill="{BASE_COLOUR}"/>'
              f'<text x="16" y="12" font-size="12" {FONT}>A (champion)</text>'
              f'<rect x="120" y="3" width="12" height="10" fill="{WINDOW_COLOUR}"/>'
              f'<text x="136" y="12" font-size="12" {FONT}>B (challenger)</text></svg>')
    parts = ['<h2 id="columns">Columns</h2>',
             f"<p>{legend}<br>{order}. Distance: "
             f"the drift check's L-infinity distance, 0 to 1; the black tick is "
             f"--max-distance (the dashed one the KS critical distance, under Robust); red: "
             f"beyond it, green: within, grey: not gated.</p>",
             _column_table("columns", charted, document, features, named)]
    for key, other in (("only_a", "B"), ("only_b", "A")):
        if document[key]:
            names = ", ".join(_e(named.column(item["name"]))
                              + (" (output)" if item["output"] else "")
                              for item in document[key])
            parts.append(f'<p class="{key}">Columns {other} does not have: {names}</p>')
    return "\n".join(parts)


def _beyond(document: Mapping[str, Any], features: Features, named: _Names) -> str:
    """The evidence of a failed --max-distance: the columns beyond it charted, or why none could
    be compared."""
    beyond = [c for c in compare.ranked(document["columns"]) if c["beyond"]]
    shown = beyond[:EVIDENCE_COLUMNS]
    more = f" (the {len(shown)} largest of {len(beyond)})" if len(shown) < len(beyond) else ""
    parts = ['<h2 id="beyond">Columns beyond --max-distance</h2>']
    if shown:
        parts.append(f"<p>{len(beyond)} gated column(s) beyond the threshold{more}; every "
                     f'column: <a href="#columns">Columns</a>.</p>')
        parts.append(_column_table("beyond", shown, document, features, named))
    else:
        parts.append("<p>No column is beyond it; the reasons above say why it fails "
                     '(<a href="#columns">Columns</a>).</p>')
    return "\n".join(parts)


def _column_table(kind: str, columns: list[dict[str, Any]], document: Mapping[str, Any],
                  features: Features, named: _Names) -> str:
    """A table of charted columns; rows anchored by column name (``beyond-`` in the evidence's
    table: the same column is in both)."""
    ids = anchors([c["name"] for c in columns])
    prefix = "" if kind == "columns" else f"{kind}-"
    limit = document["thresholds"]["max_distance"]
    rows = "\n".join(_column_row(c, prefix + anchor, features, limit, named)
                     for c, anchor in zip(columns, ids, strict=True))
    return (f'<table class="{kind}" border="1" cellpadding="6" cellspacing="0">\n'
            '<thead><tr><th scope="col">Column</th><th scope="col">Values (present / missing)'
            '</th><th scope="col">A vs B</th><th scope="col">Distance vs threshold</th></tr>'
            f"</thead>\n<tbody>\n{rows}\n</tbody></table>")


def _other_columns(columns: list[dict[str, Any]], named: _Names) -> str:
    rows = "\n".join(
        f'<tr><th scope="row" align="left">{_e(named.column(c["name"]))}</th>'
        f'<td>{_KIND[c["output"]]}</td>'
        f'<td align="right">{_e(_distance(c))}</td><td>{_result(c)}</td></tr>'
        for c in columns)
    return (f'<h2 id="other-columns">Other columns</h2>\n<details class="other-columns">'
            f"<summary>The other {len(columns)} columns, largest distance first</summary>\n"
            '<table class="other-columns" border="1" cellpadding="3" cellspacing="0">\n'
            '<thead><tr><th scope="col">Column</th><th scope="col"></th><th scope="col">'
            'Distance</th><th scope="col">Result</th></tr></thead>\n'
            f"<tbody>\n{rows}\n</tbody></table></details>")


_KIND = {True: "output", False: "input", None: ""}


def _distance(column: Mapping[str, Any]) -> str:
    distance = column["distance"]
    return str(column["note"]) if distance is None else report_svg.short(distance)


def _result(column: Mapping[str, Any]) -> str:
    if not column["gated"]:
        return "not gated"
    if column["beyond"] is None:
        return "no threshold given" if column["distance"] is not None else "n/a"
    return "beyond the threshold" if column["beyond"] else "within the threshold"


def _column_row(column: Mapping[str, Any], anchor: str, features: Features,
                limit: float | None, named: _Names) -> str:
    name = column["name"]
    kind = _KIND[column["output"]]
    counts = "<br>".join(f"{side.upper()}: {column[side]['present']} / "
                         f"{column[side]['missing']} "
                         f"<small>{_e(column[side]['inferred_type'] or '')}</small>"
                         for side in ("a", "b"))
    chart = report_svg.chart(FeatureResult(name, features[0].get(name), features[1].get(name)),
                             LABELS)
    label = _e(named.column(name)) if name.strip() else "<em>(no name)</em>"
    return (f'<tr id="{anchor}"><th scope="row">{label}<br><small>{kind}</small></th>'
            f"<td>{counts}</td><td>{chart}</td><td>{_bar(column, limit)}</td></tr>")


def _bar(column: Mapping[str, Any], limit: float | None) -> str:
    """The distance as a bar on 0 to 1, --max-distance as a tick (under Robust the KS critical
    distance dashed), coloured by the column's result."""
    distance = column["distance"]
    if distance is None:
        return _e(column["note"])
    colour = NEUTRAL_COLOUR if not column["gated"] or column["beyond"] is None \
        else ALERT_COLOUR if column["beyond"] else OK_COLOUR
    result = _result(column)
    summary = f"distance {report_svg.number(distance)} ({column['method']}): {result}"
    parts = [f'<svg class="distance" xmlns="http://www.w3.org/2000/svg" width="{BAR_WIDTH}" '
             f'height="{BAR_HEIGHT}" viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}" role="img" '
             f'aria-label="{_e(summary)}"><title>{_e(summary)}</title>'
             f'<rect x="{BAR_LEFT}" y="14" width="{BAR_LENGTH}" height="14" '
             f'fill="{TRACK_COLOUR}"/><rect class="value" x="{BAR_LEFT}" y="17" '
             f'width="{_x(distance) - BAR_LEFT:.1f}" height="8" fill="{colour}"/>']
    critical = column["critical"]
    if column["method"] == "Robust" and critical is not None and critical <= 1:
        parts.append(f'<line class="critical" x1="{_x(critical):.1f}" y1="11" '
                     f'x2="{_x(critical):.1f}" y2="31" stroke="#000" stroke-width="1" '
                     f'stroke-dasharray="3,2"/>')
    if limit is not None and column["gated"]:
        parts.append(f'<line class="threshold" x1="{_x(limit):.1f}" y1="10" '
                     f'x2="{_x(limit):.1f}" y2="32" stroke="#000" stroke-width="2"/>'
                     f'<text x="{_x(limit):.1f}" y="8" font-size="10" text-anchor="middle" '
                     f"{FONT}>threshold {report_svg.short(limit)}</text>")
    parts.append(f'<text x="{BAR_LEFT}" y="44" font-size="10" {FONT}>distance '
                 f"{_e(report_svg.short(distance))} ({_e(column['method'])})</text>"
                 f'<text x="{BAR_LEFT}" y="58" font-size="10" {FONT}>{_e(result)}</text></svg>')
    return "".join(parts)


def _x(value: float) -> float:
    return BAR_LEFT + BAR_LENGTH * min(max(value, 0.0), 1.0)


def _latency(document: Mapping[str, Any]) -> str:
    a, b = document["a"]["latency_ms"], document["b"]["latency_ms"]
    ratio = document["latency_ratio"]
    limit = document["thresholds"]["max_latency_ratio"]
    rows = [f'<tr><th scope="row" align="left">p{p}</th><td align="right">'
            f'{_number(a[f"p{p}"])}</td><td align="right">{_number(b[f"p{p}"])}</td>'
            f'<td align="right">{_number(ratio[f"p{p}"])}</td></tr>'
            for p in compare_sides.PERCENTILES]
    rows.append(f'<tr><th scope="row" align="left">records with a latency</th>'
                f'<td align="right">{a["count"]}</td><td align="right">{b["count"]}</td>'
                f"<td></td></tr>")
    given = f" (--max-latency-ratio {_number(limit)})" if limit is not None else ""
    return ('<h2 id="latency">Latency (ms)</h2>\n<table class="latency" border="1" '
            'cellpadding="4" cellspacing="0">\n<thead><tr><th scope="col"></th>'
            '<th scope="col">A</th><th scope="col">B</th>'
            f'<th scope="col">B / A{_e(given)}</th></tr></thead>\n<tbody>\n'
            f"{chr(10).join(rows)}\n</tbody></table>\n<p>{compare_sides.LATENCY_KEY} of the "
            f"records with an output; percentiles by linear interpolation.</p>")


def _errors(document: Mapping[str, Any]) -> str:
    rows = []
    for name in ("a", "b"):
        errors = document[name]["errors"]
        rate = _percent(errors["rate"]) if errors["rate"] is not None else errors["note"]
        codes = ", ".join(f"{code}: {count}" for code, count in errors["codes"].items())
        rows.append(f'<tr><th scope="row" align="left">{name.upper()}</th><td align="right">'
                    f'{errors["records"]}</td><td align="right">{errors["count"]}</td>'
                    f"<td>{_e(rate)}</td><td>{_e(codes)}</td></tr>")
    return ('<h2 id="errors">Errors</h2>\n<table class="errors" border="1" cellpadding="4" '
            'cellspacing="0">\n<thead><tr><th scope="col"></th><th scope="col">Records</th>'
            '<th scope="col">Failed calls</th><th scope="col">Error rate</th>'
            '<th scope="col">Codes</th></tr></thead>\n<tbody>\n'
            f"{chr(10).join(rows)}\n</tbody></table>")


def _percent(value: float | None) -> str:
    return "n/a" if value is None else compare.percent(value)


def _number(value: float | None) -> str:
    return "n/a" if value is None else report_svg.short(value)
