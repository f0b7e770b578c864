"""The real model, loaded once for every test of the language model (~10 s): numpy's float32
forward pass, the reference, and onnxruntime's 8-bit step built from the same weights."""

from __future__ import annotations

import pytest

from emulator.llm.engine import NUMPY, Engine
from emulator.llm.onnxstep import OnnxTransformer


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine.load(backend=NUMPY)


@pytest.fixture(scope="session")
def onnx_engine(engine: Engine) -> Engine:
    return Engine(OnnxTransformer(engine.transformer.weights, bits=8), engine.tokenizer,
                  engine.template, engine.limits)
