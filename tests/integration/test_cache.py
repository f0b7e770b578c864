"""The prediction cache against the live stack (chalice local and the emulator, whose own log
counts the calls each request made) and its DynamoDB tier against moto's server on 127.0.0.1
(real boto3, real HTTP)."""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import boto3
import cv2
import numpy as np
import pytest
from skimage import data

from chalicelib.cache.prediction import HIT, MISS, TABLE, MemoryTier, PredictionCache, TableTier
from chalicelib.calls import InvokeResult
from tests.integration.conftest import Stack, jpeg_of

pytestmark = pytest.mark.integration


def unique_photo() -> bytes:
    """A real photo no other test sent (its noise is new each time)."""
    noise = np.random.default_rng().integers(0, 8, (300, 451, 3), dtype=np.uint8)
    return jpeg_of(cv2.add(data.chelsea(), noise))


def predict(stack: Stack, image: bytes, **headers: str) -> tuple[Any, dict[str, Any]]:
    response = stack.post("/predict?k=3", image, "image/jpeg", **headers)
    return response, json.loads(response.data)


def test_a_repeated_photo_never_reaches_the_endpoint_twice(stack: Stack) -> None:
    image = unique_photo()
    first, first_body = predict(stack, image)
    second, second_body = predict(stack, image)
    assert (first.status, second.status) == (200, 200)
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("miss", "hit")
    assert stack.emulator_calls(first_body["request_id"]) == 1
    assert stack.emulator_calls(second_body["request_id"]) == 0
    assert second_body["predictions"] == first_body["predictions"]
    assert "cache;dur=" in second.headers["Server-Timing"]
    fresh, fresh_body = predict(stack, image, **{"Cache-Control": "no-cache"})
    assert fresh.headers["X-Cache"] == "miss"
    assert stack.emulator_calls(fresh_body["request_id"]) == 1


def test_eight_concurrent_requests_for_one_photo_make_one_endpoint_call(stack: Stack) -> None:
    image = unique_photo()
    start = threading.Barrier(8)
    answers: list[tuple[Any, dict[str, Any]]] = []
    lock = threading.Lock()

    def run() -> None:
        start.wait()
        answer = predict(stack, image)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [response.status for response, _ in answers] == [200] * 8
    calls = sum(stack.emulator_calls(body["request_id"]) for _, body in answers)
    # one: a request that reads after the call and joins after it landed looks again
    assert calls == 1
    assert sum(response.headers["X-Cache"] == "miss" for response, _ in answers) == calls
    assert len({json.dumps(body["predictions"]) for _, body in answers}) == 1


def test_a_tensor_model_hits_the_cache(stack: Stack) -> None:
    row = [round(float(x), 3) for x in np.random.default_rng().uniform(1, 7, 4)]
    first = stack.post("/models/iris/predict", json.dumps([row]).encode())
    second = stack.post("/models/iris/predict", json.dumps({"instances": [row]}).encode())
    assert (first.status, second.status) == (200, 200), second.data
    assert (first.headers["X-Cache"], second.headers["X-Cache"]) == ("miss", "hit")
    assert stack.emulator_calls(second.headers["X-Request-Id"]) == 0
    assert json.loads(first.data)["outputs"] == json.loads(second.data)["outputs"]


# -- the DynamoDB tier against moto's server -------------------------------------------------

@pytest.fixture
def table(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in {"AWS_ENDPOINT_URL_DYNAMODB": moto_url,
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    name = f"sagegate-cache-{os.urandom(4).hex()}"
    client = boto3.client("dynamodb")
    client.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "key", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "key", "KeyType": "HASH"}])
    client.update_time_to_live(TableName=name, TimeToLiveSpecification={
        "Enabled": True, "AttributeName": "expires_at"})
    return name


class Endpoint:
    def __init__(self, body: bytes) -> None:
        self.body, self.calls = body, 0

    def __call__(self) -> InvokeResult:
        self.calls += 1
        return InvokeResult(self.body, "application/json", "AllTraffic", None, 1)


def test_the_table_is_shared_by_containers(table: str) -> None:
    body = json.dumps([0.001] * 1000).encode()
    endpoint = Endpoint(body)
    deadline = time.monotonic() + 20
    one = PredictionCache(MemoryTier(1 << 20), TableTier(table), ttl_seconds=3600)
    use = one.request()
    use.fetch({"model": "m"}, b"upload", endpoint, deadline)
    assert (use.status, use.errors) == (MISS, 0)
    item = boto3.client("dynamodb").scan(TableName=table)["Items"]
    assert len(item) == 1 and int(item[0]["expires_at"]["N"]) > time.time() + 3500
    assert len(item[0]["answer"]["B"]) < len(body)  # compressed
    other = PredictionCache(MemoryTier(1 << 20), TableTier(table), ttl_seconds=3600)
    again = other.request()
    answer = again.fetch({"model": "m"}, b"upload", endpoint, deadline)
    assert (again.status, again.tier, again.errors) == (HIT, TABLE, 0)
    assert answer.body == body and answer.variant == "AllTraffic" and endpoint.calls == 1
    assert other.memory is not None and len(other.memory) == 1  # promoted


def test_a_missing_table_falls_through_to_the_endpoint(table: str) -> None:
    endpoint = Endpoint(b"[1.0]")
    cache = PredictionCache(None, TableTier("no-such-table"))
    use = cache.request()
    assert use.fetch({}, b"x", endpoint, time.monotonic() + 20).body == b"[1.0]"
    assert use.errors == 2 and endpoint.calls == 1 and use.status == MISS
