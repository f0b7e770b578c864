"""The llama forward pass in numpy, over a preallocated KV cache.

One function runs any number of new tokens at once: the whole prompt in one pass (a batched
prefill: every matmul is a matrix-matrix product) and then one token a step. Attention is
grouped-query: the query heads are viewed as (kv_heads, heads per kv head) so each KV head is
read once by its group, in one batched matmul, with no loop over heads. The weights' layout
(fused, transposed, norms folded in, RoPE in halves) is ``weights.py``'s.
"""

from __future__ import annotations

import numpy as np

from emulator.llm.weights import Block, Weights

PREFILL_CHUNK = 256
"""Prompt tokens per pass: a pass's attention scores are (heads, tokens, positions) float32,
so a 4,096-token prompt in one pass would hold 600 MB of them; in chunks of 256, 38 MB."""


class KVCache:
    """The keys and values of one sequence, for every block, allocated once.

    Attributes:
        keys, values: (blocks, kv_heads, capacity, head_size) float32.
        length: how many positions hold a token.
    """

    def __init__(self, weights: Weights, capacity: int) -> None:
        shape = weights.shape
        size = (shape.blocks, shape.kv_heads, capacity, shape.head_size)
        self.keys = np.empty(size, dtype=np.float32)
        self.values = np.empty(size, dtype=np.float32)
        self.capacity = capacity
        self.length = 0


class Transformer:
    """The model: token ids in, next-token logits out."""

    def __init__(self, weights: Weights) -> None:
        self.weights = weights
        shape = weights.shape
        self._eps = np.float32(shape.rms_eps)
        half = shape.head_size // 2
        inverse = shape.rope_base ** (-np.arange(half, dtype=np.float64) / half)
        angles = np.outer(np.arange(shape.context_length, dtype=np.float64), inverse)
        # (position, 1, half): broadcasts over the heads of (tokens, heads, half)
        self._cos = np.cos(angles).astype(np.float32)[:, None, :]
        self._sin = np.sin(angles).astype(np.float32)[:, None, :]

    @property
    def context_length(self) -> int:
        return self.weights.shape.context_length

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.weights, min(capacity, self.context_length))

    def prefill(self, tokens: np.ndarray, cache: KVCache) -> np.ndarray:
        """Runs a prompt in passes of ``PREFILL_CHUNK`` tokens; the last position's logits."""
        chunks = [tokens[i:i + PREFILL_CHUNK] for i in range(0, len(tokens), PREFILL_CHUNK)]
        for chunk in chunks[:-1]:
            self.forward(chunk, cache)
        return self.forward(chunks[-1], cache)

    def forward(self, tokens: np.ndarray, cache: KVCache, all_logits: bool = False
                ) -> np.ndarray:
        """Runs ``tokens`` after the ``cache.length`` positions the cache holds.

        Args:
            tokens: int token ids, (n,), n >= 1.
            cache: the sequence's cache; its length grows by n.
            all_logits: the logits of every new position (n, vocab), not only the last's.

        Returns:
            float32 logits, (vocab,) for the last position or (n, vocab).
        """
        count = len(tokens)
        start = cache.length
        if count < 1 or start + count > cache.capacity:
            raise ValueError(f"{count} tokens after {start} do not fit a cache of "
                             f"{cache.capacity}")
        x = self.weights.embeddings[tokens]
        mask = _causal_mask(start, count)
        for index, block in enumerate(self.weights.blocks):
            x = self._block(x, block, cache, index, mask)
        cache.length = start + count
        if not all_logits:
            x = x[-1]
        return (self._norm(x) * self.weights.output_norm) @ self.weights.head.T

    def _norm(self, x: np.ndarray) -> np.ndarray:
        """RMSNorm without its weight (folded into the next matrix)."""
        return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) / x.shape[-1] + self._eps)

    def _block(self, x: np.ndarray, block: Block, cache: KVCache, index: int,
               mask: np.ndarray | None) -> np.ndarray:
        x = x + self._attention(self._norm(x), block, cache, index, mask)
        gate_up = self._norm(x) @ block.gate_up
        half = gate_up.shape[-1] // 2
        gate, up = gate_up[..., :half], gate_up[..., half:]
        # SwiGLU: silu(gate) * up, silu(g) = g * sigmoid(g)
        return x + ((gate / (1 + np.exp(-gate))) * up) @ block.down

    def _attention(self, h: np.ndarray, block: Block, cache: KVCache, index: int,
                   mask: np.ndarray | None) -> np.ndarray:
        shape = self.weights.shape
        count, size = len(h), shape.head_size
        groups, per_group = shape.kv_heads, shape.heads // shape.kv_heads
        start, end = cache.length, cache.length + count
        qkv = h @ block.qkv
        width, kv_width = shape.heads * size, groups * size
        cos, sin = self._cos[start:end], self._sin[start:end]
        q = _rotate(qkv[:, :width].reshape(count, shape.heads, size), cos, sin)
        k = _rotate(qkv[:, width:width + kv_width].reshape(count, groups, size), cos, sin)
        cache.keys[index, :, start:end] = k.transpose(1, 0, 2)
        cache.values[index, :, start:end] = (
            qkv[:, width + kv_width:].reshape(count, groups, size).transpose(1, 0, 2))
        keys, values = cache.keys[index, :, :end], cache.values[index, :, :end]
        # (groups, per_group * count, size): a group's query heads, each for every new token
        queries = q.reshape(count, groups, per_group, size).transpose(1, 2, 0, 3).reshape(
            groups, per_group * count, size)
        scores = queries @ keys.transpose(0, 2, 1)  # 1/sqrt(size) is folded into Q
        if mask is not None:
            scores = (scores.reshape(groups, per_group, count, end) + mask).reshape(
                groups, per_group * count, end)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        heads = (scores @ values).reshape(groups, per_group, count, size)
        return heads.transpose(2, 0, 1, 3).reshape(count, width) @ block.output


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE on (tokens, heads, size) whose pairs are the two halves (``weights.py``)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def _causal_mask(start: int, count: int) -> np.ndarray | None:
    """(count, start + count): 0 where a new token may attend, -inf after it; None for one."""
    if count == 1:
        return None
    positions = np.arange(start + count)
    later = positions[None, :] > (start + np.arange(count))[:, None]
    return np.where(later, np.float32(-np.inf), np.float32(0))
