"""Jobs under faults, end to end, on a jobs stack of this module's own (moto's server with the
jobs' table, the emulator, chalice local with its event pump), since the tests stop and start
its moto and its emulator (each by the PID this module started it with, on the same port):

- while moto's server is down, creating a job and reading one answer 503 ``JobsUnavailable``
  with ``Retry-After``, and ``/predict`` still answers 200; once moto is back (provisioned
  again, as ``sagegate run`` does), a job is created and runs;
- real-time jobs submitted while the emulator restarts wait for it and complete, each invoked
  once (counted in the emulator's log by inference id, the job id); they name the variant the
  synchronous route names;
- an upload replaced (its presigned fields posted again) after its job was made fails that
  job with ``UploadChanged``, and the other bytes never reach the endpoint;
- an asynchronous job whose emulator is killed (SIGKILL) while the model works completes once
  the emulator is back: its queue is kept in a state folder and resumed, as SageMaker's
  asynchronous queue is durable;
- asynchronous jobs submitted while the emulator restarts wait for it, as real-time ones do
  (their ``InvokeEndpointAsync`` retried by the same rule), and complete.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import urllib3

from emulator.process import EmulatorProcess, free_port, start_emulator
from sagegate.local.aws import (
    LocalJobs,
    MotoProcess,
    emulator_resources,
    provision,
    start_moto,
)
from sagegate.local.events import WORKERS
from sagegate.local.processes import HOST, ApiProcess, start_chalice_local
from tests import imagefactory
from tests.integration.conftest import jobs_emulator_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JOBS_TABLE = "sagegate-faults-jobs"
"""The jobs' table in moto: reading a job needs moto too (chalice local's memory would not)."""
MODEL = "efficientnet-lite0"
"""A model whose jobs run on its real-time endpoint (the emulator's)."""
SETTLE_S = 120.0
"""The longest any job here may take to end (they take seconds)."""


@dataclasses.dataclass
class FaultStack:
    """The stack, and the processes this module may stop and start again."""

    api: ApiProcess
    jobs: LocalJobs
    moto: MotoProcess
    emulator: EmulatorProcess
    emulator_config: Path
    logs: Path
    open_log: Callable[[str, str], IO[Any]]
    http: urllib3.PoolManager = dataclasses.field(
        default_factory=lambda: urllib3.PoolManager(maxsize=8, retries=False, timeout=30))

    def call(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json") -> tuple[int, Any, Any]:
        response = self.http.request(method, self.api.url + path, body=body,
                                     headers={"Content-Type": content_type} if body else {})
        return response.status, json.loads(response.data), response

    def restart_moto(self) -> None:
        """moto's server again on its port, provisioned again (what ``sagegate run`` does)."""
        self.moto = start_moto(self.moto.port, log=self.open_log("moto.log", "ab"))
        buckets, topics = emulator_resources(self.emulator_config)
        self.jobs = provision(self.jobs, buckets, topics, key=self.moto.provision_key)

    def ensure_running(self) -> None:
        """moto and the emulator up, whatever a test before left (one that failed half-way)."""
        if self.moto.process.poll() is not None:
            self.restart_moto()
        if self.emulator.process.poll() is not None:
            self.restart_emulator()

    def restart_emulator(self) -> None:
        self.emulator = start_emulator(self.emulator_config, port=self.emulator.port,
                                       echo_stderr=self.open_log("emulator.log", "a"),
                                       extra_args=self.emulator_args())

    def emulator_args(self) -> list[str]:
        """The emulator's options: the jobs' S3 and SNS, and its queue's state folder (kept
        across its restarts, as ``make run``'s default folder of its port is)."""
        return [*self.jobs.emulator_args(), "--state-dir", str(self.logs / "emulator-state")]

    def emulator_calls(self, inference_id: str) -> int:
        """The emulator's calls for one inference id (a job's id), both of its runs."""
        text = (self.logs / "emulator.log").read_text(errors="replace")
        return sum(line.endswith(f"iid={inference_id}") for line in text.splitlines())


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    logs = tmp_path_factory.mktemp("job-faults")
    config = jobs_emulator_config(logs)
    opened: list[IO[Any]] = []
    started: list[Any] = []  # what this module started, stopped by PID on the way out

    def open_log(name: str, mode: str) -> IO[Any]:
        opened.append(open(logs / name, mode))  # noqa: SIM115 (closed on the way out)
        return opened[-1]

    stack: FaultStack | None = None
    try:
        buckets, topics = emulator_resources(config)
        moto = start_moto(free_port(HOST), log=open_log("moto.log", "wb"))
        started.append(moto)
        jobs = provision(LocalJobs(moto.url, table=JOBS_TABLE), buckets, topics,
                         key=moto.provision_key)
        emulator = start_emulator(config, echo_stderr=open_log("emulator.log", "w"),
                                  extra_args=[*jobs.emulator_args(), "--state-dir",
                                              str(logs / "emulator-state")])
        started.append(emulator)
        api = start_chalice_local(free_port(HOST), emulator.url, stage="test",
                                  log=open_log("api.log", "wb"),
                                  env={**jobs.api_env(), "CAPTURE_MODE": "off"})
        started.append(api)
        stack = FaultStack(api, jobs, moto, emulator, config, logs, open_log)
        yield stack
    finally:
        if stack is not None:  # the restarted ones too (stopping a stopped one is harmless)
            started += [stack.moto, stack.emulator]
        for process in reversed(started):
            process.stop()
        for log in opened:
            log.close()


def _jpeg() -> bytes:
    return imagefactory.jpeg(320, 240)


def _job(stack: FaultStack, body: bytes, content_type: str = "image/jpeg") -> str:
    status, answer, _ = stack.call("POST", f"/models/{MODEL}/jobs", body, content_type)
    assert status == 202, answer
    return str(answer["job_id"])


def _wait(condition: Callable[[], bool], what: str, timeout: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _state(stack: FaultStack, job_id: str) -> dict[str, Any]:
    status, view, _ = stack.call("GET", f"/jobs/{job_id}")
    assert status == 200, view
    return dict(view)


def _finished(stack: FaultStack, job_id: str) -> dict[str, Any]:
    views: dict[str, dict[str, Any]] = {}

    def done() -> bool:
        views[job_id] = _state(stack, job_id)
        return views[job_id]["state"] in ("succeeded", "failed")

    _wait(done, f"job {job_id}")
    return views[job_id]


def _assert_unavailable(status: int, answer: Any, response: Any) -> None:
    assert (status, answer["Code"]) == (503, "JobsUnavailable"), answer
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert answer["request_id"]


def test_jobs_answer_503_while_moto_is_down_and_work_again_once_it_is_back(
        faults: FaultStack) -> None:
    faults.ensure_running()
    earlier = _job(faults, _jpeg())
    assert _finished(faults, earlier)["state"] == "succeeded"
    faults.moto.stop()  # the moto this module started, by its PID

    _assert_unavailable(*faults.call("POST", f"/models/{MODEL}/jobs", _jpeg(), "image/jpeg"))
    _assert_unavailable(*faults.call("POST", f"/models/{MODEL}/jobs",
                                     json.dumps({"upload_id": "a" * 32}).encode()))
    _assert_unavailable(*faults.call("GET", f"/jobs/{earlier}"))
    predicted = faults.http.request("POST", faults.api.url + "/predict", body=_jpeg(),
                                    headers={"Content-Type": "image/jpeg"})
    assert predicted.status == 200, predicted.data  # the synchronous route needs no moto

    faults.restart_moto()
    again = _job(faults, _jpeg())
    assert _finished(faults, again)["state"] == "succeeded"
    assert faults.emulator_calls(again) == 1


def _upload(faults: FaultStack, content: bytes) -> tuple[str, dict[str, Any]]:
    status, upload, _ = faults.call("POST", "/uploads", json.dumps(
        {"model": MODEL, "content_type": "image/jpeg"}).encode())
    assert status == 200, upload
    _post_form(upload, content)
    return str(upload["upload_id"]), upload


def _post_form(upload: dict[str, Any], content: bytes) -> None:
    """The presigned form: its fields, then the file (a client may post it again)."""
    sent = urllib3.request("POST", upload["url"], timeout=30, fields={
        **upload["fields"], "file": ("photo.jpg", content, "image/jpeg")})
    assert sent.status == 204, sent.data


def test_realtime_jobs_wait_out_an_emulator_restart_and_a_replaced_upload_runs_nothing(
        faults: FaultStack) -> None:
    faults.ensure_running()
    faults.emulator.stop()  # the emulator this module started, by its PID
    waiting = [_job(faults, _jpeg()) for _ in range(WORKERS)]
    # every receiver of the event pump now holds one of them, retrying the endpoint
    _wait(lambda: all(_state(faults, job)["state"] == "running" for job in waiting),
          "the jobs to be running", timeout=60)
    upload_id, upload = _upload(faults, _jpeg())
    replaced = _job(faults, json.dumps({"upload_id": upload_id}).encode(), "application/json")
    _post_form(upload, imagefactory.jpeg(640, 480))  # the same fields, posted again
    time.sleep(2)  # some of the jobs' attempts meet the endpoint down

    faults.restart_emulator()

    for job in waiting:
        view = _finished(faults, job)
        assert view["state"] == "succeeded", view
        assert faults.emulator_calls(job) == 1  # nothing ran twice
    failed = _finished(faults, replaced)
    assert failed["state"] == "failed" and failed["error"]["Code"] == "UploadChanged", failed
    assert faults.emulator_calls(replaced) == 0  # the other bytes never reached the endpoint
    status, synchronous, _ = faults.call("POST", f"/models/{MODEL}/predict", _jpeg(),
                                         "image/jpeg")
    assert status == 200
    assert _state(faults, waiting[0])["result"]["variant"] == synchronous["variant"]


def test_an_async_job_survives_its_emulator_killed_mid_flight(faults: FaultStack) -> None:
    faults.ensure_running()
    instances = json.dumps({"instances": [[6.2, 2.9, 4.3, 1.3]]}).encode()
    status, answer, _ = faults.call("POST", "/models/slow/jobs", instances)
    assert status == 202, answer
    job = str(answer["job_id"])
    # running: the runner handed it to the asynchronous endpoint, whose model thinks 4 s
    _wait(lambda: _state(faults, job)["state"] == "running", "the job to be running", 60)
    faults.emulator.process.kill()  # SIGKILL, to the emulator this module started
    faults.emulator.process.wait(timeout=10)
    time.sleep(1)
    assert _state(faults, job)["state"] == "running"

    faults.restart_emulator()

    view = _finished(faults, job)
    assert view["state"] == "succeeded", view
    status, direct, _ = faults.call("POST", "/models/iris/predict", instances)
    assert status == 200
    assert view["result"]["predictions"] == direct["predictions"]


def test_async_jobs_wait_out_an_emulator_restart_as_realtime_ones_do(
        faults: FaultStack) -> None:
    faults.ensure_running()
    instances = json.dumps({"instances": [[6.2, 2.9, 4.3, 1.3]]}).encode()
    faults.emulator.stop()  # the emulator this module started, by its PID
    waiting = []
    for _ in range(WORKERS):
        status, answer, _ = faults.call("POST", "/models/slow/jobs", instances)
        assert status == 202, answer
        waiting.append(str(answer["job_id"]))
    # claimed, each runner retrying InvokeEndpointAsync against nothing listening
    _wait(lambda: all(_state(faults, job)["state"] == "running" for job in waiting),
          "the jobs to be running", timeout=60)
    time.sleep(2)  # several attempts meet the endpoint down (botocore's five took < 0.5 s)

    faults.restart_emulator()

    for job in waiting:
        view = _finished(faults, job)
        assert view["state"] == "succeeded", view
