"""sagegate.client's large inputs: uploads by presigned S3 POST, jobs, and when a file goes
through one, against a small local server on 127.0.0.1 that plays both sagegate's job routes
and S3's POST Object (the form's fields first and the file last, a Content-Length, S3's XML
errors)."""
from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from sagegate import client as client_module
from sagegate.client import Client, Mode, transfer
from sagegate.client import cli as predict_cli
from sagegate.client import http as http_client
from sagegate.client import jobs as jobs_client
from sagegate.client.http import ClientError
from sagegate.client.jobs import JobFailedError
from sagegate.client.progress import Bars
from sagegate.client.transfer import SYNC_LIMIT_BYTES
from tests import httpfake, imagefactory

IMAGE_MODEL: dict[str, Any] = {"name": "m", "pipeline": "image-classification",
               "image": {"resize": {"mode": "shorter-side", "shorter_side": 256, "width": 224,
                                    "height": 224, "upscale": False},
                         "passthrough": True, "max_pixels": 40_000_000}}
TENSOR_MODEL = {"name": "iris", "pipeline": "tensor",
                "content_types": ["application/json", "text/csv"]}
ANSWER = {"model": "m", "predictions": [{"index": 282, "label": "tiger cat",
                                         "probability": 0.38}]}


class FakeGate:
    """sagegate's job routes and an S3 bucket's POST Object, in one server's memory."""

    def __init__(self) -> None:
        self.url = ""
        self.policy_cap = 64 * 1024 * 1024  # what the presigned POST's policy says
        self.s3_cap = 64 * 1024 * 1024  # what S3 enforces (the same, unless a test says)
        self.objects: dict[str, tuple[str, bytes]] = {}  # key -> (content type, bytes)
        self.forms: list[list[str]] = []  # each POST's part names, in order
        self.requests: list[dict[str, Any]] = []
        self.states: list[dict[str, Any]] = []  # what GET /jobs answers, in turn
        self.jobs: dict[str, dict[str, Any]] = {}
        self.models: dict[str, Any] = {"m": IMAGE_MODEL, "iris": TENSOR_MODEL}
        self.results: dict[str, tuple[str, bytes]] = {  # answers kept as objects, by job id
            "1": ("application/json", json.dumps(ANSWER).encode())}
        self.sync_answer: tuple[str, bytes] | None = None  # the synchronous route's, if not ANSWER
        self.lock = threading.Lock()

    # sagegate's side
    def presign(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        asked = json.loads(request["body"])
        upload_id = f"{len(self.objects) + len(self.forms) + 1:032x}"
        policy = {"expiration": "2030-01-01T00:00:00Z", "conditions": [
            {"bucket": "b"}, {"key": f"jobs/uploads/{upload_id}"},
            {"Content-Type": asked["content_type"]},
            ["content-length-range", 1, self.policy_cap]]}
        fields = {"key": f"jobs/uploads/{upload_id}", "Content-Type": asked["content_type"],
                  "policy": base64.b64encode(json.dumps(policy).encode()).decode(),
                  "x-amz-signature": "abc"}
        return answer(200, {"upload_id": upload_id, "url": f"{self.url}/s3/b",
                            "fields": fields, "expires_at": 1.0})

    def submit(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        upload_id = json.loads(request["body"])["upload_id"]
        if f"jobs/uploads/{upload_id}" not in self.objects:
            return answer(404, {"Code": "UploadNotFound", "Message": "no upload"})
        job_id = f"{len(self.jobs) + 1:032x}"
        self.jobs[job_id] = {"upload_id": upload_id, "path": request["path"]}
        return answer(202, {"job_id": job_id, "state": "queued"},
                      Location=f"/jobs/{job_id}")

    def job(self, job_id: str) -> tuple[int, dict[str, str], bytes]:
        if job_id not in self.jobs:
            return answer(404, {"Code": "JobNotFound", "Message": f"No job {job_id!r}."})
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        headers = state.pop("headers", {})
        return answer(200, {"job_id": job_id, "created_at": 1.0, "updated_at": 2.0, **state},
                      **headers)

    # S3's side
    def post_object(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if "content-length" not in {name.lower() for name in request["headers"]}:
            return s3_refusal(411, "MissingContentLength", "You must provide the "
                              "Content-Length HTTP header.")
        parts = form_parts(request["headers"]["Content-Type"], request["body"])
        self.forms.append([field_name(part) for part in parts])
        fields = {field_name(part): part_bytes(part) for part in parts}
        data = fields.get("file", b"")
        if len(data) > self.s3_cap:
            return s3_refusal(400, "EntityTooLarge", "Your proposed upload exceeds the "
                              "maximum allowed size", f"<MaxSizeAllowed>{self.s3_cap}"
                              f"</MaxSizeAllowed><ProposedSize>{len(data)}</ProposedSize>")
        self.objects[fields["key"].decode()] = (fields["Content-Type"].decode(), data)
        return 204, {}, b""

    def route(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.requests.append(request)
            method, path = request["method"], request["path"].split("?")[0]
            if method == "GET" and path == "/models":
                return answer(200, {"default": "m", "models": []})
            if method == "GET" and path.removeprefix("/models/") in self.models:
                return answer(200, self.models[path.removeprefix("/models/")])
            if method == "POST" and path == "/uploads":
                return self.presign(request)
            if method == "POST" and path == "/s3/b":
                return self.post_object(request)
            if method == "POST" and path.endswith("/jobs"):
                return self.submit(request)
            if method == "GET" and path.startswith("/jobs/"):
                return self.job(path.removeprefix("/jobs/"))
            if method == "GET" and path.removeprefix("/s3/b/jobs/results/") in self.results:
                kind, body = self.results[path.removeprefix("/s3/b/jobs/results/")]
                return 200, {"Content-Type": kind} if kind else {}, body
            if method == "POST" and path.endswith("/predict"):
                if self.sync_answer is not None:
                    return 200, {"Content-Type": self.sync_answer[0]}, self.sync_answer[1]
                return answer(200, ANSWER)
            return answer(404, {"Code": "NotFound", "Message": path})

    def paths(self, method: str | None = None) -> list[str]:
        return [r["path"] for r in self.requests if method in (None, r["method"])]


def answer(status: int, body: Any, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(body).encode()


def s3_refusal(status: int, code: str, message: str,
               extra: str = "") -> tuple[int, dict[str, str], bytes]:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message>{extra}<RequestId>R</RequestId></Error>")
    return status, {"Content-Type": "application/xml"}, body.encode()


def form_parts(content_type: str, body: bytes) -> list[Message]:
    """A multipart/form-data body's parts, in order (parsed as MIME, as S3 reads it)."""
    parsed = message_from_bytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    assert parsed.is_multipart()
    parts = parsed.get_payload()
    assert isinstance(parts, list)
    return [part for part in parts if isinstance(part, Message)]


def field_name(part: Message) -> str:
    name = part.get_param("name", header="content-disposition")
    assert isinstance(name, str)
    return name


def part_bytes(part: Message) -> bytes:
    payload = part.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload


@pytest.fixture
def gate() -> Iterator[FakeGate]:
    fake = FakeGate()
    with httpfake.serve(fake.route) as url:
        fake.url = url
        yield fake


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's waits, recorded instead of slept; its clock moves by each."""
    slept: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(http_client, "_sleep", sleep)
    monkeypatch.setattr(jobs_client, "_clock", lambda: now[0])
    monkeypatch.setattr(http_client, "_random", lambda: 1.0)
    return slept


def noise(size: int) -> bytes:
    """Bytes that are no image and no data type: ``application/octet-stream``."""
    return bytes(range(256)) * (size // 256) + b"\0" * (size % 256)


# ---------------------------------------------------------------- uploads

def test_an_upload_posts_the_fields_first_and_the_file_last(gate: FakeGate,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(noise(3 * transfer.CHUNK_BYTES + 17))
    seen: list[tuple[int, int]] = []
    upload_id = Client(gate.url, "secret").upload(path, "m", progress=lambda *a: seen.append(a))
    content_type, stored = gate.objects[f"jobs/uploads/{upload_id}"]
    assert stored == path.read_bytes() and content_type == "application/octet-stream"
    assert gate.forms == [["key", "Content-Type", "policy", "x-amz-signature", "file"]]
    s3_post = next(r for r in gate.requests if r["path"] == "/s3/b")
    assert "x-api-key" not in {name.lower() for name in s3_post["headers"]}  # S3 gets no key
    assert next(r for r in gate.requests if r["path"] == "/uploads")["headers"][
        "x-api-key"] == "secret"
    size = path.stat().st_size
    assert seen[0] == (0, size) and seen[-1] == (size, size)
    assert [sent for sent, _ in seen] == sorted(sent for sent, _ in seen) and len(seen) == 5


def test_the_upload_asks_for_the_files_own_type(gate: FakeGate, tmp_path: Path) -> None:
    photo = imagefactory.jpeg(image=imagefactory.photo("coffee", 640, 480))
    batch = tmp_path / "batch.csv"
    batch.write_text("5.1,3.5,1.4,0.2\n")
    client = Client(gate.url)
    client.upload(photo, "m")
    client.upload(batch, "iris")
    client.upload(b'{"instances": []}', "iris")
    client.upload(b"5.1,3.5", "iris", content_type="text/csv")
    asked = [json.loads(r["body"])["content_type"] for r in gate.requests
             if r["path"] == "/uploads"]
    assert asked == ["image/jpeg", "text/csv", "application/json", "text/csv"]
    assert [kind for kind, _ in gate.objects.values()] == asked


def test_a_file_over_the_policys_cap_is_refused_before_it_is_sent(gate: FakeGate) -> None:
    gate.policy_cap = 1000
    with pytest.raises(ClientError) as raised:
        Client(gate.url).upload(noise(1001), "m")
    assert (raised.value.status, raised.value.code) == (400, "EntityTooLarge")
    assert "1,001 bytes" in raised.value.message and "1,000" in raised.value.message
    assert "/s3/b" not in gate.paths()


def test_s3s_own_refusal_is_a_client_error_with_its_code_and_message(gate: FakeGate) -> None:
    gate.s3_cap = 1000  # S3 enforces a cap the policy does not show the client
    with pytest.raises(ClientError) as raised:
        Client(gate.url).upload(noise(1001), "m")
    error = raised.value
    assert (error.status, error.code) == (400, "EntityTooLarge")
    assert error.message == ("Your proposed upload exceeds the maximum allowed size "
                             "(this upload takes at most 1,000 bytes)")


def test_sagegates_refusal_of_an_upload_is_its_own_error(gate: FakeGate,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate, "presign", lambda request: answer(
        415, {"Code": "UnsupportedMediaType", "Message": "this model reads image/jpeg"}))
    with pytest.raises(ClientError) as raised:
        Client(gate.url).upload(b"hello", "m")
    assert (raised.value.status, raised.value.code) == (415, "UnsupportedMediaType")
    assert gate.objects == {}


def test_a_file_too_large_for_the_synchronous_route_is_not_read_to_be_prepared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.npy"
    path.write_bytes(transfer.NPY_MAGIC + b"\0" * SYNC_LIMIT_BYTES)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read whole"))
    prepared = Client("http://127.0.0.1:9").prepare(path, shrink=False)
    assert (prepared.path, prepared.size, prepared.data) == (path, path.stat().st_size, b"")
    assert prepared.content_type == "application/x-npy" and not prepared.shrunk


# ---------------------------------------------------------------- jobs

SUCCEEDED = {"state": "succeeded", "result": ANSWER}


def test_a_job_is_submitted_and_waited_for_with_backoff_and_retry_after(
        gate: FakeGate, sleeps: list[float]) -> None:
    gate.states = [{"state": "queued"}, {"state": "running"},
                   {"state": "running", "headers": {"Retry-After": "3"}}, {"state": "running"},
                   {"state": "running"}, {"state": "running"}, SUCCEEDED]
    client = Client(gate.url)
    upload_id = client.upload(noise(10), "m")
    job = client.submit_job("m", upload_id=upload_id, k=3)
    assert job == {"job_id": f"{1:032x}", "state": "queued"}
    assert gate.jobs[job["job_id"]]["path"] == "/models/m/jobs?k=3"
    states: list[tuple[str, float]] = []
    done = client.wait(job["job_id"], progress=lambda j, t: states.append((j["state"], t)))
    assert client.result(done) == ANSWER
    assert sleeps == [0.25, 0.5, 3.0, 2.0, 4.0, 5.0]  # doubling to 5 s; Retry-After first
    assert [state for state, _ in states] == ["queued"] + ["running"] * 5 + ["succeeded"]
    assert states[-1][1] == sum(sleeps)


def test_a_failed_job_raises_its_code_and_message(gate: FakeGate, sleeps: list[float]) -> None:
    error = {"Code": "ModelError", "Message": "the endpoint said: out of memory"}
    gate.states = [{"state": "running"}, {"state": "failed", "error": error}]
    client = Client(gate.url)
    job = client.submit_job("m", upload_id=client.upload(noise(10), "m"))
    with pytest.raises(JobFailedError) as raised:
        client.wait(job["job_id"])
    assert (raised.value.code, raised.value.message) == ("ModelError", error["Message"])
    assert raised.value.job["state"] == "failed" and isinstance(raised.value, ClientError)


def test_waiting_stops_at_the_timeout(gate: FakeGate, sleeps: list[float]) -> None:
    gate.states = [{"state": "running"}]
    client = Client(gate.url)
    job = client.submit_job("m", upload_id=client.upload(noise(10), "m"))
    with pytest.raises(ClientError) as raised:
        client.wait(job["job_id"], timeout=2.0)
    assert raised.value.code == "WaitTimeout" and job["job_id"] in raised.value.message
    assert sum(sleeps) == 2.0 and sleeps[-1] == 0.25  # the last wait ends at the timeout


def test_a_missing_upload_or_job_is_the_servers_404(gate: FakeGate) -> None:
    client = Client(gate.url)
    with pytest.raises(ClientError) as raised:
        client.submit_job("m", upload_id="f" * 32)
    assert (raised.value.status, raised.value.code) == (404, "UploadNotFound")
    with pytest.raises(ClientError) as raised:
        client.job("0" * 32)
    assert (raised.value.status, raised.value.code) == (404, "JobNotFound")


def test_an_answer_kept_as_an_object_is_downloaded(gate: FakeGate) -> None:
    job = {"job_id": "1", "state": "succeeded", "result_url": f"{gate.url}/s3/b/jobs/results/1"}
    assert Client(gate.url, "secret").result(job) == ANSWER
    download = gate.requests[-1]
    assert "x-api-key" not in {name.lower() for name in download["headers"]}


CSV_ANSWER = "label,probability\ntabby,0.61\n"


@pytest.mark.parametrize(("kind", "body", "expected"), [
    ("application/json; charset=utf-8", json.dumps(ANSWER).encode(), ANSWER),
    ("application/vnd.handler+json", b'{"ok": true}', {"ok": True}),
    ("text/csv; charset=utf-8", CSV_ANSWER.encode(),
     {"content_type": "text/csv; charset=utf-8", "body": CSV_ANSWER}),
    ("application/jsonlines", b'{"a": 1}\n{"a": 2}\n',
     {"content_type": "application/jsonlines", "body": '{"a": 1}\n{"a": 2}\n'}),
    ("image/png", b"\x89PNG\r\n", {"content_type": "image/png",
                                   "body_base64": base64.b64encode(b"\x89PNG\r\n").decode()}),
    ("binary/octet-stream", b"\x93NUMPY\xff", {"content_type": "binary/octet-stream",
                                              "body_base64": "k05VTVBZ/w=="}),
    ("", b"\0\1", {"content_type": "application/octet-stream", "body_base64": "AAE="}),
])
def test_an_answer_kept_as_an_object_is_read_by_its_content_type(
        gate: FakeGate, kind: str, body: bytes, expected: dict[str, Any]) -> None:
    """A handler model may answer any type: JSON comes back as JSON, anything else as its
    type and its text (or its bytes in base64), never a JSON parser's traceback."""
    gate.results["2"] = (kind, body)
    job = {"job_id": "2", "state": "succeeded", "result_url": f"{gate.url}/s3/b/jobs/results/2"}
    assert Client(gate.url).result(job) == expected


@pytest.mark.parametrize(("kind", "body", "expected"), [
    ("text/csv", CSV_ANSWER.encode(), {"content_type": "text/csv", "body": CSV_ANSWER}),
    ("application/json", b"[[0.9, 0.1]]", {"content_type": "application/json",
                                           "body": [[0.9, 0.1]]})])
def test_a_synchronous_answer_is_read_by_its_content_type_too(
        gate: FakeGate, kind: str, body: bytes, expected: dict[str, Any]) -> None:
    """The synchronous route of a handler model may answer CSV or a JSON list: the same
    reading as a job's, not a JSON parser's traceback or a caller's AttributeError."""
    gate.sync_answer = (kind, body)
    assert Client(gate.url).predict(b"5.1,3.5,1.4,0.2", model="iris",
                                    content_type="text/csv") == expected


def test_an_answer_that_says_json_but_is_not_is_an_invalid_answer(gate: FakeGate) -> None:
    gate.results["2"] = ("application/json", b"label,probability\n")
    job = {"job_id": "2", "state": "succeeded", "result_url": f"{gate.url}/s3/b/jobs/results/2"}
    with pytest.raises(ClientError) as raised:
        Client(gate.url).result(job)
    assert (raised.value.status, raised.value.code) == (200, "InvalidAnswer")
    assert "application/json" in raised.value.message


# ---------------------------------------------------------------- predict's modes

def test_auto_sends_what_fits_synchronously_and_the_rest_through_a_job(
        gate: FakeGate, sleeps: list[float], tmp_path: Path) -> None:
    gate.states = [{"state": "running"}, SUCCEEDED]
    client = Client(gate.url)
    small = noise(SYNC_LIMIT_BYTES)
    assert client.predict(small, model="iris") == ANSWER
    assert gate.paths("POST") == ["/models/iris/predict?k=5"]
    big = tmp_path / "batch.json"
    big.write_bytes(b"[" + b" " * SYNC_LIMIT_BYTES + b"]")
    uploaded: list[int] = []
    assert client.predict(big, k=2, model="iris",
                          upload_progress=lambda sent, total: uploaded.append(sent)) == ANSWER
    assert gate.paths("POST")[1:] == ["/uploads", "/s3/b", "/models/iris/jobs?k=2"]
    assert uploaded[-1] == big.stat().st_size
    assert next(iter(gate.objects.values())) == ("application/json", big.read_bytes())


def test_async_always_takes_a_job_and_sync_never(gate: FakeGate, sleeps: list[float]) -> None:
    gate.states = [SUCCEEDED]
    client = Client(gate.url)
    photo = imagefactory.jpeg(image=imagefactory.photo("chelsea", 1920, 1080))
    assert client.predict(photo, mode=Mode.ASYNC) == ANSWER
    posts = gate.paths("POST")
    assert posts == ["/uploads", "/s3/b", "/models/m/jobs?k=5"]  # the default model, by name
    kind, stored = next(iter(gate.objects.values()))
    assert kind == "image/webp" and len(stored) < len(photo) // 2  # shrunk first
    gate.requests.clear()
    assert client.predict(noise(SYNC_LIMIT_BYTES + 1), model="iris", mode="sync") == ANSWER
    assert gate.paths("POST") == ["/models/iris/predict?k=5"]


def test_an_image_the_shrink_leaves_over_the_limit_goes_through_a_job(
        gate: FakeGate, sleeps: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the server's pixel cap the client sends the original (the server judges it),
    which for a big photo is over the synchronous limit: a job, whose cap is larger."""
    gate.states = [SUCCEEDED]
    photo = imagefactory.jpeg(image=imagefactory.photo("rocket", 1920, 1080), quality=95)
    monkeypatch.setattr(transfer, "SYNC_LIMIT_BYTES", len(photo) - 1)
    monkeypatch.setattr(client_module, "SYNC_LIMIT_BYTES", len(photo) - 1)
    low_cap: dict[str, Any] = json.loads(json.dumps(IMAGE_MODEL))
    low_cap["image"]["max_pixels"] = 1_000_000
    gate.models["m"] = low_cap
    assert Client(gate.url).predict(photo, model="m") == ANSWER
    assert next(iter(gate.objects.values())) == ("image/jpeg", photo)


# ---------------------------------------------------------------- the wire's pieces

def test_the_form_is_what_a_mime_parser_reads(tmp_path: Path) -> None:
    fields = {"key": "jobs/uploads/x", "Content-Type": "image/png", "policy": "cG9saWN5"}
    form = transfer.form(fields, "image/png", boundary="b0undary")
    data = b"\x89PNG" + bytes(range(256)) * 10
    body = b"".join(transfer.streamed(form, transfer.file_chunks(data), len(data)))
    assert len(body) == form.length(len(data))
    parts = form_parts(form.content_type, body)
    assert [field_name(part) for part in parts] == ["key", "Content-Type", "policy", "file"]
    assert part_bytes(parts[-1]) == data
    with pytest.raises(ValueError, match="cannot be sent"):
        transfer.form({"key": "a\r\nX-Evil: 1"}, "image/png")


def test_a_file_that_changes_while_it_is_sent_is_an_error(tmp_path: Path) -> None:
    form = transfer.form({}, "application/octet-stream")
    with pytest.raises(OSError, match="shrank"):
        list(transfer.streamed(form, iter([b"abc"]), 4))
    with pytest.raises(OSError, match="grew"):
        list(transfer.streamed(form, iter([b"abcde"]), 4))


@pytest.mark.parametrize(("body", "expected"), [
    (b"<Error><Code>AccessDenied</Code><Message>Policy expired.</Message></Error>",
     ("AccessDenied", "Policy expired.")),
    (b"<Error><Code>EntityTooSmall</Code><Message>small</Message>"
     b"<MinSizeAllowed>1</MinSizeAllowed></Error>",
     ("EntityTooSmall", "small (this upload takes at least 1 bytes)")),
    (b"<html>Bad gateway</html>", None), (b"not xml", None),
    (b'<!DOCTYPE x [<!ENTITY a "b">]><Error><Code>&a;</Code></Error>', None)])
def test_s3_errors_are_read_from_their_xml(body: bytes, expected: Any) -> None:
    assert transfer.s3_error(body) == expected


def test_the_policys_cap_is_read_when_it_can_be() -> None:
    policy = {"conditions": [{"key": "k"}, ["content-length-range", 1, 500]]}
    encoded = base64.b64encode(json.dumps(policy).encode()).decode()
    assert transfer.policy_max_bytes({"policy": encoded}) == 500
    assert transfer.policy_max_bytes({"policy": "not base64!"}) is None
    assert transfer.policy_max_bytes({}) is None


@pytest.mark.parametrize(("head", "name", "expected"), [
    (b"\xff\xd8\xff\xe0", "x.bin", "image/jpeg"), (b"{", None, "application/json"),
    (b" [1]", None, "application/json"), (b"1,2", "rows.csv", "text/csv"),
    (b"{}", "rows.jsonl", "application/jsonlines"),
    (transfer.NPY_MAGIC, None, "application/x-npy"),
    (b"1,2", None, "application/octet-stream")])
def test_a_files_type_by_its_bytes_then_its_name(head: bytes, name: str | None,
                                                 expected: str) -> None:
    assert transfer.media_type_of(head, name) == expected


def test_the_synchronous_limit_counts_base64_in_lambdas_6_mb() -> None:
    assert SYNC_LIMIT_BYTES == 4_706_304
    assert (SYNC_LIMIT_BYTES + 2) // 3 * 4 + transfer.EVENT_HEADROOM_BYTES <= 6 * 1024 * 1024


# ---------------------------------------------------------------- sagegate predict

def run_cli(gate: FakeGate, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from sagegate import cli

    code = cli.main(["predict", *args, "--url", gate.url])
    return code, capsys.readouterr().out


def test_predict_async_runs_a_job_and_prints_what_a_synchronous_run_prints(
        gate: FakeGate, sleeps: list[float], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    photo = tmp_path / "chelsea.jpg"
    photo.write_bytes(imagefactory.jpeg(image=imagefactory.photo("chelsea", 1920, 1080)))
    code, out = run_cli(gate, str(photo), "--format", "json", capsys=capsys)
    assert code == 0 and "/uploads" not in gate.paths()
    synchronous = json.loads(out)
    gate.states = [{"state": "queued"}, {"state": "running"}, SUCCEEDED]
    code, out = run_cli(gate, str(photo), "--format", "json", "--async", capsys=capsys)
    assert code == 0
    assert json.loads(out) == synchronous and synchronous[0]["predictions"] == ANSWER[
        "predictions"]
    assert gate.paths("POST")[-3:] == ["/uploads", "/s3/b", "/models/m/jobs?k=5"]
    assert capsys.readouterr().err == ""  # stderr is no terminal here: no bars


def test_predict_sends_a_large_batch_file_through_a_job_and_shows_its_rows(
        gate: FakeGate, sleeps: list[float], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = [[{"index": 0, "label": "setosa", "probability": 0.98}],
            [{"index": 2, "label": "virginica", "probability": 0.96}]]
    gate.states = [{"state": "succeeded", "result": {"model": "iris", "predictions": rows}}]
    batch = tmp_path / "batch.csv"
    batch.write_bytes(b"5.1,3.5,1.4,0.2\n" * (SYNC_LIMIT_BYTES // 16 + 1))
    code, out = run_cli(gate, str(batch), "--model", "iris", "--k", "1", "--format", "csv",
                        capsys=capsys)
    assert code == 0
    assert next(iter(gate.objects.values()))[0] == "text/csv"
    assert out.splitlines()[1:] == [
        f"{batch}[0],true,{batch.stat().st_size},{batch.stat().st_size},1,0,setosa,0.98,,",
        f"{batch}[1],true,{batch.stat().st_size},{batch.stat().st_size},1,2,virginica,0.96,,"]
    code, out = run_cli(gate, str(batch), "--model", "iris", capsys=capsys)
    assert code == 0 and "2 rows;" in out and "setosa" in out
    assert predict_cli.summary(rows) == "2 rows; first: setosa (0.980)"


def test_predict_reports_a_failed_job_as_the_files_error(
        gate: FakeGate, sleeps: list[float], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    gate.states = [{"state": "failed", "error": {"Code": "InvalidImage",
                                                 "Message": "the file is truncated"}}]
    path = tmp_path / "broken.jpg"
    path.write_bytes(b"\xff\xd8\xff" + b"\0" * 100)
    code, out = run_cli(gate, str(path), "--async", "--format", "json", capsys=capsys)
    assert code == 1
    assert json.loads(out)[0]["error"] == {"status": 0, "code": "InvalidImage",
                                           "message": "the file is truncated"}


def test_the_bars_show_the_upload_then_the_wait() -> None:
    with Bars(0, jobs=True) as bars, bars.job("scan.png") as (uploaded, waited):
        assert uploaded is not None and waited is not None
        uploaded(0, 40_000_000)
        uploaded(20_000_000, 40_000_000)
        assert bars.lines() == ["scan.png: upload 20.0 MB / 40.0 MB"]
        waited({"state": "running"}, 12.4)
        assert bars.lines() == ["scan.png: job running, 12 s"]
    assert bars.lines() == []  # the file's line goes when it is done
    with Bars(0, jobs=False) as quiet, quiet.job("x") as callbacks:
        assert callbacks == (None, None) and quiet.lines() == []


def test_predict_prints_a_handlers_answer_that_is_not_json(
        gate: FakeGate, sleeps: list[float], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    gate.results["2"] = ("text/csv", CSV_ANSWER.encode())
    gate.states = [{"state": "succeeded", "result_url": f"{gate.url}/s3/b/jobs/results/2"}]
    batch = tmp_path / "batch.csv"
    batch.write_text("5.1,3.5,1.4,0.2\n")
    code, out = run_cli(gate, str(batch), "--model", "iris", "--async", "--format", "json",
                        capsys=capsys)
    assert code == 0
    assert json.loads(out)[0]["predictions"] == {"content_type": "text/csv", "body": CSV_ANSWER}
    code, out = run_cli(gate, str(batch), "--model", "iris", "--async", capsys=capsys)
    assert code == 0 and "text/csv" in out and "tabby" in out
