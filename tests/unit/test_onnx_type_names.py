"""The Cortex signature's ``type`` strings are onnxruntime's own: for every dtype a
``model.json`` may declare, a one-node ONNX graph of that element type is built here, loaded by
onnxruntime, fed an array of the dtype, and the type name onnxruntime reports for its input
and output is compared with what sagegate shows a ``handler.py``."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from chalicelib.inference.userfiles.cortex import InputSignature
from chalicelib.registry.specs import DType, TensorSpec
from tests.unit.emulator import onnxbuild

# ONNX TensorProto.DataType of each dtype (onnx/onnx.proto); onnxruntime checks the pairing
# below by refusing an array of any other numpy type
ELEMENT_TYPES = {DType.FLOAT32: 1, DType.UINT8: 2, DType.INT8: 3, DType.INT16: 5,
                 DType.INT32: 6, DType.INT64: 7, DType.STRING: 8, DType.BOOL: 9,
                 DType.FLOAT16: 10, DType.FLOAT64: 11}


def sample(dtype: DType) -> np.ndarray:
    if dtype == DType.STRING:
        return np.array([["a", "b"]], dtype=object)
    return np.ones((1, 2), dtype=np.dtype(dtype.value))


def test_every_dtype_is_covered() -> None:
    assert set(ELEMENT_TYPES) == set(DType)


@pytest.mark.parametrize("dtype", list(DType), ids=str)
def test_the_signature_type_is_onnxruntimes_name(dtype: DType) -> None:
    session = onnxruntime.InferenceSession(onnxbuild.identity(ELEMENT_TYPES[dtype]),
                                           providers=["CPUExecutionProvider"])
    (result,) = session.run(None, {"x": sample(dtype)})  # the element type is the dtype's
    assert result.dtype == sample(dtype).dtype
    (given,), (made,) = session.get_inputs(), session.get_outputs()
    assert dtype.onnx_type == given.type == made.type
    shown = InputSignature.of(TensorSpec("x", dtype, (-1, 2)))
    assert (shown.type, shown.shape) == (given.type, ["N", 2])
