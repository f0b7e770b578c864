"""Inference components through the real stack: chalice local -> boto3 -> the emulator, whose
endpoints here host their models as inference components (emulator-components.json). A call
must name its component (the query string, the header, or model.json); SageMaker's refusals
come back as the client's 400."""
from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.integration.conftest import HERE, Stack, _start_stack

pytestmark = pytest.mark.integration

SETOSA = [5.1, 3.5, 1.4, 0.2]


@pytest.fixture(scope="module")
def components_stack() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="sagegate-it-") as logs:
        yield from _start_stack(HERE / "emulator-components.json", Path(logs))


def post(stack: Stack, path: str, document: Any, **headers: str) -> tuple[int, Any, str]:
    response = stack.post(path, json.dumps(document).encode(), **headers)
    return response.status, json.loads(response.data), response.headers["X-Request-Id"]


def test_a_model_route_names_its_component_in_the_query(components_stack: Stack) -> None:
    status, answer, _ = post(components_stack, "/models/iris/predict?inference_component=iris-ic",
                             {"instances": [SETOSA]})
    assert status == 200, answer
    assert answer["predictions"][0][0]["label"] == "setosa"
    assert answer["variant"] == "Shared"


def test_a_call_without_a_component_is_the_clients_400(components_stack: Stack) -> None:
    status, answer, request_id = post(components_stack, "/models/iris/predict",
                                      {"instances": [SETOSA]})
    assert (status, answer["Code"]) == (400, "InvalidParameter"), answer
    assert 'hosts inference components: name one with "inference_component"' in \
        answer["Message"]
    assert components_stack.emulator_calls(request_id) == 1  # SageMaker's refusal, not ours


def test_a_component_the_endpoint_does_not_host_is_named(components_stack: Stack) -> None:
    status, answer, _ = post(components_stack, "/models/iris/predict", {"instances": [SETOSA]},
                             **{"X-Target-Inference-Component": "nope-ic"})
    assert (status, answer["Code"]) == (400, "InvalidParameter"), answer
    assert "has no inference component 'nope-ic'" in answer["Message"]


def test_an_image_with_its_component_and_k_in_the_query_of_a_json_body(
        components_stack: Stack, photos: dict[str, bytes]) -> None:
    image = base64.b64encode(photos["chelsea"]).decode()
    status, answer, _ = post(components_stack, "/predict?inference_component=lite0-ic&k=1",
                             {"image": image})
    assert status == 200, answer
    assert len(answer["predictions"]) == 1
    assert answer["predictions"][0]["index"] in {281, 282, 285}  # a cat


def test_boto3_reaches_the_named_component(components_stack: Stack) -> None:
    client = boto3.client("sagemaker-runtime", region_name="us-east-1",
                          endpoint_url=components_stack.emulator_url,
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(retries={"max_attempts": 1}))
    body = json.dumps({"instances": [SETOSA]}).encode()
    answer = client.invoke_endpoint(EndpointName="iris", InferenceComponentName="iris-ic",
                                    Body=body, ContentType="application/json")
    assert answer["InvokedProductionVariant"] == "Shared"
    assert len(json.loads(answer["Body"].read())["predictions"][0]) == 3
    with pytest.raises(client.exceptions.ValidationError, match="Inference Component Name"):
        client.invoke_endpoint(EndpointName="iris", Body=body, ContentType="application/json")
