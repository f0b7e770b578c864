"""The emulator's log and idle keep-alive connections: a connection a client keeps open and
idle past the server's timeout is closed without a ``Request timed out`` line (an idle
keep-alive connection closing is normal); a request cut mid-way is still logged."""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from emulator import server as emulator_server
from emulator.server import EmulatorServer
from tests.unit.emulator.test_emulator_async import build

IDLE_S = 0.3


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatorServer]:
    monkeypatch.setattr(emulator_server.Handler, "timeout", IDLE_S)
    service, *_ = build()
    server = EmulatorServer(("127.0.0.1", 0), service.runtime, service)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _closed_by_server(connection: socket.socket, limit: float = 10.0) -> bytes:
    """What the server sends until it closes the connection (bounded wait)."""
    connection.settimeout(limit)
    received = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        chunk = connection.recv(65536)
        if not chunk:
            return received
        received += chunk
    raise AssertionError("the server kept the idle connection open")


def _timeouts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if "timed out" in record.getMessage()]


def test_an_idle_keep_alive_connection_closes_without_a_log_line(
        served: EmulatorServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="emulator")
    host, port = served.server_address[:2]
    with socket.create_connection((str(host), port), timeout=10) as connection:
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: emulator\r\n\r\n")
        answered = _closed_by_server(connection)  # the answer, then the idle close

    assert answered.startswith(b"HTTP/1.1 200")
    assert _timeouts(caplog) == []


def test_a_request_cut_mid_way_is_still_logged(
        served: EmulatorServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="emulator")
    host, port = served.server_address[:2]
    with socket.create_connection((str(host), port), timeout=10) as connection:
        connection.sendall(b"GET /ping HTTP/1.1\r\nHost: emul")  # the headers never end
        _closed_by_server(connection)

    assert any("Request timed out" in line for line in _timeouts(caplog))
