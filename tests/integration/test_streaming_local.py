"""Streams for real under ``make run``'s ``chalice local`` (:mod:`sagegate.local.chalice_local`):
the emulator's ``smollm2`` (the real model) behind sagegate started by sagegate's own launcher,
on a stage that requires an API key and answers with CORS headers; read with a raw socket (the
HTTP/1.1 chunks as they come) and with the real ``openai`` package. Whether the model is still
generating when a chunk is read is asked of the emulator (``GET /emulator/generations``), never
of a clock."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from emulator.process import free_port, start_emulator
from sagegate.local.chalice_local import key_id
from sagegate.local.processes import ApiProcess, start_api
from sagegate.local.stack import warm_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2"
KEY = "a1" * 20
ORIGIN = "https://app.example"
QUESTION: Any = [{"role": "user", "content": "What is the capital of France?"}]
STORY: Any = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]


@dataclass
class Stack:
    api: ApiProcess
    emulator_url: str
    api_log: Path

    @property
    def port(self) -> int:
        return int(self.api.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("streaming-local")
    with open(logs / "emulator.log", "w") as emulator_log, \
            start_emulator(echo_stderr=emulator_log) as emulator, \
            open(logs / "api.log", "wb") as api_log:
        loaded = warm_up(emulator.url, [MODEL])
        assert "is loaded" in loaded[0], loaded
        process = start_api(free_port(), emulator.url, stage="local", log=api_log, overrides={
            "SAGEGATE_AUTH": "api-key", "SAGEGATE_LOCAL_API_KEY": KEY,
            "CORS_ALLOW_ORIGIN": ORIGIN})
        try:
            yield Stack(process, emulator.url, logs / "api.log")
        finally:
            process.stop()


def generations(stack: Stack) -> dict[str, int]:
    with urllib.request.urlopen(stack.emulator_url + "/emulator/generations", timeout=10) as r:
        counts: dict[str, int] = json.load(r)[MODEL]
    return counts


class RawStream:
    """One HTTP/1.1 request on a plain socket, its answer read chunk by chunk."""

    def __init__(self, stack: Stack, body: Any, *, key: str | None = KEY,
                 length: int | None = None) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.sock = socket.create_connection(("127.0.0.1", stack.port), timeout=60)
        self.reader = self.sock.makefile("rb")
        head = ["POST /v1/chat/completions HTTP/1.1", f"Host: 127.0.0.1:{stack.port}",
                "Content-Type: application/json",
                f"Content-Length: {len(raw) if length is None else length}"]
        head += [f"x-api-key: {key}"] if key is not None else []
        self.sock.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + raw)
        status_line = self.reader.readline().decode()
        self.status = int(status_line.split()[1])
        self.headers: dict[str, str] = {}
        while (line := self.reader.readline().decode().strip()):
            name, value = line.split(":", 1)
            self.headers[name.lower()] = value.strip()

    def chunk(self) -> bytes:
        """The next chunk's bytes (b"" for the last, empty, one)."""
        size = int(self.reader.readline().strip(), 16)
        data = self.reader.read(size)
        assert self.reader.read(2) == b"\r\n"
        return data

    def events(self) -> Iterator[bytes]:
        """Each chunk's ``data:`` payload, until the last chunk."""
        while (data := self.chunk()):
            assert data.startswith(b"data: ") and data.endswith(b"\n\n"), data
            yield data[6:-2]

    def whole(self) -> bytes:
        return self.reader.read(int(self.headers["content-length"]))

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def test_the_first_chunk_arrives_while_the_model_is_still_generating(stack: Stack) -> None:
    before = generations(stack)
    stream = RawStream(stack, {"model": MODEL, "messages": STORY, "max_tokens": 48,
                               "temperature": 0, "stream": True,
                               "stream_options": {"include_usage": True}})
    try:
        assert stream.status == 200
        assert stream.headers["transfer-encoding"] == "chunked"
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["access-control-allow-origin"] == ORIGIN
        events = stream.events()
        role = json.loads(next(events))
        assert role["choices"][0]["delta"]["role"] == "assistant"
        first = json.loads(next(events))
        during = generations(stack)
        assert first["choices"][0]["delta"]["content"]
        rest = list(events)
    finally:
        stream.close()
    # the chunk was read while this generation was running, with most of its tokens to come
    assert during["active"] == before["active"] + 1
    assert during["completed"] == before["completed"]
    usage = json.loads(rest[-2])["usage"]
    assert usage["completion_tokens"] == 48  # (a long story: cut at max_tokens)
    assert during["tokens"] - before["tokens"] < usage["completion_tokens"]
    assert rest[-1] == b"[DONE]"
    assert json.loads(rest[-2])["choices"] == []
    assert json.loads(rest[-3])["choices"][0]["finish_reason"] == "length"


def test_streamed_text_is_the_whole_answer_and_usage_and_done_come_last(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.api.url + "/v1", api_key="unused", max_retries=0,
                           timeout=120, default_headers={"x-api-key": KEY})
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION,
                                           temperature=0, max_tokens=16)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=16,
        stream=True, stream_options={"include_usage": True}))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert "Paris" in text and text == whole.choices[0].message.content
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    text_stream = list(client.completions.create(model=MODEL, prompt="The capital of France is",
                                                 max_tokens=4, temperature=0, stream=True))
    whole_text = client.completions.create(model=MODEL, prompt="The capital of France is",
                                           max_tokens=4, temperature=0)
    assert "".join(c.choices[0].text for c in text_stream if c.choices) == \
        whole_text.choices[0].text


def test_keep_alive_serves_a_stream_then_another_request(stack: Stack) -> None:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=120)
    headers = {"Content-Type": "application/json", "x-api-key": KEY,
               "Cache-Control": "no-cache"}
    before = generations(stack)
    try:
        for stream in (True, False, True):
            connection.request("POST", "/v1/chat/completions", json.dumps(
                {"model": MODEL, "messages": QUESTION, "max_tokens": 2, "temperature": 0,
                 "stream": stream}), headers)
            answer = connection.getresponse()
            body = answer.read()
            assert answer.status == 200
            assert body.endswith(b"data: [DONE]\n\n") if stream else json.loads(body)["choices"]
    finally:
        connection.close()
    # each stream read to its end by sagegate before it answered [DONE]: none cut short
    after = generations(stack)
    assert after["completed"] - before["completed"] == 3
    assert after["cancelled"] == before["cancelled"]


def test_an_http_1_0_client_gets_the_events_unchunked_and_the_connection_closed(
        stack: Stack) -> None:
    body = json.dumps({"model": MODEL, "messages": QUESTION, "max_tokens": 2, "temperature": 0,
                       "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", stack.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                     b"x-api-key: " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        head, _, answer = sock.makefile("rb").read().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Connection: close" in head
    assert b"Transfer-Encoding" not in head
    assert answer.startswith(b"data: {") and answer.endswith(b"data: [DONE]\n\n")
    events = answer.split(b"\n\n")[:-1]
    assert all(event.startswith(b"data: ") for event in events)


@pytest.mark.parametrize("key", [None, "wrong" * 8])
def test_a_missing_or_wrong_key_gets_403_on_the_streaming_path(stack: Stack,
                                                               key: str | None) -> None:
    before = generations(stack)
    stream = RawStream(stack, {"model": MODEL, "messages": QUESTION, "stream": True}, key=key)
    try:
        assert stream.status == 403
        assert json.loads(stream.whole()) == {"message": "Forbidden"}
    finally:
        stream.close()
    assert generations(stack)["started"] == before["started"]


def test_a_client_that_goes_away_frees_the_model(stack: Stack) -> None:
    before = generations(stack)
    stream = RawStream(stack, {"model": MODEL, "messages": STORY, "max_tokens": 400,
                               "temperature": 0, "stream": True})
    try:
        events = stream.events()
        next(events)
        assert json.loads(next(events))["choices"][0]["delta"]["content"]
    finally:
        stream.close()
    deadline = time.monotonic() + 60
    while (now := generations(stack))["active"] > before["active"]:
        assert time.monotonic() < deadline, now
        time.sleep(0.2)
    assert now["cancelled"] == before["cancelled"] + 1
    assert now["completed"] == before["completed"]
    assert now["tokens"] - before["tokens"] < 400


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"model": MODEL, "messages": "hello", "stream": True}, 400, "invalid_type"),
    ({"model": "gpt-4o", "messages": QUESTION, "stream": True}, 404, "model_not_found"),
    ({"model": MODEL, "messages": QUESTION, "stream": True, "n": 2}, 400,
     "unsupported_parameter"),
    ({"model": MODEL, "messages": QUESTION, "stream": True, "max_tokens": 10**6}, 400,
     "invalid_value"),
    (b'{"model": "smollm2", "stream": true', 400, "invalid_json"),
])
def test_a_bad_stream_request_gets_openais_error_json(stack: Stack, body: Any, status: int,
                                                      code: str) -> None:
    stream = RawStream(stack, body)
    try:
        assert stream.status == status
        assert stream.headers["content-type"].startswith("application/json")
        assert json.loads(stream.whole())["error"]["code"] == code
    finally:
        stream.close()


def test_a_body_over_the_limit_is_refused_unread(stack: Stack) -> None:
    stream = RawStream(stack, b'{"model": "smollm2"', length=10**12)
    try:
        assert stream.status == 413
        assert json.loads(stream.whole())["error"]["code"] == "request_too_large"
        assert stream.headers.get("connection") == "close"
    finally:
        stream.close()


def test_the_log_line_and_metrics_name_the_key_by_its_id_never_the_key(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.api.url + "/v1", api_key="unused", max_retries=0,
                           timeout=120, default_headers={"x-api-key": KEY})
    list(client.chat.completions.create(model=MODEL, messages=QUESTION,
                                        max_tokens=2, stream=True))
    deadline = time.monotonic() + 10
    while True:
        text = stack.api_log.read_text()
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        requests = [line for line in lines if line.get("message") == "request"
                    and line.get("streamed") and line.get("completion_tokens") == 2]
        usage = [line for line in lines if line.get("api_key") == key_id(KEY)
                 and line.get("CompletionTokens") == [2.0]]  # (this request's, written last)
        if (requests and usage) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert KEY not in text
    assert requests and requests[-1]["api_key_id"] == key_id(KEY)
    dimensions = usage[-1]["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    assert {"model", "api_key"} <= set(dimensions)
    assert usage[-1]["model"] == MODEL and usage[-1]["CompletionTokens"] == [2.0]


def _chat(stack: Stack, *args: str, key: str = KEY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sagegate.cli", "chat", *args, "--url", stack.api.url,
         "--api-key", key], cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_sagegate_chat_streams_and_answers_whole(stack: Stack) -> None:
    streamed = _chat(stack, MODEL, "What is the capital of France?", "--max-tokens", "12",
                     "--temperature", "0")
    whole = _chat(stack, MODEL, "What is the capital of France?", "--max-tokens", "12",
                  "--temperature", "0", "--no-stream")
    assert streamed.returncode == 0 and whole.returncode == 0, streamed.stderr + whole.stderr
    assert "Paris" in streamed.stdout and streamed.stdout == whole.stdout
    system = _chat(stack, MODEL, "Hi", "--system", "Answer in one word.", "--max-tokens", "3")
    assert system.returncode == 0 and system.stdout.strip(), system.stderr


@pytest.mark.parametrize(("args", "key", "status", "says"), [
    (("gpt-4o", "Hi"), KEY, 1, "404 model_not_found"),
    ((MODEL, "Hi"), "wrong", 1, "403"),
    ((MODEL, "Hi", "--temperature", "3"), KEY, 2, "--temperature"),
    ((MODEL, "Hi", "--max-tokens", "0"), KEY, 2, "--max-tokens"),
    ((MODEL, "Hi", "--max-tokens", "100000"), KEY, 1, "400 invalid_value"),
])
def test_sagegate_chat_says_what_went_wrong_in_one_line(stack: Stack, args: tuple[str, ...],
                                                        key: str, status: int,
                                                        says: str) -> None:
    ran = _chat(stack, *args, key=key)
    assert ran.returncode == status
    lines = ran.stderr.strip().splitlines()
    assert says in lines[-1] and "Traceback" not in ran.stderr
    assert len(lines) == 1 or status == 2  # (argparse adds its usage line)


def test_sagegate_chat_without_a_server_says_so(stack: Stack) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "sagegate.cli", "chat", MODEL, "Hi", "--url",
         f"http://127.0.0.1:{free_port()}"], cwd=ROOT, capture_output=True, text=True,
        timeout=60)
    assert ran.returncode == 1
    assert ran.stderr.count("\n") == 1 and "ConnectionError" in ran.stderr


def test_a_warm_up_that_finds_no_emulator_says_so_and_goes_on() -> None:
    said = warm_up(f"http://127.0.0.1:{free_port()}", [MODEL], timeout=5)
    assert len(said) == 1 and "did not load" in said[0] and MODEL in said[0]
