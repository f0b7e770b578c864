"""The streaming function's handler, its parts: the proxy event read as a request, the CORS
headers app.py's routes give, the prelude, a failed stream as Lambda's function error, the
deadline's last word, the shared event writer, and the refusals before the service."""
from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import app
from chalicelib.core.access import Access, AuthMode
from chalicelib.http.completions import deliver
from chalicelib.lambdastream import handler
from chalicelib.lambdastream.handler import Answer, ProxyRequest
from chalicelib.llm.streams import DONE


class FakeStream:
    """Records what the handler sends; a write after the end raises, as the runtime's."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.ending: tuple[str, ...] | None = None

    def write(self, data: bytes) -> None:
        if self.ending is not None:
            raise ConnectionError("ended")
        self.sent.append(data)

    def end(self) -> None:
        self.ending = self.ending or ("end",)

    def fail(self, error_type: str, message: str) -> None:
        self.ending = self.ending or ("fail", error_type, message)


def event(body: bytes | str = b"{}", *, encoded: bool = False, path: str = "/v1/completions",
          method: str = "POST") -> dict[str, Any]:
    raw = base64.b64encode(body).decode() if encoded else body
    return {"resource": path, "path": path, "httpMethod": method,
            "headers": {"Content-Type": "application/json", "X-Request-Id": "mine-1"},
            "queryStringParameters": {"a": "1"}, "body": raw, "isBase64Encoded": encoded,
            "requestContext": {"resourcePath": path, "requestId": "gw-1",
                               "identity": {"apiKeyId": "key-1"}}}


def test_the_proxy_event_is_read_as_chalice_reads_it() -> None:
    request = ProxyRequest(event(b"\xff\x00", encoded=True))
    assert request.raw_body == b"\xff\x00"
    assert request.headers["content-type"] == request.headers["CONTENT-TYPE"] == \
        "application/json"
    assert (request.method, request.path, request.query_params) == \
        ("POST", "/v1/completions", {"a": "1"})
    assert request.context["identity"]["apiKeyId"] == "key-1"
    assert ProxyRequest(event('{"é": 1}')).raw_body == '{"é": 1}'.encode()
    assert request.to_original_event()["requestContext"]["requestId"] == "gw-1"


def test_the_cors_headers_are_app_pys() -> None:
    access = Access(auth=AuthMode.API_KEY, cors_origin="https://app.example")
    chalice = app._cors(access)
    assert not isinstance(chalice, bool)
    assert handler.cors_headers(access) == chalice.get_access_control_headers()
    assert handler.cors_headers(Access()) == {}


def test_the_prelude_ends_with_eight_nuls_within_16_kb() -> None:
    prelude = handler.prelude(200, {"Content-Type": "text/event-stream"})
    document, _, rest = prelude.partition(b"\0" * 8)
    assert rest == b"" and json.loads(document) == {
        "statusCode": 200, "headers": {"Content-Type": "text/event-stream"}, "cookies": []}
    with pytest.raises(ValueError, match="16 KB"):
        handler.prelude(200, {"X-Big": "x" * 16_384})


@pytest.mark.parametrize(("last", "expected"), [
    (b'data: {"error": {"message": "gone", "type": "server_error", "code": "model_error"}}'
     b"\n\n", ("ModelError", "gone")),
    (b'data: {"error": {"message": "m", "type": "server_error", "code": null}}\n\n',
     ("ServerError", "m")),
    (b"data: {}\n\n", ("StreamError", "The stream ended without [DONE]."))])
def test_a_failed_streams_last_event_is_the_function_error(
        last: bytes, expected: tuple[str, str]) -> None:
    assert handler.error_type(last) == expected


def test_a_stream_ended_by_done_ends_cleanly_an_error_event_fails_it() -> None:
    done, failed = FakeStream(), FakeStream()
    Answer(done, {}).ended(DONE)
    Answer(failed, {}).ended(
        b'data: {"error": {"message": "x", "type": "server_error", "code": "endpoint_error"}}'
        b"\n\n")
    assert done.ending == ("end",)
    assert failed.ending == ("fail", "EndpointError", "x")


def test_the_prelude_has_the_routes_cors_headers_under_the_answers_own() -> None:
    stream = FakeStream()
    Answer(stream, {"Access-Control-Allow-Origin": "https://app.example", "X-Cache": "no"}
           ).begin(200, {"X-Cache": "miss"})
    headers = json.loads(stream.sent[0].partition(b"\0" * 8)[0])["headers"]
    assert headers == {"Access-Control-Allow-Origin": "https://app.example", "X-Cache": "miss"}


def test_the_deadline_mid_stream_sends_the_error_event_then_fails() -> None:
    stream = FakeStream()
    answer = Answer(stream, {"Access-Control-Allow-Origin": "https://app.example"})
    answer.begin(200, {"Content-Type": "text/event-stream"})
    answer.write(b"data: 1\n\n")
    answer.expire("rid-1")
    last = json.loads(stream.sent[-1].removeprefix(b"data: "))
    assert last["error"]["code"] == handler.DEADLINE_CODE
    assert stream.ending is not None and stream.ending[:2] == ("fail", "DeadlineExceeded")
    with pytest.raises(ConnectionError):  # the handler's next write: it stops there
        answer.write(b"data: 2\n\n")


def test_the_deadline_before_the_first_byte_is_a_whole_504() -> None:
    stream = FakeStream()
    Answer(stream, {}).expire("rid-1")
    prelude, _, _ = stream.sent[0].partition(b"\0" * 8)
    assert json.loads(prelude)["statusCode"] == 504
    assert json.loads(prelude)["headers"]["X-Request-Id"] == "rid-1"
    assert json.loads(stream.sent[1])["error"]["code"] == handler.DEADLINE_CODE
    assert stream.ending == ("end",)


def test_the_deadline_after_the_end_says_nothing() -> None:
    stream = FakeStream()
    answer = Answer(stream, {})
    answer.whole(200, {}, b"{}")
    answer.expire("rid-1")
    assert len(stream.sent) == 2 and stream.ending == ("end",)


class Late:
    """A context with less time left than the deadline's margin."""

    def get_remaining_time_in_millis(self) -> int:
        return handler.DEADLINE_MARGIN_MS // 2


def test_without_time_to_serve_the_504_is_at_once_and_nothing_is_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENDPOINT_NAME", "smollm2")
    monkeypatch.setattr(handler, "services", handler.Services())
    served: list[Any] = []
    monkeypatch.setattr(handler, "serve_streaming", lambda *args: served.append(args))
    stream = FakeStream()
    handler.handle(event(b"{}", path="/v1/chat/completions"), Late(), stream)
    prelude, _, _ = stream.sent[0].partition(b"\0" * 8)
    assert json.loads(prelude)["statusCode"] == 504
    assert stream.ending == ("end",)
    assert served == []  # no tokens reserved, no endpoint call for an answer already given


def test_deliver_stops_at_done_and_ends_a_defect_with_server_error() -> None:
    asked: list[int] = []

    def events() -> Any:
        for number in range(3):
            asked.append(number)
            yield DONE if number == 1 else b"data: {}\n\n"

    written: list[bytes] = []
    assert deliver(events(), written.append) == DONE
    assert asked == [0, 1] and written == [b"data: {}\n\n", DONE]

    def broken() -> Any:
        yield b"data: {}\n\n"
        raise KeyError("a bug")

    written.clear()
    last = deliver(broken(), written.append)
    assert written[-1] == last
    assert json.loads(last.removeprefix(b"data: "))["error"]["code"] == "server_error"


def test_a_client_gone_is_not_a_defect() -> None:
    def write(data: bytes) -> None:
        raise ConnectionResetError("gone")

    with pytest.raises(ConnectionResetError):
        deliver(iter([b"data: {}\n\n"]), write)


@pytest.mark.parametrize(("path", "method", "status", "code"), [
    ("/v1/models", "GET", 404, "unknown_url"),
    ("/v1/completions", "POST", 413, "request_too_large")])
def test_what_the_function_refuses_before_the_service(
        monkeypatch: pytest.MonkeyPatch, path: str, method: str, status: int,
        code: str) -> None:
    monkeypatch.setenv("MAX_BODY_BYTES", "1024")
    monkeypatch.setenv("ENDPOINT_NAME", "smollm2")
    monkeypatch.setattr(handler, "services", handler.Services())
    stream = FakeStream()
    handler.handle(event(b"x" * 2048, path=path, method=method), None, stream)
    prelude, _, _ = stream.sent[0].partition(b"\0" * 8)
    assert json.loads(prelude)["statusCode"] == status
    assert json.loads(stream.sent[1])["error"]["code"] == code
    assert stream.ending == ("end",)
