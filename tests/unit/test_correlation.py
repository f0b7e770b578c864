"""The request id of record and the client's correlation id (chalicelib.http.exchange)."""
from __future__ import annotations

from typing import Any

from chalicelib.http import exchange as correlation


def test_request_id_is_api_gateways_and_chosen_once() -> None:
    context: dict[str, Any] = {"requestId": "gw-1"}
    assert correlation.request_id(context) == "gw-1"
    context["requestId"] = "changed"
    assert correlation.request_id(context) == "gw-1"


def test_request_id_without_api_gateway_is_a_new_uuid_kept_for_the_request() -> None:
    context: dict[str, Any] = {}
    first = correlation.request_id(context)
    assert len(first) == 36 and correlation.request_id(context) == first
    assert correlation.request_id({}) != first


def test_correlation_id_prefers_x_correlation_id_and_refuses_malformed_ids() -> None:
    assert correlation.correlation_id({"x-correlation-id": "abc", "x-request-id": "x"}) == "abc"
    assert correlation.correlation_id({"x-request-id": "req.1:2"}) == "req.1:2"
    assert correlation.correlation_id({"x-correlation-id": "bad id\n"}) is None
    assert correlation.correlation_id({"x-request-id": "x" * 65}) is None
    assert correlation.correlation_id({}) is None
