"""Runtime.invoke_stream with in-memory containers: what is refused before the stream, what
the stream carries, and that the container's answer is always closed (no model, no I/O)."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer

from emulator import errors
from emulator.config import parse_config
from emulator.container import ContainerReply, StreamingContainer
from emulator.runtime import InvokeRequest, Runtime, StreamResult
from tests.unit.emulator.fakes import FakeContainer

RAW = {
    "allow_fault_header": True,
    "models": {"lm": {"kind": "llm"}, "tab": {"kind": "tensor", "path": "t.onnx"}},
    "endpoints": {name: {"variants": [{"name": "AllTraffic", "model": name}]}
                  for name in ("lm", "tab")},
}


class FakeStream:
    def __init__(self, lines: list[bytes]) -> None:
        self.content_type = "application/jsonlines"
        self.lines = lines
        self.closed = False

    def parts(self) -> Iterator[bytes]:
        yield from self.lines

    def close(self) -> None:
        self.closed = True


class FakeStreamingContainer:
    """Streams its lines; or refuses (a reply), or throttles (raises)."""

    def __init__(self, outcome: FakeStream | ContainerReply | Exception) -> None:
        self.outcome = outcome

    def invoke(self, body: bytes, content_type: str | None, accept: str | None,
               cancel: threading.Event | None = None) -> ContainerReply:
        return ContainerReply(200, b"{}", "application/json")

    def stream(self, body: bytes, content_type: str | None, accept: str | None
               ) -> FakeStream | ContainerReply:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def generations(self) -> dict[str, int]:
        return {"started": 0}


def runtime(lm: Any, slept: list[float] | None = None) -> Runtime:
    config = parse_config(RAW, Path("/configs"))
    tab = FakeContainer(ContainerReply(200, b'{"predictions": [1]}', "application/json"))
    return Runtime(config, {"lm": lm, "tab": tab}, random.Random(1),
                   (slept if slept is not None else []).append)


def call(endpoint: str = "lm", attributes: str | None = None) -> InvokeRequest:
    return InvokeRequest(endpoint, b"{}", 2, "application/json", custom_attributes=attributes)


def payloads(result: StreamResult) -> list[bytes]:
    buffer = EventStreamBuffer()
    buffer.add_data(b"".join(result.events))
    return [message.payload for message in buffer]


def test_the_fake_is_a_streaming_container() -> None:
    assert isinstance(FakeStreamingContainer(FakeStream([])), StreamingContainer)


def test_each_part_is_a_payload_part_with_the_containers_content_type() -> None:
    opened = FakeStream([b"a\n", b"b\n"])

    result = runtime(FakeStreamingContainer(opened)).invoke_stream(call())

    assert (result.variant, result.content_type) == ("AllTraffic", "application/jsonlines")
    assert payloads(result) == [b"a\n", b"b\n"]
    result.close()
    assert opened.closed


def test_a_refusal_is_a_model_error_before_the_stream() -> None:
    refusal = ContainerReply(400, b'{"error": "bad", "code": 400}', "application/json")

    with pytest.raises(errors.ModelError) as caught:
        runtime(FakeStreamingContainer(refusal)).invoke_stream(call())

    assert caught.value.original_status == 400
    assert json.loads(caught.value.original_message) == {"error": "bad", "code": 400}


def test_a_throttled_generation_is_raised_before_the_stream() -> None:
    lm = FakeStreamingContainer(errors.ThrottlingException("busy"))

    with pytest.raises(errors.ThrottlingException):
        runtime(lm).invoke_stream(call())


@pytest.mark.parametrize(("trigger", "error"), [
    ("emulator-fault=ServiceUnavailable", errors.ServiceUnavailable),
    ("emulator-fault=ModelError:503", errors.ModelError),
])
def test_injected_errors_come_before_the_stream(trigger: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        runtime(FakeStreamingContainer(FakeStream([b"a\n"]))).invoke_stream(call(
            attributes=trigger))


def test_latency_is_spent_when_the_events_are_read() -> None:
    slept: list[float] = []
    result = runtime(FakeStreamingContainer(FakeStream([b"a\n"])), slept).invoke_stream(
        call(attributes="emulator-latency-ms=250"))

    assert slept == []
    assert payloads(result) == [b"a\n"]
    assert slept == [0.25]


def test_a_container_that_does_not_stream_is_one_payload_part() -> None:
    result = runtime(FakeStreamingContainer(FakeStream([]))).invoke_stream(call("tab"))

    assert (result.content_type, payloads(result)) == ("application/json",
                                                        [b'{"predictions": [1]}'])


def test_generations_lists_the_streaming_models() -> None:
    assert runtime(FakeStreamingContainer(FakeStream([]))).generations() == {
        "lm": {"started": 0}}
