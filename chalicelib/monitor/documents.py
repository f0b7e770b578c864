"""A baseline's ``statistics.json`` and ``constraints.json``, read back and checked before use.

A baseline is the user's file: made by ``sagegate monitor baseline``, by Model Monitor's own
analyzer, or edited by hand (``constraints.json`` is meant to be). Every key the checks and
the report read is checked here first, with the types, enumerations and ranges of Model
Monitor's schemas ("Schema for Statistics", "Schema for Constraints"), so a bad document is
one :class:`DocumentError` naming the file and the JSON path of its bad part::

    constraints.json: features[3].monitoringConfigOverrides.comparison_threshold: "abc" is
    not a number

rather than a traceback from deep inside a check, or worse a check that silently passes (a
KLL sketch that is not a list of lists of numbers; ``"evaluate_constraints": false``, which
is not ``"Disabled"`` and so would read as enabled). Keys sagegate does not read are left
alone, so Model Monitor's additions to its schemas keep loading.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

TYPES = ("Integral", "Fractional", "String", "Unknown")
SWITCHES = ("Enabled", "Disabled")
COMPARISON_METHODS = ("Simple", "Robust")
CATEGORICAL_METHODS = ("LInfinity", "ChiSquared")
MAX_KLL_LEVELS = 64
"""A KLL sketch of n values has about log2(n / k) levels: 64 is past any count of values (an
item of level h weighs 2**h, so a thousand levels would overflow a float)."""
_SHOWN = 40  # characters of a bad string quoted in a message


class DocumentError(ValueError):
    """A baseline document is not JSON or not of Model Monitor's schema; the message names the
    file and the JSON path of the bad part."""


class _At:
    """A place in a document (the file's name and a JSON path) that makes the errors."""

    def __init__(self, name: str, path: str = "") -> None:
        self.name = name
        self.path = path

    def key(self, key: str) -> _At:
        return _At(self.name, f"{self.path}.{key}" if self.path else key)

    def index(self, index: int) -> _At:
        return _At(self.name, f"{self.path}[{index}]")

    def error(self, detail: str) -> DocumentError:
        where = f"{self.path}: " if self.path else ""
        return DocumentError(f"{self.name}: {where}{detail}")

    def bad(self, value: Any, what: str) -> DocumentError:
        return self.error(f"{_show(value)} is not {what}")


Check = Callable[[Any, _At], None]


def parse(data: str | bytes, name: str) -> Any:
    """A JSON document.

    Args:
        data: the file's content.
        name: how messages name the file.

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
    """A baseline's ``statistics.json``, parsed and checked (:func:`check_statistics`).

    Raises:
        DocumentError: not JSON, or not a statistics document.
    """
    return check_statistics(parse(data, name), name)


def load_constraints(data: str | bytes, name: str) -> dict[str, Any]:
    """A baseline's ``constraints.json``, parsed and checked (:func:`check_constraints`).

    Raises:
        DocumentError: not JSON, or not a constraints document.
    """
    return check_constraints(parse(data, name), name)


def check_statistics(document: Any, name: str) -> dict[str, Any]:
    """``document`` if it is a ``statistics.json`` the checks and the report can read.

    Raises:
        DocumentError: naming ``name`` and the JSON path of the first bad part.
    """
    at = _At(name)
    top = _object(document, at)
    _optional(top, "dataset", at, _dataset)
    _features(top, at, _statistics_feature)
    return top


def check_constraints(document: Any, name: str) -> dict[str, Any]:
    """``document`` if it is a ``constraints.json`` the checks can apply.

    Raises:
        DocumentError: naming ``name`` and the JSON path of the first bad part.
    """
    at = _At(name)
    top = _object(document, at)
    _features(top, at, _constraint_feature)
    _optional(top, "monitoring_config", at, _config, nullable=True)
    return top


# --- the parts -------------------------------------------------------------------------------

def _features(top: dict[str, Any], at: _At, check: Check) -> None:
    """``features``: a list of objects, each with a name of its own."""
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
            raise item.key("name").error(f"{_show(name)} repeats features[{seen[name]}]'s "
                                         f"name")
        seen[name] = index


def _named(feature: Any, at: _At) -> dict[str, Any]:
    item = _object(feature, at)
    if "name" not in item:
        raise at.error('has no "name"')
    _text(item["name"], at.key("name"))
    _optional(item, "inferred_type", at, _choice(TYPES, exact=True))
    return item


def _statistics_feature(feature: Any, at: _At) -> None:
    item = _named(feature, at)
    _optional(item, "numerical_statistics", at, _numerical, nullable=True)
    _optional(item, "string_statistics", at, _string_statistics, nullable=True)
    _optional(item, "sagegate_type_counts", at, _type_counts, nullable=True)


def _dataset(value: Any, at: _At) -> None:
    _optional(_object(value, at), "item_count", at, _count)


def _common(value: Any, at: _At) -> None:
    common = _object(value, at)
    for key in ("num_present", "num_missing"):
        _optional(common, key, at, _count)


def _numerical(value: Any, at: _At) -> None:
    stats = _object(value, at)
    _optional(stats, "common", at, _common)
    for key in ("mean", "sum", "std_dev", "min", "max"):
        _optional(stats, key, at, _any_number)
    _optional(stats, "distribution", at, _numeric_distribution)


def _numeric_distribution(value: Any, at: _At) -> None:
    _optional(_object(value, at), "kll", at, _kll)


def _kll(value: Any, at: _At) -> None:
    kll = _object(value, at)
    _optional(kll, "buckets", at, _list_of(_bucket))
    _optional(kll, "sketch", at, _sketch)


def _bucket(value: Any, at: _At) -> None:
    bucket = _object(value, at)
    for key in ("lower_bound", "upper_bound", "count"):
        _optional(bucket, key, at, _any_number)


def _sketch(value: Any, at: _At) -> None:
    sketch = _object(value, at)
    parameters = _required(sketch, "parameters", at)
    for key in ("c", "k"):
        _positive(_required(_object(parameters, at.key("parameters")), key,
                            at.key("parameters")), at.key("parameters").key(key))
    where = at.key("data")
    levels = _required(sketch, "data", at)
    if not isinstance(levels, list):
        raise where.bad(levels, "a list of levels (lists of numbers)")
    if len(levels) > MAX_KLL_LEVELS:
        raise where.error(f"{len(levels)} levels: a KLL sketch has at most {MAX_KLL_LEVELS}")
    for index, level in enumerate(levels):
        _level(level, where.index(index))


def _level(level: Any, at: _At) -> None:
    if not isinstance(level, list):
        raise at.bad(level, "a list of numbers (a KLL level)")
    for index, item in enumerate(level):
        if not _is_number(item) or not math.isfinite(item):
            raise at.index(index).bad(item, "a finite number")


def _string_statistics(value: Any, at: _At) -> None:
    stats = _object(value, at)
    _optional(stats, "common", at, _common)
    _optional(stats, "distinct_count", at, _count)
    _optional(stats, "distribution", at, _string_distribution)


def _string_distribution(value: Any, at: _At) -> None:
    distribution = _object(value, at)
    _optional(distribution, "categorical", at, _categorical)


def _categorical(value: Any, at: _At) -> None:
    _optional(_object(value, at), "buckets", at, _list_of(_category))


def _category(value: Any, at: _At) -> None:
    bucket = _object(value, at)
    _scalar(_required(bucket, "value", at), at.key("value"))
    _count(_required(bucket, "count", at), at.key("count"))


def _type_counts(value: Any, at: _At) -> None:
    counts = _object(value, at)
    for key in ("Integral", "Fractional", "String"):
        _optional(counts, key, at, _count)


def _constraint_feature(feature: Any, at: _At) -> None:
    item = _named(feature, at)
    _optional(item, "completeness", at, _fraction, nullable=True)
    _optional(item, "num_constraints", at, _num_constraints)
    _optional(item, "string_constraints", at, _string_constraints, nullable=True)
    # the guide's spelling and the SDK's (Constraints.set_monitoring): checks.py reads both
    for key in ("monitoringConfigOverrides", "monitoring_config_overrides"):
        _optional(item, key, at, _config, nullable=True)


def _num_constraints(value: Any, at: _At) -> None:
    _optional(_object(value, at), "is_non_negative", at, _boolean)


def _string_constraints(value: Any, at: _At) -> None:
    _optional(_object(value, at), "domains", at, _list_of(_scalar), nullable=True)


def _config(value: Any, at: _At) -> None:
    """``monitoring_config`` or a feature's overrides: the overrides may give a
    ``distribution_constraints`` key directly (constraints.FeatureConfig merges them so)."""
    config = _object(value, at)
    for key in ("evaluate_constraints", "emit_metrics"):
        _optional(config, key, at, _choice(SWITCHES))
    for key in ("datatype_check_threshold", "domain_content_threshold"):
        _optional(config, key, at, _fraction)
    _optional(config, "distribution_constraints", at, _distribution_config)
    _distribution_keys(config, at)


def _distribution_config(value: Any, at: _At) -> None:
    _distribution_keys(_object(value, at), at)


def _distribution_keys(config: dict[str, Any], at: _At) -> None:
    _optional(config, "perform_comparison", at, _choice(SWITCHES))
    for key in ("comparison_threshold", "categorical_comparison_threshold"):
        _optional(config, key, at, _threshold)
    for key in ("comparison_method", "comparion_method"):  # the guide's old misspelling too
        _optional(config, key, at, _choice(COMPARISON_METHODS))
    _optional(config, "categorical_drift_method", at, _choice(CATEGORICAL_METHODS))


# --- the leaves ------------------------------------------------------------------------------

def _optional(parent: dict[str, Any], key: str, at: _At, check: Check,
              nullable: bool = False) -> None:
    """Check ``parent[key]`` if it is there (and, if ``nullable``, not null: the checks read
    those keys as ``value or {}``)."""
    if key not in parent or (nullable and parent[key] is None):
        return
    check(parent[key], at.key(key))


def _required(parent: dict[str, Any], key: str, at: _At) -> Any:
    if key not in parent:
        raise at.error(f"has no {json.dumps(key)}")
    return parent[key]


def _object(value: Any, at: _At) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise at.bad(value, "an object")
    return value


def _list_of(check: Check) -> Check:
    def checked(value: Any, at: _At) -> None:
        if not isinstance(value, list):
            raise at.bad(value, "a list")
        for index, item in enumerate(value):
            check(item, at.index(index))

    return checked


def _text(value: Any, at: _At) -> None:
    if not isinstance(value, str):
        raise at.bad(value, "a string")


def _scalar(value: Any, at: _At) -> None:
    if isinstance(value, dict | list):
        raise at.bad(value, "a string or a number")


def _boolean(value: Any, at: _At) -> None:
    if not isinstance(value, bool):
        raise at.bad(value, "true or false")


def _choice(choices: tuple[str, ...], exact: bool = False) -> Check:
    """One of ``choices``: as spelled when ``exact`` (the checks look types up as they are),
    else in any case (they compare switches and methods lower-cased)."""
    allowed = set(choices) if exact else {choice.lower() for choice in choices}

    def checked(value: Any, at: _At) -> None:
        if not isinstance(value, str) or \
                (value if exact else value.strip().lower()) not in allowed:
            raise at.bad(value, " or ".join(json.dumps(c) for c in choices))

    return checked


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _any_number(value: Any, at: _At) -> None:
    """A number the checks do not read (Model Monitor may write NaN there)."""
    if not _is_number(value):
        raise at.bad(value, "a number")


def _finite(value: Any, at: _At) -> float:
    if not _is_number(value):
        raise at.bad(value, "a number")
    if not math.isfinite(value):
        raise at.bad(value, "a finite number")
    return float(value)


def _count(value: Any, at: _At) -> None:
    if _finite(value, at) < 0:
        raise at.bad(value, "a count (0 or more)")


def _positive(value: Any, at: _At) -> None:
    if _finite(value, at) <= 0:
        raise at.bad(value, "a positive number")


def _fraction(value: Any, at: _At) -> None:
    if not 0.0 <= _finite(value, at) <= 1.0:
        raise at.bad(value, "a fraction from 0 to 1")


def _threshold(value: Any, at: _At) -> None:
    """A distance's or a p-value's threshold: both are fractions, but a threshold above 1
    (never exceeded) is a way to quiet one feature, so only a negative one is refused."""
    if _finite(value, at) < 0:
        raise at.bad(value, "a threshold (0 or more)")


def _show(value: Any) -> str:
    """A bad value as a message quotes it: scalars as JSON (a long string cut), containers by
    kind (they may be large, or nested too deep to print)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str) and len(value) > _SHOWN:
        return json.dumps(value[:_SHOWN])[:-1] + '..."'
    return json.dumps(value)  # NaN and Infinity as the JSON that held them spells them
