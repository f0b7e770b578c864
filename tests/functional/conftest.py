"""Functional tier: the real Chalice app, a real botocore client, stubbed responses."""
from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import cv2
import numpy as np
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from chalice.test import Client

import app as app_module
from chalicelib.capture import Capturer
from chalicelib.core.config import Settings
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.services import Services

ENDPOINT = "efficientnet-lite0"


def probabilities(top: dict[int, float], n: int = 1000) -> list[float]:
    """A softmax-like vector with the given classes on top and the rest spread evenly."""
    rest = (1.0 - sum(top.values())) / (n - len(top))
    values = np.full(n, rest)
    for index, value in top.items():
        values[index] = value
    return values.tolist()


def endpoint_response(body: bytes | list[float], content_type: str = "application/json",
                      variant: str = "AllTraffic", **extra: Any) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return {"Body": StreamingBody(io.BytesIO(raw), len(raw)), "ContentType": content_type,
            "InvokedProductionVariant": variant, **extra}


@dataclass
class Harness:
    client: Client
    stubber: Stubber
    sleeps: list[float]
    endpoint: EndpointClient
    monkeypatch: pytest.MonkeyPatch = field(repr=False)

    def use(self, settings: Settings | None = None, *, capturer: Capturer | None = None,
            endpoint: EndpointClient | None = None) -> Services:
        """Serve with these settings (the current ones when None), a predictor built on the
        harness's stubbed endpoint client (or ``endpoint``), and ``capturer`` if given."""
        settings = settings or app_module.services.settings
        services = Services(settings, endpoint=endpoint or self.endpoint, capturer=capturer)
        self.monkeypatch.setattr(app_module, "services", services)
        return services

    def post(self, path: str, body: bytes | str, content_type: str = "application/json",
             **headers: str) -> Any:
        return self.client.http.post(path, body=body,
                                     headers={"Content-Type": content_type, **headers})


def make_settings(**overrides: Any) -> Settings:
    """Settings for the functional tier: passthrough off unless asked, so that small test
    images take the decode-resize-encode path (tests/functional/test_passthrough.py)."""
    return Settings.from_env({"ENDPOINT_NAME": ENDPOINT}, **{"passthrough": False, **overrides})


@pytest.fixture
def sm_client() -> Any:
    return boto3.client("sagemaker-runtime", region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch, sm_client: Any) -> Iterator[Harness]:
    settings = make_settings()
    sleeps: list[float] = []
    endpoint = EndpointClient(sm_client, RetryPolicy(max_attempts=3, budget_seconds=25,
                                                     attempt_timeout=2.5),
                              sleep=sleeps.append, rng=lambda: 0.5)
    with Stubber(sm_client) as stubber, Client(app_module.app, stage_name="local") as client:
        harness = Harness(client, stubber, sleeps, endpoint, monkeypatch)
        harness.use(settings)
        yield harness
        stubber.assert_no_pending_responses()


class AnsweringEndpoint:
    """An in-memory sagemaker-runtime client that answers every call with a valid prediction,
    checking what it gets as SageMaker (6 MB) and the model's decoder would."""

    LIMIT = 6 * 1024 * 1024
    ANSWER = json.dumps(probabilities({285: 0.8})).encode()

    def __init__(self) -> None:
        self.calls = 0

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        body = params["Body"]
        assert len(body) <= self.LIMIT
        image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
        assert image is not None, "sagegate sent the endpoint something it cannot decode"
        self.calls += 1
        return {"Body": StreamingBody(io.BytesIO(self.ANSWER), len(self.ANSWER)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


@dataclass
class AnsweringApp:
    client: Client
    endpoint: AnsweringEndpoint


@pytest.fixture(scope="module")
def answering_app() -> Iterator[AnsweringApp]:
    """The app with production defaults (passthrough on) and an endpoint that always answers:
    for the hostile corpus and the fuzzer, where which requests reach the endpoint is the
    question, not a script."""
    settings = Settings.from_env({"ENDPOINT_NAME": ENDPOINT})
    fake = AnsweringEndpoint()
    endpoint = EndpointClient(fake, sleep=lambda _: None)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app_module, "services", Services(settings, endpoint=endpoint))
        with Client(app_module.app, stage_name="local") as client:
            yield AnsweringApp(client, fake)
