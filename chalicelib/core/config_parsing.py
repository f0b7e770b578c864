"""A setting's text read as its value, and the error that names a wrong one.

The spellings a variable may use are strict: anything else stops start-up rather than reading
as a default (``int()`` alone would take ``"1_000"`` and non-ASCII digits, ``float()``
``"nan"`` and ``"1_0"``). :class:`chalicelib.core.config.Settings` parses its variables and
checks its fields' types here.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from chalicelib.core.errors import ConfigurationError


class SettingError(ConfigurationError):
    """A setting's value is wrong: names the variable and says what it must be ("must be
    true or false"), so a file that gives the setting under another name (``model.json``'s
    ``image``) can name its own key."""

    def __init__(self, variable: str, requirement: str) -> None:
        super().__init__(f"{variable} {requirement}")
        self.variable = variable
        self.requirement = requirement


def check(ok: bool, name: str, requirement: str) -> None:
    if not ok:
        raise SettingError(name, requirement)


def listed(values: tuple[str, ...]) -> str:
    """Values as messages show them: ``('a', 'b')``, the form they had as plain tuples."""
    return str(tuple(str(value) for value in values))


# What each field's annotation admits. bool is an int in Python, so it is excluded by hand.
_TYPE_REQUIREMENTS: dict[str, tuple[Callable[[object], bool], str]] = {
    "bool": (lambda value: isinstance(value, bool), "must be true or false"),
    "int": (lambda value: isinstance(value, int) and not isinstance(value, bool),
            "must be a whole number"),
    "float": (lambda value: isinstance(value, int | float) and not isinstance(value, bool),
              "must be a number"),
    "str": (lambda value: isinstance(value, str), "must be a string"),
}


def check_type(name: str, annotation: object, value: object) -> None:
    """Raise :class:`SettingError` unless ``value`` is of the field's annotated type."""
    admits, requirement = _TYPE_REQUIREMENTS[str(annotation)]
    check(admits(value), name.upper(), f"{requirement}, not {value!r}")


TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
_INT_TEXT = re.compile(r"^[+-]?[0-9]+\Z")
_FLOAT_TEXT = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ValueError(text)


def _parse_int(text: str) -> int:
    if not _INT_TEXT.match(text):
        raise ValueError(text)
    return int(text)


def _parse_float(text: str) -> float:
    if not _FLOAT_TEXT.match(text):
        raise ValueError(text)
    return float(text)


# Each annotation's parser, and what its variable must spell.
_PARSERS: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (_parse_int, "must be a whole number"),
    "float": (_parse_float, "must be a number"),
    "bool": (_parse_bool, f"must be true or false ({'/'.join(TRUE_WORDS)} or "
                          f"{'/'.join(FALSE_WORDS)})"),
    "str": (str, "must be text"),
}


def parse(name: str, text: str, annotation: object) -> object:
    """The variable's ``text`` (surrounding blanks ignored) as a value of the annotated type
    (SettingError for any other spelling)."""
    parser, requirement = _PARSERS[str(annotation)]
    try:
        return parser(text.strip())
    except ValueError:
        raise SettingError(name, f"{requirement}, not {text!r}") from None
