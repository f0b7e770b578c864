"""``make run``'s stack as a user meets it: ``sagegate run`` (:mod:`sagegate.local.stack`) in a
subprocess (bad settings, ports in use, someone else answering /health, a burst of new
connections) and chalice local's own server.

Every process is started here and stopped by its PID.
"""
from __future__ import annotations

import http.client
import http.server
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from emulator.process import EmulatorProcess, free_port, start_emulator
from sagegate.local.processes import (
    ApiProcess,
    ApiStartError,
    start_chalice_local,
    wait_until_serving,
)
from sagegate.local.supervision import Supervisor
from tests import imagefactory
from tests.integration.conftest import Stack
from tests.integration.test_emulator import MODEL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
BURST = 64
"""Fresh connections opened at once, far above socketserver's default backlog of 5 (with
which 1 to 6% of 16 clients' requests were reset)."""


def sagegate_run(env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``make run``'s command, expected to stop by itself (it cannot start). Should it start
    after all, it gets SIGINT (Ctrl-C) so that it stops its own children."""
    process = subprocess.Popen([sys.executable, "-m", "sagegate.cli", "run"], cwd=ROOT,
                               env={**os.environ, **env}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def ports() -> dict[str, str]:
    return {"API_PORT": str(free_port()), "EMULATOR_PORT": str(free_port()),
            "MOTO_PORT": str(free_port())}


def assert_one_clear_line(result: subprocess.CompletedProcess[str], *says: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stdout + result.stderr
    assert "ready on" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("sagegate:")]
    assert len(lines) == 1, result.stderr
    for text in says:
        assert text in lines[0]


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [("PNG_COMPRESSION", "12", "between 0 and 9"),
     ("PASSTHROUGH", "maybe", "must be true or false"),
     ("CAPTURE_SAMPLING_PERCENTAGE", "200", "between 0 and 100")],
)
def test_a_bad_setting_stops_make_run_with_one_line(name: str, value: str, says: str) -> None:
    result = sagegate_run({**ports(), name: value})

    assert_one_clear_line(result, "cannot start", name, says)


@pytest.mark.parametrize("variable", ["API_PORT", "EMULATOR_PORT"])
def test_a_port_in_use_stops_make_run_naming_it(variable: str) -> None:
    chosen = ports()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = sagegate_run({**chosen, variable: str(port)})

    assert_one_clear_line(result, f"port {port}", variable, f"make run {variable}=")


def test_a_port_that_is_not_a_number_is_refused() -> None:
    assert_one_clear_line(sagegate_run({**ports(), "API_PORT": "eighty"}), "API_PORT")


class _Foreign(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def foreign_server() -> Iterator[int]:
    """Another program answering 200 on every path, /health included."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_health_from_another_server_is_not_taken_for_our_child(foreign_server: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    api = ApiProcess(child, "127.0.0.1", foreign_server, instance="our-own-marker")
    try:
        with pytest.raises(ApiStartError, match="did not answer /health"):
            wait_until_serving(api, timeout=1.5)
    finally:
        api.stop(timeout=2)


def test_health_from_a_dead_child_is_not_taken_either(foreign_server: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait(10)
    api = ApiProcess(child, "127.0.0.1", foreign_server, instance="")

    with pytest.raises(ApiStartError, match="exited with code 3"):
        wait_until_serving(api, timeout=5)


OTHER_APP = """
from chalice import Chalice

app = Chalice(app_name="other")


@app.route("/", methods=["POST"])
def index():
    return {"ok": True}
"""


def test_chalice_local_serves_another_project_from_its_own_directory(tmp_path: Path) -> None:
    """What the benchmark does with the 2018 reference app: another Chalice project, its
    default stage, ready on any answer from this child (GET / is 405 there)."""
    (tmp_path / ".chalice").mkdir()
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps(
        {"version": "2.0", "app_name": "other", "stages": {"dev": {"api_gateway_stage": "api"}}}))
    (tmp_path / "app.py").write_text(OTHER_APP)

    with open(tmp_path / "api.log", "wb") as log, start_chalice_local(
            free_port(), "http://127.0.0.1:9", project_dir=tmp_path, stage=None, log=log,
            ready_path="/", ready_status=None) as api:
        connection = http.client.HTTPConnection(api.host, api.port, timeout=10)
        connection.request("POST", "/", body=b"{}", headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()

    assert (response.status, answer) == (200, {"ok": True})
    assert response.getheader("X-Sagegate-Instance") == api.instance != ""
    assert api.process.poll() is not None  # stopped on the way out, by its PID


def burst_of_fresh_connections(host: str, port: int, path: str, rounds: int = 3) -> list[str]:
    """``rounds`` bursts of BURST connections opened at the same moment, one GET each;
    returns each one's status, or the name of the error it met (a reset, a timeout)."""
    barrier = threading.Barrier(BURST)

    def one(_: int) -> str:
        barrier.wait(timeout=30)
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            conn.request("GET", path)
            return str(conn.getresponse().status)
        except OSError as error:
            return type(error).__name__
        finally:
            conn.close()

    outcomes: list[str] = []
    with ThreadPoolExecutor(max_workers=BURST) as pool:
        for _ in range(rounds):
            outcomes += pool.map(one, range(BURST))
    return outcomes


def listen_backlog(port: int) -> int:
    """The accept queue size of the socket listening on ``port`` (``ss`` shows it as Send-Q)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[2])


def test_chalice_local_takes_bursts_of_fresh_connections_without_a_reset(stack: Stack) -> None:
    outcomes = burst_of_fresh_connections(stack.api.host, stack.api.port, "/health")

    assert outcomes == ["200"] * len(outcomes)
    assert listen_backlog(stack.api.port) >= 128


def test_the_emulator_takes_bursts_of_fresh_connections_without_a_reset(stack: Stack) -> None:
    emulator = stack.emulator
    outcomes = burst_of_fresh_connections(emulator.host, emulator.port, "/ping")

    assert outcomes == ["200"] * len(outcomes)
    assert listen_backlog(emulator.port) >= 128


def test_a_client_that_gives_up_costs_chalice_local_no_traceback(stack: Stack) -> None:
    """Three clients drop their connection (a reset) while sagegate waits on a slow model:
    chalice local's write fails, and it says so in one line each."""
    body = imagefactory.png(imagefactory.gradient(64, 64))
    head = (f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: image/png\r\n"
            f"X-Custom-Attributes: emulator-latency-ms=600\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    before = stack.api_log.read_text(errors="replace").count("closed the connection early")
    for _ in range(3):
        with socket.create_connection((stack.api.host, stack.api.port), timeout=5) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(head + body)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log = stack.api_log.read_text(errors="replace")
        if log.count("closed the connection early") >= before + 3:
            break
        time.sleep(0.1)

    assert log.count("closed the connection early") == before + 3
    assert "Traceback" not in log


def test_chalice_local_answers_carry_the_instance_marker(stack: Stack) -> None:
    response = stack.http.request("GET", stack.api.url + "/health")

    assert response.headers["X-Sagegate-Instance"] == stack.api.instance != ""


def test_the_emulator_supervisor_gives_up_after_a_bounded_number_of_restarts(
        tmp_path: Path) -> None:
    """A real emulator killed, then every restart failing (its config broken meanwhile):
    exactly ``max_restarts`` restarts are tried, then the supervisor gives up."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"models": {"m": {"path": str(MODEL)}}, "endpoints": {
        "efficientnet-lite0": {"variants": [{"name": "AllTraffic", "model": "m"}]}}}))
    port = free_port()
    starts: list[int] = []
    lines: list[str] = []

    def start() -> EmulatorProcess:
        starts.append(port)
        return start_emulator(config, port=port, timeout=60)

    ticks = itertools.count(0, 100)  # a clock where every backoff has always passed
    supervisor = Supervisor(start, lines.append, clock=lambda: float(next(ticks)),
                            max_restarts=2)
    first = supervisor.start()
    try:
        os.kill(first.pid, signal.SIGKILL)  # our own child
        first.process.wait(10)
        config.write_text("{ not json")
        verdicts = [supervisor.check() for _ in range(6)]
    finally:
        supervisor.stop()

    assert verdicts[:3] == [True, True, False]
    assert len(starts) == 1 + 2
    assert "exited with code -9" in lines[0]
    assert "giving up after 2 restarts" in lines[-1]
