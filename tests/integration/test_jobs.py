"""Uploads and jobs end to end, on ``make run``'s stack started with its own helpers (moto's
server as S3, SNS and SQS; the emulator writing its asynchronous results there; chalice local
with its event pump): the files are posted to the presigned URL as a client would (a multipart
form, the file last), each job is watched by polling ``GET /jobs/{id}``.

- a 40 MB image, run as a job on the image model, answers the top-1 of the same image shrunk
  and sent synchronously;
- a 30 MB CSV batch on iris (its asynchronous endpoint) completes;
- the slow model times out synchronously (504 naming the job route) and completes as a job,
  its state seen moving queued, running, succeeded;
- an upload over the model's cap is refused by S3, and the job route says so.

The emulator's slow model is scaled down (``conftest.SLOW_DELAY_S``) so this takes seconds.
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import urllib3
from skimage import data

from tests.integration.conftest import JobsStack, jpeg_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ORDER = ("queued", "running", "succeeded")
JOB_LIMIT_S = 240.0
IRIS_CAP = 33_554_432
"""iris's ``jobs.max_upload_bytes`` (chalicelib/models/iris/model.json)."""
ROW = re.compile(rb'"probabilities":\[\[([^\]]+)\]')


@pytest.fixture(scope="session")
def big_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-image's coffee (a confident 'espresso') at 9000x6000 with some grain, JPEG at
    quality 100: over 40 MB, generated once."""
    large = cv2.resize(data.coffee(), (9000, 6000), interpolation=cv2.INTER_CUBIC)
    grain = np.random.default_rng(7).integers(-10, 11, size=large.shape, dtype=np.int16)
    noisy = np.clip(large.astype(np.int16) + grain, 0, 255).astype(np.uint8)
    path = tmp_path_factory.mktemp("big-image") / "coffee-54mp.jpg"
    path.write_bytes(jpeg_of(noisy, 100))
    assert path.stat().st_size > 40_000_000
    return path


def upload(stack: JobsStack, model: str, content_type: str,
           content: bytes) -> tuple[str, urllib3.BaseHTTPResponse]:
    """``POST /uploads``, then the form to its URL: the fields, then the file."""
    status, answer, _ = stack.call("POST", "/uploads",
                                   {"model": model, "content_type": content_type})
    assert status == 200, answer
    assert set(answer) == {"upload_id", "url", "fields", "expires_at"}
    sent = urllib3.request("POST", answer["url"], timeout=60, fields={
        **answer["fields"], "file": ("input", content, content_type)})
    return answer["upload_id"], sent


def start_job(stack: JobsStack, model: str, document: Any) -> str:
    status, answer, response = stack.call("POST", f"/models/{model}/jobs", document)
    assert status == 202, answer
    assert answer["state"] == "queued"
    assert response.headers["Location"] == f"/jobs/{answer['job_id']}"
    return str(answer["job_id"])


def finish(stack: JobsStack, job_id: str) -> tuple[list[str], dict[str, Any]]:
    """Polls a job until it ends: the states seen, in order (from the 202's queued), and its
    last view."""
    seen = ["queued"]
    deadline = time.monotonic() + JOB_LIMIT_S
    while True:
        status, view, _ = stack.call("GET", f"/jobs/{job_id}")
        assert status == 200, view
        if view["state"] != seen[-1]:
            seen.append(view["state"])
        if view["state"] in ("succeeded", "failed"):
            return seen, view
        assert time.monotonic() < deadline, f"job {job_id} still {view['state']}"
        time.sleep(0.05)


def assert_moved_forward(seen: list[str]) -> None:
    """Each state seen at most once, in the allowed order, ending in succeeded."""
    assert seen == [state for state in ORDER if state in seen], seen
    assert seen[-1] == "succeeded", seen


def top1(answer: dict[str, Any]) -> tuple[int, str]:
    first = answer["predictions"][0]
    return first["index"], first["label"]


def test_a_40_mb_image_as_a_job_answers_the_top1_of_the_image_shrunk(
        jobs_stack: JobsStack, big_image: Path) -> None:
    content = big_image.read_bytes()
    upload_id, sent = upload(jobs_stack, "efficientnet-lite0", "image/jpeg", content)
    assert sent.status == 204, sent.data
    job_id = start_job(jobs_stack, "efficientnet-lite0", {"upload_id": upload_id})

    seen, view = finish(jobs_stack, job_id)

    assert_moved_forward(seen)
    image = cv2.imdecode(np.frombuffer(content, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    shrunk = jpeg_of(cv2.cvtColor(cv2.resize(image, (1200, 800), interpolation=cv2.INTER_AREA),
                                  cv2.COLOR_BGR2RGB), 92)
    status, direct, _ = jobs_stack.call("POST", "/models/efficientnet-lite0/predict",
                                        body=shrunk, content_type="image/jpeg")
    assert status == 200, direct
    assert top1(view["result"]) == top1(direct) == (967, "espresso")


def test_a_30_mb_tabular_batch_completes_on_the_asynchronous_endpoint(
        jobs_stack: JobsStack) -> None:
    rows = np.random.default_rng(3).uniform([4, 2, 1, 0.1], [8, 4.5, 7, 2.5], (1_875_000, 4))
    csv = "".join(f"{a:.1f},{b:.1f},{c:.1f},{d:.1f}\n" for a, b, c, d in rows).encode()
    assert len(csv) >= 30_000_000
    upload_id, sent = upload(jobs_stack, "iris", "text/csv", csv)
    assert sent.status == 204, sent.data
    job_id = start_job(jobs_stack, "iris", {"upload_id": upload_id})

    seen, view = finish(jobs_stack, job_id)

    assert_moved_forward(seen)
    # a 400 MB answer: read its first row and its end, not the whole of it
    url = view["result_url"]
    head = urllib3.request("GET", url, headers={"Range": "bytes=0-299"})
    tail = urllib3.request("GET", url, headers={"Range": "bytes=-300"})
    assert head.status == tail.status == 206
    assert b'"endpoint":"iris-async"' in tail.data
    row = ROW.search(head.data)
    assert row is not None, head.data
    first = [float(value) for value in row.group(1).split(b",")]
    status, direct, _ = jobs_stack.call("POST", "/models/iris/predict",
                                        body=csv.split(b"\n", 1)[0], content_type="text/csv")
    assert status == 200, direct
    assert first == pytest.approx(direct["outputs"]["probabilities"][0], abs=1e-6)


def test_the_slow_model_times_out_synchronously_and_completes_as_a_job(
        jobs_stack: JobsStack) -> None:
    instances = {"instances": [[6.2, 2.9, 4.3, 1.3]]}

    status, timeout, _ = jobs_stack.call("POST", "/models/slow/predict", instances)
    assert (status, timeout["Code"]) == (504, "EndpointTimeout"), timeout
    assert "POST /models/slow/jobs" in timeout["Message"]

    seen, view = finish(jobs_stack, start_job(jobs_stack, "slow", instances))

    assert_moved_forward(seen)
    assert "running" in seen  # the model thinks for seconds: a poll every 50 ms sees it
    status, iris, _ = jobs_stack.call("POST", "/models/iris/predict", instances)
    assert status == 200
    assert view["result"]["predictions"] == iris["predictions"]


def test_an_upload_over_the_cap_is_refused_by_s3_and_the_job_route_says_so(
        jobs_stack: JobsStack) -> None:
    upload_id, sent = upload(jobs_stack, "iris", "text/csv", b"1" * (IRIS_CAP + 1))

    assert sent.status == 400 and b"<Code>EntityTooLarge</Code>" in sent.data
    status, answer, _ = jobs_stack.call("POST", "/models/iris/jobs", {"upload_id": upload_id})
    assert (status, answer["Code"]) == (404, "UploadNotFound"), answer
    assert str(IRIS_CAP) in answer["Message"]
