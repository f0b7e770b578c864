"""The emulator's ``smollm2`` endpoint through real boto3: InvokeEndpoint with LMI's and the chat
schemas, InvokeEndpointWithResponseStream (AWS event stream framing, read by botocore
unchanged), the stream faults, a caller that goes away, and the bounds.

One emulator process for the module; its model is loaded once, by the module's first call.
Generations are greedy and a few tokens long (the model makes ~20 tokens/s here).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EventStreamError

from emulator.process import EmulatorProcess, start_emulator
from tests.integration.test_emulator import make_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"
PROMPT = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
CHAT = [{"role": "user", "content": QUESTION}]
STORY = ("<|im_start|>user\nWrite a long story about a dragon.<|im_end|>\n"
         "<|im_start|>assistant\n")
"""A prompt whose greedy answer runs past 60 tokens (an answer that ends early would let a
test of stopping pass without stopping anything)."""


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    directory = tmp_path_factory.mktemp("llm-emulator")
    bounds = {"max_prompt_tokens": 64, "max_new_tokens": 256, "default_max_new_tokens": 16}
    config = {
        "allow_fault_header": True,
        "default_endpoint": "smollm2",
        "models": {
            "smollm2": {"kind": "llm", **bounds, "max_concurrent_generations": 4},
            "smollm2-one": {"kind": "llm", **bounds, "max_concurrent_generations": 1},
            "iris": {"kind": "tensor", "path": str(ROOT / "emulator/models/iris/model.onnx")},
        },
        "endpoints": {name: {"variants": [{"name": "AllTraffic", "model": name}]}
                      for name in ("smollm2", "smollm2-one", "iris")},
    }
    path = directory / "config.json"
    path.write_text(json.dumps(config))
    with start_emulator(path, timeout=60) as process:
        yield process


@pytest.fixture(scope="module")
def client(emulator: EmulatorProcess) -> Any:
    client = make_client(emulator.url)
    invoke(client, {"inputs": "Hi", "parameters": {"max_new_tokens": 1}})  # loads the model
    return client


def invoke(client: Any, document: object, endpoint: str = "smollm2", **options: Any
           ) -> dict[str, Any]:
    response: dict[str, Any] = client.invoke_endpoint(
        EndpointName=endpoint, Body=json.dumps(document), ContentType="application/json",
        **options)
    response["Payload"] = response["Body"].read()
    return response


def open_stream(client: Any, document: object, endpoint: str = "smollm2", **options: Any
                ) -> dict[str, Any]:
    response: dict[str, Any] = client.invoke_endpoint_with_response_stream(
        EndpointName=endpoint, Body=json.dumps(document), ContentType="application/json",
        **options)
    return response


def json_lines(events: Any) -> Iterator[dict[str, Any]]:
    """A stream's JSON lines, buffered across PayloadParts and split on newlines (one line
    may arrive in two parts)."""
    pending = b""
    for event in events:
        pending += event["PayloadPart"]["Bytes"]
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield json.loads(line)
    assert pending == b""


def generations(emulator: EmulatorProcess, model: str = "smollm2") -> dict[str, int]:
    with urllib.request.urlopen(f"{emulator.url}/emulator/generations", timeout=10) as answer:
        counts: dict[str, int] = json.load(answer)[model]
    return counts


def wait_idle(emulator: EmulatorProcess, model: str = "smollm2") -> dict[str, int]:
    deadline = time.monotonic() + 30
    while (counts := generations(emulator, model))["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return counts


LMI_PARIS = {"inputs": PROMPT, "parameters": {"max_new_tokens": 12, "details": True}}


@pytest.fixture(scope="module")
def paris(client: Any) -> dict[str, Any]:
    response = invoke(client, LMI_PARIS)
    assert response["ContentType"] == "application/json"
    answer: dict[str, Any] = json.loads(response["Payload"])
    return answer


def test_invoke_endpoint_answers_lmi_generated_text_and_details(paris: dict[str, Any]) -> None:
    assert "Paris" in paris["generated_text"]
    details = paris["details"]
    assert (details["finish_reason"], details["inputs"]) == ("eos_token", PROMPT)
    assert details["generated_tokens"] == len(details["tokens"])
    assert {"id", "text", "log_prob"} <= set(details["tokens"][0])


def test_streamed_tokens_join_to_the_unstreamed_text(client: Any, paris: dict[str, Any]) -> None:
    response = open_stream(client, LMI_PARIS)

    lines = list(json_lines(response["Body"]))

    assert (response["ContentType"], response["InvokedProductionVariant"]) == (
        "application/jsonlines", "AllTraffic")
    assert "".join(line["token"]["text"] for line in lines) == paris["generated_text"]
    assert [line["token"]["id"] for line in lines] == [
        token["id"] for token in paris["details"]["tokens"]]
    last = lines[-1]
    assert last["generated_text"] == paris["generated_text"]
    assert last["details"] == {key: paris["details"][key]
                               for key in ("finish_reason", "generated_tokens", "inputs",
                                           "prompt_tokens")}
    assert all(set(line) == {"token"} for line in lines[:-1])


def test_chat_body_answers_a_chat_completion_and_streams_its_chunks(client: Any) -> None:
    document = {"messages": CHAT, "max_tokens": 12, "temperature": 0}

    completion = json.loads(invoke(client, document)["Payload"])
    chunks = list(json_lines(open_stream(client, {
        **document, "stream_options": {"include_usage": True}})["Body"]))

    assert completion["object"] == "chat.completion"
    content = completion["choices"][0]["message"]["content"]
    assert "Paris" in content
    *tokens, usage = chunks
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert "".join(chunk["choices"][0]["delta"]["content"] for chunk in tokens) == content
    assert tokens[0]["choices"][0]["delta"]["role"] == "assistant"
    assert tokens[-1]["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"] == completion["usage"]


def test_a_model_stream_error_is_raised_by_boto3_mid_stream(client: Any) -> None:
    response = open_stream(client, {"inputs": PROMPT, "parameters": {"max_new_tokens": 8}},
                           CustomAttributes="emulator-fault=ModelStreamError")
    parts: list[Any] = []

    with pytest.raises(EventStreamError) as caught:
        parts.extend(response["Body"])

    assert len(parts) == 2
    assert caught.value.response["Error"]["Code"] == "ModelStreamError"


def test_a_json_line_split_across_two_payload_parts_reads_back_whole(client: Any) -> None:
    document = {"inputs": PROMPT, "parameters": {"max_new_tokens": 3}}
    response = open_stream(client, document, CustomAttributes="emulator-fault=SplitPayload")

    events = list(response["Body"])

    first = events[0]["PayloadPart"]["Bytes"]
    assert not first.endswith(b"\n")
    assert len(events) == 4
    assert [line["token"]["text"] for line in json_lines(events)] == ["The", " capital", " of"]


def test_a_slow_first_token_comes_after_the_response_headers(
        client: Any, emulator: EmulatorProcess) -> None:
    before = wait_idle(emulator)
    response = open_stream(client, {"inputs": PROMPT, "parameters": {"max_new_tokens": 2}},
                           CustomAttributes="emulator-latency-ms=3000")

    waiting = generations(emulator)
    lines = list(json_lines(response["Body"]))

    assert (waiting["active"], waiting["tokens"]) == (1, before["tokens"])
    assert [line["token"]["text"] for line in lines] == ["The", " capital"]


def test_a_caller_that_goes_away_stops_the_generation(
        client: Any, emulator: EmulatorProcess) -> None:
    before = wait_idle(emulator)
    response = open_stream(client, {"inputs": STORY, "parameters": {"max_new_tokens": 200}})
    events = iter(response["Body"])

    next(events), next(events)
    response["Body"].close()
    after = wait_idle(emulator)

    assert after["active"] == 0
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["tokens"] - before["tokens"] < 40  # of the 200 asked for (it runs past 60)


def test_generations_past_the_bound_are_throttled(client: Any, emulator: EmulatorProcess
                                                  ) -> None:
    # the slot is taken when the stream starts (before its headers), and held through the
    # injected wait for the first token
    holding = open_stream(client, {"inputs": PROMPT, "parameters": {"max_new_tokens": 1}},
                          "smollm2-one", CustomAttributes="emulator-latency-ms=2000")

    with pytest.raises(ClientError) as caught:
        invoke(client, {"inputs": "Hi", "parameters": {"max_new_tokens": 1}}, "smollm2-one")
    holding["Body"].close()

    assert caught.value.response["Error"]["Code"] == "ThrottlingException"
    assert wait_idle(emulator, "smollm2-one")["active"] == 0


@pytest.mark.parametrize(("document", "message"), [
    ({"inputs": "Hi", "parameters": {"max_new_tokens": 257}}, "over this model's ceiling of 256"),
    ({"inputs": "word " * 100}, "over this model's limit of 64"),
    ({"inputs": "Hi", "parameters": {"best_of": 2}}, "unknown field parameters.best_of"),
    ({"messages": CHAT, "tools": []}, "tools is not supported"),
])
def test_bad_requests_are_refused_before_the_stream_starts(
        client: Any, document: object, message: str) -> None:
    for call in (invoke, open_stream):
        with pytest.raises(client.exceptions.ModelError) as caught:
            call(client, document)

        error = caught.value.response
        assert error["OriginalStatusCode"] == 400
        assert message in json.loads(error["OriginalMessage"])["error"]


def test_a_container_that_does_not_stream_answers_in_one_payload_part(client: Any) -> None:
    response = open_stream(client, {"instances": [[5.1, 3.5, 1.4, 0.2]]}, "iris")

    (event,) = list(response["Body"])

    assert response["ContentType"] == "application/json"
    assert len(json.loads(event["PayloadPart"]["Bytes"])["predictions"][0]) == 3
