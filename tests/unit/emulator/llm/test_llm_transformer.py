"""The forward pass: the KV cache's steps give the logits of one pass over all the tokens, and
RoPE in halves (the reordered Q and K) scores as GGUF's interleaved pairs do."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.llm import transformer
from emulator.llm.engine import Engine
from emulator.llm.weights import rope_halves_order


@pytest.fixture(scope="module")
def tokens(engine: Engine) -> np.ndarray:
    prompt = engine.chat_prompt([{"role": "user", "content": "Name a colour."}])
    return np.array([*prompt, *engine.tokenizer.encode(" Blue is a colour")])


def test_cached_steps_equal_one_full_pass(engine: Engine, tokens: np.ndarray) -> None:
    model = engine.transformer
    full = model.forward(tokens, model.new_cache(len(tokens)), all_logits=True)
    cache = model.new_cache(len(tokens))
    split = len(tokens) - 6
    stepped = [model.forward(tokens[:split], cache)]  # a batched prefill, then one a step
    stepped += [model.forward(tokens[i:i + 1], cache) for i in range(split, len(tokens))]
    assert cache.length == len(tokens)
    np.testing.assert_allclose(np.stack(stepped), full[split - 1:], rtol=0, atol=2e-3)
    assert (np.argmax(np.stack(stepped), axis=1) == np.argmax(full[split - 1:], axis=1)).all()


def test_one_token_at_a_time_from_the_start_equals_the_full_pass(engine: Engine,
                                                                  tokens: np.ndarray) -> None:
    model = engine.transformer
    head = tokens[:5]
    full = model.forward(head, model.new_cache(5), all_logits=True)
    cache = model.new_cache(5)
    stepped = np.stack([model.forward(head[i:i + 1], cache) for i in range(5)])
    np.testing.assert_allclose(stepped, full, rtol=0, atol=2e-3)


def test_a_cache_refuses_tokens_past_its_capacity(engine: Engine) -> None:
    cache = engine.transformer.new_cache(2)
    with pytest.raises(ValueError, match="do not fit"):
        engine.transformer.forward(np.array([1, 2, 3]), cache)


def _interleaved(x: np.ndarray, position: int, base: float) -> np.ndarray:
    """llama.cpp's normal RoPE: pairs (2i, 2i + 1) rotated by position * base^(-2i/d)."""
    half = x.shape[-1] // 2
    angle = position * base ** (-np.arange(half) / half)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angle) - odd * np.sin(angle)
    out[..., 1::2] = odd * np.cos(angle) + even * np.sin(angle)
    return out


def _halves(x: np.ndarray, position: int, base: float) -> np.ndarray:
    half = x.shape[-1] // 2
    angle = position * base ** (-np.arange(half) / half)
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * np.cos(angle) - second * np.sin(angle),
                           second * np.cos(angle) + first * np.sin(angle)], axis=-1)


def test_rope_in_halves_on_reordered_dims_scores_as_interleaved_pairs() -> None:
    random = np.random.default_rng(0)
    q, k = random.normal(size=64), random.normal(size=64)
    order = rope_halves_order(64)
    for qpos, kpos in [(0, 0), (5, 2), (700, 3)]:
        interleaved = _interleaved(q, qpos, 1e5) @ _interleaved(k, kpos, 1e5)
        halves = _halves(q[order], qpos, 1e5) @ _halves(k[order], kpos, 1e5)
        assert halves == pytest.approx(interleaved, rel=1e-9)


def test_a_prompt_prefilled_in_chunks_equals_one_pass(engine: Engine, tokens: np.ndarray,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    model = engine.transformer
    whole = model.forward(tokens, model.new_cache(len(tokens)))
    monkeypatch.setattr(transformer, "PREFILL_CHUNK", 7)
    cache = model.new_cache(len(tokens))
    np.testing.assert_allclose(model.prefill(tokens, cache), whole, rtol=0, atol=2e-3)
    assert cache.length == len(tokens)


EIFFEL = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
          "It is named after the engineer Gustave Eiffel, whose company designed and built the "
          "tower from 1887 to 1889. Locally nicknamed La dame de fer, it was constructed as the "
          "centrepiece of the 1889 World's Fair, and to crown the centennial anniversary of the "
          "French Revolution.")


def test_the_model_predicts_natural_text_well(engine: Engine) -> None:
    """Mean negative log-likelihood per token of a Wikipedia paragraph: 2.15 with this forward
    pass; 3.97 with RoPE applied to the file's Q/K order as halves (the wrong pairing)."""
    ids = np.array(engine.tokenizer.encode(EIFFEL))
    model = engine.transformer
    logits = model.forward(ids, model.new_cache(len(ids)), all_logits=True)[:-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert -logprobs[np.arange(len(ids) - 1), ids[1:]].mean() < 2.5
