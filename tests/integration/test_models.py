"""Every pipeline end to end: chalice local -> boto3 InvokeEndpoint -> the emulator's real
models (iris through the tensor pipeline and a Cortex handler, sentiment through a TF Serving
inference.py), the handler files unchanged."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Stack

SETOSA = [5.1, 3.5, 1.4, 0.2]
VIRGINICA = [6.7, 3.0, 5.2, 2.3]


def post(stack: Stack, path: str, document: Any, content_type: str = "application/json",
         **headers: str) -> tuple[int, Any]:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    response = stack.post(path, body, content_type, **headers)
    return response.status, json.loads(response.data)


def test_iris_through_the_tensor_pipeline(stack: Stack) -> None:
    status, answer = post(stack, "/models/iris/predict", {"instances": [SETOSA, VIRGINICA]})
    assert status == 200, answer
    assert [row[0]["label"] for row in answer["predictions"]] == ["setosa", "virginica"]
    probabilities = answer["outputs"]["probabilities"]
    assert all(abs(sum(row) - 1) < 1e-5 for row in probabilities)
    assert answer["predictions"][0][0]["probability"] > 0.9


@pytest.mark.parametrize("document", [
    {"instances": json.dumps([SETOSA])},       # the list as a string
    SETOSA,                                    # a flat row
    {"instances": [[str(x) for x in SETOSA]]},  # numbers as strings
])
def test_seed_style_mismatches_are_coerced(stack: Stack, document: Any) -> None:
    status, answer = post(stack, "/models/iris/predict", document)
    assert status == 200, answer
    assert answer["predictions"][0][0]["label"] == "setosa"


def test_what_cannot_be_coerced_is_a_400_and_never_reaches_the_emulator(stack: Stack) -> None:
    response = stack.post("/models/iris/predict", b'{"instances": [[5.1, 3.5, 1.4]]}')
    answer = json.loads(response.data)
    assert (response.status, answer["Code"]) == (400, "SignatureMismatch")
    assert answer["Message"] == ("input 'features': expected float32 of shape (-1, 4), "
                                 "got 1 row of 3")
    assert stack.emulator_calls(response.headers["X-Request-Id"]) == 0


def test_csv_rows_reach_the_model(stack: Stack) -> None:
    status, answer = post(stack, "/models/iris/predict?k=1",
                          b"5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n", "text/csv")
    assert status == 200, answer
    assert [row[0]["label"] for row in answer["predictions"]] == ["setosa", "virginica"]


def test_the_cortex_handler_runs_unchanged(stack: Stack) -> None:
    status, answer = post(stack, "/models/iris-cortex/predict",
                          {"sepal_length": 6.7, "sepal_width": 3.0, "petal_length": 5.2,
                           "petal_width": 2.3})
    assert status == 200, answer
    assert answer["class"] == "virginica"
    assert set(answer["probabilities"]) == {"setosa", "versicolor", "virginica"}


def test_the_tf_serving_inference_py_runs_unchanged(stack: Stack) -> None:
    scores = {}
    for text in ("I loved this film", "This was awful and boring"):
        status, answer = post(stack, "/models/sentiment/predict", {"text": text})
        assert status == 200, answer
        scores[text] = answer["predictions"][0][0]
    assert scores["I loved this film"] > 0.5 > scores["This was awful and boring"]


def test_json_lines_reach_the_tf_serving_handler(stack: Stack) -> None:
    body = b'{"text": "What a wonderful day"}\n{"text": "A dull, tedious mess"}\n'
    status, answer = post(stack, "/models/sentiment/predict", body, "application/jsonlines")
    assert status == 200, answer
    first, second = (row[0] for row in answer["predictions"])
    assert first > 0.5 > second


def test_a_handler_refusal_is_a_400_with_its_message(stack: Stack) -> None:
    status, answer = post(stack, "/models/sentiment/predict", {"words": "no text field"})
    assert status == 400 and answer["Code"] == "InvalidInput"


def test_the_catalog_answers_what_the_routes_take(stack: Stack) -> None:
    response = stack.http.request("GET", stack.api.url + "/models/iris")
    described = json.loads(response.data)
    status, _ = post(stack, described["path"], described["example"])
    assert status == 200


def test_an_unknown_model_is_404(stack: Stack) -> None:
    status, answer = post(stack, "/models/nope/predict", {})
    assert (status, answer["Code"]) == (404, "ModelNotFound")


# --- hostile bodies to the handler models (issue 18): a 4xx, the emulator never called ------


def test_1025_json_lines_to_sentiment_are_a_400_and_never_reach_the_emulator(
        stack: Stack) -> None:
    response = stack.post("/models/sentiment/predict", b'{"text": "fine"}\n' * 1025,
                          "application/jsonlines")
    answer = json.loads(response.data)
    assert (response.status, answer["Code"]) == (400, "SignatureMismatch")
    assert answer["Message"] == ("The model's input_handler made a request of 1025 instances; "
                                 "at most 1024 per request: send fewer records.")
    assert stack.emulator_calls(response.headers["X-Request-Id"]) == 0


@pytest.mark.parametrize("path", ["/models/sentiment/predict", "/models/iris-cortex/predict"])
def test_100000_deep_json_to_a_handler_model_is_a_400(stack: Stack, path: str) -> None:
    response = stack.post(path, b"[" * 100_000 + b"]" * 100_000)
    answer = json.loads(response.data)
    assert (response.status, answer["Code"]) == (400, "InvalidJSON")
    assert "deeper than 512 levels" in answer["Message"]
    assert stack.emulator_calls(response.headers["X-Request-Id"]) == 0
