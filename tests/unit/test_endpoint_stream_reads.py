"""Whatever reading a response stream's events raises, before its first event or after it,
:class:`EndpointClient` answers with sagegate's errors (``read_error``, one translation for
both places): botocore reads the event stream straight from urllib3, so its read timeouts and
broken connections arrive unwrapped, and its own frame parser raises ``ParserError``s. A
connection broken before the first event is retried (nothing was read yet); after it the
stream broke off. The client is an in-memory fake whose body raises as botocore's does."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.eventstream import ChecksumMismatch, InvalidPayloadLength, ParserError
from botocore.exceptions import EventStreamError
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from chalicelib.core.errors import (
    EndpointError,
    EndpointTimeoutError,
    EndpointUnavailableError,
    InvalidEndpointResponseError,
    ModelError,
)
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient, Invocation, read_error

PART = {"PayloadPart": {"Bytes": b'{"token": {"text": "Paris"}}\n'}}


def timeout() -> Exception:
    return ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]


def reset() -> Exception:
    return ProtocolError("Connection broken", ConnectionResetError(104, "reset"))


class Body:
    """A response stream's body: ``events`` (dicts yielded, exceptions raised), closed or not."""

    def __init__(self, *events: Any) -> None:
        self.events, self.closed = events, False

    def __iter__(self) -> Iterator[Any]:
        for event in self.events:
            if isinstance(event, BaseException):
                raise event
            yield event

    def close(self) -> None:
        self.closed = True


class Runtime:
    """``invoke_endpoint_with_response_stream`` answering each call with the next body."""

    def __init__(self, *bodies: Body) -> None:
        self.bodies, self.calls = list(bodies), 0

    def invoke_endpoint_with_response_stream(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        return {"Body": self.bodies.pop(0), "ContentType": "application/jsonlines",
                "InvokedProductionVariant": "AllTraffic"}


def client(runtime: Runtime, sleeps: list[float]) -> EndpointClient:
    return EndpointClient(runtime, RetryPolicy(max_attempts=3, budget_seconds=60,  # type: ignore[arg-type]
                                               attempt_timeout=4), sleep=sleeps.append)


INVOCATION = Invocation("smollm2", b"{}", "application/json", "application/json")


@pytest.mark.parametrize("raised", [reset, lambda: ConnectionResetError(104, "reset"),
                                    lambda: ProtocolError("IncompleteRead(0 bytes read)")])
def test_a_connection_broken_before_the_first_event_is_retried(raised: Any) -> None:
    first, second = Body(raised()), Body(PART)
    runtime, sleeps = Runtime(first, second), list[float]()
    stream = client(runtime, sleeps).invoke_stream(INVOCATION)
    assert list(stream.parts()) == [PART["PayloadPart"]["Bytes"]]
    assert runtime.calls == 2 and len(sleeps) == 1 and stream.attempts == 2 and first.closed


def test_a_connection_that_stays_broken_is_an_unavailable_endpoint_after_the_retries() -> None:
    bodies = [Body(reset()) for _ in range(3)]
    runtime, sleeps = Runtime(*bodies), list[float]()
    with pytest.raises(EndpointUnavailableError) as raised:
        client(runtime, sleeps).invoke_stream(INVOCATION)
    assert runtime.calls == 3 and all(body.closed for body in bodies)
    assert raised.value.retry_after is not None


@pytest.mark.parametrize(("raised", "expected"), [
    (timeout, EndpointTimeoutError),
    (lambda: ChecksumMismatch(1, 2), InvalidEndpointResponseError),
    (lambda: InvalidPayloadLength(1 << 30), InvalidEndpointResponseError),
    (lambda: EventStreamError({"Error": {"Code": "ModelStreamError", "Message": "no"}},
                              "InvokeEndpointWithResponseStream"), ModelError)])
def test_a_timeout_a_bad_frame_or_an_error_event_first_is_not_retried(
        raised: Any, expected: type[Exception]) -> None:
    body = Body(raised(), PART)
    runtime, sleeps = Runtime(body), list[float]()
    with pytest.raises(expected):
        client(runtime, sleeps).invoke_stream(INVOCATION)
    assert runtime.calls == 1 and sleeps == [] and body.closed


@pytest.mark.parametrize(("raised", "expected", "code"), [
    (timeout, EndpointTimeoutError, "EndpointTimeout"),
    (reset, EndpointError, "EndpointError"),
    (lambda: OSError(32, "broken pipe"), EndpointError, "EndpointError"),
    (lambda: ChecksumMismatch(1, 2), InvalidEndpointResponseError, "InvalidEndpointResponse"),
    (lambda: ParserError("bad"), InvalidEndpointResponseError, "InvalidEndpointResponse")])
def test_a_failure_after_the_first_event_is_sagegates_error_never_retried(
        raised: Any, expected: type[EndpointError], code: str) -> None:
    runtime, sleeps = Runtime(Body(PART, raised())), list[float]()
    stream = client(runtime, sleeps).invoke_stream(INVOCATION)
    parts = stream.parts()
    assert next(parts) == PART["PayloadPart"]["Bytes"]
    with pytest.raises(expected) as found:
        next(parts)
    assert type(found.value) is expected and code == found.value.CODE
    assert runtime.calls == 1 and sleeps == []


def test_after_the_first_event_a_broken_connection_says_it_broke_off() -> None:
    error = read_error(reset(), started=True)
    assert type(error) is EndpointError and "broke off" in error.message
    assert isinstance(read_error(reset(), started=False), EndpointUnavailableError)
