"""A large JSON object read in place: its members and an array's items, one value at a time.

A TF Serving batch can hold hundreds of thousands of instances; parsing it whole would hold them
all at once. These functions walk the text, decoding one value at a time with the standard
library's decoder, so memory does not grow with the batch. Malformed JSON is a
:class:`ValueError`, as ``json.loads`` raises.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def value_at(data: str, start: int) -> Any:
    """The JSON value that starts at ``start`` (and no further).

    Raises:
        ValueError: no JSON value there.
    """
    return _DECODER.raw_decode(data, start)[0]


def members(data: str) -> Iterator[tuple[str, int, int | None]]:
    """(key, where its value starts, its item count if an array) of each member of the object
    ``data``; arrays are walked item by item, so no large value is held.

    Raises:
        ValueError: ``data`` is not a JSON object.
    """
    position = _skip(data, 0)
    if data[position:position + 1] != "{":
        raise ValueError("not an object")
    position = _skip(data, position + 1)
    if data[position:position + 1] == "}":
        return
    while True:
        key, position = _DECODER.raw_decode(data, position)
        position = _skip(data, position)
        if not isinstance(key, str) or data[position:position + 1] != ":":
            raise ValueError("a member expected")
        start = _skip(data, position + 1)
        count: int | None = None
        if data[start:start + 1] == "[":
            count, position = _array_extent(data, start)
        else:
            position = _DECODER.raw_decode(data, start)[1]
        yield key, start, count
        position = _skip(data, position)
        mark = data[position:position + 1]
        if mark == "}":
            return
        if mark != ",":
            raise ValueError("',' or '}' expected")
        position = _skip(data, position + 1)


def array_items(data: str, start: int) -> Iterator[Any]:
    """Each item of the JSON array at ``start``, decoded when its turn comes.

    Raises:
        ValueError: not a well-formed array.
    """
    for item, _end in _array_positions(data, start):
        yield item


def _skip(data: str, position: int) -> int:
    return _SPACE.match(data, position).end()  # type: ignore[union-attr]


def _array_extent(data: str, start: int) -> tuple[int, int]:
    count, end = 0, _skip(data, start + 1) + 1  # "[]"
    for count, step in enumerate(_array_positions(data, start), 1):  # noqa: B007
        end = step[1]
    return count, end


def _array_positions(data: str, start: int) -> Iterator[tuple[Any, int]]:
    """Each item of the array at ``start``, with the position after it."""
    position = _skip(data, start + 1)
    if data[position:position + 1] == "]":
        return
    while True:
        item, position = _DECODER.raw_decode(data, position)
        position = _skip(data, position)
        mark = data[position:position + 1]
        if mark == "]":
            yield item, position + 1
            return
        if mark != ",":
            raise ValueError("',' or ']' expected")
        yield item, position
        position = _skip(data, position + 1)
