"""A baseline's ``statistics.json`` and ``constraints.json``, read back and checked before use.

A baseline is the user's file: made by ``sagegate monitor baseline``, by Model Monitor's
analyzer, or edited by hand. Every key the checks and the report read is checked here first, with
the types, enumerations and ranges of Model Monitor's schemas ("Schema for Statistics", "Schema
for Constraints"), so a bad document is one :class:`DocumentError` naming the file and the JSON
path of its bad part::

    constraints.json: features[3].monitoringConfigOverrides.comparison_threshold: "abc" is
    not a number

rather than a traceback from inside a check, or a check that silently passes (a KLL sketch that
is not lists of numbers; ``"evaluate_constraints": false``, which is not ``"Disabled"`` and so
reads as enabled). Keys sagegate does not read are left alone, so Model Monitor's additions to
its schemas keep loading.
"""
from __future__ import annotations

import json
import math
from typing import Any

from chalicelib.monitor.json_paths import (
    At,
    Check,
    DocumentError,
    an_object,
    any_number,
    boolean,
    choice,
    count,
    fraction,
    is_number,
    list_of,
    optional,
    positive,
    required,
    scalar,
    show,
    text,
    threshold,
)

TYPES = ("Integral", "Fractional", "String", "Unknown")
SWITCHES = ("Enabled", "Disabled")
COMPARISON_METHODS = ("Simple", "Robust")
CATEGORICAL_METHODS = ("LInfinity", "ChiSquared")
MAX_KLL_LEVELS = 64
"""A KLL sketch of n values has about log2(n / k) levels: 64 is past any count (an item of level
h weighs 2**h, so a thousand levels would overflow a float)."""




def parse(data: str | bytes, name: str) -> Any:
    """A JSON document (``name``: the file, for messages).

    Raises:
        DocumentError: not UTF-8 JSON, or nested too deep to read.
    """
    try:
        return json.loads(data)
    except RecursionError:  # a document nested thousands deep: no baseline is
        raise DocumentError(f"{name}: nested too deep to be a baseline document") from None
    except UnicodeDecodeError:
        raise DocumentError(f"{name}: not UTF-8 text") from None
    except ValueError as error:
        raise DocumentError(f"{name}: not JSON ({error})") from None


def load_statistics(data: str | bytes, name: str) -> dict[str, Any]:
    """A baseline's ``statistics.json``, parsed and checked.

    Raises:
        DocumentError: not JSON, or not a statistics document.
    """
    return check_statistics(parse(data, name), name)


def load_constraints(data: str | bytes, name: str) -> dict[str, Any]:
    """A baseline's ``constraints.json``, parsed and checked.

    Raises:
        DocumentError: not JSON, or not a constraints document.
    """
    return check_constraints(parse(data, name), name)


def check_statistics(document: Any, name: str) -> dict[str, Any]:
    """``document`` if it is a ``statistics.json`` the checks and the report can read.

    Raises:
        DocumentError: naming ``name`` and the JSON path of the first bad part.
    """
    at = At(name)
    top = an_object(document, at)
    optional(top, "dataset", at, _dataset)
    _features(top, at, _statistics_feature)
    return top


def check_constraints(document: Any, name: str) -> dict[str, Any]:
    """``document`` if it is a ``constraints.json`` the checks can apply.

    Raises:
        DocumentError: naming ``name`` and the JSON path of the first bad part.
    """
    at = At(name)
    top = an_object(document, at)
    _features(top, at, _constraint_feature)
    optional(top, "monitoring_config", at, _config, nullable=True)
    return top


# --- the parts -------------------------------------------------------------------------------

def _features(top: dict[str, Any], at: At, check: Check) -> None:
    if "features" not in top:
        raise at.error('has no "features" list')
    features = top["features"]
    where = at.key("features")
    if not isinstance(features, list):
        raise where.bad(features, "a list")
    seen: dict[str, int] = {}
    for index, feature in enumerate(features):
        item = where.index(index)
        check(feature, item)
        name = feature["name"]
        if name in seen:  # the checks key features by name: a repeat would hide the first
            raise item.key("name").error(f"{show(name)} repeats features[{seen[name]}]'s "
                                         f"name")
        seen[name] = index


def _named(feature: Any, at: At) -> dict[str, Any]:
    item = an_object(feature, at)
    if "name" not in item:
        raise at.error('has no "name"')
    text(item["name"], at.key("name"))
    optional(item, "inferred_type", at, choice(TYPES, exact=True))
    return item


def _statistics_feature(feature: Any, at: At) -> None:
    item = _named(feature, at)
    optional(item, "numerical_statistics", at, _numerical, nullable=True)
    optional(item, "string_statistics", at, _string_statistics, nullable=True)
    optional(item, "sagegate_type_counts", at, _type_counts, nullable=True)


def _dataset(value: Any, at: At) -> None:
    optional(an_object(value, at), "item_count", at, count)


def _common(value: Any, at: At) -> None:
    common = an_object(value, at)
    for key in ("num_present", "num_missing"):
        optional(common, key, at, count)


def _numerical(value: Any, at: At) -> None:
    stats = an_object(value, at)
    optional(stats, "common", at, _common)
    for key in ("mean", "sum", "std_dev"):  # null: past the doubles' range
        optional(stats, key, at, any_number, nullable=True)
    for key in ("min", "max"):
        optional(stats, key, at, any_number)
    optional(stats, "distribution", at, _numeric_distribution)


def _numeric_distribution(value: Any, at: At) -> None:
    optional(an_object(value, at), "kll", at, _kll)


def _kll(value: Any, at: At) -> None:
    kll = an_object(value, at)
    optional(kll, "buckets", at, list_of(_bucket))
    optional(kll, "sketch", at, _sketch)


def _bucket(value: Any, at: At) -> None:
    bucket = an_object(value, at)
    for key in ("lower_bound", "upper_bound", "count"):
        optional(bucket, key, at, any_number)


def _sketch(value: Any, at: At) -> None:
    sketch = an_object(value, at)
    parameters = required(sketch, "parameters", at)
    for key in ("c", "k"):
        positive(required(an_object(parameters, at.key("parameters")), key,
                            at.key("parameters")), at.key("parameters").key(key))
    where = at.key("data")
    levels = required(sketch, "data", at)
    if not isinstance(levels, list):
        raise where.bad(levels, "a list of levels (lists of numbers)")
    if len(levels) > MAX_KLL_LEVELS:
        raise where.error(f"{len(levels)} levels: a KLL sketch has at most {MAX_KLL_LEVELS}")
    for index, level in enumerate(levels):
        _level(level, where.index(index))


def _level(level: Any, at: At) -> None:
    if not isinstance(level, list):
        raise at.bad(level, "a list of numbers (a KLL level)")
    for index, item in enumerate(level):
        if not is_number(item) or not math.isfinite(item):
            raise at.index(index).bad(item, "a finite number")


def _string_statistics(value: Any, at: At) -> None:
    stats = an_object(value, at)
    optional(stats, "common", at, _common)
    optional(stats, "distinct_count", at, count)
    optional(stats, "distribution", at, _string_distribution)


def _string_distribution(value: Any, at: At) -> None:
    distribution = an_object(value, at)
    optional(distribution, "categorical", at, _categorical)


def _categorical(value: Any, at: At) -> None:
    optional(an_object(value, at), "buckets", at, list_of(_category))


def _category(value: Any, at: At) -> None:
    bucket = an_object(value, at)
    scalar(required(bucket, "value", at), at.key("value"))
    count(required(bucket, "count", at), at.key("count"))


def _type_counts(value: Any, at: At) -> None:
    counts = an_object(value, at)
    for key in ("Integral", "Fractional", "String"):
        optional(counts, key, at, count)


def _constraint_feature(feature: Any, at: At) -> None:
    item = _named(feature, at)
    optional(item, "completeness", at, fraction, nullable=True)
    optional(item, "num_constraints", at, _num_constraints)
    optional(item, "string_constraints", at, _string_constraints, nullable=True)
    # the guide's spelling and the SDK's (Constraints.set_monitoring): checks.py reads both
    for key in ("monitoringConfigOverrides", "monitoring_config_overrides"):
        optional(item, key, at, _config, nullable=True)


def _num_constraints(value: Any, at: At) -> None:
    optional(an_object(value, at), "is_non_negative", at, boolean)


def _string_constraints(value: Any, at: At) -> None:
    optional(an_object(value, at), "domains", at, list_of(scalar), nullable=True)


def _config(value: Any, at: At) -> None:
    """``monitoring_config`` or a feature's overrides: the overrides may give a
    ``distribution_constraints`` key directly (constraints.FeatureConfig merges them so)."""
    config = an_object(value, at)
    for key in ("evaluate_constraints", "emit_metrics"):
        optional(config, key, at, choice(SWITCHES))
    for key in ("datatype_check_threshold", "domain_content_threshold"):
        optional(config, key, at, fraction)
    optional(config, "distribution_constraints", at, _distribution_config)
    _distribution_keys(config, at)


def _distribution_config(value: Any, at: At) -> None:
    _distribution_keys(an_object(value, at), at)


def _distribution_keys(config: dict[str, Any], at: At) -> None:
    optional(config, "perform_comparison", at, choice(SWITCHES))
    for key in ("comparison_threshold", "categorical_comparison_threshold"):
        optional(config, key, at, threshold)
    for key in ("comparison_method", "comparion_method"):  # the guide's old misspelling too
        optional(config, key, at, choice(COMPARISON_METHODS))
    optional(config, "categorical_drift_method", at, choice(CATEGORICAL_METHODS))


