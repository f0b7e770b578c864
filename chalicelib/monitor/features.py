"""One feature's statistics, accumulated chunk by chunk in bounded memory, and merged.

Each value is typed as Deequ (Model Monitor's analyzer) types it: missing (None, empty, NaN, and
any number no double holds: infinities, ``1e999``, ``10**400``, as JSON or text), Integral
(``-12``), Fractional (``3.5``, ``1e-3``) or String (anything else, booleans included). This is
the one place a value gets its type, for the baseline, the check and compare alike. Numbers go to
running moments, Deequ's KLL sketch and a distinct counter in one bulk update per chunk (in
arrival order: Deequ's sketch depends on it); strings (and, once a feature has shown strings, its
numbers too) go to a frequent-items sketch and a HyperLogLog. Every part merges, so an hour is
the unit and a day the merge of its hours.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from chalicelib.monitor import sketches
from chalicelib.monitor.sketches import (
    NO_FALSE_NEGATIVES,
    NumberDistinct,
    frequent_strings_sketch,
    hll_sketch,
    hll_union,
)

INTEGRAL, FRACTIONAL, STRING, UNKNOWN = "Integral", "Fractional", "String", "Unknown"
FREQUENT_LG_MAP = 10
"""Frequent-items map of 2**10 slots: counts are exact up to 768 distinct values."""
HLL_LG_K = 12
"""HyperLogLog with 4096 slots: distinct counts within about 1.6 %."""
CATEGORICAL_BUCKETS = 100
_NOT_INTEGRAL = frozenset(".eEnNiI")
_SIGNS = frozenset("+- \t")
MAX_VALUE_CHARS = 1024
"""The longest string value kept as it is: a longer one is kept as its first characters and a
digest (:func:`bounded_text`), so a feature's categorical and distinct-value state, and its
buckets in ``statistics.json``, hold at most this much per value."""
_DIGEST_BYTES = 8
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_JAVA_TRIM = "".join(map(chr, range(0x21)))
"""What Java's ``String.trim`` (and so ``Double.parseDouble``) strips: U+0000 to U+0020 only;
Python's ``float()`` strips Unicode blanks too (U+00A0), which leaves a String."""
_PLAIN_NUMBER_CHARS = frozenset("0123456789+-.eE" + _JAVA_TRIM + "nNaAiIfFtTyY")
"""The characters of a chunk numpy may type at once: ASCII digits, signs, point, exponent, blanks
and the letters of ``nan``/``inf``/``infinity``. Anything else (``_``, which ``float()`` accepts
as a separator, other scripts' digits, Unicode blanks) sends the chunk to :func:`classify`, a
value at a time."""


class Moments:
    """Count, sum, mean, M2 (Chan et al.'s parallel variance), min and max of numbers."""

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.mean = 0.0
        self.m2 = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, values: np.ndarray) -> None:
        if not values.size:
            return
        other = Moments()
        with np.errstate(over="ignore", invalid="ignore"):  # past the doubles: written null
            other.count, other.sum = int(values.size), float(values.sum())
            other.mean = other.sum / other.count
            other.m2 = float(np.square(values - other.mean).sum())
        other.min, other.max = float(values.min()), float(values.max())
        self.merge(other)

    def merge(self, other: Moments) -> None:
        if not other.count:
            return
        if not self.count:  # a copy: (mean * n) / n is not always mean again in doubles
            self.count, self.sum, self.mean, self.m2 = (other.count, other.sum, other.mean,
                                                        other.m2)
            self.min, self.max = other.min, other.max
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.m2 += other.m2 + delta * delta * self.count * other.count / total
        self.mean += delta * other.count / total
        self.count, self.sum = total, self.sum + other.sum
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)

    @property
    def std_dev(self) -> float:
        """The population standard deviation (Spark's ``stddev_pop``, as Deequ reports)."""
        return math.sqrt(self.m2 / self.count) if self.count else 0.0


class FeatureStats:
    """The statistics of one feature (column) over the records added so far."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.present = 0
        self.integral = 0
        self.fractional = 0
        self.strings = 0
        self.moments = Moments()
        self.kll = sketches.new_sketch()
        self.frequent = frequent_strings_sketch(FREQUENT_LG_MAP)
        self.distinct = hll_sketch(HLL_LG_K)
        self.distinct_numbers = NumberDistinct(HLL_LG_K)

    @property
    def inferred_type(self) -> str:
        """Deequ's rule: any string makes a String, else any fraction a Fractional."""
        if self.strings:
            return STRING
        if self.fractional:
            return FRACTIONAL
        return INTEGRAL if self.integral else UNKNOWN

    def add(self, values: list[Any]) -> None:
        """Add one chunk of values (None and empty strings count as missing)."""
        kinds = set(map(type, values))
        if kinds <= {int, float}:
            self._add_numbers(values, kinds)
        elif kinds == {str}:
            self._add_texts(values)
        else:
            self._add_mixed(values)

    def _add_numbers(self, values: list[Any], kinds: set[type]) -> None:
        try:
            array = np.asarray(values, dtype=np.float64)
        except OverflowError:  # an integer past the doubles (10**400): typed one by one
            self._add_mixed(values)
            return
        finite = array[np.isfinite(array)]
        if kinds == {int}:
            integral = len(values)
        else:
            integral = 0 if kinds == {float} else sum(type(v) is int for v in values)
        self._numbers(finite, integral)
        if self.strings:
            self._categorical([_text(v) for v in values if v == v and abs(v) != math.inf])

    def _add_texts(self, values: list[str]) -> None:
        try:
            array = np.asarray(values, dtype=np.float64)
        except ValueError:
            self._add_mixed(values)
            return
        joined = "".join(values)
        if not _PLAIN_NUMBER_CHARS.issuperset(joined):  # "1_000": float() reads it, Java not
            self._add_mixed(values)
            return
        finite = np.isfinite(array)
        if not finite.all():  # "nan", "inf": missing, as Deequ reads them
            values = [v for v, ok in zip(values, finite, strict=True) if ok]
            array = array[finite]
            joined = "".join(values)
        if _NOT_INTEGRAL.isdisjoint(joined):
            integral = len(values)
        elif _SIGNS.isdisjoint(joined):  # no sign, no blank: str.isdigit says it, in C
            integral = sum(map(str.isdigit, values))
        else:
            integral = sum(v.strip().lstrip("+-").isdigit() for v in values)
        self._numbers(array, integral)
        if self.strings:
            self._categorical([v.strip() for v in values])

    def _add_mixed(self, values: list[Any]) -> None:
        numbers: list[float] = []
        integral, texts = 0, []
        for value in values:
            kind, number, text = classify(value)
            if kind == INTEGRAL:
                integral += 1
                numbers.append(number)
            elif kind == FRACTIONAL:
                numbers.append(number)
            if kind != UNKNOWN:
                texts.append((kind, text))
        array = np.asarray(numbers, dtype=np.float64)
        self._numbers(array, integral)
        strings = [text for kind, text in texts if kind == STRING]
        self.strings += len(strings)
        self.present += len(strings)
        self._categorical([text for _, text in texts] if self.strings else strings)

    def _numbers(self, array: np.ndarray, integral: int) -> None:
        self.present += array.size
        self.integral += integral
        self.fractional += array.size - integral
        if array.size:
            self.moments.add(array)
            self.kll.update(array)
            self.distinct_numbers.update(array)

    def _categorical(self, texts: list[str]) -> None:
        frequent, distinct = self.frequent, self.distinct
        for text in texts:
            frequent.update(text)
            distinct.update(text)

    def merge(self, other: FeatureStats) -> None:
        self.present += other.present
        self.integral += other.integral
        self.fractional += other.fractional
        self.strings += other.strings
        self.moments.merge(other.moments)
        self.kll.merge(other.kll)
        self.distinct_numbers.merge(other.distinct_numbers)
        self.frequent.merge(other.frequent)
        union = _hll_union(self.distinct, other.distinct)
        self.distinct = union

    def categorical_buckets(self) -> list[dict[str, Any]]:
        """The most frequent values and their (estimated) counts, most frequent first."""
        rows = self.frequent.get_frequent_items(NO_FALSE_NEGATIVES)
        return [{"value": value, "count": int(estimate)}
                for value, estimate, _low, _high in rows[:CATEGORICAL_BUCKETS]]

    def distinct_count(self) -> int:
        return round(float(self.distinct.get_estimate()))

    def distinct_number_count(self) -> int:
        """The estimated number of distinct numbers (``approximate_num_distinct_values``)."""
        return round(self.distinct_numbers.estimate())


def _hll_union(first: Any, second: Any) -> Any:
    union = hll_union(HLL_LG_K)
    union.update(first)
    union.update(second)
    return union.get_result()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def classify(value: Any) -> tuple[str, float, str]:
    """A value's type, its number (0.0 unless numeric) and its text; ``UNKNOWN`` is missing.

    A text is a number when Java's ``Double.parseDouble`` (Deequ's) and Python's ``float()`` both
    read it: trimmed as Java trims, ASCII digits only, no ``_`` (``float("1_000")`` is 1000.0,
    Java refuses it). Java's type suffixes (``1.5d``) and hex floats (``0x1p3``) are Strings:
    Deequ types a column by its digits, not Java's literal syntax. ``nan``, ``inf`` and
    ``infinity`` stay missing, as every number no double holds.
    """
    kind = type(value)
    if value is None:
        return UNKNOWN, 0.0, ""
    if kind is int:
        try:
            return INTEGRAL, float(value), str(value)
        except OverflowError:  # past the doubles, as 1e999 is: missing
            return UNKNOWN, 0.0, ""
    if kind is float:
        return (FRACTIONAL, value, repr(value)) if math.isfinite(value) else (UNKNOWN, 0.0, "")
    if kind is bool:
        return STRING, 0.0, "true" if value else "false"
    text = value.strip(_JAVA_TRIM) if kind is str else _json_text(value)
    if not text:
        return UNKNOWN, 0.0, ""
    if not text.isascii() or "_" in text:  # float() reads "1_000", "١٢"; Java does not
        return STRING, 0.0, text
    if text.lstrip("+-").isdigit():
        number = float(text)  # digits past the doubles read as infinity: missing
        return (INTEGRAL, number, text) if math.isfinite(number) else (UNKNOWN, 0.0, "")
    try:
        number = float(text)
    except ValueError:
        return STRING, 0.0, text
    return (FRACTIONAL, number, text) if math.isfinite(number) else (UNKNOWN, 0.0, "")


def bounded_text(value: str) -> str | None:
    """A string longer than :data:`MAX_VALUE_CHARS`, as the statistics keep it. Typed first as
    :func:`classify` types it, so a long number is still one (missing if no double holds it, else
    its number's short text). Other text is its first characters, ``...`` and a BLAKE2b digest of
    the whole, :data:`MAX_VALUE_CHARS` in all: values differing past their start stay distinct.
    Trimmed as :func:`classify` trims, so a value's type does not depend on its length."""
    text = value.strip(_JAVA_TRIM)
    if len(text) <= MAX_VALUE_CHARS:
        return text
    if _NUMBER_CHARS.issuperset(text[:64]):  # text can be a number only if it starts as one
        kind, number, _text = classify(text)
        if kind == UNKNOWN:
            return None
        if kind == INTEGRAL:  # a double's digits: the sign and the digits past the zeros
            return ("-" if text[0] == "-" else "") + (text.lstrip("+-").lstrip("0") or "0")
        if kind == FRACTIONAL:
            return repr(number)
    import hashlib  # deferred: OpenSSL's 4 MB are paid by a run that meets a long value

    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                             digest_size=_DIGEST_BYTES).hexdigest()
    suffix = f"... blake2b:{digest}"
    return text[:MAX_VALUE_CHARS - len(suffix)] + suffix


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)



