"""The real ``openai`` package, unchanged, against sagegate under ``chalice local`` on 127.0.0.1.

Its SageMaker runtime is first a stand-in endpoint on 127.0.0.1 speaking the wire an LMI
container behind SageMaker does: InvokeEndpoint with LMI's chat and generate bodies, and
InvokeEndpointWithResponseStream answering ``application/vnd.amazon.eventstream`` frames (the
emulator's encoder) of jsonlines chunks, one JSON line cut across two PayloadParts, and a
``ModelStreamError`` event when asked; then the emulator itself, whose ``smollm2`` endpoint runs
the real model. (``chalice local`` answers a stream whole: the chunks reach the client at the
end; streaming as they are made is the local server's.)"""
from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest

from emulator.eventstream import model_stream_error, payload_part
from emulator.process import free_port, start_emulator
from sagegate.local.processes import ApiProcess, start_api

pytestmark = pytest.mark.integration

MODEL = "smollm2"
WORDS = ["The", " capital", " of", " France", " is", " Paris", "."]
ANSWER = "".join(WORDS)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _chunk(text: str | None, finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {} if text is None else {"content": text},
         "finish_reason": finish}]}


class StandIn(BaseHTTPRequestHandler):
    """One LMI-style endpoint, ``smollm2``, behind SageMaker's runtime API."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        document = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StandIn.seen.append(document)
        if self.path.endswith("/invocations-response-stream"):
            self._stream(document)
        else:
            self._answer(document)

    def _send(self, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        for name, value in {**headers, "Content-Length": str(len(body)),
                            "x-Amzn-Invoked-Production-Variant": "AllTraffic"}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, document: dict[str, Any]) -> None:
        if "messages" in document:
            answer: Any = {"object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": ANSWER},
                 "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12, "completion_tokens": len(WORDS)}}
        else:
            answer = {"generated_text": " Paris.", "details": {
                "finish_reason": "eos_token", "generated_tokens": 2, "prompt_tokens": 5}}
        self._send(json.dumps(answer).encode(), {"Content-Type": "application/json"})

    def _stream(self, document: dict[str, Any]) -> None:
        lines = [json.dumps(_chunk(word)).encode() + b"\n" for word in WORDS]
        lines.append(json.dumps(_chunk(None, "stop")).encode() + b"\n")
        raw = b"".join(lines)
        cut = len(lines[0]) + 5  # the second line comes in two parts
        frames = [payload_part(raw[:cut]), payload_part(raw[cut:])]
        if "fail" in json.dumps(document.get("messages")):
            frames = [payload_part(lines[0]), model_stream_error("the model stopped")]
        self._send(b"".join(frames), {"Content-Type": "application/vnd.amazon.eventstream",
                                      "X-Amzn-SageMaker-Content-Type": "application/jsonlines"})

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def api() -> Iterator[ApiProcess]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory(prefix="sagegate-openai-") as logs, \
                open(Path(logs) / "api.log", "wb") as log:
            process = start_api(free_port(), f"http://127.0.0.1:{server.server_port}",
                                stage="test", log=log)
            try:
                yield process
            finally:
                process.stop()
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def client(api: ApiProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=api.url + "/v1", api_key="unused", max_retries=0, timeout=30)


def test_the_openai_package_lists_and_completes_unchanged(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == [MODEL]
    answer = client.chat.completions.create(model=MODEL, messages=QUESTION,  # type: ignore[arg-type]
                                            temperature=0, max_tokens=32)
    assert answer.choices[0].message.content == ANSWER
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens == len(WORDS)
    text = client.completions.create(model=MODEL, prompt="The capital of France is",
                                     max_tokens=8, temperature=0)
    assert text.choices[0].text == " Paris." and text.usage is not None
    assert text.usage.prompt_tokens == 5
    assert StandIn.seen[-1]["inputs"] == "The capital of France is"


def test_a_stream_read_by_the_openai_package_is_the_same_answer(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION,  # type: ignore[arg-type]
                                           temperature=0)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
        extra_headers={"Cache-Control": "no-cache"}))  # the container's stream, not the cache
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content == ANSWER
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(WORDS)


def test_bad_requests_raise_the_packages_own_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=QUESTION, n=2)  # type: ignore[arg-type]
    assert (refused.value.param, refused.value.code) == ("n", "unsupported_parameter")
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=QUESTION)  # type: ignore[arg-type]
    assert missing.value.code == "model_not_found"


def test_a_failure_mid_stream_raises_in_the_reader(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "fail, please"}], stream=True)
    with pytest.raises(openai.APIError, match="stream failed"):
        list(stream)


# --- the emulator's smollm2 (the real model) --------------------------------------------------

@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """make run's pair (the emulator's default configuration, the local stage), the model
    loaded by a first request (it loads on its first, and may outlast that request's read)."""
    logs = tmp_path_factory.mktemp("openai-emulated")
    with open(logs / "emulator.log", "w") as emulator_log, \
            start_emulator(echo_stderr=emulator_log) as emulator, \
            open(logs / "api.log", "wb") as api_log:
        process = start_api(free_port(), emulator.url, stage="local", log=api_log)
        try:
            client = openai.OpenAI(base_url=process.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=120)
            for _ in range(40):
                try:
                    client.completions.create(model=MODEL, prompt="Hi", max_tokens=1)
                    break
                except openai.APIStatusError as error:  # 504 while the model loads
                    assert error.status_code in (503, 504), error
                    time.sleep(3)
            yield client
        finally:
            process.stop()


def test_the_real_model_answers_paris_whole_and_streamed(emulated: openai.OpenAI) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    whole = emulated.chat.completions.create(model=MODEL, messages=question,  # type: ignore[arg-type]
                                             temperature=0, max_tokens=24)
    chunks = list(emulated.chat.completions.create(
        model=MODEL, messages=question, temperature=0, max_tokens=24,  # type: ignore[arg-type]
        stream=True, stream_options={"include_usage": True},
        extra_headers={"Cache-Control": "no-cache"}))  # the model's stream, not the cache
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert "Paris" in text and text == whole.choices[0].message.content
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    completion = emulated.completions.create(model=MODEL, prompt="The capital of France is",
                                             max_tokens=4, temperature=0)
    assert "Paris" in completion.choices[0].text
