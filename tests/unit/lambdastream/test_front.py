"""API Gateway's stand-in in the offline proof (``sagegate.deploy.runtime_api``): the proxy
event it makes of a request, as API Gateway REST makes it; a stream silent past the idle
timeout cut."""
from __future__ import annotations

import base64
import http.client
import json

import pytest

from chalicelib.lambdastream import runtime
from chalicelib.lambdastream.handler import ProxyRequest
from sagegate.deploy import runtime_api
from sagegate.deploy.runtime_api import Front, RuntimeApi, key_id, proxy_event


def test_the_event_has_the_resource_the_headers_both_ways_and_the_keys_id() -> None:
    event = proxy_event("POST", "/v1/completions?a=1&a=2&b=3",
                        [("Content-Type", "application/json"), ("X-Api-Key", "secret"),
                         ("Accept", "a"), ("Accept", "b")], b'{"prompt": "hi"}')
    assert (event["resource"], event["httpMethod"]) == ("/v1/completions", "POST")
    assert event["requestContext"]["resourcePath"] == "/v1/completions"
    assert event["headers"]["Accept"] == "b"
    assert event["multiValueHeaders"]["Accept"] == ["a", "b"]
    assert event["queryStringParameters"] == {"a": "2", "b": "3"}
    assert event["multiValueQueryStringParameters"]["a"] == ["1", "2"]
    identity = event["requestContext"]["identity"]
    assert identity["apiKeyId"] == key_id("secret") != "secret"
    assert (event["body"], event["isBase64Encoded"]) == ('{"prompt": "hi"}', False)


def test_a_body_that_is_not_text_is_base64_and_no_key_no_key_id() -> None:
    event = proxy_event("POST", "/v1/completions", [], b"\xff\xfe")
    assert event["isBase64Encoded"] and base64.b64decode(event["body"]) == b"\xff\xfe"
    assert "apiKeyId" not in event["requestContext"]["identity"]
    assert ProxyRequest(event).raw_body == b"\xff\xfe"  # and the handler reads it back


def test_a_stream_silent_past_the_idle_timeout_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """As API Gateway cuts a regional stream idle for 5 minutes (here a fraction of a second):
    the client gets what was sent, then the cut, never a hang or the front's traceback."""
    monkeypatch.setattr(runtime_api, "REGIONAL_IDLE_TIMEOUT_SECONDS", 0.2)
    api = RuntimeApi()
    front = Front(api)
    client = http.client.HTTPConnection("127.0.0.1", front.port, timeout=20)
    try:
        client.request("POST", "/v1/completions", b"{}")
        function = runtime.RuntimeApi(api.address)
        invocation = function.next()
        response = function.open_response(invocation.request_id)
        prelude = json.dumps({"statusCode": 200, "headers": {}}).encode() + b"\0" * 8
        response.send(b"%X\r\n%s\r\n" % (len(prelude) + 7, prelude + b"data: 1"))
        answer = client.getresponse()  # then the function says nothing more
        assert answer.status == 200
        with pytest.raises(http.client.IncompleteRead) as cut:
            answer.read()
        assert cut.value.partial == b"data: 1"
        response.close()
    finally:
        client.close()
        front.close()
        api.close()
