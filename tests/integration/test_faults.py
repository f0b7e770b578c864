"""Endpoint faults end to end: chalice local (stage ``test``) -> boto3 -> the emulator.

Each fault is asked of the emulator through the custom attributes (``allow_fault_header`` is on
in ``emulator-config.json``); sagegate must answer its mapped status inside the request budget,
retry only what is retryable and only a bounded number of times (counted in the emulator's own
log by InferenceId, which is sagegate's request id), and recover without a restart. The last
test runs ``make run``'s own stack and kills its emulator under load.

The ``test`` stage: REQUEST_BUDGET_SECONDS=8, ENDPOINT_READ_TIMEOUT=2, ENDPOINT_MAX_ATTEMPTS=3.
"""
from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from emulator.process import free_port
from tests import imagefactory
from tests.integration.conftest import HERE, Stack
from tests.integration.test_api import CATS, assert_error, top1

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = HERE.parents[1]
BUDGET_S = 8.0
MAX_ATTEMPTS = 3
CLIENT_TIMEOUT = urllib3.Timeout(connect=2, read=BUDGET_S + 4)
"""The client waits for the budget plus a margin, no longer: a later answer fails the test."""
_IDS = itertools.count()


def fault(stack: Stack, attributes: str, image: bytes | None = None) -> tuple[Any, str]:
    """A request asking the emulator for one fault; a PNG, so sagegate re-encodes it.

    Returns:
        The response and the request id sagegate passed to the endpoint as InferenceId (its
        own id of record; the client's goes along as the correlation id).
    """
    image = image or imagefactory.png(imagefactory.gradient(64, 64))
    correlation = f"fault-{os.getpid()}-{next(_IDS)}"
    response = stack.http.request(
        "POST", stack.api.url + "/predict", body=image, timeout=CLIENT_TIMEOUT,
        headers={"Content-Type": "image/png", "X-Custom-Attributes": attributes,
                 "X-Request-Id": correlation})
    assert response.headers["X-Correlation-Id"] == correlation
    request_id = response.headers["X-Request-Id"]
    assert request_id != correlation
    return response, request_id


def calls(stack: Stack, request_id: str) -> int:
    """The emulator's calls for one request, once its log has caught up."""
    seen, stable_since = -1, time.monotonic()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        count = stack.emulator_calls(request_id)
        if count != seen:
            seen, stable_since = count, time.monotonic()
        elif count and time.monotonic() - stable_since > 0.3:
            break
        time.sleep(0.05)
    return seen


def test_model_error_is_502_with_the_original_status_and_not_retried(stack: Stack) -> None:
    response, request_id = fault(stack, "emulator-fault=ModelError:500")

    body = assert_error(response, 502, "ModelError")
    assert body["original_status_code"] == 500
    assert calls(stack, request_id) == 1


def test_the_model_refusing_a_forwarded_jpeg_is_the_clients_400(stack: Stack) -> None:
    """A small JPEG goes to the endpoint untouched; the model's 4xx then means a bad image."""
    forwarded, request_id = fault(stack, "emulator-fault=ModelError:400",
                                  imagefactory.jpeg(64, 64))
    assert_error(forwarded, 400, "InvalidImage")
    assert calls(stack, request_id) == 1
    corrupt = imagefactory.corrupt_jpeg()  # a sound header over tables libjpeg refuses
    assert corrupt.endswith(b"\xff\xd9")  # so it is forwarded, and the emulator refuses it
    assert_error(stack.post("/predict", corrupt, "image/jpeg"), 400, "InvalidImage")


@pytest.mark.parametrize("code", ["ThrottlingException", "ModelNotReadyException",
                                  "ServiceUnavailable"])
def test_unavailable_endpoint_is_503_after_bounded_retries(stack: Stack, code: str) -> None:
    response, request_id = fault(stack, f"emulator-fault={code}")

    assert_error(response, 503, "EndpointUnavailable")
    assert response.headers["Retry-After"] == "1"
    assert 2 <= calls(stack, request_id) <= MAX_ATTEMPTS


@pytest.mark.parametrize("code", ["InternalFailure", "InternalDependencyException"])
def test_service_failures_are_502_after_bounded_retries(stack: Stack, code: str) -> None:
    response, request_id = fault(stack, f"emulator-fault={code}")

    assert_error(response, 502, "EndpointError")
    assert 1 <= calls(stack, request_id) <= MAX_ATTEMPTS


def test_a_connection_reset_is_503_after_bounded_retries(stack: Stack) -> None:
    response, request_id = fault(stack, "emulator-fault=ConnectionReset")

    assert_error(response, 503, "EndpointUnavailable")
    assert 2 <= calls(stack, request_id) <= MAX_ATTEMPTS
    assert "connection reset (emulator fault injection)" in stack.emulator_log.read_text()


@pytest.mark.parametrize("kind", ["truncated", "wrong-length", "empty", "html", "nan"])
def test_malformed_endpoint_bodies_are_502_and_not_retried(stack: Stack, kind: str) -> None:
    response, request_id = fault(stack, f"emulator-fault=MalformedOutput:{kind}")

    assert_error(response, 502, "InvalidEndpointResponse")
    assert calls(stack, request_id) == 1


def test_slow_past_the_read_timeout_is_504_inside_the_budget(stack: Stack) -> None:
    # ENDPOINT_READ_TIMEOUT=2: the emulator answers after 3.5 s; the client waits at most
    # the budget plus a margin (CLIENT_TIMEOUT), so a retry storm would fail this test
    response, request_id = fault(stack, "emulator-latency-ms=3500")

    assert_error(response, 504, "EndpointTimeout")
    assert 1 <= calls(stack, request_id) <= MAX_ATTEMPTS


def test_after_every_fault_the_same_process_answers_normally(
        stack: Stack, photos: dict[str, bytes]) -> None:
    """Runs after the faults above: no restart of sagegate, the next request just works."""
    status, body = stack.predict(photos["chelsea"])

    assert status == 200 and top1(body) in CATS
    assert stack.api.process.poll() is None


# ---------------------------------------------------------------- make run, emulator killed

class Console:
    """``sagegate run``'s stdout, read line by line in a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._stream = process.stdout
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} on the console within {timeout} s: {self.seen[-20:]}")


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Console, str]]:
    """``make run``'s stack on free ports with the integration emulator config, stage test."""
    env = {**os.environ, "API_PORT": str(free_port()), "EMULATOR_PORT": str(free_port()),
           "MOTO_PORT": str(free_port())}
    command = [sys.executable, "-m", "sagegate.cli", "run", "--stage", "test",
               "--emulator-config", str(HERE / "emulator-config.json")]
    with open(tmp_path / "stderr.log", "w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=stderr, text=True)
        console = Console(process)
        try:
            ready = console.wait_for("sagegate: ready on")
            yield process, console, ready
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # Ctrl-C: it stops its own children
                process.wait(30)


def pid_of(ready: str, what: str) -> int:
    """The pid the ready line gives for ``what`` (``emulator`` or the API, ``ready``)."""
    after = ready.split(what, 1)[1]
    return int(after.split("pid ", 1)[1].split(")")[0].split(";")[0])


def test_make_run_survives_its_emulator_being_killed_under_load(
        make_run: tuple[subprocess.Popen[str], Console, str]) -> None:
    process, console, ready = make_run
    api_url = ready.split("ready on ", 1)[1].split(" ", 1)[0]
    api_pid, emulator_pid = pid_of(ready, "ready on"), pid_of(ready, "emulator ")
    http = urllib3.PoolManager(maxsize=4, retries=False, timeout=CLIENT_TIMEOUT)
    image = imagefactory.jpeg(320, 240)
    outcomes: Counter[str] = Counter()
    instances: set[str] = set()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                # no-cache: the load must reach the emulator being killed
                response = http.request("POST", api_url + "/predict", body=image,
                                        headers={"Content-Type": "image/jpeg",
                                                 "Cache-Control": "no-cache"})
            except urllib3.exceptions.HTTPError as error:
                outcomes[type(error).__name__] += 1
                continue
            code = "" if response.status == 200 else json.loads(response.data)["Code"]
            outcomes[f"{response.status} {code}".strip()] += 1
            instances.add(response.headers.get("X-Sagegate-Instance", ""))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        _wait_until(lambda: outcomes["200"] >= 20)
        os.kill(emulator_pid, signal.SIGKILL)  # a child of the stack this test started
        console.wait_for("exited with code -9")
        console.wait_for("emulator restarted")
        served_before = outcomes["200"]
        _wait_until(lambda: outcomes["200"] >= served_before + 20)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)

    assert set(outcomes) <= {"200", "503 EndpointUnavailable"}, outcomes
    assert outcomes["503 EndpointUnavailable"] >= 1, outcomes
    assert len(instances) == 1  # one chalice local throughout: the same marker answered
    assert process.poll() is None
    os.kill(api_pid, 0)  # still alive (signal 0 only checks)
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 0
    console.wait_for("sagegate: stopped", timeout=10)


def _wait_until(condition: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
