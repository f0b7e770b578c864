"""InvokeEndpoint's time limit over the language model: a whole answer that outlasts it is
SageMaker's ModelError, and its generation is stopped and its place freed (the real model)."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from emulator import errors
from emulator.config import LlmSettings, parse_config
from emulator.language import LanguageContainer
from emulator.llm.engine import Engine
from emulator.runtime import InvokeRequest, Runtime

RAW = {"models": {"lm": {"kind": "llm"}},
       "endpoints": {"lm": {"variants": [{"name": "AllTraffic", "model": "lm"}]}}}


def call(max_new_tokens: int) -> InvokeRequest:
    body = json.dumps({"inputs": "Once upon a time",
                       "parameters": {"max_new_tokens": max_new_tokens}}).encode()
    return InvokeRequest("lm", body, len(body), "application/json")


def ended(counts: dict[str, int]) -> bool:
    return counts["started"] == 1 and not counts["active"]


def test_a_whole_answer_past_the_timeout_is_cancelled_and_frees_its_place(
        engine: Engine) -> None:
    model = LanguageContainer("lm", LlmSettings(max_concurrent=1), load=lambda _: engine)
    timed_out = threading.Event()

    def wait(event: threading.Event, timeout: float) -> bool:
        if timed_out.is_set():
            return event.wait(30)
        timed_out.set()  # the first call's time is up at once
        return False

    runtime = Runtime(parse_config(RAW, Path("/configs")), {"lm": model}, random.Random(1),
                      lambda _: None, wait)

    with pytest.raises(errors.ModelError, match="timed out"):
        runtime.invoke(call(max_new_tokens=512))
    deadline = time.monotonic() + 60
    while not ended(model.generations()) and time.monotonic() < deadline:
        time.sleep(0.02)
    counts = model.generations()
    answer = runtime.invoke(call(max_new_tokens=1))

    assert (counts["active"], counts["cancelled"], counts["completed"]) == (0, 1, 0)
    assert counts["tokens"] < 512
    assert answer.reply.status == 200
