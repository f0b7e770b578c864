"""``make run`` on a stage with API-key authentication (``dev``): the real ``sagegate run``
(emulator and ``chalice local``) on free ports of 127.0.0.1, the key read from its ready lines,
and the answers API Gateway would give: 403 ``{"message":"Forbidden"}`` without the key or
with a wrong one, 200 with it, ``/health`` open. Stopped with SIGINT, as Ctrl-C, by its PID.
"""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from emulator.process import free_port
from sagegate.local.auth import API_KEY_ENV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
KEY_LINE = re.compile(r"^API key: ([0-9a-f]{40}) ")


@dataclass
class Running:
    url: str
    key: str
    lines: list[str]


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))


def _ready_lines(process: subprocess.Popen[str], lines: queue.Queue[str],
                 timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            seen.append(lines.get(timeout=0.5))
        except queue.Empty:
            continue
        if seen[-1].startswith("Ctrl-C stops"):
            return seen
    raise AssertionError(f"sagegate run did not get ready: {seen}")


@pytest.fixture(scope="module")
def dev_stack() -> Iterator[Running]:
    api_port = free_port()
    env = {key: value for key, value in os.environ.items() if key != API_KEY_ENV}
    process = subprocess.Popen(
        [sys.executable, "-m", "sagegate.cli", "run", "--stage", "dev", "--api-port",
         str(api_port), "--emulator-port", str(free_port()), "--moto-port", str(free_port()),
         "--no-warm-up"],  # (the keys are the matter here, not the language model)
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    try:
        seen = _ready_lines(process, lines, timeout=120)
        keys = [match[1] for match in map(KEY_LINE.match, seen) if match]
        assert len(keys) == 1, seen
        yield Running(f"http://127.0.0.1:{api_port}", keys[0], seen)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def get(url: str, **headers: str) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), json.load(error)


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "0" * 40}, {"x-api-key": ""}],
                         ids=["no key", "wrong key", "empty key"])
def test_a_protected_route_is_forbidden_without_the_right_key(
        dev_stack: Running, headers: dict[str, str]) -> None:
    status, sent, body = get(dev_stack.url + "/models", **headers)
    assert (status, body) == (403, {"message": "Forbidden"})
    assert sent["x-amzn-ErrorType"] == "ForbiddenException"


def test_the_key_from_the_ready_lines_is_let_through(dev_stack: Running) -> None:
    status, _, body = get(dev_stack.url + "/models", **{"x-api-key": dev_stack.key})
    assert status == 200, body
    assert "iris" in json.dumps(body)


def test_health_stays_open(dev_stack: Running) -> None:
    assert get(dev_stack.url + "/health")[0] == 200


def test_the_ready_lines_show_the_key_in_the_examples(dev_stack: Running) -> None:
    examples = [line for line in dev_stack.lines if line.lstrip().startswith("curl")]
    assert examples and all(f"x-api-key: {dev_stack.key}" in line for line in examples)
