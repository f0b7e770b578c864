"""The decoder step as one ONNX graph for onnxruntime, its matrices in 4 or 8 bits.

A decoding step reads every weight once, so its speed is the weights' size: float32 in numpy
is ~540 MB a token. onnxruntime's ``MatMulNBits`` (com.microsoft) multiplies by weights kept
in 4 or 8 bits per value (blocks of 32 with a float32 scale each), with int8 activations
(``accuracy_level`` 4, the fast kernels on x86). The graph is one whole step: 30 blocks and
the output projection, the KV cache passed in whole and the new position's keys and values
handed back, one ``run`` a token. The prompt's batched passes stay numpy's (float32).

The weights are quantized again from their float32 form (symmetric per block, no zero point):
GGUF's Q4_1 keeps a float minimum per block, which ``MatMulNBits`` takes only as float zero
points, on a path 30 times slower. The model's answers move accordingly (README: figures).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from emulator.llm.transformer import KVCache, Transformer
from emulator.llm.weights import Block, Weights

BLOCK = 32
FLOAT, UINT8, INT64 = 1, 2, 7
"""ONNX's element types (TensorProto.DataType) of the graph's tensors."""
_TENSOR_TYPES = {"<f4": FLOAT, "|u1": UINT8, "<i8": INT64}
ACCURACY_LEVEL = 4
"""MatMulNBits' int8-activation kernels; levels 0 and 1 (float activations) ran 4x slower."""
DOMAIN = "com.microsoft"


def quantize(matrix: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``matrix`` (in, out) as MatMulNBits' ``B`` (out, in / 32, 32 * bits / 8) and scales.

    Symmetric per block of 32 inputs: ``w = scale * (q - 2 ** (bits - 1))``.
    """
    rows = np.ascontiguousarray(matrix.T, dtype=np.float32)
    out, size = rows.shape
    blocks = rows.reshape(out, size // BLOCK, BLOCK)
    middle = 2 ** (bits - 1)
    largest = np.abs(blocks).max(axis=-1, keepdims=True)
    scales = np.where(largest > 0, largest / (middle - 1), 1.0).astype(np.float32)
    q = np.clip(np.rint(blocks / scales) + middle, 0, 2 * middle - 1).astype(np.uint8)
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)  # two per byte, the first in the low nibble
    return np.ascontiguousarray(q), scales.reshape(-1)


Dims = list[int | str]


def _value(name: str, dtype: int, dims: Dims) -> Any:
    """A graph input or output: its name, element type and shape (ints, or named free axes)."""
    import onnx

    shape = onnx.TensorShapeProto(dim=[
        onnx.TensorShapeProto.Dimension(dim_param=d) if isinstance(d, str)
        else onnx.TensorShapeProto.Dimension(dim_value=d) for d in dims])
    return onnx.ValueInfoProto(name=name, type=onnx.TypeProto(
        tensor_type=onnx.TypeProto.Tensor(elem_type=dtype, shape=shape)))


def _attribute(name: str, value: int | list[int]) -> Any:
    import onnx

    if isinstance(value, list):
        return onnx.AttributeProto(name=name, type=onnx.AttributeProto.INTS, ints=value)
    return onnx.AttributeProto(name=name, type=onnx.AttributeProto.INT, i=value)


class _Graph:
    """Collects nodes and initializers while the step's graph is written (onnx's protobuf
    classes, filled in directly)."""

    def __init__(self, bits: int) -> None:
        import onnx

        self.onnx = onnx
        self.bits = bits
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def node(self, kind: str, inputs: list[str], outputs: list[str], domain: str = "",
             **attributes: int | list[int]) -> None:
        self.nodes.append(self.onnx.NodeProto(
            op_type=kind, input=inputs, output=outputs, domain=domain,
            attribute=[_attribute(k, v) for k, v in attributes.items()]))

    def serialized(self, name: str, inputs: list[Any], outputs: list[Any]) -> bytes:
        """The model: this graph with its inputs and outputs, default and Microsoft opsets."""
        onnx = self.onnx
        graph = onnx.GraphProto(name=name, node=self.nodes, input=inputs, output=outputs,
                                initializer=self.initializers)
        model = onnx.ModelProto(ir_version=9, graph=graph, opset_import=[
            onnx.OperatorSetIdProto(domain="", version=17),
            onnx.OperatorSetIdProto(domain=DOMAIN, version=1)])
        return bytes(model.SerializeToString())

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def constant(self, value: np.ndarray, hint: str = "c") -> str:
        name = self.name(hint)
        array = np.ascontiguousarray(value)
        self.initializers.append(self.onnx.TensorProto(
            name=name, dims=array.shape, data_type=_TENSOR_TYPES[array.dtype.str],
            raw_data=array.tobytes()))
        return name

    def op(self, kind: str, inputs: list[str], hint: str = "t", domain: str = "",
           **attributes: int | list[int]) -> str:
        out = self.name(hint)
        self.node(kind, inputs, [out], domain, **attributes)
        return out

    def matmul(self, x: str, matrix: np.ndarray, hint: str, out: str | None = None) -> str:
        """``x @ matrix`` (matrix (in, out)) in ``bits``-bit weights."""
        packed, scales = quantize(matrix, self.bits)
        size, width = matrix.shape
        out = out or self.name(hint)
        self.node("MatMulNBits", [x, self.constant(packed, hint + "_q"),
                                  self.constant(scales, hint + "_s")], [out], DOMAIN,
                  K=size, N=width, bits=self.bits, block_size=BLOCK,
                  accuracy_level=ACCURACY_LEVEL)
        return out

    def slice(self, x: str, start: int, end: int, axis: int = -1) -> str:
        return self.op("Slice", [x, self.constant(np.array([start])),
                                 self.constant(np.array([end])),
                                 self.constant(np.array([axis]))], "slice")

    def norm(self, x: str, eps: float) -> str:
        mean = self.op("ReduceMean", [self.op("Mul", [x, x])], "mean", axes=[-1], keepdims=1)
        eps_value = self.constant(np.array(eps, dtype=np.float32))
        root = self.op("Sqrt", [self.op("Add", [mean, eps_value])])
        return self.op("Div", [x, root], "norm")

    def rotate(self, x: str, half: int) -> str:
        first, second = self.slice(x, 0, half), self.slice(x, half, 2 * half)
        return self.op("Concat", [
            self.op("Sub", [self.op("Mul", [first, "cos"]), self.op("Mul", [second, "sin"])]),
            self.op("Add", [self.op("Mul", [second, "cos"]), self.op("Mul", [first, "sin"])]),
        ], "rope", axis=-1)


def _attention(graph: _Graph, weights: Weights, block: Block, index: int, h: str
               ) -> tuple[str, str, str]:
    """One block's attention for the new token; returns (output, its key, its value)."""
    shape = weights.shape
    size, groups, per_group = shape.head_size, shape.kv_heads, shape.heads // shape.kv_heads
    width, kv_width = shape.heads * size, groups * size
    qkv = graph.matmul(h, block.qkv, f"qkv{index}")

    def reshaped(x: str, dims: list[int]) -> str:
        return graph.op("Reshape", [x, graph.constant(np.array(dims))])

    q = graph.rotate(reshaped(graph.slice(qkv, 0, width), [groups, per_group, size]), size // 2)
    k = graph.rotate(reshaped(graph.slice(qkv, width, width + kv_width), [groups, 1, size]),
                     size // 2)
    v = reshaped(graph.slice(qkv, width + kv_width, width + 2 * kv_width), [groups, 1, size])
    past_end = graph.op("Concat", [graph.constant(np.array([index + 1, groups])), "length",
                                   graph.constant(np.array([size]))], axis=0)
    starts = graph.constant(np.array([index, 0, 0, 0]))

    def history(cache: str, new: str) -> str:
        past = graph.op("Squeeze", [graph.op("Slice", [cache, starts, past_end]),
                                    graph.constant(np.array([0]))])
        return graph.op("Concat", [past, new], axis=1)

    keys, values = history("keys", k), history("values", v)
    scores = graph.op("Softmax", [graph.op("MatMul", [
        q, graph.op("Transpose", [keys], perm=[0, 2, 1])])], axis=-1)
    heads = reshaped(graph.op("MatMul", [scores, values]), [1, width])
    return graph.matmul(heads, block.output, f"out{index}"), k, v


def build(weights: Weights, bits: int) -> bytes:
    """The serialized step graph: inputs ``x`` (1, width) the token's embedding, ``cos`` and
    ``sin`` (head_size / 2,) its position's, ``keys``/``values`` the cache (blocks, kv_heads,
    capacity, head_size), ``length`` (1,) its filled positions; outputs ``logits`` (1, vocab),
    ``new_keys``/``new_values`` (blocks, kv_heads, 1, head_size)."""
    graph, shape = _Graph(bits), weights.shape
    x, new_keys, new_values = "x", list[str](), list[str]()
    for index, block in enumerate(weights.blocks):
        attended, k, v = _attention(graph, weights, block, index, graph.norm(x, shape.rms_eps))
        x = graph.op("Add", [x, attended], "residual")
        gate_up = graph.matmul(graph.norm(x, shape.rms_eps), block.gate_up, f"gu{index}")
        gate = graph.slice(gate_up, 0, shape.ffn_width)
        up = graph.slice(gate_up, shape.ffn_width, 2 * shape.ffn_width)
        swiglu = graph.op("Mul", [graph.op("Mul", [gate, graph.op("Sigmoid", [gate])]), up])
        x = graph.op("Add", [x, graph.matmul(swiglu, block.down, f"down{index}")], "residual")
        new_keys.append(k)
        new_values.append(v)
    head = (weights.head * weights.output_norm[None, :]).T
    graph.matmul(graph.norm(x, shape.rms_eps), head, "head", out="logits")
    new: Dims = [shape.blocks, shape.kv_heads, 1, shape.head_size]
    for name, parts in (("new_keys", new_keys), ("new_values", new_values)):
        graph.node("Reshape", [graph.op("Concat", parts, axis=0),
                               graph.constant(np.array(new))], [name])
    cache: Dims = [shape.blocks, shape.kv_heads, "capacity", shape.head_size]
    half = shape.head_size // 2
    inputs = [_value("x", FLOAT, [1, shape.width]), _value("cos", FLOAT, [half]),
              _value("sin", FLOAT, [half]), _value("keys", FLOAT, cache),
              _value("values", FLOAT, cache), _value("length", INT64, [1])]
    outputs = [_value("logits", FLOAT, [1, shape.vocab_size]),
               _value("new_keys", FLOAT, new), _value("new_values", FLOAT, new)]
    return graph.serialized("decoder_step", inputs, outputs)


class OnnxTransformer(Transformer):
    """The numpy transformer, its one-token steps run by onnxruntime in ``bits``-bit weights
    (``step``: the graph ``build`` made of these weights, if it was kept; else built now)."""

    def __init__(self, weights: Weights, bits: int = 8, threads: int = 1,
                 step: bytes | None = None) -> None:
        import onnxruntime

        super().__init__(weights)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.log_severity_level = 3  # errors only
        self._session = onnxruntime.InferenceSession(
            step or build(weights, bits), options, providers=["CPUExecutionProvider"])

    def forward(self, tokens: np.ndarray, cache: KVCache, all_logits: bool = False
                ) -> np.ndarray:
        if len(tokens) != 1 or all_logits:
            return super().forward(tokens, cache, all_logits)
        position = cache.length
        if position + 1 > cache.capacity:
            raise ValueError(f"1 token after {position} does not fit a cache of "
                             f"{cache.capacity}")
        logits, keys, values = self._session.run(None, {
            "x": self.weights.embeddings[tokens], "cos": self._cos[position, 0],
            "sin": self._sin[position, 0], "keys": cache.keys, "values": cache.values,
            "length": np.array([position])})
        cache.keys[:, :, position:position + 1] = keys
        cache.values[:, :, position:position + 1] = values
        cache.length = position + 1
        return np.asarray(logits[0])
