"""onnxruntime's decoder step: its weight packing is what MatMulNBits reads, and in 8 bits it
predicts as numpy's float32 pass does."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from emulator.llm.engine import Engine
from emulator.llm.onnxstep import FLOAT, _Graph, _value, quantize
from emulator.llm.sampling import Sampling

from .test_llm_transformer import EIFFEL


def _dequantized(packed: np.ndarray, scales: np.ndarray, bits: int) -> np.ndarray:
    if bits == 4:
        packed = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:2], -1)
    out = packed.shape[0]
    values = (packed.astype(np.float32) - 2 ** (bits - 1)) * scales.reshape(out, -1, 1)
    return values.reshape(out, -1).T


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_weights_are_within_half_a_step_and_matmulnbits_reads_them(bits: int) -> None:
    matrix = np.random.default_rng(bits).normal(size=(64, 8)).astype(np.float32)
    packed, scales = quantize(matrix, bits)
    restored = _dequantized(packed, scales, bits)
    step = np.repeat(scales.reshape(8, 2), 32, axis=1).T
    assert (np.abs(restored - matrix) <= step / 2 + 1e-6).all()

    graph = _Graph(bits)
    graph.matmul("x", matrix, "w", out="y")
    model = graph.serialized("one", [_value("x", FLOAT, [1, 64])], [_value("y", FLOAT, [1, 8])])
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).normal(size=(1, 64)).astype(np.float32)
    # int8 activations (accuracy_level 4): close to the dequantized weights' product, not equal
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ restored, atol=0.1)


def _mean_nll(engine: Engine, ids: np.ndarray) -> tuple[float, np.ndarray]:
    """Stepwise (the prompt's first token, then one a step) mean NLL and the steps' logits."""
    model = engine.transformer
    cache = model.new_cache(len(ids))
    logits = np.stack([model.forward(ids[i:i + 1], cache) for i in range(len(ids) - 1)])
    shifted = logits - logits.max(axis=1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-logprobs[np.arange(len(ids) - 1), ids[1:]].mean()), logits


def test_eight_bit_steps_predict_as_the_float32_pass(engine: Engine, onnx_engine: Engine
                                                     ) -> None:
    ids = np.array(engine.tokenizer.encode(EIFFEL))
    reference = engine.transformer.forward(ids, engine.transformer.new_cache(len(ids)),
                                           all_logits=True)[:-1]
    nll, logits = _mean_nll(onnx_engine, ids)
    shifted = reference - reference.max(axis=1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert nll == pytest.approx(float(-logprobs[np.arange(len(ids) - 1), ids[1:]].mean()),
                                abs=0.02)
    assert (logits.argmax(axis=1) == reference.argmax(axis=1)).mean() > 0.9


def test_onnxruntime_answers_paris_as_numpy_does(engine: Engine, onnx_engine: Engine) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    answer = onnx_engine.chat(question, Sampling(max_new_tokens=16))
    assert answer.read() == engine.chat(question, Sampling(max_new_tokens=16)).read()
    assert answer.text == "The capital of France is Paris."


def test_a_step_past_the_cache_is_refused(onnx_engine: Engine) -> None:
    cache = onnx_engine.transformer.new_cache(1)
    onnx_engine.transformer.forward(np.array([1]), cache)
    with pytest.raises(ValueError, match="does not fit"):
        onnx_engine.transformer.forward(np.array([2]), cache)
