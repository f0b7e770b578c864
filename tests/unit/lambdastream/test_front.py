"""API Gateway's stand-in in the offline proof (``sagegate.deploy.runtime_api``): the proxy
event it makes of a request, as API Gateway REST makes it."""
from __future__ import annotations

import base64

from chalicelib.lambdastream.handler import ProxyRequest
from sagegate.deploy.runtime_api import key_id, proxy_event


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
