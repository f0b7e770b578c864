"""sagegate end to end: chalice local -> boto3 -> the emulator's real model, over real HTTP."""
from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import numpy as np
import pytest

from tests import imagefactory
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

CATS = {281, 282, 283, 284, 285, 287}  # tabby, tiger cat, Persian, Siamese, Egyptian cat, lynx
CUPS = {504, 967, 968}  # coffee mug, espresso, cup


def top1(body: dict[str, Any]) -> int:
    return int(body["predictions"][0]["index"])


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    body = json.loads(response.data)
    assert response.status == status, body
    assert body["Code"] == code and body["Message"]
    assert body["request_id"] == response.headers["X-Request-Id"]
    assert "Traceback" not in response.data.decode()
    return body  # type: ignore[no-any-return]


def test_a_cat_is_a_cat_as_binary(stack: Stack, photos: dict[str, bytes]) -> None:
    status, body = stack.predict(photos["chelsea"])
    assert status == 200
    assert top1(body) in CATS
    assert body["endpoint"] == "efficientnet-lite0"


def test_coffee_as_json_base64(stack: Stack, photos: dict[str, bytes]) -> None:
    payload = json.dumps({"image": base64.b64encode(photos["coffee"]).decode(), "k": 3})
    response = stack.post("/predict", payload.encode())
    body = json.loads(response.data)
    assert response.status == 200
    assert len(body["predictions"]) == 3 and top1(body) in CUPS


def test_legacy_2018_client_body(stack: Stack, photos: dict[str, bytes]) -> None:
    payload = json.dumps({"data": base64.b64encode(photos["chelsea"]).decode(), "topk": 2})
    body = json.loads(stack.post("/predict", payload.encode()).data)
    assert len(body["predictions"]) == 2 and top1(body) in CATS


def direct_probabilities(stack: Stack, image: bytes) -> np.ndarray:
    """The original image sent straight to the emulator with boto3 (no sagegate)."""
    client = boto3.client("sagemaker-runtime", endpoint_url=stack.emulator_url,
                          region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    response = client.invoke_endpoint(EndpointName="efficientnet-lite0", Body=image,
                                      ContentType="application/x-image",
                                      TargetVariant="Primary")
    return np.asarray(json.loads(response["Body"].read()))


@pytest.mark.parametrize("name", ["chelsea", "coffee", "astronaut", "rocket", "coffee-1080p",
                                  "astronaut-2k", "chelsea-12mp"])
def test_fidelity_the_model_sees_what_it_would_have_seen(stack: Stack, photos: dict[str, bytes],
                                                         name: str) -> None:
    direct = direct_probabilities(stack, photos[name])
    status, body = stack.predict(photos[name], **{"X-Target-Variant": "Primary"})
    assert status == 200
    via = np.zeros(1000)
    for p in body["predictions"]:
        via[p["index"]] = p["probability"]
    assert top1(body) == int(np.argmax(direct))
    top5 = np.argsort(-direct, kind="stable")[:5]
    deviation = float(np.abs(via[top5] - direct[top5]).max())
    print(f"fidelity {name}: top-1 {top1(body)} worst top-5 deviation {deviation:.4f}")
    assert deviation <= 0.03


def test_variant_routing(stack: Stack, photos: dict[str, bytes]) -> None:
    for variant in ("Primary", "Challenger"):
        status, body = stack.predict(photos["coffee"], **{"X-Target-Variant": variant})
        assert status == 200 and body["variant"] == variant


def test_unweighted_traffic_reaches_both_variants(stack: Stack) -> None:
    image = imagefactory.jpeg(64, 64)
    seen = {stack.predict(image)[1]["variant"] for _ in range(24)}
    assert seen == {"Primary", "Challenger"}  # 0.5/0.5: both missing in 24 draws is ~1e-7


def test_unknown_variant_is_400(stack: Stack, photos: dict[str, bytes]) -> None:
    response = stack.post("/predict", photos["coffee"], "image/jpeg",
                          **{"X-Target-Variant": "Nope"})
    assert_error(response, 400, "InvalidVariant")


def test_client_errors_never_reach_the_endpoint(stack: Stack) -> None:
    assert_error(stack.post("/predict", b"not an image", "image/jpeg"), 400, "InvalidImage")
    assert_error(stack.post("/predict", b"{", "application/json"), 400, "InvalidJSON")
    assert_error(stack.post("/predict", b"x", "text/plain"), 415, "UnsupportedMediaType")
    assert_error(stack.post("/predict", imagefactory.png_bomb(), "image/png"), 413,
                 "ImageTooLarge")
    assert_error(stack.post("/predict?k=0", imagefactory.jpeg(), "image/jpeg"), 400,
                 "InvalidParameter")


def test_endpoint_not_found_end_to_end(stack_without_endpoint: Stack) -> None:
    response = stack_without_endpoint.post("/predict", imagefactory.jpeg(64, 64), "image/jpeg")
    assert_error(response, 502, "EndpointNotFound")


def test_concurrent_clients_see_no_errors(stack: Stack, photos: dict[str, bytes]) -> None:
    images = [photos["chelsea"], photos["coffee"]] * 20

    def one(image: bytes) -> tuple[int, int]:
        status, body = stack.predict(image)
        return status, top1(body) if status == 200 else -1

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, images))
    assert [status for status, _ in results] == [200] * len(images)
    expected = [CATS if i % 2 == 0 else CUPS for i in range(len(images))]
    assert all(index in allowed for (_, index), allowed in zip(results, expected, strict=True)), \
        results


def test_resize_binary_round_trip(stack: Stack, photos: dict[str, bytes]) -> None:
    response = stack.http.request(
        "POST", stack.api.url + "/resize?width=300&height=100&mode=fill",
        body=photos["coffee"], headers={"Content-Type": "image/jpeg", "Accept": "image/png"})
    assert response.status == 200 and response.headers["Content-Type"] == "image/png"
    image = imagefactory.cv2.imdecode(np.frombuffer(response.data, np.uint8), 1)
    assert image.shape == (100, 300, 3)


def test_health(stack: Stack) -> None:
    response = stack.http.request("GET", stack.api.url + "/health")
    assert response.status == 200 and json.loads(response.data)["labels"] == 1000
