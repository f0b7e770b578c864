"""The emulator as a real process on 127.0.0.1, driven by boto3 and raw HTTP.

One emulator per module (the committed EfficientNet-Lite0 model, fault header allowed).
The model file is committed: if it is missing these tests fail, they do not skip.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import cv2
import numpy as np
import pytest
from botocore.config import Config
from skimage import data

from emulator.process import EmulatorProcess, start_emulator
from tests import imagefactory

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "emulator" / "models" / "efficientnet-lite0" / "model.onnx"
ENDPOINT = "efficientnet-lite0"
CAT_CLASSES = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
CUP_CLASSES = {504, 967, 968}  # coffee mug, espresso, cup
SPLIT_REQUESTS = 200


def emulator_config(model: Path) -> dict[str, Any]:
    return {
        "allow_fault_header": True,
        "seed": 11,
        "models": {"lite0": {"path": str(model)}},
        "endpoints": {
            ENDPOINT: {"variants": [{"name": "AllTraffic", "model": "lite0"}]},
            "ab-test": {
                "variants": [
                    {"name": "A", "model": "lite0", "weight": 0.7},
                    {"name": "B", "model": "lite0", "weight": 0.3},
                ]
            },
        },
    }


def jpeg_of(rgb: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]))
    assert ok
    return encoded.tobytes()


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert MODEL.is_file(), f"the committed model is missing: {MODEL}"
    path = tmp_path_factory.mktemp("emulator") / "config.json"
    path.write_text(json.dumps(emulator_config(MODEL)))
    return path


@pytest.fixture(scope="module")
def emulator(config_path: Path) -> Iterator[EmulatorProcess]:
    with start_emulator(config_path, timeout=60) as process:
        yield process


def make_client(url: str, attempts: int = 1) -> Any:
    return boto3.client(
        "sagemaker-runtime", endpoint_url=url, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": attempts}, max_pool_connections=16),
    )  # fmt: skip


@pytest.fixture(scope="module")
def client(emulator: EmulatorProcess) -> Any:
    return make_client(emulator.url)


@pytest.fixture(scope="module")
def chelsea() -> bytes:
    return jpeg_of(data.chelsea())


@pytest.fixture(scope="module")
def coffee() -> bytes:
    return jpeg_of(data.coffee())


def invoke(client: Any, body: bytes, **options: Any) -> dict[str, Any]:
    options.setdefault("EndpointName", ENDPOINT)
    options.setdefault("ContentType", "application/x-image")
    response: dict[str, Any] = client.invoke_endpoint(Body=body, **options)
    response["Payload"] = response["Body"].read()
    return response


def top1(payload: bytes) -> int:
    return int(np.argmax(json.loads(payload)))


def test_classifies_chelsea_as_a_cat(client: Any, chelsea: bytes) -> None:
    response = invoke(client, chelsea)

    probabilities = json.loads(response["Payload"])
    assert len(probabilities) == 1000
    assert sum(probabilities) == pytest.approx(1.0, abs=1e-4)
    assert top1(response["Payload"]) in CAT_CLASSES
    assert response["ContentType"] == "application/json"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert response["ResponseMetadata"]["RequestId"]


def test_classifies_coffee_as_a_cup(client: Any, coffee: bytes) -> None:
    response = invoke(client, coffee, ContentType="image/jpeg")

    assert top1(response["Payload"]) in CUP_CLASSES


def test_accepts_png_too(client: Any) -> None:
    png = imagefactory.png(np.ascontiguousarray(data.chelsea()[:, :, ::-1]))

    assert top1(invoke(client, png, ContentType="image/png")["Payload"]) in CAT_CLASSES


def test_answers_jsonlines_when_asked(client: Any, chelsea: bytes) -> None:
    response = invoke(client, chelsea, Accept="application/jsonlines")

    assert response["ContentType"] == "application/jsonlines"
    record = json.loads(response["Payload"])
    assert int(np.argmax(record["prediction"])) in CAT_CLASSES


def test_echoes_custom_attributes(client: Any, chelsea: bytes) -> None:
    response = invoke(client, chelsea, CustomAttributes="trace-id=abc-123", InferenceId="i-1")

    assert response["CustomAttributes"] == "trace-id=abc-123"


def test_target_variant_header_is_honoured(client: Any, chelsea: bytes) -> None:
    responses = [
        invoke(client, chelsea, EndpointName="ab-test", TargetVariant="B") for _ in range(5)
    ]
    variants = {response["InvokedProductionVariant"] for response in responses}

    assert variants == {"B"}


def test_traffic_is_split_by_variant_weight(client: Any) -> None:
    small = imagefactory.jpeg(64, 48)

    counts = Counter(
        invoke(client, small, EndpointName="ab-test")["InvokedProductionVariant"]
        for _ in range(SPLIT_REQUESTS)
    )

    assert set(counts) == {"A", "B"}
    assert counts["A"] / SPLIT_REQUESTS == pytest.approx(0.7, abs=0.1)


def test_concurrent_requests_all_succeed(emulator: EmulatorProcess, chelsea: bytes) -> None:
    shared = make_client(emulator.url)

    def worker(_: int) -> list[int]:
        return [top1(invoke(shared, chelsea)["Payload"]) for _ in range(5)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [label for labels in pool.map(worker, range(8)) for label in labels]

    assert len(results) == 40
    assert len(set(results)) == 1 and results[0] in CAT_CLASSES


def test_unknown_endpoint_raises_validation_error(client: Any, chelsea: bytes) -> None:
    with pytest.raises(client.exceptions.ValidationError) as raised:
        invoke(client, chelsea, EndpointName="no-such-endpoint")

    message = raised.value.response["Error"]["Message"]
    assert message == "Endpoint no-such-endpoint of account 123456789012 not found."
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_body_over_6_mb_raises_validation_error(client: Any) -> None:
    with pytest.raises(client.exceptions.ValidationError) as raised:
        invoke(client, b"\xff" * (6 * 1024 * 1024 + 1))

    assert "6291456" in raised.value.response["Error"]["Message"]


def test_unknown_target_variant_raises_validation_error(client: Any, chelsea: bytes) -> None:
    with pytest.raises(client.exceptions.ValidationError):
        invoke(client, chelsea, EndpointName="ab-test", TargetVariant="C")


def test_undecodable_image_raises_model_error_with_the_original_answer(client: Any) -> None:
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, imagefactory.corrupt_jpeg())

    response = raised.value.response
    assert response["OriginalStatusCode"] == 400
    assert response["OriginalMessage"].startswith("unable to evaluate payload provided")
    assert response["LogStreamArn"].endswith(f"/aws/sagemaker/Endpoints/{ENDPOINT}")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424


def test_unsupported_content_type_raises_model_error_415(client: Any, chelsea: bytes) -> None:
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, chelsea, ContentType="text/csv")

    assert raised.value.response["OriginalStatusCode"] == 415


def test_decompression_bomb_is_refused_as_a_model_error(client: Any) -> None:
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, imagefactory.png_bomb(), ContentType="image/png")

    assert raised.value.response["OriginalStatusCode"] == 400


@pytest.mark.parametrize(
    ("fault", "status"),
    [
        ("ModelNotReadyException", 429),
        ("ServiceUnavailable", 503),
        ("InternalFailure", 500),
        ("InternalDependencyException", 530),
        ("ModelError", 424),
    ],
)
def test_fault_header_raises_the_modeled_exception(
    client: Any, chelsea: bytes, fault: str, status: int
) -> None:
    with pytest.raises(getattr(client.exceptions, fault)) as raised:
        invoke(client, chelsea, CustomAttributes=f"emulator-fault={fault}")

    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_malformed_output_fault_answers_200_with_a_broken_body(client: Any, chelsea: bytes) -> None:
    response = invoke(client, chelsea, CustomAttributes="emulator-fault=MalformedOutput:truncated")

    with pytest.raises(json.JSONDecodeError):
        json.loads(response["Payload"])


def raw_request(
    emulator: EmulatorProcess, method: str, path: str, body: bytes | None = None,
    headers: dict[str, str] | None = None, connection: http.client.HTTPConnection | None = None,
) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    conn = connection or http.client.HTTPConnection(emulator.host, emulator.port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    payload = response.read()
    if connection is None:
        conn.close()
    return response.status, dict(response.getheaders()), payload


def test_ping_answers_200(emulator: EmulatorProcess) -> None:
    assert raw_request(emulator, "GET", "/ping")[0] == 200


def test_unknown_path_answers_404_unknown_operation(emulator: EmulatorProcess) -> None:
    status, headers, _ = raw_request(emulator, "POST", "/endpoints/x/predict", b"{}")

    assert (status, headers["x-amzn-ErrorType"]) == (404, "UnknownOperationException")


def test_container_route_answers_like_the_model_container(
    emulator: EmulatorProcess, chelsea: bytes
) -> None:
    status, headers, body = raw_request(
        emulator, "POST", "/invocations", chelsea, {"Content-Type": "image/jpeg"}
    )
    refused = raw_request(emulator, "POST", "/invocations", b"junk", {"Content-Type": "image/jpeg"})

    assert (status, headers["Content-Type"]) == (200, "application/json")
    assert top1(body) in CAT_CLASSES
    assert refused[0] == 400
    assert refused[2].startswith(b"unable to evaluate payload provided")


def test_oversized_body_is_read_and_the_connection_stays_usable(
    emulator: EmulatorProcess, chelsea: bytes
) -> None:
    conn = http.client.HTTPConnection(emulator.host, emulator.port, timeout=30)
    path = f"/endpoints/{ENDPOINT}/invocations"
    try:
        first = raw_request(emulator, "POST", path, b"\0" * 7_000_000, connection=conn)
        second = raw_request(emulator, "POST", path, chelsea, {"Content-Type": "image/jpeg"}, conn)
    finally:
        conn.close()

    assert (first[0], first[1]["x-amzn-ErrorType"]) == (400, "ValidationError")
    assert second[0] == 200


def test_chunked_request_body_is_accepted(emulator: EmulatorProcess, chelsea: bytes) -> None:
    conn = http.client.HTTPConnection(emulator.host, emulator.port, timeout=30)
    parts = [chelsea[i : i + 4096] for i in range(0, len(chelsea), 4096)]
    try:
        conn.request("POST", f"/endpoints/{ENDPOINT}/invocations", body=iter(parts),
                     headers={"Content-Type": "image/jpeg"}, encode_chunked=True)  # fmt: skip
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()

    assert response.status == 200
    assert top1(body) in CAT_CLASSES


def test_sigterm_lets_a_running_request_finish_then_exits_0(config_path: Path) -> None:
    process = start_emulator(config_path, timeout=60)
    results: list[int] = []
    slow = threading.Thread(
        target=lambda: results.append(
            raw_request(process, "POST", "/invocations", imagefactory.jpeg(64, 48),
                        {"Content-Type": "image/jpeg",
                         "X-Amzn-SageMaker-Custom-Attributes": "emulator-latency-ms=700"})[0]
        )
    )  # fmt: skip
    try:
        slow.start()
        time.sleep(0.3)
    finally:
        code = process.stop(timeout=15)
    slow.join(10)

    assert code == 0
    assert results == [200]
