"""The parts of make run's streams and ``sagegate chat`` that need no server: the local gateway's
key identity and its checks on a small app, which bodies ask for a stream, usage by API key in
the request's metrics (the route's own set unchanged), and the chat command's reading of bodies,
refusals and ``data:`` lines."""
from __future__ import annotations

import io
import json
from typing import Any

import pytest
from chalice import Chalice, CORSConfig, local
from chalice.config import Config

from chalicelib.core.observability import RequestLog
from chalicelib.http.completions import api_key_id
from emulator.process import DEFAULT_CONFIG
from sagegate.client.chat import ChatError, _events, _refusal, request_body
from sagegate.local.chalice_local import ApiKeyGateway, _asks_stream, _content_length, key_id
from sagegate.local.stack import llm_endpoints, parse_args

KEY = "k" * 40


def small_app() -> Chalice:
    app = Chalice("keyed")

    @app.route("/v1/chat/completions", methods=["POST"], api_key_required=True,
               cors=CORSConfig(allow_origin="https://app.example"))
    def chat() -> dict[str, Any]:
        return {"identity": app.current_request.context.get("identity")}

    @app.route("/open", methods=["POST"])
    def open_route() -> dict[str, Any]:
        return {}

    return app


def test_a_key_is_named_by_a_stable_id_that_is_not_the_key() -> None:
    assert key_id(KEY) == key_id(KEY) != key_id("j" * 40)
    assert KEY not in key_id(KEY) and key_id(KEY).startswith("local-")


def test_the_gateway_checks_the_key_and_puts_its_id_where_api_gateway_does() -> None:
    gateway = ApiKeyGateway(small_app(), Config(), KEY)
    event, _ = gateway.authorized("POST", "/v1/chat/completions", {"x-api-key": KEY}, b"{}")
    assert event["requestContext"]["identity"]["apiKeyId"] == key_id(KEY)
    with pytest.raises(local.ForbiddenError):
        gateway.authorized("POST", "/v1/chat/completions", {"x-api-key": "wrong"}, b"{}")
    answered = gateway.handle_request("POST", "/v1/chat/completions", {"x-api-key": KEY}, b"{}")
    assert json.loads(answered["body"])["identity"]["apiKeyId"] == key_id(KEY)
    open_event, _ = gateway.authorized("POST", "/open", {}, None)
    assert "apiKeyId" not in open_event["requestContext"]["identity"]


def test_the_gateway_gives_chalices_cors_headers_of_a_route() -> None:
    gateway = ApiKeyGateway(small_app(), Config(), KEY)
    assert gateway.cors_headers("/v1/chat/completions", "POST")[
        "Access-Control-Allow-Origin"] == "https://app.example"
    assert gateway.cors_headers("/open", "POST") == {}


@pytest.mark.parametrize(("body", "streams"), [
    (b'{"stream": true}', True), (b'{"stream": false}', False), (b'{"stream": "true"}', False),
    (b'{"stream": 1}', False), (b"[true]", False), (b"not json", False), (None, False),
    (b"[" * 100_000, False)])
def test_only_a_json_object_with_stream_true_asks_for_a_stream(body: bytes | None,
                                                                streams: bool) -> None:
    assert _asks_stream(body) is streams


@pytest.mark.parametrize(("headers", "length"), [
    ({}, 0), ({"Content-Length": "12"}, 12), ({"content-length": " 7 "}, 7),
    ({"Content-Length": "-1"}, None), ({"Content-Length": "1e3"}, None),
    ({"Content-Length": "\u00b2"}, None), ({"Content-Length": "\u0661\u0662"}, None)])
def test_a_bodys_declared_length(headers: dict[str, str], length: int | None) -> None:
    assert _content_length(headers) == length


class Served:
    def __init__(self, context: dict[str, Any]) -> None:
        self.context = context


@pytest.mark.parametrize(("context", "found"), [
    ({"identity": {"apiKeyId": "abc123"}}, "abc123"), ({"identity": {"sourceIp": "1"}}, None),
    ({}, None), ({"identity": None}, None)])
def test_the_key_id_is_read_from_the_request_context(context: dict[str, Any],
                                                     found: str | None) -> None:
    assert api_key_id(Served(context)) == found  # type: ignore[arg-type]


def _emf(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]


def test_usage_by_key_is_a_metric_set_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    log = RequestLog("r1", "POST", "/v1/chat/completions", model="smollm2",
                     api_key_id="key1", prompt_tokens=30, completion_tokens=7)
    log.finish(200, None, 12.0)
    out = capsys.readouterr().out
    line = next(json.loads(text) for text in out.splitlines() if '"message":"request"' in text)
    assert line["api_key_id"] == "key1"
    sets = _emf(out)
    assert len(sets) == 2
    route, usage = sets
    assert route["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][:2] == ["route", "model"]
    assert usage["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][:2] == ["model", "api_key"]
    assert (usage["api_key"], usage["PromptTokens"], usage["CompletionTokens"]) == \
        ("key1", [30.0], [7.0])


def test_no_key_no_usage_set(capsys: pytest.CaptureFixture[str]) -> None:
    RequestLog("r2", "POST", "/v1/chat/completions", model="smollm2", prompt_tokens=3,
               completion_tokens=1).finish(200, None, 1.0)
    assert len(_emf(capsys.readouterr().out)) == 1


def test_the_chat_body() -> None:
    assert request_body("smollm2", "Hi") == {
        "model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    body = request_body("m", "Hi", system="Be brief.", max_tokens=5, temperature=0.0,
                        stream=False)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (body["max_tokens"], body["temperature"], body["stream"]) == (5, 0.0, False)


@pytest.mark.parametrize(("status", "raw", "text"), [
    (404, b'{"error": {"message": "No model x.", "type": "invalid_request_error", '
          b'"param": "model", "code": "model_not_found"}}', "404 model_not_found: No model x."),
    (403, b'{"message":"Forbidden"}', "403 HTTP403: Forbidden"),
    (413, b'{"Code": "PayloadTooLarge", "Message": "Too big."}', "413 PayloadTooLarge: Too big."),
    (502, b"<html>bad gateway</html>", "502 HTTP502: <html>bad gateway</html>")])
def test_a_refusal_is_one_line(status: int, raw: bytes, text: str) -> None:
    assert str(_refusal(status, raw)) == text


class Lines:
    def __init__(self, text: bytes) -> None:
        self._buffer = io.BytesIO(text)

    def readline(self, limit: int = -1) -> bytes:
        return self._buffer.readline(limit)


def test_data_lines_are_read_until_done() -> None:
    stream = Lines(b'data: {"a": 1}\n\n: comment\ndata:{"b": 2}\n\ndata: [DONE]\n\nignored\n')
    assert list(_events(stream)) == [{"a": 1}, {"b": 2}]  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "code"), [
    (b'data: {"a": 1}\n\n', "StreamBroken"), (b"data: {not json\n\n", "InvalidResponse")])
def test_a_stream_cut_short_or_garbled_is_an_error(text: bytes, code: str) -> None:
    with pytest.raises(ChatError) as failed:
        list(_events(Lines(text)))  # type: ignore[arg-type]
    assert failed.value.code == code


def test_make_runs_llm_endpoints_are_warmed_up() -> None:
    assert llm_endpoints(DEFAULT_CONFIG) == ["smollm2"]


def test_no_warm_up_is_an_option_of_sagegate_run() -> None:
    assert parse_args([]).warm_up is True
    assert parse_args(["--no-warm-up"]).warm_up is False
