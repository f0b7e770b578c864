"""A record's answer, read from its ``endpointOutput`` for ``sagegate monitor compare``: its
top-1 (:func:`top1`: what a pair of records agrees on) and the names of the columns it flattens
to (:func:`output_names`: the columns ``max_distance`` gates), the JSON read once for both.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
from typing import Any

ARGMAX, FIRST_COLUMN = "argmax", "first_column"
UNDEFINED_METHOD = "undefined"


@dataclasses.dataclass(frozen=True)
class Top1:
    """A record's top-1 answer: one label per instance, and how it was read."""

    method: str
    """``argmax`` (of each probability vector) or ``first_column``."""
    labels: tuple[Any, ...]


UNDEFINED = Top1(UNDEFINED_METHOD, ())
"""The top-1 of an answer holding NaN: its pair is counted apart (``undefined``), never compared
(NaN equals nothing, so every such pair would disagree)."""


def top1(output: Any) -> Top1 | None:
    """The top-1 answer of a record's ``endpointOutput``, or None (no output, a binary one, no
    value).

    JSON: a list of numbers is one probability vector, a list of such lists (or TF Serving
    ``predictions`` of them) one per instance: each gives its argmax (the first index of the
    largest). Other JSON gives its first value in flattened order per instance of
    ``predictions``, or for the whole document. CSV: each line's first value. A number compares
    as a number (``1`` equals ``1.0``), anything else as its text.
    """
    return top1_of(parse_output(output))


@dataclasses.dataclass(frozen=True)
class Output:
    """An ``endpointOutput`` with text data (``document`` ``_UNREADABLE`` when not JSON)."""

    encoding: str
    data: str
    document: Any = None


_UNREADABLE = object()


def parse_output(output: Any) -> Output | None:
    """The output, its JSON read once for its answer and its columns."""
    if not isinstance(output, dict) or not isinstance(output.get("data"), str):
        return None
    encoding = str(output.get("encoding", "")).upper()
    data: str = output["data"]
    if encoding != "JSON":
        return Output(encoding, data)
    try:
        return Output(encoding, data, json.loads(data))
    except (ValueError, RecursionError):
        return Output(encoding, data, _UNREADABLE)


def top1_of(output: Output | None) -> Top1 | None:
    if output is None:
        return None
    if output.encoding == "CSV":
        labels = tuple(_value(line[0]) for line in csv.reader(io.StringIO(output.data))
                       if line)
        return Top1(FIRST_COLUMN, labels) if labels else None
    if output.encoding != "JSON" or output.document is _UNREADABLE:
        return None
    document = output.document
    batch = document.get("predictions") if isinstance(document, dict) else None
    instances = batch if isinstance(batch, list) else [document]
    if isinstance(document, list) and not _vector(document):
        instances = document if document and all(_vector(item) for item in document) \
            else [document]
    if instances and all(_vector(item) for item in instances):
        return Top1(ARGMAX, tuple(_argmax(item) for item in instances))
    if any(_has_nan(item) for item in instances):
        return UNDEFINED
    firsts = [_first_leaf(item) for item in instances]
    if not firsts or any(label is _NONE for label in firsts):
        return None
    labels = tuple(_value(label) for label in firsts)
    return UNDEFINED if any(label != label for label in labels) else Top1(FIRST_COLUMN, labels)


def _has_nan(item: Any) -> bool:
    return isinstance(item, list) and any(
        type(value) is float and value != value for value in item)


def _argmax(vector: list[float]) -> int:
    return max(range(len(vector)), key=vector.__getitem__)


def output_names(output: Output) -> tuple[str, ...] | None:
    """The columns :func:`flatten_record` makes of the most common outputs, named without
    flattening: one CSV line (``_c0``, ...), a JSON list of scalars or a TF Serving
    ``predictions`` alone of all lists of scalars, or all scalars (``prediction0``, ...); None
    for any other."""
    if output.encoding == "CSV":
        data = output.data.rstrip("\r\n")
        if "\n" in data or '"' in data:
            return None
        return tuple(f"_c{i}" for i in range(data.count(",") + 1))
    document = output.document
    if isinstance(document, dict) and len(document) == 1 \
            and isinstance(document.get("predictions"), list):
        instances = document["predictions"]
        if not instances:
            return ()
        if all(type(item) in _SCALARS for item in instances):
            return ("prediction0",)
        if not all(isinstance(item, list) and all(type(v) in _SCALARS for v in item)
                   for item in instances):
            return None
        width = max(len(item) for item in instances)
        return _predictions(width)
    if isinstance(document, list) and all(type(v) in _SCALARS for v in document):
        return _predictions(len(document))
    return None


@functools.lru_cache(maxsize=64)
def _predictions(width: int) -> tuple[str, ...]:
    return tuple(f"prediction{i}" for i in range(width))


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _vector(item: Any) -> bool:
    """A probability vector: a non-empty list of finite numbers (booleans are not)."""
    return isinstance(item, list) and bool(item) and all(
        type(value) in (int, float) and math.isfinite(_double(value)) for value in item)


_NONE = object()


def _first_leaf(value: Any) -> Any:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        else:
            return item
    return _NONE


def _value(value: Any) -> Any:
    """A number (from JSON or text) as a float, anything else as its text (``true``, ``null`` as
    JSON writes them)."""
    if type(value) in (int, float):
        return _double(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    return json.dumps(value)


def _double(value: float) -> float:
    """A JSON number as a double: an integer past the doubles' range (``10**400``) is infinite,
    as ``1e999`` reads."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
