"""Whatever a broken endpoint connection does, EndpointClient answers with sagegate's errors.

A real boto3 client against a raw socket server on 127.0.0.1 that misbehaves in one way per
test: the class of bug is an SDK exception escaping as a 500 (found when the emulator was
killed while it was sending an answer: botocore's ResponseStreamingError).
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config

from chalicelib.core.errors import EndpointError, EndpointUnavailableError, SagegateError
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient, Invocation

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"x-Amzn-Invoked-Production-Variant: AllTraffic\r\n")
BEHAVIOURS = {
    "body cut short": HEAD + b"Content-Length: 1000\r\n\r\n[0.1, 0.2",
    "headers cut short": b"HTTP/1.1 200 OK\r\nContent-Ty",
    "not HTTP": b"\x16\x03\x01\x00\xa5garbage that is no status line\r\n\r\n",
    "closed at once": b"",
    "chunked body cut short": HEAD + b"Transfer-Encoding: chunked\r\n\r\n400\r\n[0.1",
}


def _server(answer: bytes) -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


@pytest.fixture(params=sorted(BEHAVIOURS))
def broken_endpoint(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    for url in _server(BEHAVIOURS[request.param]):
        yield request.param, url


def test_a_broken_connection_is_a_sagegate_error_never_an_sdk_exception(
        broken_endpoint: tuple[str, str]) -> None:
    name, url = broken_endpoint
    client = boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(retries={"total_max_attempts": 1}, read_timeout=2,
                                        connect_timeout=2))
    sleeps: list[float] = []
    endpoint = EndpointClient(client, RetryPolicy(max_attempts=2, budget_seconds=20,
                                                  attempt_timeout=4), sleep=sleeps.append)
    try:
        result = endpoint.invoke(Invocation("e", b"x", "image/jpeg", "application/json"))
    except SagegateError as error:
        raised = error
    else:  # http.client may read headers cut at EOF as complete: an empty answer, which the
        # pipeline refuses as InvalidEndpointResponse (tests/functional/test_errors.py)
        assert name == "headers cut short" and result.body == b"", (name, result)
        return
    assert isinstance(raised, EndpointError), name
    if name in ("body cut short", "chunked body cut short", "closed at once"):
        # the connection dropped: retried, then 503 so the client retries later
        assert isinstance(raised, EndpointUnavailableError), (name, raised)
        assert len(sleeps) == 1
