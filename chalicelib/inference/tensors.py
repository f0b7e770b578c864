"""Requests as tensors: a body read against a model's signature.

The most common failure in front of an endpoint is a request that does not match the model's
signature: a string where float32 is needed, ``[1, 2, 3, 4]`` where ``(batch, 4)`` is. This
module reads what clients send (``{"instances": [...]}`` rows, ``{"inputs": {...}}`` columns,
a bare list, ``{"<input name>": ...}``, CSV rows, ``.npy``);
:mod:`~chalicelib.inference.coercion` coerces it to the declared dtype and shape where the
intent is unambiguous and refuses anything else with a
:class:`~chalicelib.core.errors.SignatureMismatchError` naming the input, what was expected and
what arrived. The endpoint then gets TF Serving's REST body (:func:`tfs_request`) and its
answer is read back per output (:func:`tfs_outputs`).
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chalicelib.core.errors import (
    InvalidEndpointResponseError,
    SignatureMismatchError,
    UnsupportedMediaTypeError,
)
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import MediaType, bare
from chalicelib.inference.coercion import (
    SHOWN,
    check_batch,
    coerce,
    describe_value,
    json_in_a_string,
)
from chalicelib.registry.specs import Signature, TensorSpec

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
    names = [spec.name for spec in signature.inputs]
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
    return _named(document, names, "field")


def _rows(instances: Any, signature: Signature) -> dict[str, Any]:
    """TF Serving's row format: each instance the single input's value, or an object."""
    if isinstance(instances, str):  # a JSON-encoded list sent as a string, a classic mistake
        instances = json_in_a_string(instances, '"instances"')
    if not isinstance(instances, list) or not instances:
        raise SignatureMismatchError(
            f'"instances" must be a non-empty list of rows, not {describe_value(instances)}.')
    if len(signature.inputs) == 1 and not all([isinstance(row, dict) for row in instances]):
        return {signature.inputs[0].name: instances}
    if not all([isinstance(row, dict) for row in instances]):
        names = ", ".join(repr(spec.name) for spec in signature.inputs)
        raise SignatureMismatchError(
            f"This model has {len(signature.inputs)} inputs ({names}): each instance must be "
            "an object keyed by input name.")
    columns: dict[str, list[Any]] = {}
    for index, row in enumerate(instances):
        named = _named(row, [spec.name for spec in signature.inputs], f"instance {index}'s key")
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


# TF Serving's REST bodies: the request made of a model's input tensors, the answer read
# back per output.


def _json_values(array: np.ndarray) -> Any:
    """An array as JSON values; float32 and float16 as their shortest decimal (5.1, not
    5.099999904632568: the same number once the server reads it back as float32)."""
    if array.dtype in (np.float32, np.float16):
        return array.astype(str).astype(np.float64).tolist()
    return array.tolist()


def tfs_request(arrays: Mapping[str, np.ndarray], signature: Signature) -> bytes:
    """TF Serving's row-format predict body for ``arrays`` (one per declared input)."""
    if len(signature.inputs) == 1:
        instances: list[Any] = _json_values(arrays[signature.inputs[0].name])
    else:
        batch = {len(array) for array in arrays.values()}
        if len(batch) != 1:
            raise SignatureMismatchError(
                "The inputs have different batch sizes: "
                + ", ".join(f"{name} {len(array)}" for name, array in arrays.items()))
        columns = {spec.name: _json_values(arrays[spec.name]) for spec in signature.inputs}
        instances = [{name: column[index] for name, column in columns.items()}
                     for index in range(batch.pop())]
    return json.dumps({"signature_name": "serving_default", "instances": instances},
                      separators=(",", ":")).encode()


def tfs_outputs(body: bytes, signature: Signature) -> list[np.ndarray]:
    """An endpoint's TF Serving answer as one array per output, in the signature's order,
    each with the batch axis (what onnxruntime's ``session.run()`` returns).

    A model declaring no outputs gives one array, the predictions as they came.

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
