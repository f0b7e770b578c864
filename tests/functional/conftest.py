"""Functional tier: the real Chalice app, a real botocore client, stubbed responses."""
from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from chalice.test import Client

import app as app_module
from chalicelib.config import Settings
from chalicelib.endpoint import EndpointClient, RetryPolicy
from chalicelib.pipeline import Predictor
from chalicelib.predictions import load_labels

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
    predictor = Predictor(settings, endpoint, load_labels(settings.labels))
    monkeypatch.setattr(app_module, "_SETTINGS", settings)
    monkeypatch.setattr(app_module, "_PREDICTOR", predictor)
    with Stubber(sm_client) as stubber, Client(app_module.app, stage_name="local") as client:
        yield Harness(client, stubber, sleeps)
        stubber.assert_no_pending_responses()
