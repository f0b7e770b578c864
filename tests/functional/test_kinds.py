"""What a pipeline kind keeps of a client's request and shows in the catalog, through the real
app (``chalice.test.Client``) and a stubbed endpoint: a ``sagemaker-tfs`` model's handler sees
the client's ``Accept`` (and may answer in it), and a ``tensor`` model's example request for a
signature with a free (``-1``) inner dimension is one the model's route reads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY

import app as app_module
from chalicelib.inference.predictions import load_labels
from chalicelib.registry.loading import load_model, load_registry
from tests.functional.conftest import Harness, endpoint_response

POSITIVE = b'{"predictions": [[0.93]]}'


def _sentiment(harness: Harness, **headers: str) -> Any:
    # the endpoint is asked for model.json's accept whatever the client's: the handler's
    # output_handler answers in the client's (context.accept_header)
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(POSITIVE),
        {"EndpointName": "sentiment", "Body": ANY, "ContentType": "application/json",
         "Accept": "application/json", "InferenceId": ANY})
    return harness.post("/models/sentiment/predict", json.dumps({"text": "I loved this film"}),
                        **headers)


@pytest.mark.parametrize(("accept", "answered"), [
    ("application/jsonlines", "application/jsonlines"),
    ("text/csv", "text/csv"),
    ("*/*", "application/json"),  # the container's default for "anything"
])
def test_a_tfs_handler_sees_the_clients_accept(harness: Harness, accept: str,
                                               answered: str) -> None:
    response = _sentiment(harness, Accept=accept)
    assert response.status_code == 200, response.body
    assert response.headers["Content-Type"] == answered
    assert json.loads(response.body) == json.loads(POSITIVE)


def test_a_tfs_handler_without_an_accept_sees_json(harness: Harness) -> None:
    response = _sentiment(harness)
    assert response.status_code == 200, response.body
    assert response.headers["Content-Type"] == "application/json"


def _with_model(harness: Harness, tmp_path: Path, name: str, document: dict[str, Any]) -> None:
    settings = app_module.services.settings
    env = {"ENDPOINT_NAME": settings.endpoint_name}
    registry = load_registry(settings, env)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps(document))
    registry.models[name] = load_model(folder, settings, env, load_labels(settings.labels))
    app_module.services._registry = registry


@pytest.mark.parametrize(("shape", "instance"), [
    ([-1, -1, 3], [[0.0, 0.0, 0.0]]),  # a free inner dimension: one element
    ([-1, 2, -1], [[0.0], [0.0]]),
    ([-1, 4], [0.0, 0.0, 0.0, 0.0]),
])
def test_a_free_dimensions_example_has_one_element_and_the_route_reads_it(
        harness: Harness, tmp_path: Path, shape: list[int], instance: Any) -> None:
    _with_model(harness, tmp_path, "frames", {
        "endpoint": "frames", "pipeline": "tensor",
        "signature": {"inputs": [{"name": "x", "dtype": "float32", "shape": shape}]}})
    described = json.loads(harness.client.http.get("/models/frames").body)
    assert described["example"] == {"instances": [instance]}
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(b'{"predictions": [[0.5]]}'),
        {"EndpointName": "frames", "Body": ANY, "ContentType": "application/json",
         "Accept": "application/json", "InferenceId": ANY})
    response = harness.post("/models/frames/predict", json.dumps(described["example"]))
    assert response.status_code == 200, response.body
