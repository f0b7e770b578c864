"""The event stream encoder against botocore's own reader, and the stream faults' framing.

botocore's ``EventStreamBuffer`` checks both CRCs and the lengths; its ``EventStream`` with the
sagemaker-runtime model's ``ResponseStream`` shape is what ``invoke_endpoint_with_response_stream``
iterates, so a message it reads here is one boto3 reads from the emulator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import botocore.session
import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer
from botocore.exceptions import EventStreamError
from botocore.parsers import create_parser

from emulator import eventstream, faults


def read_messages(data: bytes, chunk: int | None = None) -> list[Any]:
    buffer = EventStreamBuffer()
    messages = []
    step = chunk or len(data) or 1
    for start in range(0, len(data), step):
        buffer.add_data(data[start:start + step])
        messages.extend(buffer)
    return messages


class RawStream:
    """What botocore's EventStream reads: a body that yields chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        pass


def boto3_events(chunks: list[bytes]) -> EventStream:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    output = model.operation_model("InvokeEndpointWithResponseStream").output_shape
    parser = create_parser("rest-json")._event_stream_parser  # what the client hands it
    return EventStream(RawStream(chunks), output.members["Body"], parser,
                       "InvokeEndpointWithResponseStream")


def test_a_payload_part_reads_back_with_its_headers_and_both_crcs() -> None:
    data = eventstream.payload_part(b'{"token": {"id": 1}}\n')

    (message,) = read_messages(data)

    assert message.headers == {":event-type": "PayloadPart",
                               ":content-type": "application/octet-stream",
                               ":message-type": "event"}
    assert message.payload == b'{"token": {"id": 1}}\n'
    assert message.prelude.total_length == len(data)


def test_messages_read_back_when_they_arrive_a_few_bytes_at_a_time() -> None:
    payloads = [b"a", b"", "é€𝄞\n".encode(), b"x" * 70_000]
    data = b"".join(eventstream.payload_part(payload) for payload in payloads)

    messages = read_messages(data, chunk=7)

    assert [message.payload for message in messages] == payloads


@pytest.mark.parametrize("offset", [3, 9, 20, -2])
def test_a_changed_byte_fails_a_crc(offset: int) -> None:
    data = bytearray(eventstream.payload_part(b"payload"))
    data[offset] ^= 0x01

    with pytest.raises(ChecksumMismatch):
        read_messages(bytes(data))


def test_a_string_header_is_type_7_with_a_two_byte_length() -> None:
    data = eventstream.encode_message({":a": "xyz"}, b"")

    assert data[12:21] == b"\x02:a\x07\x00\x03xyz"


@pytest.mark.parametrize("headers", [{"h": "v" * 65_536},
                                     {"h": "v" * 60_000, "i": "v" * 60_000, "j": "v" * 60_000}])
def test_oversized_headers_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        eventstream.encode_message(headers, b"")


def test_boto3_reads_payload_parts_as_the_response_stream() -> None:
    events = list(boto3_events([eventstream.payload_part(b"one\n"),
                                eventstream.payload_part(b"two\n")]))

    assert events == [{"PayloadPart": {"Bytes": b"one\n"}}, {"PayloadPart": {"Bytes": b"two\n"}}]


def test_boto3_raises_a_model_stream_error_event() -> None:
    chunks = [eventstream.payload_part(b"one\n"),
              eventstream.model_stream_error("broken", eventstream.STREAM_BROKEN)]
    read: list[Any] = []

    with pytest.raises(EventStreamError) as caught:
        read.extend(boto3_events(chunks))

    assert read == [{"PayloadPart": {"Bytes": b"one\n"}}]
    error = caught.value.response["Error"]
    assert (error["Code"], error["Message"]) == ("ModelStreamError", "broken")


def test_boto3_raises_an_internal_stream_failure_event() -> None:
    chunk = eventstream.exception_event(eventstream.INTERNAL_STREAM_FAILURE,
                                        {"Message": "failed"})

    with pytest.raises(EventStreamError) as caught:
        list(boto3_events([chunk]))

    assert caught.value.response["Error"]["Code"] == "InternalStreamFailure"


LINES = [b'{"token": {"id": 1, "text": "a"}}\n', b'{"token": {"id": 2, "text": "b"}}\n',
         b'{"token": {"id": 3, "text": "c"}}\n']


def stream(plan: faults.FaultPlan, parts: list[bytes], sleeps: list[float] | None = None,
           timeout: float = 60.0, clock: Iterator[float] | None = None) -> list[Any]:
    ticks = clock or iter(lambda: 0.0, None)
    events = faults.stream_events(plan, parts, (sleeps if sleeps is not None else []).append,
                                  timeout, lambda: next(ticks))
    return read_messages(b"".join(events))


def test_without_faults_each_part_is_one_payload_part() -> None:
    messages = stream(faults.FaultPlan(), LINES)

    assert [message.payload for message in messages] == LINES


def test_split_payload_cuts_the_first_line_across_two_parts() -> None:
    messages = stream(faults.FaultPlan(error=faults.SPLIT), LINES)

    payloads = [message.payload for message in messages]
    assert len(payloads) == 4
    assert not payloads[0].endswith(b"\n")
    with pytest.raises(json.JSONDecodeError):
        json.loads(payloads[0])
    assert b"".join(payloads) == b"".join(LINES)


def test_model_stream_error_ends_the_stream_after_two_parts() -> None:
    plan = faults.FaultPlan(error=faults.STREAM_ERROR, detail=eventstream.TIME_EXCEEDED)

    messages = stream(plan, LINES)

    assert [message.payload for message in messages[:2]] == LINES[:2]
    assert messages[2].headers[":exception-type"] == "ModelStreamError"
    assert json.loads(messages[2].payload)["ErrorCode"] == "ModelInvocationTimeExceeded"
    assert len(messages) == 3


def test_latency_is_spent_before_the_first_part() -> None:
    sleeps: list[float] = []

    stream(faults.FaultPlan(latency_ms=1500), LINES, sleeps)

    assert sleeps == [1.5]


def test_a_first_part_past_the_timeout_is_model_invocation_time_exceeded() -> None:
    messages = stream(faults.FaultPlan(), LINES, timeout=60, clock=iter([0.0, 61.0]))

    (message,) = messages
    assert json.loads(message.payload)["ErrorCode"] == "ModelInvocationTimeExceeded"


@pytest.mark.parametrize(("attribute", "plan"), [
    ("emulator-fault=SplitPayload", faults.FaultPlan(error="SplitPayload")),
    ("emulator-fault=ModelStreamError", faults.FaultPlan(error="ModelStreamError")),
    ("emulator-fault=ModelStreamError:ModelInvocationTimeExceeded",
     faults.FaultPlan(error="ModelStreamError", detail="ModelInvocationTimeExceeded")),
])
def test_stream_faults_are_asked_for_by_name(attribute: str, plan: faults.FaultPlan) -> None:
    request = faults.parse_fault_request(attribute)

    assert faults.plan_faults(faults.FaultConfig(), None, request) == plan  # type: ignore[arg-type]


def test_an_unknown_model_stream_error_code_is_refused() -> None:
    with pytest.raises(faults.errors.ValidationError, match="ErrorCode"):
        faults.parse_fault_request("emulator-fault=ModelStreamError:Other")
