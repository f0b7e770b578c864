"""Each captured body says how it is written, as SageMaker's own capture does: CSV content
types as ``CSV``, JSON ones as ``JSON``, anything else base64. Model Monitor's analysis and
users' preprocessors read ``encoding`` to know how to parse ``data``, so a CSV body labelled
``JSON`` breaks them even though the text itself is intact."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY

from chalicelib.capture import Capturer
from chalicelib.capture.records import Exchange, build_record
from chalicelib.capture.sinks import DirectorySink
from tests.functional.conftest import Harness, endpoint_response

CSV_ROWS = "5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n"
TFS_ROWS = (b'{"signature_name":"serving_default","instances":'
            b'[[5.1,3.5,1.4,0.2],[6.7,3.0,5.2,2.3]]}')
ANSWER = json.dumps({"predictions": [[0.9, 0.05, 0.05], [0.01, 0.1, 0.89]]}).encode()


@pytest.mark.parametrize("content_type,encoding", [
    ("text/csv", "CSV"), ("text/csv; charset=utf-8", "CSV"), ("TEXT/CSV", "CSV"),
    ("application/json", "JSON"), ("application/jsonlines", "JSON"),
    ("application/x-image", "BASE64"), ("application/octet-stream", "BASE64"),
])
def test_each_side_of_a_record_names_its_encoding(content_type: str, encoding: str) -> None:
    body = b"1,2,3\n" if encoding != "JSON" else b'{"a": 1}'
    record = json.loads(build_record(Exchange(
        "churn", "AllTraffic", "r1", body, content_type, body, content_type,
        original=body, original_content_type=content_type), "both", True).line)
    sides = [record["captureData"]["endpointInput"], record["captureData"]["endpointOutput"],
             record["originalInput"]]
    assert [side["encoding"] for side in sides] == [encoding] * 3
    assert all(side["observedContentType"] == content_type for side in sides)
    if encoding != "BASE64":
        assert all(side["data"] == body.decode() for side in sides)


def test_a_csv_tensor_request_is_captured_as_csv_and_what_was_sent_as_json(
        harness: Harness, tmp_path: Path) -> None:
    """The client's CSV (the original) and the TF Serving JSON the endpoint got, in one
    record, each labelled as what it is."""
    harness.use(capturer=Capturer("both", DirectorySink(tmp_path), include_original=True))
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(ANSWER),
        {"EndpointName": "iris", "Body": TFS_ROWS, "ContentType": "application/json",
         "Accept": "application/json", "InferenceId": ANY})
    response = harness.post("/models/iris/predict", CSV_ROWS, "text/csv")
    assert response.status_code == 200, response.body
    (record_file,) = tmp_path.glob("iris/AllTraffic/**/*.jsonl")
    record: dict[str, Any] = json.loads(record_file.read_text())
    original = record["originalInput"]
    assert (original["observedContentType"], original["encoding"], original["data"]) == (
        "text/csv", "CSV", CSV_ROWS)
    sent = record["captureData"]["endpointInput"]
    assert (sent["encoding"], sent["data"]) == ("JSON", TFS_ROWS.decode())
