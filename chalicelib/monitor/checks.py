"""Every check of Model Monitor's data quality analysis, over two ``statistics.json`` documents.

``evaluate(baseline, constraints, window)`` compares a window's statistics with the baseline's
under ``constraints.json`` and returns the ``constraint_violations.json`` document and, per
feature, what the report draws. The checks and their descriptions' wording follow the analyzer's:

- ``data_type_check``: the fraction of a window's values of the baseline's type (Integral:
  integers; Fractional: any number; String: anything) is below ``datatype_check_threshold``.
- ``completeness_check``: the fraction of present values is below the feature's ``completeness``.
- ``baseline_drift_check``: numeric features, the L-infinity distance between the two KLL
  distributions is above ``comparison_threshold`` ("Simple"); "Robust" flags only when a
  two-sample Kolmogorov-Smirnov test on the sketches' sizes also rejects "same distribution"
  at 5 % (a small window's sampling noise is not drift). String features: the L-infinity distance of
  the categorical frequencies against ``categorical_comparison_threshold`` ("LInfinity"), or a
  chi-squared p-value below it ("ChiSquared").
- ``missing_column_check`` / ``extra_column_check``: a baseline feature absent from the window,
  and the reverse.
- ``categorical_values_check``: the fraction of a String feature's values inside
  ``string_constraints.domains`` is below ``domain_content_threshold``.
"""
from __future__ import annotations

import dataclasses
import decimal
import math
from collections.abc import Mapping
from typing import Any

from chalicelib.monitor import sketches
from chalicelib.monitor.constraints import FeatureConfig

DATA_TYPE, COMPLETENESS, DRIFT = "data_type_check", "completeness_check", "baseline_drift_check"
MISSING, EXTRA, CATEGORICAL = "missing_column_check", "extra_column_check", \
    "categorical_values_check"
_EPSILON = 1e-9


@dataclasses.dataclass
class FeatureResult:
    """One feature's comparison, as the report shows it."""

    name: str
    baseline: Mapping[str, Any] | None
    window: Mapping[str, Any] | None
    distance: float | None = None
    threshold: float | None = None
    method: str = ""
    violations: list[dict[str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Evaluation:
    """The violations document and the per-feature results, violated features first."""

    violations: dict[str, Any]
    features: list[FeatureResult]


def evaluate(baseline: Mapping[str, Any], constraints: Mapping[str, Any],
             window: Mapping[str, Any]) -> Evaluation:
    """Evaluate every check (``constraints`` possibly edited by hand)."""
    base_features = {f["name"]: f for f in baseline.get("features", [])}
    window_features = {f["name"]: f for f in window.get("features", [])}
    items = int(window.get("dataset", {}).get("item_count", 0))
    global_config = constraints.get("monitoring_config")
    results: list[FeatureResult] = []
    counts = (len(window_features), len(constraints.get("features", [])))
    for constraint in constraints.get("features", []):
        name = constraint["name"]
        config = FeatureConfig(global_config, _overrides(constraint))
        result = FeatureResult(name, base_features.get(name), window_features.get(name))
        results.append(result)
        if not config.evaluate:
            continue
        if result.window is None:
            result.violations.append(_violation(name, MISSING, _columns("missing", counts)))
            continue
        _check_feature(result, constraint, config, items)
    known = {c["name"] for c in constraints.get("features", [])}
    for name, feature in window_features.items():
        if name not in known:
            result = FeatureResult(name, None, feature)
            result.violations.append(_violation(name, EXTRA, _columns("extra", counts)))
            results.append(result)
    results.sort(key=lambda r: not r.violations)
    return Evaluation({"violations": [v for r in results for v in r.violations]}, results)


def _check_feature(result: FeatureResult, constraint: Mapping[str, Any],
                   config: FeatureConfig, items: int) -> None:
    window = result.window or {}
    present = common_statistics(window).get("num_present", 0)
    kind = constraint.get("inferred_type", "Unknown")
    add = result.violations.append
    type_failed = False
    if present and kind in _MATCHERS:
        match = _MATCHERS[kind](window) / present
        expected = config.number("datatype_check_threshold")
        type_failed = match < expected - _EPSILON
        if type_failed:
            add(_violation(result.name, DATA_TYPE,
                           f"Data type match requirement is not met. Expected data type: "
                           f"{kind}, Expected match: {_pct(expected)}. Observed: Only "
                           f"{_pct(match)} of data is {kind}."))
    completeness = constraint.get("completeness")
    if completeness is not None and items:
        observed = present / items
        if observed < float(completeness) - _EPSILON:
            add(_violation(result.name, COMPLETENESS,
                           f"Data completeness requirement is not met. Expected: "
                           f"{_pct(float(completeness))}. Observed: Only {_pct(observed)}."))
    domains = (constraint.get("string_constraints") or {}).get("domains")
    if domains and present:
        _check_domain(result, domains, config, present)
    if config.compare and result.baseline is not None:
        # a feature whose values no longer have the baseline's type is reported once, as a
        # type violation: the analyzer reported no drift for such features in a real run
        # (Churn, 0/1 in the baseline against the model's probabilities, is a distance of
        # about 0.86), so the distance is computed for the report and not flagged
        _check_drift(result, config, flag=not type_failed)


def _check_domain(result: FeatureResult, domains: list[Any], config: FeatureConfig,
                  present: int) -> None:
    allowed = {str(d) for d in domains}
    counted = {str(b["value"]): float(b["count"]) for b in _categories(result.window or {})}
    if not counted:  # a numeric window of a String feature: nothing is in the domain
        inside = 0.0
    else:
        inside = sum(count for value, count in counted.items() if value in allowed)
    match = min(inside / present, 1.0)
    expected = config.number("domain_content_threshold")
    if match < expected - _EPSILON:
        result.violations.append(_violation(
            result.name, CATEGORICAL,
            f"Categorical value match requirement is not met. Expected match: "
            f"{_pct(expected)}. Observed: Only {_pct(match)} of data is within the baseline "
            f"domain."))


def _check_drift(result: FeatureResult, config: FeatureConfig, flag: bool = True) -> None:
    base, window = _kll(result.baseline or {}), _kll(result.window or {})
    if base is not None and window is not None:
        result.distance = sketches.linf_distance(base, window)
        result.threshold = config.number("comparison_threshold")
        result.method = config.text("comparison_method") or "Robust"
        if result.method.lower() == "robust":
            critical = sketches.ks_critical(base.n, window.n)
            drifted = result.distance > max(result.threshold, critical)
        else:
            drifted = result.distance > result.threshold
    else:
        base_c, window_c = _categories(result.baseline or {}), _categories(result.window or {})
        if not base_c or not window_c:
            return
        result.threshold = config.number("categorical_comparison_threshold")
        result.method = config.text("categorical_drift_method") or "LInfinity"
        if result.method.lower() == "chisquared":
            result.distance = chi_squared_p_value(base_c, window_c)
            drifted = result.distance < result.threshold
        else:
            result.distance = categorical_distance(base_c, window_c)
            drifted = result.distance > result.threshold
    if drifted and flag:
        word = "p-value" if result.method.lower() == "chisquared" else "distance"
        relation = "is below" if word == "p-value" else "exceeds"
        result.violations.append(_violation(
            result.name, DRIFT,
            f"Baseline drift {word}: {java_double(result.distance)} {relation} threshold: "
            f"{java_double(result.threshold)}"))


@dataclasses.dataclass(frozen=True)
class Distance:
    """The L-infinity distance between two features' distributions (:func:`distance`)."""

    kind: str
    """``numeric`` (the KLL sketches' cumulative distributions) or ``categorical`` (frequencies)."""
    value: float
    sizes: tuple[float, float]
    """The values each side's distribution stands for: a two-sample test's sizes."""


def distance(first: Mapping[str, Any], second: Mapping[str, Any]) -> Distance | None:
    """The drift check's distance between two ``statistics.json`` features: numeric when both
    have a KLL sketch, categorical when both have categorical buckets, else None."""
    base, window = _kll(first), _kll(second)
    if base is not None and window is not None:
        return Distance("numeric", sketches.linf_distance(base, window), (base.n, window.n))
    base_c, window_c = _categories(first), _categories(second)
    if not base_c or not window_c:
        return None
    return Distance("categorical", categorical_distance(base_c, window_c),
                    (sum(float(b["count"]) for b in base_c),
                     sum(float(b["count"]) for b in window_c)))


def categorical_distance(first: list[Mapping[str, Any]],
                         second: list[Mapping[str, Any]]) -> float:
    p, q = _frequencies(first), _frequencies(second)
    return max((abs(p.get(v, 0.0) - q.get(v, 0.0)) for v in set(p) | set(q)), default=0.0)


def chi_squared_p_value(baseline: list[Mapping[str, Any]],
                        window: list[Mapping[str, Any]]) -> float:
    """The p-value of a chi-squared goodness-of-fit test of the window's counts against the
    baseline's frequencies (Wilson-Hilferty's approximation of the tail)."""
    expected = _frequencies(baseline)
    observed = {str(b["value"]): float(b["count"]) for b in window}
    total = sum(observed.values())
    floor = 0.5 / max(total, 1.0)  # a value the baseline never saw still counts
    statistic = 0.0
    for value in set(expected) | set(observed):
        e = max(expected.get(value, 0.0), floor) * total
        statistic += (observed.get(value, 0.0) - e) ** 2 / e
    dof = max(len(set(expected) | set(observed)) - 1, 1)
    z = ((statistic / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _frequencies(buckets: list[Mapping[str, Any]]) -> dict[str, float]:
    total = sum(float(b["count"]) for b in buckets) or 1.0
    return {str(b["value"]): float(b["count"]) / total for b in buckets}


def common_statistics(feature: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A feature's ``common`` part (``num_present``, ``num_missing``) from its numerical or
    string statistics; empty when it has none."""
    for key in ("numerical_statistics", "string_statistics"):
        part = (feature or {}).get(key)
        if isinstance(part, Mapping) and isinstance(part.get("common"), Mapping):
            common: Mapping[str, Any] = part["common"]
            return common
    return {}


def _kll(feature: Mapping[str, Any]) -> sketches.WeightedCdf | None:
    kll = (feature.get("numerical_statistics") or {}).get("distribution", {}).get("kll")
    if not kll or "sketch" not in kll:
        return None
    return sketches.WeightedCdf(kll["sketch"].get("data", []))


def _categories(feature: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    stats = feature.get("string_statistics") or {}
    buckets: list[Mapping[str, Any]] = stats.get("distribution", {}).get(
        "categorical", {}).get("buckets", [])
    return buckets


def _integral_count(feature: Mapping[str, Any]) -> float:
    return float(common_statistics(feature).get("num_present", 0)) \
        if feature.get("inferred_type") == "Integral" else float(_type_counts(feature)[0])


def _numeric_count(feature: Mapping[str, Any]) -> float:
    if feature.get("inferred_type") in ("Integral", "Fractional"):
        return float(common_statistics(feature).get("num_present", 0))
    return float(_type_counts(feature)[1])


def _type_counts(feature: Mapping[str, Any]) -> tuple[int, int]:
    """(integers, numbers) among a feature's values, as sagegate records them."""
    counts = feature.get("sagegate_type_counts") or {}
    integral = int(counts.get("Integral", 0))
    return integral, integral + int(counts.get("Fractional", 0))


_MATCHERS = {"Integral": _integral_count, "Fractional": _numeric_count,
             "String": lambda feature: float(common_statistics(feature).get("num_present", 0))}


def _overrides(constraint: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # the guide spells it monitoringConfigOverrides; the SDK's Constraints.set_monitoring
    # writes monitoring_config_overrides: both are honoured, the guide's spelling last
    snake = constraint.get("monitoring_config_overrides") or {}
    camel = constraint.get("monitoringConfigOverrides") or {}
    return {**snake, **camel} or None


def _violation(name: str, check: str, description: str) -> dict[str, str]:
    return {"feature_name": name, "constraint_check_type": check, "description": description}


def _columns(which: str, counts: tuple[int, int]) -> str:
    return (f"There are {which} columns in current dataset. Number of columns in current "
            f"dataset: {counts[0]}, Number of columns in baseline constraints: {counts[1]}")


def _pct(fraction: float) -> str:
    return f"{java_double(fraction * 100)}%"


def java_double(value: float) -> str:
    """A double as Java's ``Double.toString`` prints it: the shortest digits that read back (as
    Python's ``repr`` finds), at least one digit after the point ("100.0"), and ``1.0E-4`` /
    ``1.2345678E7`` outside [0.001, 10^7)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = decimal.Decimal(repr(float(value))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1  # type: ignore[operator]
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"
