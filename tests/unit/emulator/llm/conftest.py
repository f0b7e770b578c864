"""The real model, loaded once for every test of the language model (~12 s to prepare, 1-2 s
from the prepared model's cache): numpy's float32 forward pass, the reference, and
onnxruntime's 8-bit step over the same weights (the same cached files)."""

from __future__ import annotations

import pytest

from emulator.llm.engine import NUMPY, Engine


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine.load(backend=NUMPY)


@pytest.fixture(scope="session")
def onnx_engine(engine: Engine) -> Engine:
    return Engine.load(limits=engine.limits)
