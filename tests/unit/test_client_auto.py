"""Auto mode's way to a job (sagegate.client and ``sagegate predict``): a batch of more rows
than a request carries goes to a model's asynchronous jobs at once, a synchronous 504
``EndpointTimeout`` or a 413 that names the job route is sent again once as a job, each saying
so; and a directory's files that are not sent are named. Against the job tests' fake of
sagegate's routes and S3 (``tests/unit/test_client_jobs.py``), its synchronous route made to
refuse as sagegate does."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sagegate.client import Client, Mode, inputs
from sagegate.client.http import ClientError
from sagegate.client.jobs import names_job_route, rows_of
from sagegate.client.transfer import as_is
from tests import httpfake
from tests.unit.test_client_jobs import ANSWER, SUCCEEDED, FakeGate, answer

ASYNC_JOBS = {"backend": "async", "max_upload_bytes": 33554432, "path": "/models/iris/jobs"}
REALTIME_JOBS = {"backend": "realtime", "max_upload_bytes": 104857600,
                 "path": "/models/iris/jobs"}
ROW = b"5.1,3.5,1.4,0.2\n"
TIMEOUT = (504, "EndpointTimeout", "The endpoint did not answer in time. Try again later. If "
           "the model needs longer, run it as a job: POST /models/iris/jobs.")
TOO_LARGE = (413, "PayloadTooLarge", "Request body is 7000000 bytes; the limit is 6291456. "
             "Send a smaller image: resize or recompress it on the client. Or run it as a "
             "job, which takes far larger inputs: POST /uploads, post the file to the URL it "
             'gives, then POST /models/{name}/jobs with {"upload_id": ...} (sagegate predict '
             "--async does all three).")


class Gate(FakeGate):
    """The fake, its synchronous route refusing as sagegate does: more than 1,024 rows
    (400), or what a test sets (``refusal``); ``POST /uploads`` 501 on a stage without jobs."""

    def __init__(self) -> None:
        super().__init__()
        self.models["iris"] = {**self.models["iris"], "jobs": ASYNC_JOBS}
        self.refusal: tuple[int, str, str] | None = None
        self.jobs_disabled = False

    def route(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        path = request["path"].split("?")[0]
        if request["method"] == "POST" and path.endswith("/predict"):
            refusal = self.refusal or self._rows_refusal(request["body"])
            if refusal is not None:
                with self.lock:
                    self.requests.append(request)
                return answer(refusal[0], {"Code": refusal[1], "Message": refusal[2]})
        if request["method"] == "POST" and path == "/uploads" and self.jobs_disabled:
            with self.lock:
                self.requests.append(request)
            return answer(501, {"Code": "JobsDisabled", "Message": "Jobs are off."})
        return super().route(request)

    @staticmethod
    def _rows_refusal(body: bytes) -> tuple[int, str, str] | None:
        rows = body.count(b"\n")
        if rows <= 1024:
            return None
        return (400, "SignatureMismatch", "input 'features': the CSV body has more than 1024 "
                "rows; at most 1024 a request.")


@pytest.fixture
def gate() -> Iterator[Gate]:
    fake = Gate()
    with httpfake.serve(fake.route) as url:
        fake.url = url
        fake.states = [SUCCEEDED]
        yield fake


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    from sagegate.client import http as http_client
    monkeypatch.setattr(http_client, "_sleep", lambda seconds: None)


def test_more_rows_than_a_request_carries_go_to_the_models_async_jobs_at_once(
        gate: Gate) -> None:
    notes: list[str] = []
    got = Client(gate.url).predict(ROW * 2000, model="iris", content_type="text/csv",
                                   note=notes.append)
    assert got == ANSWER
    assert gate.paths("POST") == ["/uploads", "/s3/b", "/models/iris/jobs?k=5"]  # no refusal
    assert notes == ["2,000 rows is over the model's 1,024 a request: sending it as a job"]
    assert next(iter(gate.objects.values())) == ("text/csv", ROW * 2000)


def test_a_real_time_jobs_backend_takes_no_more_rows_so_the_refusal_stands(
        gate: Gate) -> None:
    gate.models["iris"]["jobs"] = REALTIME_JOBS
    with pytest.raises(ClientError) as refused:
        Client(gate.url).predict(ROW * 2000, model="iris", content_type="text/csv")
    assert (refused.value.status, refused.value.code) == (400, "SignatureMismatch")
    assert gate.paths("POST") == ["/models/iris/predict?k=5"]


def test_a_batch_within_the_limit_stays_synchronous(gate: Gate) -> None:
    notes: list[str] = []
    assert Client(gate.url).predict(ROW * 1024, model="iris", content_type="text/csv",
                                    note=notes.append) == ANSWER
    assert gate.paths("POST") == ["/models/iris/predict?k=5"] and notes == []


@pytest.mark.parametrize("refusal", [TIMEOUT, TOO_LARGE], ids=["504", "413"])
def test_a_refusal_a_job_does_not_have_is_sent_again_once_as_a_job(
        gate: Gate, refusal: tuple[int, str, str]) -> None:
    gate.refusal = refusal
    notes: list[str] = []
    assert Client(gate.url).predict(ROW, model="iris", content_type="text/csv",
                                    note=notes.append) == ANSWER
    assert gate.paths("POST") == ["/models/iris/predict?k=5", "/uploads", "/s3/b",
                                  "/models/iris/jobs?k=5"]
    assert notes == [f"the synchronous route answered {refusal[0]} {refusal[1]}: sending it "
                     "as a job"]


def test_a_job_that_fails_too_is_not_tried_again(gate: Gate) -> None:
    gate.refusal = TIMEOUT
    gate.states = [{"state": "failed", "error": {"Code": "ModelError", "Message": "no"}}]
    with pytest.raises(ClientError, match="ModelError"):
        Client(gate.url).predict(ROW, model="iris", content_type="text/csv")
    assert gate.paths("POST").count("/models/iris/jobs?k=5") == 1
    assert gate.paths("POST").count("/models/iris/predict?k=5") == 1


@pytest.mark.parametrize("case", ["sync mode", "no jobs", "413 without the route"])
def test_no_job_without_auto_mode_the_models_jobs_or_a_refusal_that_says_so(
        gate: Gate, case: str) -> None:
    gate.refusal = TIMEOUT
    mode = Mode.SYNC if case == "sync mode" else Mode.AUTO
    if case == "no jobs":
        del gate.models["iris"]["jobs"]
    if case == "413 without the route":
        gate.refusal = (413, "PayloadTooLarge", "Request body is 7000000 bytes; the limit is "
                        "6291456.")
    with pytest.raises(ClientError) as refused:
        Client(gate.url).predict(ROW, model="iris", content_type="text/csv", mode=mode)
    assert refused.value.code == gate.refusal[1]
    assert gate.paths("POST") == ["/models/iris/predict?k=5"]


def test_on_a_stage_without_jobs_the_synchronous_answer_stands(gate: Gate) -> None:
    gate.jobs_disabled = True
    gate.refusal = TIMEOUT
    with pytest.raises(ClientError) as refused:  # the endpoint's timeout, not JobsDisabled
        Client(gate.url).predict(ROW, model="iris", content_type="text/csv")
    assert refused.value.code == "EndpointTimeout"
    gate.refusal = None
    gate.requests.clear()
    with pytest.raises(ClientError) as rows:  # the rows' refusal, after trying the job
        Client(gate.url).predict(ROW * 2000, model="iris", content_type="text/csv")
    assert rows.value.code == "SignatureMismatch"
    assert gate.paths("POST") == ["/uploads", "/models/iris/predict?k=5"]


def test_predict_says_once_on_stderr_why_a_file_went_to_a_job(
        gate: Gate, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sagegate import cli

    batch = tmp_path / "iris-2000.csv"
    batch.write_bytes(ROW * 2000)
    code = cli.main(["predict", str(batch), "--model", "iris", "--url", gate.url,
                     "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)[0]["ok"] is True
    assert captured.err.splitlines() == [
        f"note: {batch}: 2,000 rows is over the model's 1,024 a request: sending it as a job"]


def test_predict_names_the_files_of_a_directory_it_skips(
        gate: Gate, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sagegate import cli

    (tmp_path / "cat.jpg").write_bytes(b"\xff\xd8\xff" + b"\0" * 64)
    (tmp_path / "iris.csv").write_bytes(ROW)
    cli.main(["predict", str(tmp_path), "--url", gate.url, "--format", "json"])
    err = capsys.readouterr().err.splitlines()
    assert err == [f"skipped {tmp_path / 'iris.csv'}: not an image ({inputs.HOW_TO_SEND})"]


def test_many_skipped_files_are_named_then_counted(tmp_path: Path) -> None:
    (tmp_path / "cat.jpg").write_bytes(b"\xff\xd8\xff")
    for index in range(8):
        (tmp_path / f"rows-{index}.csv").write_bytes(ROW)
    found = inputs.find([str(tmp_path)])
    assert found.files == [tmp_path / "cat.jpg"] and len(found.skipped) == 8
    lines = inputs.skipped_lines(found.skipped)
    assert lines[:5] == [f"skipped {tmp_path / f'rows-{i}.csv'}: not an image" for i in range(5)]
    assert lines[5] == f"skipped 3 more files that are not an image ({inputs.HOW_TO_SEND})"
    (tmp_path / "cat.jpg").unlink()
    with pytest.raises(inputs.UsageError, match="only 8 other files"):
        inputs.find([str(tmp_path)])


@pytest.mark.parametrize(("data", "content_type", "rows"), [
    (ROW * 3, "text/csv", 3),
    (ROW * 3 + b"\n\n", "text/csv", 3),  # blank lines are no rows, as the server reads them
    (b'{"a": 1}\n\n{"a": 2}\n', "application/jsonlines", 2),
    (json.dumps({"instances": [[1, 2, 3, 4]] * 5}).encode(), "application/json", 5),
    (json.dumps([[1, 2, 3, 4]] * 6).encode(), "application/json", 6),
    (json.dumps([1, 2, 3, 4]).encode(), "application/json", None),  # one instance
    (b'{"image": "aW1n"}', "application/json", None),
    (b"{not json", "application/json", None),
    (np.zeros((3, 4), np.float32).tobytes(), "application/x-npy", None),
])
def test_rows_are_counted_as_the_server_reads_them(data: bytes, content_type: str,
                                                    rows: int | None) -> None:
    assert rows_of(as_is(data, content_type)) == rows


def test_the_job_route_is_recognised_as_sagegate_names_it() -> None:
    assert names_job_route(TIMEOUT[2]) and names_job_route(TOO_LARGE[2])
    assert not names_job_route("Request body is 7000000 bytes; the limit is 6291456.")
