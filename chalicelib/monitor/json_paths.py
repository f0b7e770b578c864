"""Checks of a JSON document's parts that name the file and the JSON path of a bad one
(``constraints.json: features[3].completeness: "x" is not a number``): the leaves
:mod:`chalicelib.monitor.documents` builds its schema checks from."""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

_SHOWN = 40  # characters of a bad string quoted in a message


class DocumentError(ValueError):
    """A baseline document is not JSON or not of Model Monitor's schema."""


class At:

    def __init__(self, name: str, path: str = "") -> None:
        self.name = name
        self.path = path

    def key(self, key: str) -> At:
        return At(self.name, f"{self.path}.{key}" if self.path else key)

    def index(self, index: int) -> At:
        return At(self.name, f"{self.path}[{index}]")

    def error(self, detail: str) -> DocumentError:
        where = f"{self.path}: " if self.path else ""
        return DocumentError(f"{self.name}: {where}{detail}")

    def bad(self, value: Any, what: str) -> DocumentError:
        return self.error(f"{show(value)} is not {what}")


Check = Callable[[Any, At], None]


def optional(parent: dict[str, Any], key: str, at: At, check: Check,
              nullable: bool = False) -> None:
    """Check ``parent[key]`` if present (and, if ``nullable``, not null: the checks read those as
    ``value or {}``)."""
    if key not in parent or (nullable and parent[key] is None):
        return
    check(parent[key], at.key(key))


def required(parent: dict[str, Any], key: str, at: At) -> Any:
    if key not in parent:
        raise at.error(f"has no {json.dumps(key)}")
    return parent[key]


def an_object(value: Any, at: At) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise at.bad(value, "an object")
    return value


def list_of(check: Check) -> Check:
    def checked(value: Any, at: At) -> None:
        if not isinstance(value, list):
            raise at.bad(value, "a list")
        for index, item in enumerate(value):
            check(item, at.index(index))

    return checked


def text(value: Any, at: At) -> None:
    if not isinstance(value, str):
        raise at.bad(value, "a string")


def scalar(value: Any, at: At) -> None:
    if isinstance(value, dict | list):
        raise at.bad(value, "a string or a number")


def boolean(value: Any, at: At) -> None:
    if not isinstance(value, bool):
        raise at.bad(value, "true or false")


def choice(choices: tuple[str, ...], exact: bool = False) -> Check:
    """One of ``choices``: as spelled when ``exact`` (types are looked up as they are), else in
    any case (switches and methods are compared lower-cased)."""
    allowed = set(choices) if exact else {choice.lower() for choice in choices}

    def checked(value: Any, at: At) -> None:
        if not isinstance(value, str) or \
                (value if exact else value.strip().lower()) not in allowed:
            raise at.bad(value, " or ".join(json.dumps(c) for c in choices))

    return checked


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def any_number(value: Any, at: At) -> None:
    """A number the checks do not read (Model Monitor may write NaN there)."""
    if not is_number(value):
        raise at.bad(value, "a number")


def finite(value: Any, at: At) -> float:
    if not is_number(value):
        raise at.bad(value, "a number")
    if not math.isfinite(value):
        raise at.bad(value, "a finite number")
    return float(value)


def count(value: Any, at: At) -> None:
    if finite(value, at) < 0:
        raise at.bad(value, "a count (0 or more)")


def positive(value: Any, at: At) -> None:
    if finite(value, at) <= 0:
        raise at.bad(value, "a positive number")


def fraction(value: Any, at: At) -> None:
    if not 0.0 <= finite(value, at) <= 1.0:
        raise at.bad(value, "a fraction from 0 to 1")


def threshold(value: Any, at: At) -> None:
    """A distance's or p-value's threshold: a fraction, but one above 1 (never exceeded) quiets a
    feature, so only a negative one is refused."""
    if finite(value, at) < 0:
        raise at.bad(value, "a threshold (0 or more)")


def show(value: Any) -> str:
    """A bad value as a message quotes it: scalars as JSON (a long string cut), containers by
    kind (they may be large, or too deep to print)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str) and len(value) > _SHOWN:
        return json.dumps(value[:_SHOWN])[:-1] + '..."'
    return json.dumps(value)  # NaN and Infinity as the JSON that held them spells them
