"""A client's value coerced to a tensor's declared dtype and shape where the intent is
unambiguous (numbers sent as strings, one row for a ``(-1, N)`` input, a missing batch axis),
refused with a message naming the input, what was expected and what arrived otherwise."""
from __future__ import annotations

import contextvars
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from chalicelib.core.errors import (
    SignatureMismatchError,
)
from chalicelib.registry.specs import DType, TensorSpec

MAX_INSTANCES = 1024
"""Rows one request may carry (the emulator's TF Serving bound is the same)."""
MAX_ELEMENTS = 4_000_000
"""Values one input may carry, whatever its shape."""
_LIMITS: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar(
    "tensor_limits", default=(MAX_INSTANCES, MAX_ELEMENTS))


@contextmanager
def batch_limits(rows: int, elements: int) -> Iterator[None]:
    """Other bounds than one request's (:data:`MAX_INSTANCES`, :data:`MAX_ELEMENTS`) for the
    reads inside: a job's batch for an asynchronous endpoint, which is no real-time call."""
    token = _LIMITS.set((rows, elements))
    try:
        yield
    finally:
        _LIMITS.reset(token)


def limits() -> tuple[int, int]:
    """The rows and values one input may carry here (see :func:`batch_limits`)."""
    return _LIMITS.get()
_NUMPY_TYPES: dict[DType, Any] = {
    DType.FLOAT16: np.float16, DType.FLOAT32: np.float32, DType.FLOAT64: np.float64,
    DType.INT8: np.int8, DType.INT16: np.int16, DType.INT32: np.int32, DType.INT64: np.int64,
    DType.UINT8: np.uint8, DType.BOOL: np.bool_, DType.STRING: np.object_,
}
_INTEGER = (DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8)
_NUMBER = re.compile(r"[ \t]*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t]*")
"""A number sent as text, as JSON and CSV write one: ASCII digits, an optional sign, point and
exponent, spaces or tabs around (``5.1, 3.5`` in CSV). Not what Python's ``float()`` also takes
(``1_000``, ``nan``, ``inf``, full-width digits, other whitespace)."""
_ARRAY_KINDS = {DType.BOOL: "biu"}
"""The numpy dtype kinds an array may have for an input of this dtype (the others: ``iuf``,
numbers only). Booleans feed only bool inputs, as JSON ``true`` does; datetimes, complex
numbers, records and bytes feed nothing. Strings and objects are read value by value."""
SHOWN = 40
"""Characters of a client's value quoted back in a message."""
_MAX_INT_DIGITS = 40
"""Digits of an integer sent as text read exactly (more are beyond every integer dtype)."""


def json_in_a_string(text: str, where: str) -> Any:
    """A JSON document sent inside a string (some clients double-encode), parsed; the client's
    ``SignatureMismatch`` naming ``where`` when it is not one."""
    try:
        return json.loads(text)
    except ValueError:
        raise SignatureMismatchError(
            f"{where} is a string that is not JSON; send the list itself.") from None


def coerce(spec: TensorSpec, value: Any) -> np.ndarray:
    """``value`` as an array of ``spec``'s dtype and shape.

    Accepted beyond an exact match: numbers sent as strings (as JSON or CSV writes them), a
    JSON list sent as a string, a single sample without the batch axis
    (``[5.1, 3.5, 1.4, 0.2]`` for ``(-1, 4)``). Every body shape and every handler's return
    comes through here: the batch bound and the value checks (after the cast to the dtype)
    hold for all of them.

    Raises:
        SignatureMismatchError: "input 'features': expected float32 of shape (-1, 4), got a
            list of 3 numbers"; more than :data:`MAX_INSTANCES` rows; a value that is not a
            finite number, not whole for an integer input, or beyond the dtype's range; an
            array of a dtype kind that is not numbers.
    """
    def mismatch(got: str) -> SignatureMismatchError:
        return SignatureMismatchError(
            f"input {spec.name!r}: expected {spec.describe()}, got {got}",
            details={"input": spec.name, "expected": {"dtype": str(spec.dtype),
                                                      "shape": list(spec.shape)}})

    if isinstance(value, str) and spec.dtype != DType.STRING and value.lstrip()[:1] in "[{":
        value = json_in_a_string(value, f"input {spec.name!r}")
    array = _as_array(value, spec, mismatch)
    if array.ndim == len(spec.shape) - 1 and spec.shape[0] == -1:
        array = array[np.newaxis, ...]  # one sample, without the batch axis
    if array.ndim != len(spec.shape) or any(
            [want not in (-1, have) for want, have in zip(spec.shape, array.shape, strict=True)]):
        raise mismatch(describe_value(value if not isinstance(value, np.ndarray) else array))
    if array.shape[0] == 0:
        raise mismatch("an empty batch")
    max_rows = _LIMITS.get()[0]
    if array.shape[0] > max_rows:  # every body shape and every handler's return
        raise mismatch(f"{array.shape[0]} rows (at most {max_rows} a request)")
    # after the shape: no work on what is refused
    if spec.dtype == DType.STRING:
        if not all([isinstance(item, str) for item in array.reshape(-1)]):
            raise mismatch(describe_value(value))
        return array.astype(object)
    return _numbers(array, spec, value, mismatch)


def check_batch(rows: int, what: str) -> None:
    """Stop a parser that has read more rows than a request may carry (coerce checks the
    batch of every input; this bounds the work before it)."""
    max_rows = limits()[0]
    if rows > max_rows:
        raise SignatureMismatchError(
            f"{what} has more than {max_rows} rows; at most {max_rows} a request.")


def _as_array(value: Any, spec: TensorSpec, mismatch: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        array = value
    else:
        max_values = _LIMITS.get()[1]
        size = _count(value, max_values + 1)
        if size > max_values:
            raise mismatch(f"{size} values (at most {max_values})")
        try:
            array = np.array(value, dtype=object)
        except ValueError:
            raise mismatch(describe_value(value)) from None
        if array.dtype == object and array.ndim and any(
                [isinstance(item, list) for item in array.reshape(-1)]):
            raise mismatch(describe_value(value))  # ragged rows
    return array


def _numbers(array: np.ndarray, spec: TensorSpec, value: Any, mismatch: Any) -> np.ndarray:
    array = _numeric_source(array, spec, mismatch)
    flat = array.reshape(-1)
    if array.dtype == object and spec.dtype not in _INTEGER \
            and {type(item) for item in flat} == {float}:
        flat = flat.astype(np.float64)  # JSON's numbers with a point: nothing to read apart
    elif array.dtype == object:  # Python ints stay ints: 2**53 + 1 for int64 is not 2**53
        try:
            flat = np.array([_number(item, spec.dtype) for item in flat], dtype=object)
        except _NotANumber as bad:
            raise mismatch(f"{describe_value(value)} holding {bad.shown}, which is not a "
                           "number") from None
    numbers = np.array([_float(item) for item in flat], dtype=np.float64) \
        if flat.dtype == object else flat.astype(np.float64)
    if not np.all(np.isfinite(numbers)):
        raise mismatch(f"{_shown(numbers[~np.isfinite(numbers)][0])}, which is not a finite "
                       "number")
    fraction = numbers != np.round(numbers)
    if (spec.dtype in _INTEGER or spec.dtype == DType.BOOL) and np.any(fraction):
        raise mismatch(f"{_shown(numbers[fraction][0])}, a number that is not whole")
    if spec.dtype in _INTEGER and flat.dtype.kind in "iuO":
        return _integers(flat, spec, mismatch).reshape(array.shape)
    return _cast(numbers, spec, mismatch).reshape(array.shape)


def _integers(flat: np.ndarray, spec: TensorSpec, mismatch: Any) -> np.ndarray:
    """Whole numbers (Python ints and whole floats, or an integer array) in an integer dtype,
    compared with its range exactly, not through float64."""
    info = np.iinfo(_NUMPY_TYPES[spec.dtype])
    for extreme in (flat.min(), flat.max()) if flat.size else ():
        if not info.min <= extreme <= info.max:
            raise mismatch(f"{_shown(extreme)}, outside {spec.dtype}'s range ({info.min} to "
                           f"{info.max})")
    return flat.astype(info.dtype)


def _cast(numbers: np.ndarray, spec: TensorSpec, mismatch: Any) -> np.ndarray:
    """``numbers`` (finite float64) in the input's dtype, refusing a value the cast changed
    beyond rounding: one beyond float16/32's range became infinite, one beyond an integer
    type's range wrapped, a bool input's 2 became 1."""
    target = np.dtype(_NUMPY_TYPES[spec.dtype])
    with np.errstate(over="ignore", invalid="ignore"):
        cast = numbers.astype(target)
        changed = ~np.isfinite(cast) if target.kind == "f" else cast.astype(np.float64) != numbers
    if np.any(changed):
        limits = (f" (±{np.finfo(target).max!s})" if target.kind == "f" else
                  "" if target.kind == "b" else
                  f" ({np.iinfo(target).min} to {np.iinfo(target).max})")
        raise mismatch(f"{_shown(numbers[changed][0])}, outside {spec.dtype}'s range{limits}")
    return cast


def _numeric_source(array: np.ndarray, spec: TensorSpec, mismatch: Any) -> np.ndarray:
    """An array (an .npy body, a handler's return) whose dtype kind can feed the input: strings
    and objects as objects (read value by value, as JSON is)."""
    if array.dtype.kind in "OU":
        return array.astype(object)
    if array.dtype.kind not in _ARRAY_KINDS.get(spec.dtype, "iuf"):
        raise mismatch(f"an array of {str(array.dtype)[:SHOWN]}: "
                       f"{'true/false' if array.dtype.kind == 'b' else 'not numbers'}")
    return array


class _NotANumber(ValueError):
    """A value that is not a number, with how it is quoted back (bounded)."""

    def __init__(self, item: Any) -> None:
        super().__init__()
        self.shown = _shown(item)


def _number(item: Any, dtype: DType) -> int | float:
    """One value as a Python int or float: a number, or a string that looks like one
    (:data:`_NUMBER`; digits alone read as an int, exactly)."""
    if isinstance(item, (bool, np.bool_)):
        if dtype == DType.BOOL:
            return int(item)
        raise _NotANumber(bool(item))
    if isinstance(item, (int, np.integer)):
        return int(item)
    if isinstance(item, (float, np.floating)):
        return float(item)
    if isinstance(item, str) and _NUMBER.fullmatch(item):  # "5.1" -> 5.1: numbers as strings
        text = item.strip(" \t")
        if len(text) <= _MAX_INT_DIGITS and text.lstrip("+-").isdigit():
            return int(text)
        return float(text)  # a longer integer reads as a float: beyond every integer range
    raise _NotANumber(item)


def _float(item: int | float) -> float:
    try:
        return float(item)
    except OverflowError:  # a Python int beyond float64: beyond every dtype's range
        return math.inf if item > 0 else -math.inf


def _shown(item: Any) -> str:
    """A client's value quoted back, at most :data:`SHOWN` characters of it."""
    if isinstance(item, (float, np.floating)):
        return repr(float(item))
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool) \
            and abs(int(item)) < 10**SHOWN:
        return str(int(item))
    if isinstance(item, str):
        return repr(item[:SHOWN]) + ("..." if len(item) > SHOWN else "")
    return describe_value(item)


def _count(value: Any, limit: int = MAX_ELEMENTS + 1) -> int:
    """How many leaves a nested list holds (stopping past ``limit``)."""
    if not isinstance(value, list):
        return 1
    total, pending = 0, [value]  # a stack, not recursion: one call however deep the rows
    while pending and total < limit:
        for item in pending.pop():
            if isinstance(item, list):
                pending.append(item)
                continue
            total += 1
            if total >= limit:
                break
    return total


def describe_value(value: Any) -> str:
    """What arrived, in a few words: "a list of 3 numbers", "a string", "2 rows of 3"."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {tuple(value.shape)[:8]} ({str(value.dtype)[:SHOWN]})"
    if isinstance(value, list):
        return _describe_list(value)
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "a number", float: "a number", dict: "an object",
             type(None): "null"}
    return names.get(type(value), "a " + type(value).__name__)


def _describe_list(value: list[Any]) -> str:
    if not value:
        return "an empty list"
    if all(isinstance(item, list) for item in value):
        lengths = sorted({len(item) for item in value})
        rows = f"{len(value)} row{'s' if len(value) > 1 else ''}"
        if len(lengths) == 1:
            return f"{rows} of {lengths[0]}"
        return f"{rows} of different lengths ({lengths[0]} to {lengths[-1]})"
    kinds = {describe_value(item).split(" ", 1)[-1] for item in value}
    if len(kinds) == 1 and kinds <= {"number", "string"}:
        return f"a list of {len(value)} {kinds.pop()}s"
    return f"a list of {len(value)} mixed values"
