"""The packaged streaming function streams, offline, as Lambda and API Gateway would run it.

``sagegate package --stage prod``'s function zip and layer are extracted into a Lambda-like
tree; the function starts through its packaged ``bootstrap`` wrapper (the template's
``AWS_LAMBDA_EXEC_WRAPPER`` and handler) on an interpreter without this checkout's
site-packages, against a local Lambda Runtime API in streaming mode and API Gateway's
stand-in (:mod:`sagegate.deploy.runtime_api`). Its SageMaker runtime is the emulator, whose
``smollm2`` runs the real model (one emulator for the module, loaded once), reached through a
relay that can add the emulator's fault trigger to a call (the OpenAI routes do not forward a
client's ``X-Custom-Attributes``). Clients are a raw socket (the chunks as they come) and the
``openai`` package. That a chunk reached the client before the function had written the last
is told by the order the Runtime API and the front saw things in, never by a clock.
"""
from __future__ import annotations

import http.client
import json
import socket
import stat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest

from emulator.process import free_port, start_emulator
from sagegate.deploy import runtime_api
from sagegate.deploy.runtime_api import Front, Invocation, RuntimeApi
from sagegate.deploy.sandbox import LambdaTree
from sagegate.local.stack import warm_up
from tests.deploy.conftest import Package

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(300)]

MODEL = "smollm2"
KEY = "k3" * 20
QUESTION: Any = [{"role": "user", "content": "What is the capital of France?"}]
STORY: Any = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
FAULT_HEADER = "X-Amzn-SageMaker-Custom-Attributes"
_HOP_HEADERS = {"transfer-encoding", "content-length", "connection", "keep-alive"}


class Relay(BaseHTTPRequestHandler):
    """SageMaker's runtime as the function calls it: the emulator's answers passed on as they
    come, with the emulator's fault trigger added to the calls while ``fault`` is set."""

    protocol_version = "HTTP/1.1"
    upstream: ClassVar[str] = ""
    fault: ClassVar[str | None] = None

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name: value for name, value in self.headers.items()
                   if name.lower() not in _HOP_HEADERS}
        if Relay.fault:
            headers[FAULT_HEADER] = f"emulator-fault={Relay.fault}"
        connection = http.client.HTTPConnection(Relay.upstream, timeout=120)
        try:
            connection.request("POST", self.path, body, headers)
            answer = connection.getresponse()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in _HOP_HEADERS:
                    self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while (data := answer.read1(65536)):
                self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        finally:
            connection.close()


@dataclass
class Stack:
    prod: Package
    runtime: RuntimeApi
    front: Front
    log: Path
    tree: LambdaTree
    env: dict[str, str]

    def last(self) -> Invocation:
        return self.front.served[-1]


@pytest.fixture(scope="module")
def stack(package: Callable[[str], Package],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prod = package("prod")
    work = tmp_path_factory.mktemp("streaming-function")
    tree = LambdaTree.build(work / "lambda", prod.function_zip, prod.layer_zip)
    runtime_api.keep_modes(prod.function_zip, tree.task)
    config = work / "emulator.json"
    config.write_text(json.dumps({
        "allow_fault_header": True, "default_endpoint": MODEL,
        "models": {MODEL: {"kind": "llm", "max_prompt_tokens": 2048, "max_new_tokens": 512,
                           "max_concurrent_generations": 2}},
        "endpoints": {MODEL: {"variants": [{"name": "AllTraffic", "model": MODEL}]}}}))
    runtime = RuntimeApi()
    front = Front(runtime, api_key=KEY)
    with open(work / "emulator.log", "w") as emulator_log, \
            start_emulator(config, echo_stderr=emulator_log, timeout=60) as emulator, \
            open(work / "function.log", "wb") as function_log:
        assert "is loaded" in warm_up(emulator.url, [MODEL])[0]
        Relay.upstream = emulator.url.removeprefix("http://")
        relay = runtime_api.LocalServer(Relay)
        env = runtime_api.function_env(prod.template, runtime, tree,
                                       f"http://127.0.0.1:{relay.server_address[1]}", "prod")
        # the stage's tables (the prediction cache, the token budgets) are not there: a
        # refused connection, and each fails open, as it would on AWS
        env["AWS_ENDPOINT_URL_DYNAMODB"] = f"http://127.0.0.1:{free_port()}"
        process = runtime_api.start_function(tree, env, work, function_log)
        try:
            yield Stack(prod, runtime, front, work / "function.log", tree, env)
        finally:
            runtime_api.stop(process)
            relay.close()
            front.close()
            runtime.close()


class RawStream:
    """One request to the front on a plain socket, its answer read chunk by chunk."""

    def __init__(self, stack: Stack, body: Any, key: str = KEY) -> None:
        raw = json.dumps(body).encode()
        self.sock = socket.create_connection(("127.0.0.1", stack.front.port), timeout=120)
        self.reader = self.sock.makefile("rb")
        head = ["POST /v1/chat/completions HTTP/1.1", "Host: gateway",
                "Content-Type: application/json", f"Content-Length: {len(raw)}",
                f"x-api-key: {key}"]
        self.sock.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + raw)
        self.status = int(self.reader.readline().split()[1])
        self.headers: dict[str, str] = {}
        while (line := self.reader.readline().decode().strip()):
            name, value = line.split(":", 1)
            self.headers[name.lower()] = value.strip()

    def chunk(self) -> bytes | None:
        """The next chunk's bytes (b"": the last chunk; None: the connection was cut)."""
        size_line = self.reader.readline()
        if not size_line:
            return None
        data = self.reader.read(int(size_line.strip(), 16))
        assert self.reader.read(2) == b"\r\n"
        return data

    def body(self) -> list[bytes | None]:
        """Every chunk to the end (its last: b"" for an answer ended, None for one cut)."""
        chunks = []
        while (data := self.chunk()):
            chunks.append(data)
        return [*chunks, data]

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def answered(stack: Stack, body: Any, status: int) -> tuple[RawStream, list[bytes | None]]:
    """One request's whole answer, read to its end (or its cut), after checking its status."""
    stream = RawStream(stack, body)
    try:
        assert stream.status == status
        return stream, stream.body()
    finally:
        stream.close()


def data(chunk: bytes | None) -> Any:
    """A ``data:`` event's JSON (or ``[DONE]``)."""
    assert chunk is not None and chunk.startswith(b"data: ") and chunk.endswith(b"\n\n"), chunk
    text = chunk[6:-2]
    return text.decode() if text == b"[DONE]" else json.loads(text)


def test_the_packaged_wrapper_keeps_its_executable_bit(stack: Stack) -> None:
    """Chalice's zip records the wrapper's mode (Lambda runs it as AWS_LAMBDA_EXEC_WRAPPER)."""
    with zipfile.ZipFile(stack.prod.function_zip) as zipped:
        mode = zipped.getinfo("chalicelib/lambdastream/bootstrap").external_attr >> 16
    assert mode & stat.S_IXUSR and mode & stat.S_IXOTH


def test_chunks_reach_the_client_as_the_function_writes_them(stack: Stack) -> None:
    stream = RawStream(stack, {"model": MODEL, "messages": STORY, "max_tokens": 64,
                               "temperature": 0, "stream": True,
                               "stream_options": {"include_usage": True}})
    try:
        assert stream.status == 200
        assert stream.headers["transfer-encoding"] == "chunked"
        role = data(stream.chunk())
        first = data(stream.chunk())
        # the client holds a token while the function has not finished its response
        invocation = stack.last()
        seen_then = len(invocation.record)
        assert not invocation.finished.is_set()
        rest = stream.body()
    finally:
        stream.close()
    assert role["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["delta"]["content"]
    assert rest[-1] == b"" and data(rest[-2]) == "[DONE]"
    assert data(rest[-3])["usage"]["completion_tokens"] == 64
    assert invocation.finished.is_set() and len(invocation.record) > seen_then
    # the front wrote the first chunk to the client before the function sent its last
    last_chunk = [part for part in invocation.record if part.kind == "chunk"][-1]
    assert invocation.relayed[0] < last_chunk.seen
    assert invocation.function_error() is None


def test_the_clients_status_and_headers_are_the_preludes(stack: Stack) -> None:
    stream, _ = answered(stack, {"model": MODEL, "messages": QUESTION, "max_tokens": 4,
                                 "temperature": 0, "stream": True}, 200)
    prelude = stack.last().record[0]
    assert prelude.kind == "prelude" and prelude.value["statusCode"] == stream.status == 200
    for name, value in prelude.value["headers"].items():
        assert stream.headers[name.lower()] == value
    assert prelude.value["headers"]["Content-Type"].startswith("text/event-stream")
    assert prelude.value["headers"]["X-Request-Id"]
    assert prelude.value["cookies"] == []


@pytest.fixture()
def openai_client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.front.url}/v1", api_key="unused", max_retries=0,
                         timeout=120, default_headers={"x-api-key": KEY})


def test_the_openai_package_reads_the_stream(openai_client: openai.OpenAI) -> None:
    text = "".join(chunk.choices[0].delta.content or "" for chunk in
                   openai_client.chat.completions.create(
                       model=MODEL, messages=QUESTION, max_tokens=12, temperature=0,
                       stream=True) if chunk.choices)
    assert "Paris" in text


def test_a_whole_answer_when_not_streamed(openai_client: openai.OpenAI, stack: Stack) -> None:
    completion = openai_client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=12, temperature=0)
    assert "Paris" in (completion.choices[0].message.content or "")
    prelude = stack.last().record[0].value
    assert prelude["statusCode"] == 200
    assert prelude["headers"]["Content-Type"] == "application/json"


def test_a_bad_request_is_openais_400_through_the_prelude(stack: Stack) -> None:
    _, chunks = answered(stack, {"model": MODEL, "messages": QUESTION, "temperature": 5,
                                 "stream": True}, 400)
    error = json.loads(b"".join(chunk or b"" for chunk in chunks))["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "temperature")
    invocation = stack.last()
    assert invocation.record[0].value["statusCode"] == 400
    assert invocation.function_error() is None  # a refusal is an answer, not a failure


def test_a_model_stream_error_ends_with_the_error_event_the_trailers_and_the_cut(
        stack: Stack) -> None:
    Relay.fault = "ModelStreamError"
    try:
        _, chunks = answered(stack, {"model": MODEL, "messages": STORY, "max_tokens": 32,
                                     "temperature": 0.5, "stream": True}, 200)
    finally:
        Relay.fault = None
    assert chunks[-1] is None  # cut: no last chunk, as API Gateway ends a failed stream
    events = [data(chunk) for chunk in chunks[:-1]]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1]["error"]["code"] == "model_error" and "[DONE]" not in events
    assert stack.last().function_error() == {
        "type": "ModelError",
        "body": {"errorType": "ModelError",
                 "errorMessage": "The model's stream failed (ModelStreamError)."}}


def test_the_function_serves_on_after_a_failed_stream(openai_client: openai.OpenAI) -> None:
    completion = openai_client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=12, temperature=0, stream=False,
        extra_headers={"Cache-Control": "no-cache"})
    assert "Paris" in (completion.choices[0].message.content or "")


def test_the_deadline_ends_the_stream_with_an_error_event_and_the_trailers(
        stack: Stack, openai_client: openai.OpenAI) -> None:
    """The function is given 6 s: 2 s before they are up, its response is ended (and here,
    where nothing stops it then, it serves the next request)."""
    stack.front.deadline_seconds = 6.0
    try:
        _, chunks = answered(stack, {"model": MODEL, "messages": STORY, "max_tokens": 500,
                                     "temperature": 0, "stream": True}, 200)
    finally:
        stack.front.deadline_seconds = 300.0
    assert chunks[-1] is None
    events = [data(chunk) for chunk in chunks[:-1]]
    assert any(event.get("choices") and event["choices"][0]["delta"].get("content")
               for event in events[:-1])
    assert events[-1]["error"]["code"] == "deadline_exceeded"
    failure = stack.last().function_error()
    assert failure is not None and failure["type"] == "DeadlineExceeded"
    completion = openai_client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=4, temperature=0,
        extra_headers={"Cache-Control": "no-cache"})
    assert completion.choices[0].finish_reason == "length"


def test_a_handler_that_does_not_import_is_the_init_error_and_api_gateways_502(
        stack: Stack, tmp_path: Path) -> None:
    runtime, front = RuntimeApi(), None
    try:
        front = Front(runtime, api_key=KEY)
        env = {**stack.env, "AWS_LAMBDA_RUNTIME_API": runtime.address,
               "_HANDLER": "chalicelib.lambdastream.no_such_module.handle"}
        with open(tmp_path / "function.log", "wb") as log:
            process = runtime_api.start_function(stack.tree, env, tmp_path, log)
            try:
                assert process.wait(60) == 1
            finally:
                runtime_api.stop(process)
        stream = RawStream(Stack(stack.prod, runtime, front, tmp_path, stack.tree, env),
                           {"model": MODEL, "messages": QUESTION})
        stream.close()
        assert stream.status == 502
        assert [error["type"] for error in runtime.init_errors] == ["Runtime.ImportModuleError"]
        assert "Traceback" in (tmp_path / "function.log").read_text()
    finally:
        if front is not None:
            front.close()
        runtime.close()
