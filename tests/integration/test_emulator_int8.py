"""The int8 challenger (``efficientnet-lite0-int8``) as the emulator serves it, beside the
float model it was quantized from, through boto3 on a real emulator process.

The two models and endpoints are the committed ``emulator/config.json``'s, as they are (only
the model paths made absolute); nothing else of that file is started. The model files are
committed: if one is missing these tests fail, they do not skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.config import Config

from emulator.process import EmulatorProcess, start_emulator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
FLOAT = "efficientnet-lite0"
INT8 = "efficientnet-lite0-int8"
NEAR_TIE = 0.05
"""A photo whose float top-1 leads its second class by less than this may swap the two in
int8 (chelsea's tiger cat 0.38 against Egyptian cat 0.36: int8 answers Egyptian cat)."""
MAX_PROBABILITY_DIFF = 0.2
"""The most any class's probability may move (0.16 on chelsea-12mp: tiger cat 0.40 to 0.56)."""


def write_config(directory: Path) -> Path:
    base = json.loads((ROOT / "emulator" / "config.json").read_text())
    config = {
        "models": {name: {**base["models"][name],
                          "path": str(ROOT / "emulator" / base["models"][name]["path"])}
                   for name in (FLOAT, INT8)},
        "endpoints": {name: base["endpoints"][name] for name in (FLOAT, INT8)},
    }  # fmt: skip
    path = directory / "emulator-int8.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    with start_emulator(write_config(tmp_path_factory.mktemp("int8")), timeout=60) as process:
        yield process


@pytest.fixture(scope="module")
def client(emulator: EmulatorProcess) -> Any:
    return boto3.client(
        "sagemaker-runtime", endpoint_url=emulator.url, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )  # fmt: skip


def invoke(client: Any, endpoint: str, image: bytes) -> tuple[dict[str, Any], np.ndarray]:
    response: dict[str, Any] = client.invoke_endpoint(EndpointName=endpoint, Body=image,
                                                      ContentType="image/jpeg")
    return response, np.asarray(json.loads(response["Body"].read()), dtype=np.float64)


def test_the_int8_endpoint_answers_1000_probabilities(client: Any,
                                                      photos: dict[str, bytes]) -> None:
    response, probabilities = invoke(client, INT8, photos["coffee"])

    assert response["ContentType"] == "application/json"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert probabilities.shape == (1000,)
    assert probabilities.min() >= 0.0
    assert probabilities.sum() == pytest.approx(1.0, abs=1e-4)
    assert int(probabilities.argmax()) == 967  # espresso, as the float model answers


def test_the_int8_endpoint_keeps_the_float_top1_on_the_photos(
        client: Any, photos: dict[str, bytes]) -> None:
    agreed, swapped = [], []
    for name, image in photos.items():
        _, reference = invoke(client, FLOAT, image)
        _, candidate = invoke(client, INT8, image)
        first, second = np.argsort(-reference)[:2]
        top1 = int(candidate.argmax())
        assert np.abs(candidate - reference).max() < MAX_PROBABILITY_DIFF, name
        if top1 == first:
            agreed.append(name)
            continue
        # the only difference allowed: a near-tie of the float model's first two, swapped
        assert top1 == second, f"{name}: int8 top-1 {top1}, float's top-2 {first}, {second}"
        assert reference[first] - reference[second] < NEAR_TIE, name
        swapped.append(name)

    assert len(agreed) >= len(photos) - 1, f"agreed on {agreed}, swapped on {swapped}"
