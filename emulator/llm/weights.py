"""The model's weights laid out for speed: float32, fused, pre-transposed, norms folded in.

Each token reads every weight once, so decoding is bound by memory bandwidth and by the
number of numpy calls per layer. The layout serves both:

* one matrix per matmul, (in, out) and C-contiguous, so ``x @ w`` is one BLAS call: Q, K and
  V fused into ``qkv``, the SwiGLU gate and up projections into ``gate_up``;
* the RMSNorm weights folded into the rows of the matrix that follows each norm (``(x * g) @ w
  == x @ (g[:, None] * w)``), and attention's ``1 / sqrt(head_size)`` into Q's columns;
* Q's and K's dimensions reordered inside each head from GGUF's interleaved RoPE pairs
  ``(0, 1), (2, 3), ...`` (llama.cpp's converter permutes HF's Q and K to get them) to two
  halves ``(i, i + head_size / 2)``. Q and K get the same order, so their dot products are
  unchanged, and the rotation becomes two slices instead of a strided gather.

float32, not float16: numpy has no float16 BLAS, and converting on the fly costs more than
the bandwidth it saves (measured: README).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from emulator.llm.modelfile import Hyperparameters, ModelFile


@dataclasses.dataclass(frozen=True)
class Block:
    """One transformer block's matrices, each (in, out)."""

    qkv: np.ndarray
    output: np.ndarray
    gate_up: np.ndarray
    down: np.ndarray


@dataclasses.dataclass(frozen=True)
class Weights:
    """Every weight of the model, and the numbers that shape them."""

    shape: Hyperparameters
    embeddings: np.ndarray
    """(vocab, width): the input embeddings, and the output projection when tied."""
    head: np.ndarray
    """(vocab, width): the output projection (``head @ x`` gives the logits)."""
    output_norm: np.ndarray
    blocks: tuple[Block, ...]


def rope_halves_order(head_size: int) -> np.ndarray:
    """The permutation that takes a head's interleaved pairs to two halves: evens, then odds."""
    return np.concatenate([np.arange(0, head_size, 2), np.arange(1, head_size, 2)])


def _rows_to_halves(matrix: np.ndarray, heads: int, head_size: int) -> np.ndarray:
    """Reorders the output rows of Q or K (heads * head_size, in) within each head."""
    order = rope_halves_order(head_size)
    by_head = matrix.reshape(heads, head_size, -1)
    return by_head[:, order, :].reshape(heads * head_size, -1)


def _block(model: ModelFile, index: int, shape: Hyperparameters) -> Block:
    def tensor(name: str) -> np.ndarray:
        return model.tensor(f"blk.{index}.{name}")

    head_size = shape.head_size
    q = _rows_to_halves(tensor("attn_q.weight"), shape.heads, head_size) / np.sqrt(head_size)
    k = _rows_to_halves(tensor("attn_k.weight"), shape.kv_heads, head_size)
    attn_norm = tensor("attn_norm.weight")[:, None]
    ffn_norm = tensor("ffn_norm.weight")[:, None]
    qkv = np.concatenate([q, k, tensor("attn_v.weight")]).T * attn_norm
    gate_up = np.concatenate([tensor("ffn_gate.weight"), tensor("ffn_up.weight")]).T * ffn_norm
    return Block(
        qkv=np.ascontiguousarray(qkv, dtype=np.float32),
        output=np.ascontiguousarray(tensor("attn_output.weight").T),
        gate_up=np.ascontiguousarray(gate_up, dtype=np.float32),
        down=np.ascontiguousarray(tensor("ffn_down.weight").T))


def load(model: ModelFile) -> Weights:
    """Dequantizes and lays out every weight of an open model file (~2 s, ~540 MB)."""
    shape = model.hyperparameters()
    embeddings = np.ascontiguousarray(model.tensor("token_embd.weight"))
    # Tied embeddings: a file without output.weight projects through the input embeddings.
    head = (np.ascontiguousarray(model.tensor("output.weight"))
            if model.has_tensor("output.weight") else embeddings)
    return Weights(
        shape=shape, embeddings=embeddings, head=head,
        output_norm=model.tensor("output_norm.weight"),
        blocks=tuple(_block(model, index, shape) for index in range(shape.blocks)))
