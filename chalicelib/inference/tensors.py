"""Requests as tensors: a body read against a model's signature.

The most common failure in front of an endpoint is a request that does not match the model's
signature: a string where float32 is needed, ``[1, 2, 3, 4]`` where ``(batch, 4)`` is. This
module reads what clients send (``{"instances": [...]}`` rows, ``{"inputs": {...}}`` columns,
a bare list, ``{"<input name>": ...}``, CSV rows, ``.npy``), coerces it to the declared dtype
and shape where the intent is unambiguous (:func:`coerce`) and refuses anything else with a
:class:`~chalicelib.core.errors.SignatureMismatchError` naming the input, what was expected and
what arrived. The endpoint then gets TF Serving's REST body (:func:`tfs_request`) and its
answer is read back per output (:func:`tfs_outputs`).
"""
from __future__ import annotations

import contextvars
import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from chalicelib.core.errors import (
    InvalidEndpointResponseError,
    SignatureMismatchError,
    UnsupportedMediaTypeError,
)
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import MediaType, bare
from chalicelib.registry.specs import DType, Signature, TensorSpec

NPY = "application/x-npy"
READABLE_TYPES = (MediaType.JSON, MediaType.JSONLINES, MediaType.CSV, NPY)
_ENVELOPES = ("instances", "inputs", "signature_name")


def read_tensors(body: bytes, content_type: str | None, signature: Signature
                 ) -> dict[str, np.ndarray]:
    """Read a request body into one array per declared input, each coerced to its spec.

    Raises:
        SignatureMismatchError: the data does not fit the signature (the message says how).
        InvalidJSONError: a JSON body that does not parse.
        UnsupportedMediaTypeError: a content type this reader does not take.
    """
    # a request's Call carries its type bare already: only another type is made so
    kind = content_type if content_type in READABLE_TYPES else bare(content_type)
    if kind in (MediaType.JSON, MediaType.JSONLINES):
        raw = _from_json(load_json(body) if kind == MediaType.JSON else _lines(body), signature)
    elif kind == MediaType.CSV:
        name = _only_input(signature, "CSV rows").name
        raw = {name: _csv_rows(body, name)}
    elif kind == NPY:
        name = _only_input(signature, "an .npy array").name
        raw = {name: _npy(body, name)}
    else:
        raise UnsupportedMediaTypeError(
            f"Unsupported Content-Type {kind[:64]!r}; this model reads "
            f"{', '.join(READABLE_TYPES)}.")
    return {spec.name: coerce(spec, raw[spec.name]) for spec in signature.inputs}


def _lines(body: bytes) -> Any:
    """JSON lines, one instance a line."""
    lines = [line for line in body.splitlines() if line.strip()]
    check_batch(len(lines), "The body's JSON lines")  # before parsing them: bounded work
    return {"instances": [load_json(line) for line in lines]}


def _from_json(document: Any, signature: Signature) -> dict[str, Any]:
    if isinstance(document, list):  # a bare list: the single input's value (rows)
        return {_only_input(signature, "a bare list").name: document}
    if not isinstance(document, dict):
        raise SignatureMismatchError(
            f"The body must be a JSON object or list, not {describe_value(document)}.")
    if "instances" in document or "inputs" in document:
        extra = sorted(set(document) - set(_ENVELOPES))
        if extra or ("instances" in document and "inputs" in document):
            raise SignatureMismatchError(
                'Send {"instances": [...]} (rows) or {"inputs": {...}} (columns), with '
                f'"signature_name" at most; got the fields {", ".join(sorted(document))}.')
        if "instances" in document:
            return _rows(document["instances"], signature)
        return _columns(document["inputs"], signature)
    return _named(document, [spec.name for spec in signature.inputs], "field")


def _rows(instances: Any, signature: Signature) -> dict[str, Any]:
    """TF Serving's row format: each instance the single input's value, or an object."""
    if isinstance(instances, str):  # a JSON-encoded list sent as a string, a classic mistake
        instances = json_in_a_string(instances, '"instances"')
    if not isinstance(instances, list) or not instances:
        raise SignatureMismatchError(
            f'"instances" must be a non-empty list of rows, not {describe_value(instances)}.')
    objects = all([isinstance(row, dict) for row in instances])
    if len(signature.inputs) == 1 and not objects:
        return {signature.inputs[0].name: instances}
    if not objects:
        names = ", ".join(repr(spec.name) for spec in signature.inputs)
        raise SignatureMismatchError(
            f"This model has {len(signature.inputs)} inputs ({names}): each instance must be "
            "an object keyed by input name.")
    columns: dict[str, list[Any]] = {}
    inputs = [spec.name for spec in signature.inputs]
    for index, row in enumerate(instances):
        named = _named(row, inputs, f"instance {index}'s key")
        for name, value in named.items():
            columns.setdefault(name, []).append(value)
    return columns


def _columns(inputs: Any, signature: Signature) -> dict[str, Any]:
    """TF Serving's columnar format: ``{"inputs": {name: value}}`` or the single input."""
    if isinstance(inputs, dict):
        return _named(inputs, [spec.name for spec in signature.inputs], '"inputs" key')
    return {_only_input(signature, 'a list in "inputs"').name: inputs}


def _named(fields: Mapping[str, Any], names: Sequence[str], what: str) -> dict[str, Any]:
    unknown = sorted(set(fields) - set(names))
    if unknown:
        shown = ", ".join(repr(name[:64]) for name in unknown[:5])
        raise SignatureMismatchError(
            f"Unknown {what} {shown}; the model's inputs are: {', '.join(names)}.")
    missing = [name for name in names if name not in fields]
    if missing:
        raise SignatureMismatchError(
            f"Missing input {missing[0]!r}; the model's inputs are: {', '.join(names)}.")
    return dict(fields)


def _only_input(signature: Signature, what: str) -> TensorSpec:
    if len(signature.inputs) != 1:
        names = ", ".join(repr(spec.name) for spec in signature.inputs)
        raise SignatureMismatchError(
            f"This model has {len(signature.inputs)} inputs ({names}): {what} cannot say "
            'which is which; send {"instances": [{"<input>": ...}, ...]} or '
            '{"inputs": {"<input>": ...}}.')
    return signature.inputs[0]


def _csv_rows(body: bytes, name: str) -> list[list[str]]:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SignatureMismatchError(f"input {name!r}: the CSV body is not UTF-8 text.") \
            from None
    rows: list[list[str]] = []
    try:
        for row in csv.reader(io.StringIO(text)):
            if row:
                rows.append(row)
                check_batch(len(rows), f"input {name!r}: the CSV body")  # stop reading
    except csv.Error as error:  # a field over the csv module's limit, a stray quote, ...
        raise SignatureMismatchError(
            f"input {name!r}: the CSV body is not valid CSV: {str(error)[:SHOWN * 2]}.") \
            from None
    if not rows:
        raise SignatureMismatchError(f"input {name!r}: the CSV body has no rows.")
    return rows


def _npy(body: bytes, name: str) -> np.ndarray:
    if body[:2] == b"PK":
        raise SignatureMismatchError(
            f"input {name!r}: the body must be one .npy array, not an .npz archive.")
    try:
        _npy_header(body)
        array = np.load(io.BytesIO(body), allow_pickle=False)
        _check_code_points(array)
    except SignatureMismatchError as error:
        raise SignatureMismatchError(f"input {name!r}: {error.message}") from None
    except Exception:  # ValueError, EOFError, OSError: whatever a damaged file raises
        raise SignatureMismatchError(
            f"input {name!r}: the body is not a valid .npy array.") from None
    return array


def _check_code_points(array: np.ndarray) -> None:
    """Refuse a string array holding code points beyond Unicode: numpy reads any 32-bit value,
    and the str made of one is invalid (a SystemError, or worse, later)."""
    if array.dtype.kind != "U" or not array.size:
        return
    codes = np.ascontiguousarray(array).reshape(-1).view(
        np.dtype(np.uint32).newbyteorder(array.dtype.byteorder))
    if codes.max() > 0x10FFFF:
        raise SignatureMismatchError("the .npy strings hold code points beyond Unicode.")


def _npy_header(body: bytes) -> None:
    """Refuse an ``.npy`` body whose header does not announce exactly the bytes that follow,
    before numpy allocates what the header announces (a few bytes may claim terabytes)."""
    stream = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(stream)
        read = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}[version]
        shape, _, dtype = read(stream)
        expected = math.prod(shape) * dtype.itemsize
    except Exception:  # ValueError, KeyError (a version 3.0 or later), whatever else it raises
        raise SignatureMismatchError("the body is not a valid .npy array (format 1.0 or "
                                     "2.0).") from None
    if expected != len(body) - stream.tell():
        raise SignatureMismatchError(
            f"the .npy header announces {expected} bytes of data; {len(body) - stream.tell()} "
            "follow.")


# A client's value coerced to a tensor's declared dtype and shape where the intent is
# unambiguous (numbers sent as strings, one row for a ``(-1, N)`` input, a missing batch
# axis), refused with a message naming the input, what was expected and what arrived.

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
        SignatureMismatchError: a shape that does not fit; more than :data:`MAX_INSTANCES`
            rows; a value that is not a finite number, not whole for an integer input, or
            beyond the dtype's range; an array of a dtype kind that is not numbers.
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
    if array.dtype.kind == "U":  # strings read value by value, as JSON's are
        array = array.astype(object)
    elif array.dtype != object and array.dtype.kind not in _ARRAY_KINDS.get(spec.dtype, "iuf"):
        raise mismatch(f"an array of {str(array.dtype)[:SHOWN]}: "
                       f"{'true/false' if array.dtype.kind == 'b' else 'not numbers'}")
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
        if flat.dtype == object else flat.astype(np.float64, copy=False)
    if not np.all(np.isfinite(numbers)):
        raise mismatch(f"{_shown(numbers[~np.isfinite(numbers)][0])}, which is not a finite "
                       "number")
    if spec.dtype in _INTEGER or spec.dtype == DType.BOOL:
        fraction = numbers != np.round(numbers)
        if np.any(fraction):
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


# TF Serving's REST bodies: the request made of a model's input tensors, the answer read
# back per output.


def tfs_request(arrays: Mapping[str, np.ndarray], signature: Signature) -> bytes:
    """TF Serving's row-format predict body for ``arrays`` (one per declared input)."""
    if len(signature.inputs) != 1:
        batch = {len(array) for array in arrays.values()}
        if len(batch) != 1:
            raise SignatureMismatchError(
                "The inputs have different batch sizes: "
                + ", ".join(f"{name} {len(array)}" for name, array in arrays.items()))
    columns: dict[str, Any] = {}
    for spec in signature.inputs:
        array = arrays[spec.name]
        if array.dtype in (np.float32, np.float16):
            # the shortest decimal (5.1, not 5.099999904632568): the same number once the
            # server reads it back as float32
            array = array.astype(str).astype(np.float64)
        columns[spec.name] = array.tolist()
    instances = columns[signature.inputs[0].name] if len(signature.inputs) == 1 else [
        dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    return json.dumps({"signature_name": "serving_default", "instances": instances},
                      separators=(",", ":")).encode()


def tfs_outputs(body: bytes, signature: Signature) -> list[np.ndarray]:
    """An endpoint's TF Serving answer as one array per output, in the signature's order,
    each with the batch axis (as onnxruntime's ``session.run()``); a model declaring no outputs
    gives one array, the predictions as they came.

    Raises:
        InvalidEndpointResponseError: not TF Serving's answer, or not the declared outputs.
    """
    try:
        document = json.loads(body)
    except ValueError:
        raise InvalidEndpointResponseError("The endpoint's answer is not JSON.") from None
    names = [spec.name for spec in signature.outputs]
    if isinstance(document, dict) and "predictions" in document:
        rows = document["predictions"]
        if not isinstance(rows, list):
            raise InvalidEndpointResponseError('"predictions" is not a list.')
        if len(names) > 1:
            try:
                return [np.array([row[name] for row in rows]) for name in names]
            except (KeyError, TypeError, ValueError):
                raise InvalidEndpointResponseError(
                    f"The endpoint's predictions lack the outputs {', '.join(names)}.") from None
        return [_array(rows)]
    if isinstance(document, dict) and "outputs" in document:
        outputs = document["outputs"]
        if isinstance(outputs, dict):
            try:
                return [_array(outputs[name]) for name in names] if names else \
                    [_array(value) for value in outputs.values()]
            except KeyError as missing:
                raise InvalidEndpointResponseError(
                    f"The endpoint's outputs lack {missing}.") from None
        return [_array(outputs)]
    raise InvalidEndpointResponseError(
        'The endpoint did not answer TF Serving\'s {"predictions": ...} or {"outputs": ...}.')


def _array(value: Any) -> np.ndarray:
    try:
        array = np.array(value)
    except ValueError:
        raise InvalidEndpointResponseError("The endpoint's outputs are ragged.") from None
    if array.dtype.kind in "fc" and not np.all(np.isfinite(array)):
        raise InvalidEndpointResponseError("The endpoint's outputs hold non-finite values.")
    return array


def to_json(value: Any) -> Any:
    """Numpy arrays and scalars (as handlers return them) as plain JSON values."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biu" or (value.dtype.kind == "f" and np.all(np.isfinite(value))):
            return value.tolist()  # plain numbers already: nothing to walk
        return to_json(value.tolist())
    if isinstance(value, np.generic):
        return to_json(value.item())
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
