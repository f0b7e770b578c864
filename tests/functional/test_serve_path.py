"""One serve path: every model's request is read once, served through one interface, and its
cache outcome noted once."""
from __future__ import annotations

from typing import Any

import pytest

import app as app_module
from chalicelib.http import modelcalls
from chalicelib.inference.pipeline import Predictor
from chalicelib.inference.serving import HandledModel
from chalicelib.kinds.tensor import TensorModel
from chalicelib.registry.kinds import Pipeline
from tests import imagefactory
from tests.functional.conftest import AnsweringApp


def test_every_model_is_served_through_the_same_interface(answering_app: AnsweringApp) -> None:
    services = app_module.services
    kinds = {model.pipeline: services.pipeline_for(model)
             for model in services.registry.models.values()}
    assert type(kinds[Pipeline.IMAGE_CLASSIFICATION]) is Predictor
    assert type(kinds[Pipeline.TENSOR]) is TensorModel  # a HandledModel whose halves split
    assert all(type(kinds[p]) is HandledModel for p in (Pipeline.SAGEMAKER_TFS,
                                                        Pipeline.CORTEX))


@pytest.mark.parametrize(("path", "body", "headers", "status"), [
    ("/predict", imagefactory.jpeg(64, 48), {"Content-Type": "image/jpeg"}, 200),
    ("/predict", b"not an image", {"Content-Type": "image/jpeg"}, 400),
    ("/models/iris/predict", b'{"instances": [["a", "b"]]}',
     {"Content-Type": "application/json"}, 400),
])
def test_the_cache_outcome_is_noted_once_per_request(
        answering_app: AnsweringApp, monkeypatch: pytest.MonkeyPatch, path: str, body: bytes,
        headers: dict[str, str], status: int) -> None:
    noted: list[Any] = []
    original = modelcalls.note_cache
    monkeypatch.setattr(modelcalls, "note_cache", lambda log, cache, timer: (
        noted.append(cache), original(log, cache, timer)))
    response = answering_app.client.http.post(path, body=body, headers=headers)
    assert response.status_code == status
    assert len(noted) == 1
