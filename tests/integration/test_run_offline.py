"""``sagegate run`` never addresses AWS, whatever the stage: every process of the stack runs
with a ``sitecustomize`` (on ``PYTHONPATH``, which each child inherits) whose audit hook records
and refuses any ``socket.getaddrinfo`` or ``socket.connect`` to an address that is not this
machine's loopback. The stack is run for each stage ``.chalice/config.json`` declares, as a
user starts it (``sagegate run --stage <stage>``); a prediction of each kind (with data capture
where the stage captures), an asynchronous job (where the stage has jobs) and the web page are
asked for; then nothing was refused, the job finished, and the captures are where their
destination's contract files them: under ``{endpoint}/{variant}/yyyy/mm/dd/hh/`` of the
stage's capture location (moto's S3 for a stage that captures to S3 or through Firehose).

The stack runs once a stage, stopped with SIGINT (Ctrl-C) by its PID."""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import pytest
import urllib3
from skimage import data

from emulator.process import free_port
from sagegate.deploy.stages import load_stage
from sagegate.local.auth import API_KEY_ENV
from tests.integration.conftest import jpeg_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
STAGES = sorted(json.loads((ROOT / ".chalice" / "config.json").read_text())["stages"])
WAIT_S = 60.0
T = TypeVar("T")

SITECUSTOMIZE = textwrap.dedent('''
    """Loaded by every Python process of the stack under test: records the process, then
    records and refuses any name lookup or connection that would leave this machine."""
    import errno
    import ipaddress
    import os
    import socket
    import sys

    _LOG = os.environ["SAGEGATE_OFFLINE_AUDIT"]


    def _write(name, line):
        with open(_LOG + name, "a", encoding="utf-8") as out:
            out.write(line + "\\n")


    def _local(host):
        if host is None:
            return True
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        host = str(host).rstrip(".").lower()
        if host in ("", "localhost") or host.endswith(".localhost"):
            return True
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        return address.is_loopback or address.is_unspecified


    def _hook(event, args):
        if event == "socket.getaddrinfo":
            host, port = args[0], args[1]
        elif event == "socket.connect":
            sock, address = args
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                return
            host, port = address[0], address[1]
        else:
            return
        if not _local(host):
            _write(".refused", f"{os.getpid()} {event} {host!r} {port!r} {sys.orig_argv[:4]!r}")
            raise OSError(errno.ENETUNREACH, f"offline test: {host}:{port} refused")


    _write(".processes", f"{os.getpid()} {sys.orig_argv[:4]!r}")
    sys.addaudithook(_hook)
''')


@dataclass
class Stack:
    stage: str
    url: str
    key: str
    moto_url: str
    audit: Path
    http: urllib3.PoolManager

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json") -> tuple[int, Any]:
        headers = {"x-api-key": self.key, **({"Content-Type": content_type} if body else {})}
        answer = self.http.request(method, self.url + path, body=body, headers=headers)
        try:
            return answer.status, json.loads(answer.data)
        except ValueError:
            return answer.status, answer.data

    def s3_keys(self, bucket: str, prefix: str) -> list[str]:
        s3 = boto3.client("s3", endpoint_url=self.moto_url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        try:
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
        except s3.exceptions.NoSuchBucket:
            return []
        return [item["Key"] for item in listed.get("Contents", [])]

    def lines(self, suffix: str) -> list[str]:
        path = Path(str(self.audit) + suffix)
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module", params=STAGES)
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    stage = str(request.param)
    logs = tmp_path_factory.mktemp(f"offline-{stage}")
    (logs / "site").mkdir()
    (logs / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    audit = logs / "audit"
    ports = {name: free_port() for name in ("api", "emulator", "moto")}
    path = os.pathsep.join(filter(None, [str(logs / "site"), os.environ.get("PYTHONPATH")]))
    env = {**{k: v for k, v in os.environ.items() if k != API_KEY_ENV},
           API_KEY_ENV: secrets.token_hex(20), "PYTHONPATH": path,
           "SAGEGATE_OFFLINE_AUDIT": str(audit), "EMULATOR_STATE_DIR": str(logs / "state")}
    with open(logs / "out.log", "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sagegate.cli", "run", "--stage", stage,
             "--api-port", str(ports["api"]), "--emulator-port", str(ports["emulator"]),
             "--moto-port", str(ports["moto"])],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_ready(process, logs / "out.log")
            yield Stack(stage, f"http://127.0.0.1:{ports['api']}", env[API_KEY_ENV],
                        f"http://127.0.0.1:{ports['moto']}", audit,
                        urllib3.PoolManager(retries=False, timeout=30))
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C: it stops its own children
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_ready(process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and process.poll() is None:
        if "Ctrl-C stops them all." in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise AssertionError(f"sagegate run did not get ready: {log.read_text(errors='replace')}")


def until(check: Callable[[], T], limit: float = WAIT_S) -> T:
    """``check()``'s first truthy value within ``limit`` seconds, else its last one."""
    deadline = time.monotonic() + limit
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(0.5)
        value = check()
    return value


def _job_state(stack: Stack, job_id: str) -> str:
    status, answer = stack.call("GET", f"/jobs/{job_id}")
    return str(answer.get("state")) if status == 200 else f"HTTP {status}"


def _capture_location(stage: str) -> tuple[str, str] | None:
    """The bucket and prefix a local run of ``stage`` files its captures under on moto's S3
    (None: the stage does not capture to S3 or through Firehose)."""
    loaded = load_stage(stage)
    destination = loaded.env.get("CAPTURE_DESTINATION", "")
    if destination.startswith("firehose://"):
        destination = loaded.capture_stream or "s3://sagegate-local-captures/firehose"
    if not destination.startswith("s3://") or loaded.env.get("CAPTURE_MODE", "off") == "off":
        return None
    bucket, _, prefix = destination.removeprefix("s3://").partition("/")
    return bucket, prefix.rstrip("/") + "/"


def test_a_local_run_never_leaves_this_machine(stack: Stack) -> None:
    status, _ = stack.call("POST", "/predict", jpeg_of(data.chelsea()), "image/jpeg")
    assert status == 200
    status, _ = stack.call("POST", "/models/iris/predict", b'{"instances": [[5.1, 3.5, 1.4, 0.2]]}')
    assert status == 200
    page = stack.http.request("GET", stack.url + "/")
    assert page.status == 200 and b"<html" in page.data.lower()
    status, job = stack.call("POST", "/models/iris/jobs", b'{"instances": [[5.9, 3.0, 4.2, 1.5]]}')
    assert status in (202, 501), job  # 501: a stage without jobs
    state = "no jobs"
    if status == 202:
        until(lambda: _job_state(stack, job["job_id"]) in ("succeeded", "failed"))
        state = _job_state(stack, job["job_id"])
    location = _capture_location(stack.stage)
    captured = until(lambda: _hour_folders(stack, location)) if location else ["not captured"]

    assert stack.lines(".refused") == []
    processes = stack.lines(".processes")
    for program in ("sagegate.cli", "moto_server", "emulator", "chalice_local"):
        assert any(program in line for line in processes), (program, processes)
    assert state in ("succeeded", "no jobs"), state
    assert captured, f"no capture under {location}"


CAPTURE_KEY = re.compile(r"(?P<endpoint>[^/]+)/(?P<variant>[^/]+)/\d{4}/\d{2}/\d{2}/\d{2}/[^/]+$")


def _hour_folders(stack: Stack, location: tuple[str, str] | None) -> list[str]:
    """The ``endpoint/variant`` folders of the captures filed under the stage's location with
    the monitor's layout, once both predictions' endpoints have one."""
    assert location is not None
    bucket, prefix = location
    folders = {f"{match['endpoint']}/{match['variant']}"
               for key in stack.s3_keys(bucket, prefix)
               if (match := CAPTURE_KEY.match(key.removeprefix(prefix)))}
    wanted = {"efficientnet-lite0/AllTraffic", "iris/AllTraffic"}
    return sorted(folders) if wanted <= folders else []
