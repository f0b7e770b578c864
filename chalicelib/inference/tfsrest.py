"""TF Serving's REST bodies: the request made of a model's input tensors, and the answer read
back per output."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from chalicelib.core.errors import (
    InvalidEndpointResponseError,
    SignatureMismatchError,
)
from chalicelib.registry.specs import Signature


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
