"""bench/cost.py's arithmetic: per million requests, by charge and architecture."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from bench import cost, prices
from sagegate.deploy.stages import load_stage


def test_duration_is_billed_in_whole_milliseconds_rounded_up() -> None:
    assert cost.billed_ms(0.0611) == 62
    assert cost.billed_ms(0.061) == 61
    assert cost.billed_ms(0.0) == 1


def test_a_capture_record_is_billed_in_5_kb_steps() -> None:
    assert cost.capture_billed_bytes(0) == 0
    assert cost.capture_billed_bytes(1) == 5120
    assert cost.capture_billed_bytes(5120) == 5120
    assert cost.capture_billed_bytes(12 * 1024) == 15 * 1024


def test_a_million_requests_cost_each_charge_by_its_price() -> None:
    usage = cost.Usage("r", billed_ms=100, memory_mb=2048, capture_bytes=3000)
    x86 = cost.per_million(usage, "x86_64")
    # 0.1 s x 2 GB = 0.2 GB-s a request
    assert x86.compute == pytest.approx(0.2 * 0.0000166667 * 1e6)  # $3.33
    assert x86.requests == pytest.approx(0.20)
    assert x86.gateway == pytest.approx(3.50)
    assert x86.capture == pytest.approx(5120 / 1024 ** 3 * 0.029 * 1e6)  # 3 KB billed as 5
    assert x86.streamed == 0
    assert x86.total == pytest.approx(x86.compute + 0.20 + 3.50 + x86.capture)


def test_arm64_costs_less_only_in_lambdas_compute() -> None:
    usage = cost.Usage("r", billed_ms=1000, memory_mb=1024, capture_bytes=0)
    x86, arm = cost.per_million(usage, "x86_64"), cost.per_million(usage, "arm64")
    assert arm.compute / x86.compute == pytest.approx(0.8, abs=1e-4)
    assert dataclasses.replace(arm, compute=0) == dataclasses.replace(x86, compute=0)


def test_only_streamed_bytes_past_6_mb_are_charged() -> None:
    small = cost.Usage("llm", 10, 1024, 0, streamed_bytes=4096)
    assert cost.per_million(small, "arm64").streamed == 0
    large = dataclasses.replace(small, streamed_bytes=prices.LAMBDA_STREAM_FREE_BYTES + prices.GB)
    assert cost.per_million(large, "arm64").streamed == pytest.approx(0.008 * 1e6)


def test_memory_is_the_stages_and_the_streaming_functions_own_when_set() -> None:
    stage = load_stage("prod")
    api = cost.memories(stage)[0]
    assert api == stage.lambda_memory_size
    own = dataclasses.replace(stage, lambda_functions={"stream": {"lambda_memory_size": 512}})
    assert cost.memories(own) == (api, 512)
    assert cost.memories(dataclasses.replace(stage, lambda_functions={})) == (api, api)


def test_the_table_gives_arm64_over_x86_64_per_route() -> None:
    text = cost.cost_table([cost.Usage("image", 100, 1024, 0)])
    x86 = cost.per_million(cost.Usage("image", 100, 1024, 0), "x86_64").total
    arm = cost.per_million(cost.Usage("image", 100, 1024, 0), "arm64").total
    assert f"{arm / x86:.3f}" in text.splitlines()[-1]
    assert f"${x86:,.2f}" in text


def test_a_routes_connection_is_closed_after_its_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    connections: list[Any] = []

    class Connection:
        def __init__(self, host: str, port: int | None, timeout: float) -> None:
            self.closed = False
            connections.append(self)

        def request(self, *args: Any, **kwargs: Any) -> None:
            pass

        def getresponse(self) -> Any:
            return type("Answer", (), {"status": 200, "read": lambda self: b"{}"})()

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(cost.http.client, "HTTPConnection", Connection)
    api = type("Api", (), {"url": "http://127.0.0.1:9"})()
    route = cost.Route("r", "/predict", b"{}", "application/json", "e")
    with cost.timed(api, route) as call:  # type: ignore[arg-type]
        assert call()[1] == 2
        assert not connections[0].closed
    assert [connection.closed for connection in connections] == [True]
