"""Jobs under faults, on ``sagegate run --stage dev`` as a user starts it (the API-key stage,
its jobs and cache tables on moto's server): a job is created and read there; a job whose
ticket's S3 event is lost (the bucket's notification removed) is run by the scheduled re-drive
within its period, exactly once; a job already claimed is never run again by it.

The re-drive's period and wait are settings, made seconds here (1 s, 3 s). The stack runs
once for the module, stopped with SIGINT (Ctrl-C) by its PID; the emulator's log (its stderr)
counts each job's endpoint calls by their inference id, the job's id."""
from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import boto3
import pytest
import urllib3
from skimage import data

from chalicelib.jobs.records import JobState
from chalicelib.jobs.table import TableJobStore
from emulator.process import free_port
from sagegate.local.auth import API_KEY_ENV
from tests.integration.conftest import jpeg_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
PERIOD_S, AFTER_S = 1, 3
TABLE = BUCKET = "sagegate-dev-jobs"
WAIT_S = 60.0


@dataclass
class DevStack:
    url: str
    key: str
    moto_url: str
    ready: list[str]
    stderr: Path
    stdout: Path
    http: urllib3.PoolManager

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "image/jpeg") -> tuple[int, Any]:
        headers = {"x-api-key": self.key, **({"Content-Type": content_type} if body else {})}
        answer = self.http.request(method, self.url + path, body=body, headers=headers)
        return answer.status, json.loads(answer.data)

    def aws(self, name: str) -> Any:
        return boto3.client(name, endpoint_url=self.moto_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def endpoint_calls(self, job_id: str) -> int:
        """The emulator's calls for a job (its inference id is the job's)."""
        return sum(line.endswith(f"iid={job_id}")
                   for line in self.stderr.read_text(errors="replace").splitlines())


def _pump(stream: IO[str], lines: queue.Queue[str], copy: IO[str]) -> None:
    for line in stream:
        copy.write(line)
        copy.flush()
        lines.put(line.rstrip("\n"))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    logs = tmp_path_factory.mktemp("dev-run")
    ports = {name: free_port() for name in ("api", "emulator", "moto")}
    env = {**{k: v for k, v in os.environ.items() if k != API_KEY_ENV},
           API_KEY_ENV: secrets.token_hex(20), "JOB_REDRIVE_PERIOD_SECONDS": str(PERIOD_S),
           "JOB_REDRIVE_AFTER_SECONDS": str(AFTER_S)}
    with open(logs / "stderr.log", "w") as stderr, open(logs / "stdout.log", "w") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "sagegate.cli", "run", "--stage", "dev",
             "--api-port", str(ports["api"]), "--emulator-port", str(ports["emulator"]),
             "--moto-port", str(ports["moto"]), "--no-warm-up"],  # (no language model needed)
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
            text=True)
        lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        threading.Thread(target=_pump, args=(process.stdout, lines, stdout), daemon=True).start()
        try:
            ready = _ready(process, lines)
            yield DevStack(f"http://127.0.0.1:{ports['api']}", env[API_KEY_ENV],
                           f"http://127.0.0.1:{ports['moto']}", ready, logs / "stderr.log",
                           logs / "stdout.log",
                           urllib3.PoolManager(retries=False, timeout=30))
        finally:
            process.send_signal(signal.SIGINT)  # Ctrl-C: it stops its own children
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _ready(process: subprocess.Popen[str], lines: queue.Queue[str]) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and process.poll() is None:
        try:
            seen.append(lines.get(timeout=0.5))
        except queue.Empty:
            continue
        if seen[-1].startswith("Ctrl-C stops"):
            return seen
    raise AssertionError(f"sagegate run --stage dev did not get ready: {seen}")


@pytest.fixture(scope="module")
def photo() -> bytes:
    return jpeg_of(data.chelsea())


def until(check: Any, what: str, limit: float = WAIT_S) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {limit:g} s")


def state_of(dev: DevStack, job_id: str) -> str:
    status, view = dev.call("GET", f"/jobs/{job_id}")
    assert status == 200, view
    return str(view["state"])


def create(dev: DevStack, photo: bytes) -> str:
    status, answer = dev.call("POST", "/models/efficientnet-lite0/jobs", photo)
    assert status == 202, answer
    return str(answer["job_id"])


def test_the_dev_stage_creates_and_reads_jobs_in_its_table_on_moto(dev: DevStack,
                                                                   photo: bytes) -> None:
    """Its job routes answered 500: JOBS_TABLE was a real table, the ready line said
    memory."""
    [jobs_line] = [line for line in dev.ready if line.startswith("jobs:")]
    assert f"records in DynamoDB table {TABLE} there" in jobs_line

    job_id = create(dev, photo)

    assert until(lambda: state_of(dev, job_id) == "succeeded", "the job's success")
    item = dev.aws("dynamodb").get_item(TableName=TABLE, Key={"job_id": {"S": job_id}})["Item"]
    assert item["state"] == {"S": "succeeded"}
    status, view = dev.call("GET", f"/jobs/{job_id}")
    assert status == 200 and view["result"]["predictions"][0]["label"]
    assert dev.endpoint_calls(job_id) == 1


def test_a_job_whose_ticket_event_is_lost_is_run_by_the_redrive_once(dev: DevStack,
                                                                     photo: bytes) -> None:
    # from now on the bucket notifies nothing: every ticket's event is lost
    dev.aws("s3").put_bucket_notification_configuration(Bucket=BUCKET,
                                                        NotificationConfiguration={})
    job_id = create(dev, photo)
    time.sleep(AFTER_S / 2)
    assert state_of(dev, job_id) == "queued"  # nothing ran it ...

    until(lambda: state_of(dev, job_id) == "succeeded", "the re-drive running the job",
          limit=AFTER_S + 10 * PERIOD_S + 20)  # ... until the re-drive did

    time.sleep(4 * PERIOD_S)  # more runs of the re-drive: none may run it again
    assert dev.endpoint_calls(job_id) == 1
    redriven = [line for line in dev.stdout.read_text(errors="replace").splitlines()
                if "job re-driven" in line and job_id in line]
    assert len(redriven) == 1


def test_a_job_already_claimed_is_not_run_again_by_the_redrive(dev: DevStack,
                                                              photo: bytes) -> None:
    dev.aws("s3").put_bucket_notification_configuration(Bucket=BUCKET,
                                                        NotificationConfiguration={})
    job_id = create(dev, photo)
    store = TableJobStore(TABLE, client=dev.aws("dynamodb"))
    claimed, moved = store.claim(job_id, "another-runner", time.time() + 960)  # still at work
    assert moved and claimed.state is JobState.RUNNING

    time.sleep(AFTER_S + 5 * PERIOD_S)  # the job is well past due

    job = store.get(job_id)
    assert job is not None
    assert (job.state, job.runner_id) == (JobState.RUNNING, "another-runner")
    assert dev.endpoint_calls(job_id) == 0
