"""Data capture and logs end to end: chalice local with CAPTURE_MODE=both at 100%, the
emulator's real model, concurrent clients, and a Model Monitor-style record parser."""
from __future__ import annotations

import base64
import csv
import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from sagegate.captures import reader, rows
from tests import imagefactory
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


def records_by_inference_id(stack: Stack, expected: set[str] | None = None) -> Counter[str]:
    """How many records each inference id has, once those of ``expected`` are all stored
    (the capture writer stores them after the response: a bounded wait, never a sleep that
    hopes)."""
    deadline = time.monotonic() + 10
    while True:
        counts = Counter(rows.inference_id(record)
                         for record in reader.read_records(str(stack.captures)))
        if not expected or all(counts[rid] for rid in expected) \
                or time.monotonic() > deadline:
            return counts
        time.sleep(0.05)


def log_lines(stack: Stack) -> list[dict[str, Any]]:
    lines = []
    for raw in stack.api_log.read_text(errors="replace").splitlines():
        if raw.startswith("{"):
            document = json.loads(raw)
            if document.get("message") == "request":
                lines.append(document)
    return lines


def wait_for_log(stack: Stack, request_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The log lines of these requests (chalice local writes them just after answering)."""
    deadline = time.monotonic() + 10
    while True:
        found = {line["request_id"]: line for line in log_lines(stack)
                 if line.get("request_id") in request_ids}
        if len(found) == len(request_ids) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_exactly_one_record_per_successful_inference_under_load(
        stack: Stack, photos: dict[str, bytes]) -> None:
    """Bounded load (120 requests, 8 clients), a quarter of them bad: every 2xx has exactly
    one record, no error has any, and every record parses as Model Monitor reads it."""
    bad = b"\xff\xd8\xff\xe0 not really a jpeg"
    bodies = [photos["chelsea"], photos["coffee"], imagefactory.jpeg(320, 240), bad] * 30

    def one(i: int) -> tuple[int, str]:
        # no-cache: every request is a real inference (a hit's record would hold the upload)
        response = stack.post("/predict", bodies[i], "image/jpeg",
                              **{"X-Request-Id": f"load-{i}", "Cache-Control": "no-cache"})
        return response.status, response.headers["X-Request-Id"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(len(bodies))))
    ok = {rid for status, rid in results if status == 200}
    failed = {rid for status, rid in results if status != 200}
    assert len(ok) == 90 and len(failed) == 30
    assert all(status == 400 for status, _ in results if _ in failed)

    counts = records_by_inference_id(stack, ok)
    assert {rid: counts[rid] for rid in ok} == dict.fromkeys(ok, 1)
    assert not any(counts[rid] for rid in failed)


def test_a_record_holds_what_the_model_received_and_answered(
        stack: Stack, photos: dict[str, bytes]) -> None:
    response = stack.post("/predict?k=1", photos["chelsea-12mp"], "image/jpeg",
                          **{"X-Request-Id": "capture-one", "X-Custom-Attributes": "session=42"})
    assert response.status == 200
    records_by_inference_id(stack, {response.headers["X-Request-Id"]})
    (entry,) = [e for e in reader.read_entries(str(stack.captures))
                if rows.inference_id(e.record) == response.headers["X-Request-Id"]]
    record = entry.record
    assert record.event_metadata is not None
    assert record.event_metadata.custom_attribute == ["session=42"]
    assert record.endpoint_input is not None and record.endpoint_output is not None
    assert record.endpoint_input.encoding == "BASE64"
    sent = cv2.imdecode(np.frombuffer(rows.decoded(record.endpoint_input), np.uint8),
                        cv2.IMREAD_COLOR)
    assert min(sent.shape[:2]) == 256  # the resized image, not the upload
    probabilities = json.loads(record.endpoint_output.data)
    top = json.loads(response.data)["predictions"][0]
    assert int(np.argmax(probabilities)) == top["index"]
    assert probabilities[top["index"]] == pytest.approx(top["probability"])
    variant = json.loads(response.data)["variant"]
    assert list(stack.captures.glob(f"efficientnet-lite0/{variant}/*/*/*/*/*.jsonl"))
    (row,) = rows.flatten(entry, 1, None)
    assert row["top1_index"] == top["index"] and "prediction999" in row


def test_a_small_jpeg_is_captured_as_it_was_uploaded(
        stack: Stack, photos: dict[str, bytes]) -> None:
    # (no-cache: the session's stack may hold this photo's answer; a hit's record is marked)
    response = stack.post("/predict", photos["chelsea"], "image/jpeg",
                          **{"X-Request-Id": "capture-passthrough", "Cache-Control": "no-cache"})
    assert response.status == 200
    records_by_inference_id(stack, {response.headers["X-Request-Id"]})
    (record,) = [r for r in reader.read_records(str(stack.captures))
                 if rows.inference_id(r) == response.headers["X-Request-Id"]]
    assert record.endpoint_input is not None
    assert rows.decoded(record.endpoint_input) == photos["chelsea"]


def test_every_request_is_one_json_log_line(stack: Stack, photos: dict[str, bytes]) -> None:
    image = photos["coffee"]
    encoded = base64.b64encode(image).decode()
    good = stack.post("/predict", json.dumps({"image": encoded}).encode(),
                      **{"X-Request-Id": "log-ok", "x-api-key": "s3cr3t-api-key-value",
                         "Cache-Control": "no-cache"})
    bad = stack.post("/predict", b"{}", **{"X-Request-Id": "log-bad"})
    assert (good.status, bad.status) == (200, 400)
    ids = good.headers["X-Request-Id"], bad.headers["X-Request-Id"]
    lines = wait_for_log(stack, set(ids))
    ok, failed = lines[ids[0]], lines[ids[1]]
    assert (ok["correlation_id"], failed["correlation_id"]) == ("log-ok", "log-bad")
    assert (ok["status"], ok["route"], ok["endpoint"]) == (200, "/predict", "efficientnet-lite0")
    assert ok["image_in"]["bytes"] == len(image) and ok["capture"] == "queued"
    assert {"parse", "preprocess", "endpoint", "postprocess", "capture"} <= set(ok["stages_ms"])
    assert (failed["status"], failed["error_code"]) == (400, "MissingImage")
    text = stack.api_log.read_text(errors="replace")
    assert "s3cr3t-api-key-value" not in text and encoded[:64] not in text


def test_the_whole_capture_folder_reads_each_endpoint_with_its_labels(
        stack: Stack, photos: dict[str, bytes], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``sagegate capture captures/`` over image and iris records the stack wrote: every
    endpoint's rows with its own model's labels, and a public-style JSON preprocessor run
    unchanged over the iris folder."""
    image = stack.post("/predict?k=1", photos["coffee"], "image/jpeg",
                       **{"X-Request-Id": "folder-image", "Cache-Control": "no-cache"})
    flower = stack.post("/models/iris/predict",
                        json.dumps({"instances": [[5.1, 3.5, 1.4, 0.2]]}).encode(),
                        **{"X-Request-Id": "folder-iris", "Cache-Control": "no-cache"})
    assert (image.status, flower.status) == (200, 200)
    records_by_inference_id(stack, {image.headers["X-Request-Id"],
                                    flower.headers["X-Request-Id"]})

    assert reader.main([str(stack.captures), "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    rows = {row["inferenceId"]: row for row in map(json.loads, captured.out.splitlines())}
    ids = image.headers["X-Request-Id"], flower.headers["X-Request-Id"]
    assert rows[ids[1]]["top1_label"] == "setosa"
    assert rows[ids[0]]["top1_label"] == json.loads(image.data)["predictions"][0]["label"]
    assert "Traceback" not in captured.err

    handler = Path(__file__).resolve().parents[1] / "preprocessors" / "json_tensor.py"
    out = tmp_path / "iris.csv"
    assert reader.main([str(stack.captures / "iris"), "--format", "csv", "-o", str(out),
                        "--preprocess-handler", str(handler)]) == 0
    with out.open() as lines:
        (row,) = [r for r in csv.DictReader(lines) if r["request_id"] == ids[1]]
    assert row["feature0000000000"] == "5.1" and float(row["prediction0"]) > 0.5
