"""The emulator's ``smollm2`` (the real model) behind ``chalice local`` capturing to a folder:
the ``openai`` package's exchanges, whole and streamed, are records of the body sent and the
assembled completion; temperature 0 is answered again from the cache; and ``sagegate monitor
baseline`` and ``check`` read the records into their language-model columns. Few tokens a
request (the model makes ~20-30 a second here)."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from emulator.process import free_port, start_emulator
from sagegate.local.processes import start_api
from sagegate.monitor import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
MODEL = "smollm2"
QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, Path]]:
    logs = tmp_path_factory.mktemp("llm-capture")
    captures = logs / "captures"
    with open(logs / "emulator.log", "w") as emulator_log, \
            start_emulator(echo_stderr=emulator_log) as emulator, \
            open(logs / "api.log", "wb") as api_log:
        process = start_api(free_port(), emulator.url, stage="local", log=api_log, overrides={
            "CAPTURE_MODE": "both", "CAPTURE_DESTINATION": str(captures),
            "CAPTURE_WRITER": "inline", "CAPTURE_SAMPLING_PERCENTAGE": "100"})
        try:
            client = openai.OpenAI(base_url=process.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=120)
            for _ in range(40):  # the model loads on its first request
                try:
                    client.completions.create(model=MODEL, prompt="Hi", max_tokens=1,
                                              temperature=0.5)
                    break
                except openai.APIStatusError as error:
                    assert error.status_code in (503, 504), error
                    time.sleep(3)
            yield client, captures / MODEL
        finally:
            process.stop()


def records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.rglob("*.jsonl"))
            for line in path.open()]


def test_real_exchanges_are_captured_and_monitored(
        stack: tuple[openai.OpenAI, Path], tmp_path: Path) -> None:
    client, captures = stack
    before = len(records(captures))
    whole = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=8)
    again = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=8)
    assert (whole.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit")
    assert again.parse().choices[0].message.content == whole.parse().choices[0].message.content
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0.7, seed=3,
        max_tokens=6, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4,
                              temperature=0.5)
    found = records(captures)[before:]
    assert len(found) == 4
    by_stream = {r["eventMetadata"]["sagegateLlm"]["streamed"]: r for r in found
                 if not r["eventMetadata"].get("sagegateCacheHit")
                 and r["eventMetadata"]["sagegateLlm"]["operation"] == "chat.completion"}
    output = json.loads(by_stream[True]["captureData"]["endpointOutput"]["data"])
    assert output["choices"][0]["message"]["content"] == streamed
    assert json.loads(by_stream[True]["captureData"]["endpointInput"]["data"])["stream"]
    assert by_stream[True]["eventMetadata"]["sagegateLlm"]["timeToFirstTokenMs"] > 0
    assert sum(bool(r["eventMetadata"].get("sagegateCacheHit")) for r in found) == 1

    assert cli.main(["baseline", str(captures), "-o", str(tmp_path / "baseline")]) == 0
    statistics = json.loads((tmp_path / "baseline" / "statistics.json").read_text())
    features = {f["name"]: f for f in statistics["features"]}
    assert {"prompt_tokens", "completion_tokens", "latency_ms", "time_to_first_token_ms",
            "tokens_per_second", "finish_reason", "prompt_chars",
            "completion_chars"} <= set(features)
    assert features["completion_tokens"]["numerical_statistics"]["max"] <= 8
    assert cli.main(["check", str(captures), "--baseline", str(tmp_path / "baseline"),
                     "-o", str(tmp_path / "check"), "--start", "-PT1H", "--end", "now"]) == 0
    assert (tmp_path / "check" / "constraint_violations.json").exists()
