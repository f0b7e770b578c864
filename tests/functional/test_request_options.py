"""Per-request options through the real app: one rule for every body shape (the query string
applies to JSON bodies, unknown parameters are refused on every route), and SageMaker's
InferenceComponentName from model.json, the query string or its header, as botocore sends it."""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY

import app as app_module
from chalicelib.inference.predictions import load_labels
from chalicelib.registry.loading import load_model, load_registry
from tests import imagefactory
from tests.functional.conftest import ENDPOINT, Harness, endpoint_response, probabilities

CAT = probabilities({285: 0.83, 281: 0.1, 282: 0.05})
JPEG = imagefactory.jpeg(320, 240)
IMAGE = base64.b64encode(JPEG).decode()
IRIS_ROW = [5.1, 3.5, 1.4, 0.2]
TFS_ROW = b'{"signature_name":"serving_default","instances":[[5.1,3.5,1.4,0.2]]}'
SETOSA = json.dumps({"predictions": [[0.97, 0.02, 0.01]]}).encode()
IRIS = {"endpoint": "iris", "pipeline": "tensor",
        "signature": {"inputs": [{"name": "features", "dtype": "float32", "shape": [-1, 4]}],
                      "outputs": [{"name": "probabilities", "dtype": "float32",
                                   "shape": [-1, 3]}]}}


def expect_image(harness: Harness, **params: Any) -> None:
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(CAT),
        {"EndpointName": ENDPOINT, "Body": ANY, "ContentType": "application/x-image",
         "Accept": "application/json", "InferenceId": ANY, **params})


def expect_iris(harness: Harness, **params: Any) -> None:
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(SETOSA),
        {"EndpointName": "iris", "Body": TFS_ROW, "ContentType": "application/json",
         "Accept": "application/json", "InferenceId": ANY, **params})


def error_of(response: Any) -> tuple[int, str, str]:
    body = json.loads(response.body)
    return response.status_code, body["Code"], body["Message"]


# --- one rule for every body shape ---------------------------------------------------------

def test_k_in_the_query_applies_to_a_json_body(harness: Harness) -> None:
    expect_image(harness)
    response = harness.post("/predict?k=1", json.dumps({"image": IMAGE}))
    assert response.status_code == 200, response.body
    assert [p["index"] for p in response.json_body["predictions"]] == [285]


def test_the_variant_in_the_query_reaches_the_endpoint_for_a_json_body(harness: Harness) -> None:
    expect_image(harness, TargetVariant="Challenger")
    response = harness.post("/predict?variant=Challenger", json.dumps({"image": IMAGE}))
    assert response.status_code == 200, response.body


@pytest.mark.parametrize(("path", "body"), [
    ("/predict?colour=red", {"image": IMAGE}),
    ("/resize?colour=red", {"image": IMAGE, "width": 8, "height": 8}),
    ("/models/efficientnet-lite0/predict?colour=red", {"image": IMAGE}),
])
def test_an_unknown_query_parameter_is_a_400_with_a_json_body(harness: Harness, path: str,
                                                              body: dict[str, Any]) -> None:
    status, code, message = error_of(harness.post(path, json.dumps(body)))
    assert (status, code) == (400, "InvalidParameter")
    assert message.startswith("Unknown query parameter(s) 'colour'; known: ")


@pytest.mark.parametrize(("path", "body", "content_type", "name"), [
    ("/predict?k=1&k=2", {"image": IMAGE}, "application/json", "k"),
    ("/predict?variant=A&k=1&variant=B", JPEG, "image/jpeg", "variant"),
    ("/models/efficientnet-lite0/predict?k=2&k=2", JPEG, "image/jpeg", "k"),
    ("/models/iris/predict?k=1&k=3", b"5.1,3.5,1.4,0.2", "text/csv", "k"),
    ("/resize?width=8&height=8&width=9", {"image": IMAGE}, "application/json", "width"),
    ("/resize?format=png&width=8&height=8&format=jpeg&height=9", JPEG, "image/jpeg", "format"),
])
def test_a_query_parameter_given_twice_is_a_400_naming_it(
        harness: Harness, path: str, body: Any, content_type: str, name: str) -> None:
    # ?k=1&k=2 was read as k=2: the client's other value silently dropped
    sent = body if isinstance(body, bytes) else json.dumps(body)
    status, code, message = error_of(harness.post(path, sent, content_type))
    assert (status, code) == (400, "InvalidParameter")
    assert f"'{name}' given twice" in message


def test_a_parameter_given_once_beside_others_is_read(harness: Harness) -> None:
    expect_image(harness)
    response = harness.post("/predict?k=2&variant=", JPEG, "image/jpeg")
    assert response.status_code == 200, response.body
    assert len(response.json_body["predictions"]) == 2


@pytest.mark.parametrize(("path", "body"), [
    ("/predict?k=1", {"image": IMAGE, "k": 3}),
    ("/resize?width=9", {"image": IMAGE, "width": 8, "height": 8}),
])
def test_an_option_in_the_body_and_the_query_is_a_400_naming_both(
        harness: Harness, path: str, body: dict[str, Any]) -> None:
    status, code, message = error_of(harness.post(path, json.dumps(body)))
    assert (status, code) == (400, "InvalidParameter")
    assert "sent both as a field of the JSON body and as a query parameter" in message


def test_resize_takes_a_json_bodys_size_from_the_query(harness: Harness) -> None:
    response = harness.post("/resize?width=16&height=12&format=png",
                            json.dumps({"image": IMAGE}))
    assert response.status_code == 200, response.body
    assert (response.json_body["width"], response.json_body["height"]) == (16, 12)


# --- inference components -------------------------------------------------------------------

def test_the_query_names_the_inference_component(harness: Harness) -> None:
    expect_iris(harness, InferenceComponentName="iris-ic")
    response = harness.post("/models/iris/predict?inference_component=iris-ic",
                            json.dumps([IRIS_ROW]))
    assert response.status_code == 200, response.body


def test_the_header_names_the_inference_component_for_an_image(harness: Harness) -> None:
    expect_image(harness, InferenceComponentName="lite0-ic")
    response = harness.post("/predict", JPEG, "image/jpeg",
                            **{"X-Target-Inference-Component": "lite0-ic"})
    assert response.status_code == 200, response.body


def with_models(harness: Harness, tmp_path: Path, **documents: dict[str, Any]) -> None:
    settings = app_module.services.settings
    env = {"ENDPOINT_NAME": settings.endpoint_name}
    labels = load_labels(settings.labels)
    registry = load_registry(settings, env)
    for name, document in documents.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.json").write_text(json.dumps(document))
        registry.models[name] = load_model(folder, settings, env, labels)
    app_module.services._registry = registry


def test_model_json_names_the_inference_component_and_a_request_may_override_it(
        harness: Harness, tmp_path: Path) -> None:
    with_models(harness, tmp_path, **{"iris-shared": {**IRIS, "inference_component": "iris-ic"}})
    expect_iris(harness, InferenceComponentName="iris-ic")
    expect_iris(harness, InferenceComponentName="iris-ic-2")
    path = "/models/iris-shared/predict"
    assert harness.post(path, json.dumps([IRIS_ROW])).status_code == 200
    # another component is another answer: not the cached one
    assert harness.post(path + "?inference_component=iris-ic-2",
                        json.dumps([IRIS_ROW])).status_code == 200


def test_an_image_models_own_targets_reach_the_endpoint(harness: Harness,
                                                         tmp_path: Path) -> None:
    with_models(harness, tmp_path, **{ENDPOINT: {
        "endpoint": "$ENDPOINT_NAME", "pipeline": "image-classification",
        "inference_component": "lite0-ic", "variant": "Blue"}})
    expect_image(harness, InferenceComponentName="lite0-ic", TargetVariant="Blue")
    response = harness.post("/predict", json.dumps({"image": IMAGE}))
    assert response.status_code == 200, response.body


def test_an_image_answer_is_cached_per_inference_component(harness: Harness) -> None:
    expect_image(harness, InferenceComponentName="a-ic")
    expect_image(harness, InferenceComponentName="b-ic")
    for component in ("a-ic", "b-ic", "a-ic"):
        response = harness.post(f"/predict?inference_component={component}", JPEG,
                                "image/jpeg")
        assert response.status_code == 200, response.body
    assert response.headers["X-Cache"] == "hit"


@pytest.mark.parametrize(("query", "says"), [
    ("", 'hosts inference components: name one with "inference_component"'),
    ("?inference_component=other-ic", "has no inference component 'other-ic'"),
])
def test_sagemakers_refusals_are_the_clients_400(harness: Harness, query: str,
                                                 says: str) -> None:
    message = ("Inference Component Name header is required for endpoints to which you plan "
               "to deploy inference components. Please include Inference Component Name header "
               "or consider using SageMaker models.") if not query else \
        "Inference Component other-ic not found for endpoint iris."
    harness.stubber.add_client_error("invoke_endpoint", "ValidationError", message, 400)
    status, code, text = error_of(harness.post("/models/iris/predict" + query,
                                               json.dumps([IRIS_ROW])))
    assert (status, code) == (400, "InvalidParameter")
    assert says in text


@pytest.mark.parametrize("value", ["bad_name", "-x", "x" * 64])
def test_a_malformed_component_never_reaches_the_endpoint(harness: Harness, value: str) -> None:
    status, code, message = error_of(harness.post(
        "/models/iris/predict", json.dumps([IRIS_ROW]),
        **{"X-Target-Inference-Component": value}))
    assert (status, code) == (400, "InvalidParameter") and '"inference_component"' in message


def test_a_browser_may_send_every_option_header() -> None:
    from chalicelib.core.access import Access
    from chalicelib.reading import options

    cors = app_module._cors(Access(cors_origin="https://app.example.com"))
    assert not isinstance(cors, bool)
    allowed = {name.strip().lower() for name in cors.allow_headers.split(",")}
    assert set(options.PREDICT_HEADERS) <= allowed
