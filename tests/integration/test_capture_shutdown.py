"""A process that ends with capture records its sink has not stored: stopped as ``sagegate
run`` stops ``chalice local`` (SIGTERM, through the interpreter's exit), with an S3 that
stopped answering. What could not be stored is dropped with a log line and counted in
``CaptureDropped``, never lost silently."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HELD = 60

# The app's own objects: its Services builds the capturer from the settings and registers the
# flush at exit; SIGTERM ends it as sagegate.local.chalice_local makes chalice local end.
SCRIPT = f"""
import os, signal
from chalicelib.capture import Exchange
from chalicelib.core.config import Settings
from chalicelib.services import Services
from sagegate.local.chalice_local import _exit_on_sigterm

signal.signal(signal.SIGTERM, _exit_on_sigterm)
capturer = Services(Settings.from_env(dict(os.environ))).capturer
for number in range({HELD}):
    assert capturer.capture(Exchange(
        endpoint="iris", variant="AllTraffic", inference_id=f"r-{{number}}", sent=b"1,2",
        sent_content_type="text/csv", received=b"[0.5]",
        received_content_type="application/json")) == "queued"
print("ready", flush=True)
signal.pause()
"""


@pytest.fixture
def silent_s3() -> Iterator[str]:
    """An S3 endpoint that takes connections and never answers (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_records_a_stopped_process_could_not_store_are_logged_and_counted(
        silent_s3: str) -> None:
    env = {**os.environ, "ENDPOINT_NAME": "iris", "CAPTURE_MODE": "both",
           "CAPTURE_DESTINATION": "s3://captures/datacapture", "CAPTURE_WRITER": "background",
           "AWS_ENDPOINT_URL_S3": silent_s3, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    metrics = [json.loads(line) for line in out.splitlines()
               if line.startswith("{") and "CaptureDropped" in line]
    assert sum(sum(line["CaptureDropped"]) for line in metrics) == HELD
    said = [line for line in (out + err).splitlines() if "dropped" in line and "exit" in line]
    assert said and f"{HELD} record(s)" in said[0]
