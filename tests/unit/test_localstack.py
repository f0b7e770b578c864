"""The local stack's helpers (:mod:`sagegate.local.stack`, :mod:`sagegate.local.processes`) on
their own: port checks, the command line's ports, readiness (an answer from our own child
only), termination by PID, memory readings, the environment and the ready banner's capture
line.

Every child process is started here and stopped by its PID; every server listens on 127.0.0.1.
"""
from __future__ import annotations

import http.server
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from chalicelib.core.config import Settings
from emulator.process import free_port, terminate
from sagegate.local.preflight import (
    StartError,
    check_models,
    check_port_free,
    preflight,
    read_port,
)
from sagegate.local.processes import (
    INSTANCE_HEADER,
    ApiProcess,
    ApiStartError,
    api_env,
    own_answer,
    peak_rss_mb,
    rss_mb,
    wait_until_serving,
)
from sagegate.local.stack import describe_capture, parse_args

pytestmark = pytest.mark.timeout(60)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A child of this test that does nothing until stopped (by its PID)."""
    child = subprocess.Popen(SLEEPER)
    try:
        yield child
    finally:
        terminate(child, 2)


# ---------------------------------------------------------------- ports

def test_a_free_port_passes_the_check() -> None:
    check_port_free(free_port(), "API_PORT")


def test_a_port_someone_listens_on_is_refused_naming_it_and_the_way_out() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(StartError) as refused:
            check_port_free(port, "EMULATOR_PORT")

    message = str(refused.value)
    assert f"port {port} on 127.0.0.1 (EMULATOR_PORT)" in message
    assert "make run EMULATOR_PORT=9000" in message


def test_the_way_out_never_suggests_the_port_in_use() -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            taken.bind(("127.0.0.1", 9000))
        except OSError:
            pytest.skip("port 9000 is in use on this machine")
        taken.listen()

        with pytest.raises(StartError, match="make run API_PORT=9001"):
            check_port_free(9000, "API_PORT")


@pytest.mark.parametrize(("environ", "expected"),
                         [({}, 8000), ({"API_PORT": ""}, 8000), ({"API_PORT": " 9000 "}, 9000),
                          ({"API_PORT": "65535"}, 65535)])
def test_read_port_takes_the_variable_or_the_default(environ: dict[str, str],
                                                     expected: int) -> None:
    assert read_port(environ, "API_PORT") == expected


@pytest.mark.parametrize("raw", ["eighty", "0", "65536", "-1", "80.0"])
def test_read_port_refuses_what_is_not_a_port(raw: str) -> None:
    with pytest.raises(StartError, match=f"EMULATOR_PORT must be a port number.*{raw!r}"):
        read_port({"EMULATOR_PORT": raw}, "EMULATOR_PORT")


def test_port_options_beat_the_environment() -> None:
    api, emulator, moto = free_port(), free_port(), free_port()
    args = parse_args(["--stage", "test", "--api-port", str(api),
                       "--emulator-port", str(emulator), "--moto-port", str(moto)])

    plan = preflight(args, {"API_PORT": "eighty", "EMULATOR_PORT": "eighty",
                            "MOTO_PORT": "eighty"})

    assert (plan.api_port, plan.emulator_port, plan.moto_port) == (api, emulator, moto)
    assert plan.settings.endpoint_name == "efficientnet-lite0"
    assert plan.api_key is None  # the test stage is open
    assert plan.jobs_env["JOBS_BUCKET"] == "sagegate-local-jobs"
    assert plan.jobs_env["AWS_ENDPOINT_URL_S3"] == f"http://127.0.0.1:{moto}"


def test_the_same_port_twice_is_refused() -> None:
    port = str(free_port())

    with pytest.raises(StartError, match=f"both {port}"):
        preflight(parse_args([]), {"API_PORT": port, "EMULATOR_PORT": port})


@pytest.mark.parametrize("value", ["0", "http", "70000"])
def test_a_port_option_that_is_not_a_port_is_a_usage_error(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--api-port", value])

    assert exited.value.code == 2
    assert "sagegate run: error: argument --api-port" in capsys.readouterr().err


def test_help_names_the_command_and_the_port_variables(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])

    text = capsys.readouterr().out
    assert text.startswith("usage: sagegate run")
    for word in ("--stage", "--emulator-config", "API_PORT", "EMULATOR_PORT"):
        assert word in text


# ---------------------------------------------------------------- readiness

class _Answer(http.server.BaseHTTPRequestHandler):
    """Answers ``status`` on every path, with ``marker`` in the instance header if set."""

    status: ClassVar[int] = 200
    marker: ClassVar[str] = ""

    def do_GET(self) -> None:
        self.send_response(self.status)
        if self.marker:
            self.send_header(INSTANCE_HEADER, self.marker)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def serving(status: int, marker: str) -> http.server.ThreadingHTTPServer:
    handler = type("Handler", (_Answer,), {"status": status, "marker": marker})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def answers() -> Iterator[list[http.server.ThreadingHTTPServer]]:
    servers: list[http.server.ThreadingHTTPServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "marker", "expected"),
                         [(200, "ours", 200), (405, "ours", 405), (200, "", None),
                          (200, "theirs", None), (403, "theirs", None)])
def test_only_an_answer_carrying_our_marker_counts(
        sleeper: subprocess.Popen[bytes], answers: list[http.server.ThreadingHTTPServer],
        status: int, marker: str, expected: int | None) -> None:
    answers.append(server := serving(status, marker))
    api = ApiProcess(sleeper, "127.0.0.1", server.server_address[1], instance="ours")

    assert own_answer(api, "/health") == expected


def test_nothing_listening_is_no_answer(sleeper: subprocess.Popen[bytes]) -> None:
    api = ApiProcess(sleeper, "127.0.0.1", free_port(), instance="ours")

    assert own_answer(api) is None


def test_ready_when_our_child_answers_the_status_asked_for(
        sleeper: subprocess.Popen[bytes],
        answers: list[http.server.ThreadingHTTPServer]) -> None:
    answers.append(server := serving(405, "ours"))
    api = ApiProcess(sleeper, "127.0.0.1", server.server_address[1], instance="ours")

    wait_until_serving(api, timeout=5, path="/", status=None)  # any answer will do
    with pytest.raises(ApiStartError, match=r"did not answer /health within 0\.5 s"):
        wait_until_serving(api, timeout=0.5)  # 200 asked for


def test_a_child_that_exits_is_not_waited_for(
        answers: list[http.server.ThreadingHTTPServer]) -> None:
    answers.append(server := serving(200, "ours"))
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    child.wait(10)
    api = ApiProcess(child, "127.0.0.1", server.server_address[1], instance="ours")
    started = time.monotonic()

    with pytest.raises(ApiStartError, match="exited with code 4"):
        wait_until_serving(api, timeout=30)
    assert time.monotonic() - started < 5


# ---------------------------------------------------------------- termination

def test_terminate_stops_a_child_with_sigterm(sleeper: subprocess.Popen[bytes]) -> None:
    assert terminate(sleeper, 5) == -signal.SIGTERM
    assert sleeper.poll() == -signal.SIGTERM


def test_terminate_kills_a_child_that_ignores_sigterm() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
         "time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        started = time.monotonic()

        assert terminate(child, 0.5) == -signal.SIGKILL
        assert time.monotonic() - started < 5
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def test_terminate_leaves_an_exited_child_and_gives_its_code() -> None:
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait(10)

    assert terminate(child, 1) == 3


def test_api_process_stop_terminates_its_own_child(sleeper: subprocess.Popen[bytes]) -> None:
    with ApiProcess(sleeper, "127.0.0.1", 1) as api:
        assert api.pid == sleeper.pid and api.url == "http://127.0.0.1:1"
    assert sleeper.poll() == -signal.SIGTERM


# ---------------------------------------------------------------- memory, environment, banner

def test_memory_readings_see_what_a_child_holds() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; block = bytearray(96 * 2**20); "
         "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        held = rss_mb(child.pid)

        assert held > 96
        assert peak_rss_mb(child.pid) >= held
    finally:
        terminate(child, 2)
        assert child.stdout is not None
        child.stdout.close()


def test_memory_of_an_exited_child_is_an_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)

    with pytest.raises(OSError):  # reaped: /proc/<pid> is gone
        rss_mb(child.pid)


def test_api_env_points_boto3_at_the_emulator_with_dummy_credentials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a-real-key")

    env = api_env("http://127.0.0.1:9", {"CAPTURE_MODE": "both"})

    assert "AWS_PROFILE" not in env
    assert env["AWS_ACCESS_KEY_ID"] == "testing"
    assert env["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"] == "http://127.0.0.1:9"
    assert env["CAPTURE_MODE"] == "both"


def settings(**env: str) -> Settings:
    return Settings.from_env({"ENDPOINT_NAME": "efficientnet-lite0", **env})


@pytest.mark.parametrize(("env", "line"), [
    ({}, "data capture off"),
    ({"CAPTURE_MODE": "both", "CAPTURE_DESTINATION": "captures", "CAPTURE_MAX_BYTES": "5000000"},
     "capturing both of each prediction to captures (at most 5 MB an endpoint, its oldest files "
     "dropped; CAPTURE_MAX_BYTES)"),
    ({"CAPTURE_MODE": "input", "CAPTURE_DESTINATION": "captures", "CAPTURE_MAX_BYTES": "0"},
     "capturing input of each prediction to captures (no size cap: set CAPTURE_MAX_BYTES)"),
    ({"CAPTURE_MODE": "output", "CAPTURE_DESTINATION": "s3://capture-bucket/x",
      "CAPTURE_MAX_BYTES": "5000000"},
     "capturing output of each prediction to s3://capture-bucket/x"),
])
def test_the_ready_banner_says_what_data_capture_does(env: dict[str, str], line: str) -> None:
    assert describe_capture(settings(**env)) == line


def test_sagegate_run_refuses_to_start_on_a_broken_model(tmp_path: Path) -> None:
    """Every model.json and handler file is loaded before anything starts, as on Lambda."""
    import shutil

    from chalicelib.core.config import Settings
    from chalicelib.registry.loading import MODELS_DIR

    settings = Settings(endpoint_name="efficientnet-lite0")
    shutil.copytree(MODELS_DIR, tmp_path / "models")
    assert "iris-cortex" in check_models(settings, {}, tmp_path / "models")
    handler = tmp_path / "models" / "iris-cortex" / "handler.py"
    # a post_inference of no form Cortex ever called (it may be left out, not misshapen)
    handler.write_text(handler.read_text().replace(
        "def post_inference(prediction, signature, metadata)",
        "def post_inference(prediction, signature, metadata, extra)"))
    with pytest.raises(StartError) as caught:
        check_models(settings, {}, tmp_path / "models")
    assert "models/iris-cortex/handler.py" in str(caught.value)
    assert "post_inference" in str(caught.value)
