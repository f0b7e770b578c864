"""sagegate.client and ``sagegate predict`` through uploads and jobs, against ``make run``'s
jobs flow (the integration conftest's ``jobs_stack``: moto's server as the local S3, SNS and
SQS, the emulator writing to it, chalice local with its event pump): ``--async``, a file over
the synchronous limit sent as a job by itself, a batch on an asynchronous endpoint, a failed
job, an S3 refusal.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import pytest
from skimage import data

from sagegate import cli
from sagegate.client import Client, Mode, transfer
from sagegate.client.http import ClientError
from sagegate.client.jobs import JobFailedError
from sagegate.client.transfer import SYNC_LIMIT_BYTES
from tests import imagefactory
from tests.integration.conftest import JobsStack, jpeg_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CATS = {281, 282, 283, 284, 285, 287}
STATE_ORDER = {"queued": 0, "running": 1, "succeeded": 2, "failed": 2}


@pytest.fixture
def jobs_url(jobs_stack: JobsStack) -> str:
    """The URL of the conftest's jobs stack (``make run``'s jobs flow: moto's server, the
    emulator writing to it, chalice local with its event pump)."""
    return jobs_stack.api.url


@pytest.fixture(scope="module")
def big_photo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 54 MP JPEG of scikit-image's cat (9000x6000): over the synchronous route's pixel cap
    (40 MP, so the client sends it as it is) and over its byte limit, so a job takes it."""
    large = cv2.resize(data.chelsea(), (9000, 6000), interpolation=cv2.INTER_CUBIC)
    path = tmp_path_factory.mktemp("big") / "chelsea-54mp.jpg"
    path.write_bytes(jpeg_of(large, 97))
    assert path.stat().st_size > SYNC_LIMIT_BYTES
    return path


def run_json(url: str, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = cli.main(["predict", *args, "--url", url, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_async_gives_the_synchronous_answer(jobs_url: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    photo = tmp_path / "chelsea.jpg"
    photo.write_bytes(jpeg_of(data.chelsea()))
    code, direct = run_json(jobs_url, str(photo), "--k", "3", capsys=capsys)
    assert code == 0, direct
    code, via_job = run_json(jobs_url, str(photo), "--k", "3", "--async", capsys=capsys)
    assert code == 0, via_job
    assert [p["index"] for p in via_job[0]["predictions"]] == \
        [p["index"] for p in direct[0]["predictions"]]
    for mine, theirs in zip(via_job[0]["predictions"], direct[0]["predictions"], strict=True):
        assert mine["probability"] == pytest.approx(theirs["probability"], abs=1e-6)


def test_a_photo_over_the_limit_goes_through_a_job_by_itself(
        jobs_url: str, big_photo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client(jobs_url)
    with pytest.raises(ClientError) as raised:  # the synchronous route cannot take it
        client.predict(big_photo, k=1, mode=Mode.SYNC)
    assert raised.value.status == 413  # over the pixel cap, or the body limit
    code, entries = run_json(jobs_url, str(big_photo), "--k", "3", capsys=capsys)
    assert code == 0, entries
    entry = entries[0]
    assert entry["bytes_sent"] == entry["bytes_original"] == big_photo.stat().st_size
    assert entry["predictions"][0]["index"] in CATS
    # the same top-1 as the photo shrunk here and sent synchronously
    image = cv2.imread(str(big_photo))
    assert image is not None
    shrunk = cv2.resize(image, (384, 256), interpolation=cv2.INTER_AREA)
    ok, small = cv2.imencode(".png", shrunk)
    assert ok
    direct = client.predict(small.tobytes(), k=1, mode=Mode.SYNC)
    assert direct["predictions"][0]["index"] == entry["predictions"][0]["index"]


def test_a_batch_runs_on_the_asynchronous_endpoint_and_moves_through_its_states(
        jobs_url: str, tmp_path: Path) -> None:
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]] * 300
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps({"instances": rows}))
    states: list[str] = []
    uploaded: list[tuple[int, int]] = []
    answer = Client(jobs_url).predict(batch, k=1, model="iris", mode="async",
                                      upload_progress=lambda *sent: uploaded.append(sent),
                                      wait_progress=lambda job, _: states.append(job["state"]))
    labels = [row[0]["label"] for row in answer["predictions"]]
    assert labels == ["setosa", "virginica"] * 300
    assert uploaded[-1] == (batch.stat().st_size, batch.stat().st_size)
    assert states[-1] == "succeeded"
    ranks = [STATE_ORDER[state] for state in states]
    assert ranks == sorted(ranks)  # forward only


def test_auto_mode_sends_a_batch_over_a_requests_rows_as_a_job_and_says_so(
        jobs_stack: JobsStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2,000 CSV rows, over the 1,024 a synchronous request carries: ``sagegate predict`` in
    auto mode reads iris's asynchronous jobs in ``GET /models/iris`` and runs a job at once,
    instead of the synchronous route's 400."""
    batch = tmp_path / "iris-2000.csv"
    batch.write_bytes(b"5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n" * 1000)
    logged = jobs_stack.api_log.stat().st_size  # the session's stack: only this test's lines
    code = cli.main(["predict", str(batch), "--model", "iris", "--k", "1", "--url",
                     jobs_stack.api.url, "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    [entry] = json.loads(captured.out)
    labels = [row[0]["label"] for row in entry["predictions"]]
    assert labels == ["setosa", "virginica"] * 1000
    assert captured.err.splitlines() == [
        f"note: {batch}: 2,000 rows is over the model's 1,024 a request: sending it as a job"]
    with open(jobs_stack.api_log, "rb") as log:
        log.seek(logged)
        lines = log.read().decode(errors="replace")
    assert "/models/iris/jobs" in lines and "/models/iris/predict" not in lines


def test_auto_mode_sends_a_model_too_slow_for_the_synchronous_route_again_as_a_job(
        jobs_stack: JobsStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The jobs stack's slow model answers after 4 s, past the test stage's 2 s read timeout:
    the synchronous route's 504 ``EndpointTimeout`` names the job route, and auto mode sends
    the file there once."""
    rows = tmp_path / "slow.csv"
    rows.write_bytes(b"5.1,3.5,1.4,0.2\n")
    code = cli.main(["predict", str(rows), "--model", "slow", "--k", "1", "--url",
                     jobs_stack.api.url, "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert json.loads(captured.out)[0]["predictions"][0][0]["label"] == "setosa"
    assert captured.err.splitlines() == [
        f"note: {rows}: the synchronous route answered 504 EndpointTimeout: sending it as a job"]


def test_a_job_that_fails_is_the_files_error(jobs_url: str, big_photo: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(imagefactory.truncated(big_photo.read_bytes()))
    code, entries = run_json(jobs_url, str(broken), capsys=capsys)
    assert code == 1
    error = entries[0]["error"]
    assert error["code"] == "InvalidImage" and "truncated" in error["message"], error
    with pytest.raises(JobFailedError) as raised:
        Client(jobs_url).predict(broken, mode="async")
    assert raised.value.code == "InvalidImage" and raised.value.job["state"] == "failed"


def test_a_file_over_the_models_cap_is_refused_with_s3s_code(
        jobs_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """iris takes uploads of at most 32 MiB (its model.json): the presigned POST's policy says
    so and the client refuses before sending; sent all the same, S3 (the local one checks the
    policy as S3 does) refuses it, and its XML error is the client's error; the job route
    refuses an upload never made."""
    client = Client(jobs_url)
    huge = tmp_path / "huge.csv"
    with open(huge, "wb") as file:
        file.truncate(32 * 1024 * 1024 + 1)
    with pytest.raises(ClientError) as raised:
        client.upload(huge, "iris", content_type="text/csv")
    assert raised.value.code == "EntityTooLarge" and "33,554,432" in raised.value.message
    monkeypatch.setattr(transfer, "policy_max_bytes", lambda fields: None)
    with pytest.raises(ClientError) as raised:
        client.upload(huge, "iris", content_type="text/csv")
    assert (raised.value.status, raised.value.code) == (400, "EntityTooLarge")
    assert "maximum allowed size" in raised.value.message  # S3's own words, and its limit
    assert "at most 33,554,432 bytes" in raised.value.message
    with pytest.raises(ClientError) as raised:
        client.submit_job("iris", upload_id="0" * 32)
    assert (raised.value.status, raised.value.code) == (404, "UploadNotFound")
