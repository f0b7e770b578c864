"""Tiny ONNX graphs for the tensor container's tests, written without the ``onnx`` package.

An ``.onnx`` file is one protobuf message (``ModelProto``); the few fields these graphs need
are encoded here by hand (field numbers from ``onnx/onnx.proto``), so the tests depend on
onnxruntime alone, which loads and checks what is written. Three graphs:

- :func:`classifier`: ``features`` float32 ``(batch, 4)`` -> ``probabilities`` float32
  ``(batch, 3)``, a softmax over ``features @ W + b`` (the iris model's signature).
- :func:`two_inputs`: ``input_ids``, ``input_mask`` int32 ``(batch, length)`` -> ``outputs``
  float32 ``(batch, 1)``, the sum of ``input_ids * input_mask`` per row.
- :func:`two_outputs`: ``x`` int64 ``(batch, 2)`` -> ``doubled`` int64 ``(batch, 2)`` and
  ``total`` float32 ``(batch,)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

FLOAT, INT32, INT64 = 1, 6, 7
"""ONNX ``TensorProto.DataType`` values."""
ATTRIBUTE_INT = 2
OPSET = 13
IR_VERSION = 7

CLASSIFIER_WEIGHTS = np.array(
    [[0.5, -0.25, 0.1], [1.0, 0.0, -1.0], [-0.5, 0.75, 0.2], [0.0, 0.3, 0.6]], dtype=np.float32
)
CLASSIFIER_BIAS = np.array([0.1, 0.0, -0.1], dtype=np.float32)

Dim = int | str


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, elem_type: int, shape: Sequence[Dim]) -> bytes:
    dims = b"".join(
        _bytes(1, _bytes(2, dim) if isinstance(dim, str) else _int(1, dim)) for dim in shape
    )
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def _initializer(name: str, array: np.ndarray) -> bytes:
    types = {np.dtype(np.float32): FLOAT, np.dtype(np.int64): INT64}
    dims = b"".join(_int(1, dim) for dim in array.shape)
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return dims + _int(2, types[array.dtype]) + _bytes(8, name) + _bytes(9, little.tobytes())


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], **ints: int) -> bytes:
    fields = [_bytes(1, name) for name in inputs] + [_bytes(2, name) for name in outputs]
    fields.append(_bytes(4, op))
    for key, value in ints.items():
        fields.append(_bytes(5, _bytes(1, key) + _int(3, value) + _int(20, ATTRIBUTE_INT)))
    return b"".join(fields)


def model_bytes(
    nodes: Sequence[bytes],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    initializers: Sequence[bytes] = (),
) -> bytes:
    """Encodes a ``ModelProto`` of one graph (opset 13)."""
    graph = b"".join(
        [*(_bytes(1, node) for node in nodes), _bytes(2, "test-graph"),
         *(_bytes(5, item) for item in initializers),
         *(_bytes(11, item) for item in inputs), *(_bytes(12, item) for item in outputs)]
    )  # fmt: skip
    opset = _bytes(1, "") + _int(2, OPSET)
    return _int(1, IR_VERSION) + _bytes(2, "sagegate-tests") + _bytes(7, graph) + _bytes(8, opset)


def classifier(batch: Dim = "batch") -> bytes:
    """``features`` float32 ``(batch, 4)`` -> ``probabilities`` float32 ``(batch, 3)``."""
    return model_bytes(
        nodes=[
            _node("MatMul", ["features", "W"], ["logits0"]),
            _node("Add", ["logits0", "b"], ["logits"]),
            _node("Softmax", ["logits"], ["probabilities"], axis=-1),
        ],
        inputs=[_value_info("features", FLOAT, [batch, 4])],
        outputs=[_value_info("probabilities", FLOAT, [batch, 3])],
        initializers=[_initializer("W", CLASSIFIER_WEIGHTS), _initializer("b", CLASSIFIER_BIAS)],
    )


def classifier_reference(features: np.ndarray) -> np.ndarray:
    """What :func:`classifier` computes, in numpy."""
    logits = features.astype(np.float32) @ CLASSIFIER_WEIGHTS + CLASSIFIER_BIAS
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)


def two_inputs(length: int = 8) -> bytes:
    """``input_ids``, ``input_mask`` int32 ``(batch, length)`` -> ``outputs`` float32
    ``(batch, 1)``: the sum of ``input_ids * input_mask`` over each row."""
    return model_bytes(
        nodes=[
            _node("Mul", ["input_ids", "input_mask"], ["masked"]),
            _node("Cast", ["masked"], ["masked_float"], to=FLOAT),
            _node("ReduceSum", ["masked_float", "axes"], ["outputs"], keepdims=1),
        ],
        inputs=[_value_info("input_ids", INT32, ["batch", length]),
                _value_info("input_mask", INT32, ["batch", length])],
        outputs=[_value_info("outputs", FLOAT, ["batch", 1])],
        initializers=[_initializer("axes", np.array([1], dtype=np.int64))],
    )  # fmt: skip


def two_outputs() -> bytes:
    """``x`` int64 ``(batch, 2)`` -> ``doubled`` int64 ``(batch, 2)`` and ``total`` float32
    ``(batch,)``."""
    return model_bytes(
        nodes=[
            _node("Add", ["x", "x"], ["doubled"]),
            _node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
            _node("Cast", ["sum"], ["total"], to=FLOAT),
        ],
        inputs=[_value_info("x", INT64, ["batch", 2])],
        outputs=[_value_info("doubled", INT64, ["batch", 2]),
                 _value_info("total", FLOAT, ["batch"])],
        initializers=[_initializer("axes", np.array([1], dtype=np.int64))],
    )  # fmt: skip


def identity(elem_type: int, shape: Sequence[Dim] = ("batch", 2)) -> bytes:
    """``x`` -> ``y``, both of ONNX element type ``elem_type`` (any ``TensorProto.DataType``
    that ``Identity`` takes): for reading the type names onnxruntime reports."""
    return model_bytes(
        nodes=[_node("Identity", ["x"], ["y"])],
        inputs=[_value_info("x", elem_type, shape)],
        outputs=[_value_info("y", elem_type, shape)],
    )


GRAPHS = {"classifier": classifier, "two-inputs": two_inputs, "two-outputs": two_outputs}


def write_models(directory: Path) -> dict[str, Path]:
    """Writes every graph of :data:`GRAPHS` as ``<name>.onnx`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, build in GRAPHS.items():
        path = directory / f"{name}.onnx"
        path.write_bytes(build())
        paths[name] = path
    return paths
