"""The real model, loaded once for every test of the language model (~10 s)."""

from __future__ import annotations

import pytest

from emulator.llm.engine import Engine


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine.load()
