"""Integration tier: real processes on 127.0.0.1 (the emulator, chalice local), real HTTP."""
from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import urllib3
from playwright.sync_api import Browser, sync_playwright
from skimage import data

from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from emulator.process import EmulatorProcess, free_port, start_emulator
from sagegate.local import aws as local_aws
from sagegate.local.aws import LocalJobs
from sagegate.local.browser import BrowserError, find_chromium
from sagegate.local.processes import ApiProcess, start_api

HERE = Path(__file__).resolve().parent


@dataclass
class Stack:
    api: ApiProcess
    emulator_url: str
    http: urllib3.PoolManager
    api_log: Path
    """chalice local's output: sagegate's JSON log lines and EMF metrics."""
    captures: Path
    """The data capture directory (CAPTURE_MODE=both, 100%)."""
    emulator: EmulatorProcess
    emulator_log: Path
    """The emulator's log: one line per request, with the InferenceId (sagegate's request id)."""

    def emulator_calls(self, request_id: str) -> int:
        """How many calls the emulator received for one sagegate request (its InferenceId)."""
        marker = f"iid={request_id}"
        return sum(line.endswith(marker)
                   for line in self.emulator_log.read_text(errors="replace").splitlines())

    def post(self, path: str, body: bytes, content_type: str = "application/json",
             **headers: str) -> urllib3.BaseHTTPResponse:
        return self.http.request("POST", self.api.url + path, body=body,
                                 headers={"Content-Type": content_type, **headers})

    def predict(self, image: bytes, **headers: str) -> tuple[int, dict[str, Any]]:
        response = self.post("/predict?k=1000", image, "image/jpeg", **headers)
        return response.status, json.loads(response.data)


def jpeg_of(rgb: Any, quality: int = 95) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


@pytest.fixture(scope="session")
def photos() -> dict[str, bytes]:
    """Real photos that scikit-image ships, as JPEGs, plus upscaled ones that sagegate
    decodes at reduced scale (1080p at 1/2, 2048x2048 at 1/4, 12 MP at 1/4)."""
    chelsea = data.chelsea()

    def upscaled(image: np.ndarray, size: tuple[int, int]) -> bytes:
        return jpeg_of(cv2.resize(image, size, interpolation=cv2.INTER_CUBIC), 90)

    return {"chelsea": jpeg_of(chelsea), "coffee": jpeg_of(data.coffee()),
            "astronaut": jpeg_of(data.astronaut()), "rocket": jpeg_of(data.rocket()),
            "coffee-1080p": upscaled(data.coffee(), (1920, 1080)),
            "astronaut-2k": upscaled(data.astronaut(), (2048, 2048)),
            "chelsea-12mp": upscaled(chelsea, (4032, 3024))}


def _start_stack(config: Path, log_dir: Path) -> Iterator[Stack]:
    captures = log_dir / "captures"
    capture_env = {"CAPTURE_MODE": "both", "CAPTURE_DESTINATION": str(captures)}
    with open(log_dir / "emulator.log", "w") as emulator_log, \
            start_emulator(config, echo_stderr=emulator_log) as emulator, \
            open(log_dir / "api.log", "wb") as api_log:
        api = start_api(free_port(), emulator.url, stage="test", log=api_log, env=capture_env)
        try:
            yield Stack(api, emulator.url, urllib3.PoolManager(maxsize=16, retries=False,
                                                               timeout=30),
                        log_dir / "api.log", captures, emulator, log_dir / "emulator.log")
        finally:
            api.stop()


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="sagegate-it-") as logs:
        yield from _start_stack(HERE / "emulator-config.json", Path(logs))


@pytest.fixture(scope="module")
def stack_without_endpoint() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="sagegate-it-") as logs:
        yield from _start_stack(HERE / "emulator-other-endpoint.json", Path(logs))


SLOW_DELAY_S = 4
"""The jobs stack's slow model: answers after 4 s, not make run's 75 ..."""
INVOKE_TIMEOUT_S = 3
"""... past its emulator's InvokeEndpoint limit (SageMaker's 60 s, scaled down), itself past
the test stage's ENDPOINT_READ_TIMEOUT (2 s), so the synchronous route's 504 is sagegate's."""


@dataclass
class JobsStack:
    """``make run``'s jobs flow started with its own helpers: moto's server (provisioned as
    ``sagegate run`` does), the emulator writing to it, chalice local (stage test) with its
    event pump."""

    api: ApiProcess
    http: urllib3.PoolManager
    jobs: LocalJobs
    api_log: Path

    def call(self, method: str, path: str, document: Any = None, body: bytes | None = None,
             content_type: str = "application/json") -> tuple[int, Any, urllib3.BaseHTTPResponse]:
        """A JSON (or ``body``) request to the API: status, parsed answer, response."""
        data = json.dumps(document).encode() if document is not None else body
        response = self.http.request(method, self.api.url + path, body=data,
                                     headers={"Content-Type": content_type} if data else {})
        return response.status, json.loads(response.data), response


def jobs_emulator_config(directory: Path) -> Path:
    """``emulator/config.json`` (its model paths made absolute) with the slow model and the
    InvokeEndpoint limit scaled down (see :data:`SLOW_DELAY_S`)."""
    raw = json.loads(DEFAULT_EMULATOR_CONFIG.read_text())
    for spec in raw["models"].values():
        if "path" in spec:  # a language model without one uses the wheel's file
            spec["path"] = str(DEFAULT_EMULATOR_CONFIG.parent / spec["path"])
    raw["models"]["slow"]["delay_seconds"] = SLOW_DELAY_S
    raw["invocation_timeout_seconds"] = INVOKE_TIMEOUT_S
    path = directory / "emulator-jobs.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.fixture(scope="session")
def jobs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsStack]:
    logs = tmp_path_factory.mktemp("jobs-stack")
    config = jobs_emulator_config(logs)
    with local_aws.jobs_stack(config, stage="test", logs=logs,
                              env={"CAPTURE_MODE": "off"}) as (api, jobs):
        yield JobsStack(api, urllib3.PoolManager(maxsize=4, retries=False, timeout=60), jobs,
                        logs / "api.log")


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """moto's server on 127.0.0.1, for the AWS services that cannot run here otherwise (S3,
    Firehose, DynamoDB): tests point boto3 at it with AWS_ENDPOINT_URL_<SERVICE>."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium (the one ``sagegate browser`` installs), for the web page's and the
    monitoring report's tests; a missing one fails them, never skips."""
    try:
        executable = find_chromium()
    except BrowserError as error:
        pytest.fail(str(error), pytrace=False)
    if executable is None:
        pytest.fail("no Chromium for the browser tests: `make test` installs one first "
                    "(.venv/bin/sagegate browser)", pytrace=False)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True,
                                              args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()
