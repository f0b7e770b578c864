"""The streaming function's Runtime API loop against a local Runtime API in streaming mode
(``sagegate.deploy.runtime_api``, on 127.0.0.1): what reaches Lambda, chunk by chunk, for a
handler that streams, fails before its first byte, or fails midway; the init error."""
from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.lambdastream import runtime
from chalicelib.lambdastream.runtime import Context, ResponseStream, StreamFinished
from sagegate.deploy.runtime_api import RuntimeApi

PRELUDE = json.dumps({"statusCode": 200, "headers": {}}).encode() + b"\0" * 8


@pytest.fixture()
def api() -> Iterator[RuntimeApi]:
    server = RuntimeApi()
    try:
        yield server
    finally:
        server.close()


def serve_one(api: RuntimeApi, handler: runtime.Handler, event: Any = None,
              env: dict[str, str] | None = None) -> Any:
    invocation = api.invoke(event or {"n": 1}, deadline_seconds=30)
    client = runtime.RuntimeApi(api.address)
    runtime.serve(client, handler, client.next(), env if env is not None else {})
    assert invocation.finished.wait(10)
    return invocation


def kinds(invocation: Any) -> list[tuple[str, Any]]:
    return [(part.kind, part.value) for part in invocation.record]


def test_each_write_is_one_chunk_and_the_end_follows_the_handler(api: RuntimeApi) -> None:
    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        stream.write(PRELUDE)
        stream.write(b"data: 1\n\n")
        stream.write(b"")  # nothing to send: no chunk (an empty one would end the body)
        stream.write(b"data: 2\n\n")

    invocation = serve_one(api, handler)
    assert kinds(invocation) == [("prelude", {"statusCode": 200, "headers": {}}),
                                 ("chunk", b"data: 1\n\n"), ("chunk", b"data: 2\n\n"),
                                 ("end", {})]
    assert invocation.function_error() is None


def test_a_chunk_reaches_the_api_before_the_next_is_written(api: RuntimeApi) -> None:
    arrived: list[bool] = []

    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        stream.write(PRELUDE + b"first")
        invocation = next(iter(api.invocations.values()))
        for _ in range(500):  # bounded: until the Runtime API has read the chunk
            if any(part.kind == "chunk" for part in invocation.record):
                break
            time.sleep(0.01)
        arrived.append(any(part.kind == "chunk" for part in invocation.record))
        stream.write(b"second")

    serve_one(api, handler)
    assert arrived == [True]


def test_a_failure_before_the_first_byte_is_the_invocations_error(api: RuntimeApi) -> None:
    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        raise ValueError("no such thing")

    invocation = serve_one(api, handler)
    assert kinds(invocation) == [("error", {"type": "ValueError", "body": {
        "errorMessage": "no such thing", "errorType": "ValueError"}})]


def test_a_failure_midway_ends_with_the_error_trailers_and_no_traceback(
        api: RuntimeApi, capsys: pytest.CaptureFixture[str]) -> None:
    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        stream.write(PRELUDE + b"data: 1\n\n")
        raise RuntimeError("broke")

    invocation = serve_one(api, handler)
    assert [kind for kind, _ in kinds(invocation)] == ["prelude", "chunk", "end"]
    assert invocation.record[1].value == b"data: 1\n\n"
    assert invocation.function_error() == {
        "type": "RuntimeError", "body": {"errorMessage": "broke", "errorType": "RuntimeError"}}
    assert "Traceback" in capsys.readouterr().err  # the log's, not the client's


def test_fail_reports_the_handlers_own_error_type(api: RuntimeApi) -> None:
    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        stream.write(PRELUDE + b"x")
        stream.fail("ModelError", "The model's stream failed.")
        stream.end()  # once ended, ended
        with pytest.raises(StreamFinished):
            stream.write(b"more")

    invocation = serve_one(api, handler)
    trailers = invocation.trailers()
    assert trailers["lambda-runtime-function-error-type"] == "ModelError"
    assert json.loads(base64.b64decode(trailers["lambda-runtime-function-error-body"])) == {
        "errorMessage": "The model's stream failed.", "errorType": "ModelError"}


def test_the_context_and_the_trace_id_are_lambdas(api: RuntimeApi) -> None:
    seen: dict[str, Any] = {}
    env = {"AWS_LAMBDA_FUNCTION_NAME": "sagegate-prod-stream",
           "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1769"}

    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        seen.update(event=event, id=context.aws_request_id, name=context.function_name,
                    memory=context.memory_limit_in_mb, arn=context.invoked_function_arn,
                    group=context.log_group_name,
                    remaining=context.get_remaining_time_in_millis(),
                    trace=env.get(runtime.TRACE_ENV))
        stream.write(PRELUDE)

    invocation = serve_one(api, handler, {"hello": "world"}, env)
    assert seen["event"] == {"hello": "world"} and seen["id"] == invocation.request_id
    assert (seen["name"], seen["memory"]) == ("sagegate-prod-stream", 1769)
    assert seen["arn"].startswith("arn:aws:lambda:")
    assert seen["group"] == "/aws/lambda/sagegate-prod-stream"
    assert 0 < seen["remaining"] <= 30_000
    assert seen["trace"].startswith("Root=1-")


@pytest.mark.parametrize(("name", "error_type"), [
    ("nothing", "Runtime.MalformedHandlerName"),
    ("chalicelib.no_such_module.handle", "Runtime.ImportModuleError"),
    ("chalicelib.lambdastream.runtime.no_such_function", "Runtime.HandlerNotFound")])
def test_a_handler_that_cannot_be_loaded_is_the_init_error(
        api: RuntimeApi, monkeypatch: pytest.MonkeyPatch, name: str, error_type: str) -> None:
    monkeypatch.setenv(runtime.RUNTIME_API_ENV, api.address)
    monkeypatch.setenv(runtime.HANDLER_ENV, name)
    assert runtime.main() == 1
    assert [error["type"] for error in api.init_errors] == [error_type]
    assert api.init_errors[0]["body"]["errorType"] == error_type


def test_the_loop_serves_invocations_one_after_another(
        api: RuntimeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.RUNTIME_API_ENV, api.address)
    monkeypatch.setenv(runtime.HANDLER_ENV, f"{__name__}.echo")
    monkeypatch.setenv(runtime.TRACE_ENV, "")  # the loop sets it: put back as it was
    first, second = api.invoke({"say": "a"}), api.invoke({"say": "b"})
    threading.Thread(target=runtime.main, daemon=True).start()
    assert first.finished.wait(10) and second.finished.wait(10)
    assert [part.value for part in first.record if part.kind == "chunk"] == [b"a"]
    assert [part.value for part in second.record if part.kind == "chunk"] == [b"b"]


def echo(event: Any, context: Context, stream: ResponseStream) -> None:
    stream.write(PRELUDE + event["say"].encode())


class GoneConnection:
    """A response's connection that Lambda has closed."""

    def send(self, data: bytes) -> None:
        raise BrokenPipeError("closed")

    def close(self) -> None:
        pass


class GoneApi(runtime.RuntimeApi):
    def __init__(self) -> None:
        super().__init__("127.0.0.1:9")

    def open_response(self, request_id: str) -> Any:
        return GoneConnection()


def test_a_response_whose_connection_is_gone_leaves_the_loop_serving(
        capsys: pytest.CaptureFixture[str]) -> None:
    ended: list[str] = []

    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        try:
            stream.write(PRELUDE)
        except ConnectionError:
            ended.append("write")

    invocation = runtime.Invocation("rid", 0, "arn", None, {})
    runtime.serve(GoneApi(), handler, invocation, {})  # returns: the loop asks for the next
    assert ended == ["write"]
    assert "could not be ended" in capsys.readouterr().err


class ClosedAtTheEnd:
    """A response's connection that Lambda closes after its first chunk."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def send(self, data: bytes) -> None:
        if self.sent:
            raise ConnectionResetError("closed")
        self.sent.append(data)

    def close(self) -> None:
        self.closed = True


def test_a_response_whose_end_cannot_be_sent_closes_its_connection(
        capsys: pytest.CaptureFixture[str]) -> None:
    connection = ClosedAtTheEnd()

    class Api(GoneApi):
        def open_response(self, request_id: str) -> Any:
            return connection

    def handler(event: Any, context: Context, stream: ResponseStream) -> None:
        stream.write(PRELUDE)

    runtime.serve(Api(), handler, runtime.Invocation("rid", 0, "arn", None, {}), {})
    assert connection.sent == [b"%X\r\n%s\r\n" % (len(PRELUDE), PRELUDE)]
    assert connection.closed  # the terminator failed: the socket is not left open
    assert "could not be ended" in capsys.readouterr().err


def test_a_function_gone_mid_response_is_lambdas_exit_error(api: RuntimeApi) -> None:
    """(The local Runtime API's side, which the deploy tests' front relies on.)"""
    invocation = api.invoke({})
    client = runtime.RuntimeApi(api.address)
    client.next()
    connection = client.open_response(invocation.request_id)
    connection.send(b"%X\r\n%s\r\n" % (len(PRELUDE) + 1, PRELUDE + b"x"))
    connection.close()
    assert invocation.finished.wait(10)
    assert [part.kind for part in invocation.record] == ["prelude", "chunk", "end"]
    assert invocation.function_error() == {"type": "Runtime.ExitError", "body": {}}
