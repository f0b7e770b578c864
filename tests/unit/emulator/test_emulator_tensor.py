"""The tensor kind: TF Serving bodies in, predictions out, over real (tiny) ONNX graphs.

The graphs are written by ``onnxbuild`` (no ``onnx`` package needed) and run by onnxruntime:
``classifier`` (``features`` float32 (-1, 4) -> ``probabilities`` (-1, 3)), ``two-inputs``
(``input_ids``, ``input_mask`` int32 (-1, 8) -> ``outputs`` (-1, 1)) and ``two-outputs``
(``x`` int64 (-1, 2) -> ``doubled`` int64 (-1, 2), ``total`` float32 (-1,)).
"""

from __future__ import annotations

import io
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator import errors, faults
from emulator.config import TENSOR, ConfigError, load_config, parse_config
from emulator.container import ContainerReply
from emulator.loader import build_runtime, load_containers
from emulator.models import ModelLoadError, OnnxGraph, TensorSpec
from emulator.runtime import InvokeRequest
from emulator.tensors import (
    DEFAULT_MAX_INSTANCES,
    NPY,
    TensorContainer,
    TensorRequestError,
    jsonable,
    parse_npy,
    to_batch,
)
from tests.unit.emulator import onnxbuild

IRIS = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]]


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return onnxbuild.write_models(tmp_path_factory.mktemp("tensor-models"))


@pytest.fixture(scope="module")
def graphs(model_paths: dict[str, Path]) -> dict[str, OnnxGraph]:
    return {name: OnnxGraph.load(path) for name, path in model_paths.items()}


@pytest.fixture(scope="module")
def classifier(graphs: dict[str, OnnxGraph]) -> TensorContainer:
    return TensorContainer(graphs["classifier"])


@pytest.fixture(scope="module")
def two_inputs(graphs: dict[str, OnnxGraph]) -> TensorContainer:
    return TensorContainer(graphs["two-inputs"])


@pytest.fixture(scope="module")
def two_outputs(graphs: dict[str, OnnxGraph]) -> TensorContainer:
    return TensorContainer(graphs["two-outputs"])


def call(
    container: TensorContainer,
    body: object,
    content_type: str | None = "application/json",
    accept: str | None = None,
) -> ContainerReply:
    if isinstance(body, str):
        data = body.encode()
    elif isinstance(body, bytes):
        data = body
    else:
        data = json.dumps(body).encode()
    return container.invoke(data, content_type, accept)


def answer(reply: ContainerReply) -> Any:
    assert reply.status == 200, reply.body
    return json.loads(reply.body)


def refusal(reply: ContainerReply, status: int = 400) -> str:
    assert reply.status == status, reply.body
    assert reply.content_type == "application/json"
    document = json.loads(reply.body)
    assert list(document) == ["error"]
    message: str = document["error"]
    return message


def expected(rows: list[list[float]]) -> np.ndarray:
    return onnxbuild.classifier_reference(np.array(rows, dtype=np.float32))


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def ids(length: int = 8, start: int = 0) -> list[int]:
    return list(range(start, start + length))


# --- the signature -------------------------------------------------------------------------


def test_reads_the_signature_from_the_session(graphs: dict[str, OnnxGraph]) -> None:
    graph = graphs["two-inputs"]

    assert [spec.describe() for spec in graph.inputs] == [
        "input_ids tensor(int32) (-1, 8)",
        "input_mask tensor(int32) (-1, 8)",
    ]
    assert [spec.describe() for spec in graph.outputs] == ["outputs tensor(float) (-1, 1)"]
    assert graph.inputs[0].dtype == np.dtype(np.int32)
    assert graph.outputs[0].shape == (None, 1)


def test_a_fixed_batch_axis_is_read_as_fixed(tmp_path: Path) -> None:
    path = tmp_path / "fixed.onnx"
    path.write_bytes(onnxbuild.classifier(batch=2))

    graph = OnnxGraph.load(path)

    assert graph.inputs[0].shape == (2, 4)
    assert graph.inputs[0].shape_text() == "(2, 4)"


def test_a_fixed_batch_axis_takes_exactly_that_many_instances(tmp_path: Path) -> None:
    path = tmp_path / "fixed.onnx"
    path.write_bytes(onnxbuild.classifier(batch=2))
    container = TensorContainer(OnnxGraph.load(path))

    assert len(answer(call(container, {"instances": IRIS[:2]}))["predictions"]) == 2
    assert refusal(call(container, {"instances": IRIS})) == (
        "input features tensor(float) (2, 4) takes exactly 2 instances per request, got 3"
    )


def test_a_missing_model_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="model file not found"):
        OnnxGraph.load(tmp_path / "absent.onnx")


# --- row format ----------------------------------------------------------------------------


def test_row_format_answers_one_prediction_per_instance(classifier: TensorContainer) -> None:
    reply = call(classifier, {"signature_name": "serving_default", "instances": IRIS})

    assert reply.content_type == "application/json"
    predictions = answer(reply)["predictions"]
    assert len(predictions) == 3
    assert all(len(row) == 3 for row in predictions)
    np.testing.assert_allclose(np.array(predictions), expected(IRIS), rtol=1e-6)


def test_float32_outputs_are_their_shortest_round_trip_repr(classifier: TensorContainer) -> None:
    reply = call(classifier, {"instances": IRIS[:1]})

    text = reply.body.decode()
    row = expected(IRIS[:1])[0]
    assert text == '{"predictions": [[' + ", ".join(str(value) for value in row) + "]]}"
    assert np.array_equal(np.array(answer(reply)["predictions"][0], dtype=np.float32), row)


def test_the_signature_name_is_optional(classifier: TensorContainer) -> None:
    assert len(answer(call(classifier, {"instances": IRIS}))["predictions"]) == 3


def test_integers_are_cast_to_a_float_input(classifier: TensorContainer) -> None:
    predictions = answer(call(classifier, {"instances": [[5, 3, 1, 0]]}))["predictions"]

    np.testing.assert_allclose(predictions, expected([[5, 3, 1, 0]]), rtol=1e-6)


def test_keyed_instances_feed_a_single_input_too(classifier: TensorContainer) -> None:
    body = {"instances": [{"features": row} for row in IRIS]}

    predictions = answer(call(classifier, body))["predictions"]

    np.testing.assert_allclose(predictions, expected(IRIS), rtol=1e-6)


def test_named_inputs_share_the_batch_axis(two_inputs: TensorContainer) -> None:
    body = {"instances": [
        {"input_ids": ids(), "input_mask": [1] * 8},
        {"input_ids": ids(start=10), "input_mask": [1, 1, 1, 0, 0, 0, 0, 0]},
    ]}  # fmt: skip

    assert answer(call(two_inputs, body)) == {"predictions": [[28.0], [33.0]]}


def test_int_values_given_as_whole_floats_are_accepted(two_inputs: TensorContainer) -> None:
    body = {"instances": [{"input_ids": [2.0] * 8, "input_mask": [1] * 8}]}

    assert answer(call(two_inputs, body)) == {"predictions": [[16.0]]}


def test_several_outputs_give_one_object_per_instance(two_outputs: TensorContainer) -> None:
    reply = call(two_outputs, {"instances": [[1, 2], [3, 4], [-5, 10]]})

    assert answer(reply) == {"predictions": [
        {"doubled": [2, 4], "total": 3.0},
        {"doubled": [6, 8], "total": 7.0},
        {"doubled": [-10, 20], "total": 5.0},
    ]}  # fmt: skip


def test_a_bare_list_of_instances_is_wrapped_as_the_container_does(
    classifier: TensorContainer,
) -> None:
    assert len(answer(call(classifier, IRIS))["predictions"]) == 3
    assert len(answer(call(classifier, IRIS[0]))["predictions"]) == 1


def test_a_bare_object_is_one_instance_of_named_inputs(two_inputs: TensorContainer) -> None:
    body = {"input_ids": ids(), "input_mask": [1] * 8}

    assert answer(call(two_inputs, body)) == {"predictions": [[28.0]]}


# --- columnar format -----------------------------------------------------------------------


def test_columnar_list_feeds_the_single_input(classifier: TensorContainer) -> None:
    document = answer(call(classifier, {"inputs": IRIS}))

    assert list(document) == ["outputs"]
    np.testing.assert_allclose(document["outputs"], expected(IRIS), rtol=1e-6)


def test_columnar_object_feeds_named_inputs(two_inputs: TensorContainer) -> None:
    body = {"inputs": {"input_ids": [ids(), ids(start=1)], "input_mask": [[1] * 8, [0] * 8]}}

    assert answer(call(two_inputs, body)) == {"outputs": [[28.0], [0.0]]}


def test_columnar_answers_with_several_outputs_are_keyed_by_name(
    two_outputs: TensorContainer,
) -> None:
    reply = call(two_outputs, {"inputs": {"x": [[1, 2], [3, 4]]}})

    assert answer(reply) == {"outputs": {"doubled": [[2, 4], [6, 8]], "total": [3.0, 7.0]}}


# --- JSON lines, CSV, .npy -----------------------------------------------------------------


def test_json_lines_are_one_instance_each(classifier: TensorContainer) -> None:
    body = "\n".join(json.dumps(row) for row in IRIS) + "\n"

    reply = call(classifier, body, "application/jsonlines")

    np.testing.assert_allclose(answer(reply)["predictions"], expected(IRIS), rtol=1e-6)


def test_json_lines_may_be_row_bodies(two_inputs: TensorContainer) -> None:
    first = {"instances": [{"input_ids": ids(), "input_mask": [1] * 8}]}
    second = {"input_ids": ids(), "input_mask": [0] * 8}
    body = json.dumps(first) + "\r\n\n" + json.dumps(second)

    reply = call(two_inputs, body, "application/jsonlines")

    assert answer(reply) == {"predictions": [[28.0], [0.0]]}


def test_json_lines_sent_as_application_json_are_detected(classifier: TensorContainer) -> None:
    body = "\n".join(json.dumps(row) for row in IRIS)

    assert len(answer(call(classifier, body, "application/json"))["predictions"]) == 3


def test_csv_rows_are_instances(classifier: TensorContainer) -> None:
    body = "5.1,3.5,1.4,0.2\r\n6.2, 2.9, 4.3, 1.3\n\n7.7,3,6.1,2.3\n"

    reply = call(classifier, body, "text/csv")

    np.testing.assert_allclose(answer(reply)["predictions"], expected(IRIS), rtol=1e-6)


def test_csv_feeds_integer_inputs(two_outputs: TensorContainer) -> None:
    assert answer(call(two_outputs, "1,2\n3,4", "text/csv; charset=utf-8"))["predictions"] == [
        {"doubled": [2, 4], "total": 3.0},
        {"doubled": [6, 8], "total": 7.0},
    ]


def test_npy_is_the_batch_of_the_single_input(classifier: TensorContainer) -> None:
    array = np.array(IRIS, dtype=np.float64)

    reply = call(classifier, npy(array), "application/x-npy")

    assert reply.content_type == "application/json"
    np.testing.assert_allclose(answer(reply)["predictions"], expected(IRIS), rtol=1e-6)


def test_npy_of_int32_feeds_an_int64_input(two_outputs: TensorContainer) -> None:
    body = npy(np.array([[1, 2]], dtype=np.int32))

    assert answer(call(two_outputs, body, "application/x-npy")) == {
        "predictions": [{"doubled": [2, 4], "total": 3.0}]
    }


# --- Accept and content types --------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [(None, "application/json"), ("*/*", "application/json"),
     ("application/json", "application/json"),
     ("application/jsonlines", "application/jsonlines"),
     ("text/csv, application/jsonlines", "application/jsonlines")],
)  # fmt: skip
def test_answers_json_or_one_line_of_jsonlines(
    classifier: TensorContainer, accept: str | None, chosen: str
) -> None:
    reply = call(classifier, {"instances": IRIS}, accept=accept)

    assert reply.content_type == chosen
    assert b"\n" not in reply.body
    assert len(answer(reply)["predictions"]) == 3


def test_refuses_an_unsupported_accept_with_406(classifier: TensorContainer) -> None:
    message = refusal(call(classifier, {"instances": IRIS}, accept="text/csv"), 406)

    assert message.startswith("Not Acceptable: text/csv")


@pytest.mark.parametrize("content_type", ["text/plain", "image/jpeg", None, ""])
def test_refuses_an_unsupported_content_type_with_415(
    classifier: TensorContainer, content_type: str | None
) -> None:
    message = refusal(call(classifier, {"instances": IRIS}, content_type), 415)

    assert message.startswith(f"Unsupported Media Type: {content_type or 'Unknown'}")


# --- refusals: TF Serving's 400 {"error": ...} ---------------------------------------------

REFUSED_BY_CLASSIFIER = [
    ({"instances": []}, "no instances"),
    ({"inputs": []}, "input 'features' must have shape (-1, 4) (tensor(float)), got (0,)"),
    ({"instances": [[1, 2, 3]]}, "each instance of input 'features' must have shape (4,)"),
    ({"instances": [1, 2, 3, 4]}, "must have shape (4,) (the input is features tensor(float) "
                                  "(-1, 4)), got ()"),
    ({"instances": [[[1, 2, 3, 4]]]}, "must have shape (4,)"),
    ({"inputs": [1, 2, 3, 4]}, "input 'features' must have shape (-1, 4)"),
    ({"instances": [[1, 2, 3, 4], [1, 2, 3]]}, "instance 1 of input 'features' has shape (3,) "
                                               "but instance 0 has (4,)"),
    ({"instances": [[1, 2, 3, 4], [1, [2], 3, 4]]}, "are ragged"),
    ({"instances": [["a", "b", "c", "d"]]}, "takes numbers, got a string"),
    ({"instances": [[1, 2, 3, None]]}, "takes numbers, got null"),
    ({"instances": [[True, False, True, False]]}, "takes numbers, not true/false"),
    ({"instances": [[1e300, 1, 2, 3]]}, "1e+300 is out of range for float32"),
    ({"instances": [[2**70, 1, 2, 3]]}, "is out of range"),
    ({"instances": [{"b64": "AAAA"}]}, '{"b64": ...} values (binary strings) are not supported'),
    ({"inputs": {"b64": "AAAA"}}, '{"b64": ...} values'),
    ({"instances": [[{"b64": "AAAA"}] * 4]}, '{"b64": ...} values'),
    ({"instances": [{"features": [1, 2, 3, 4]}, [1, 2, 3, 4]]}, "instance 1 is not an object"),
    ({"instances": [[1, 2, 3, 4], {"features": [1, 2, 3, 4]}]}, "instance 1 is an object"),
    ({"instances": [{"feature": [1, 2, 3, 4]}]}, "instance 0 has unknown input 'feature'; "
                                                 "this model's inputs are: features"),
    ({"inputs": {"features": IRIS, "extra": 1}}, "'inputs' has unknown input 'extra'"),
    ({"instances": IRIS, "inputs": IRIS}, "only one of 'inputs' or 'instances'"),
    ({"instances": {"features": IRIS}}, "'instances' must be a list"),
    ({"signature_name": "predict", "instances": IRIS}, 'signature name: "predict" not found'),
    ({"signature_name": 3, "instances": IRIS}, "'signature_name' must be a string"),
    ({"examples": [{"x": 1}]}, "Missing 'inputs' or 'instances' key"),
    ({"inputs": {"features": {"nested": 1}}}, "takes numbers, got an object"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "named"), REFUSED_BY_CLASSIFIER)
def test_refuses_what_the_signature_does_not_take(
    classifier: TensorContainer, body: object, named: str
) -> None:
    assert named in refusal(call(classifier, body))


REFUSED_BY_TWO_INPUTS = [
    ({"instances": [ids()]}, "instances is a plain list, but this model takes 2 inputs "
                             "(input_ids, input_mask)"),
    ({"inputs": [ids()]}, "inputs is a plain value/list, but this model takes 2 inputs"),
    ({"instances": [{"input_ids": ids()}]}, "instance 0 is missing input 'input_mask'"),
    ({"inputs": {"input_ids": [ids()]}}, "'inputs' is missing input 'input_mask'"),
    ({"instances": [{"input_ids": ids(), "input_mask": [1] * 8, "token_type_ids": [0] * 8}]},
     "instance 0 has unknown input 'token_type_ids'"),
    ({"instances": [{"input_ids": [1.5] * 8, "input_mask": [1] * 8}]}, "takes integers, got 1.5"),
    ({"instances": [{"input_ids": [2**31] * 8, "input_mask": [1] * 8}]},
     "2147483648 is out of range for int32 [-2147483648, 2147483647]"),
    ({"instances": [{"input_ids": ids(7), "input_mask": [1] * 7}]},
     "each instance of input 'input_ids' must have shape (8,)"),
    ({"instances": [{"input_ids": ids(), "input_mask": [1] * 8},
                    {"input_ids": ids(), "input_mask": [1] * 7}]},
     "instance 1 of input 'input_mask' has shape (7,) but instance 0 has (8,)"),
    ({"inputs": {"input_ids": [ids()], "input_mask": [[1] * 8, [1] * 8]}},
     "the inputs do not share the batch axis: input_ids has 1, input_mask has 2"),
    ({"instances": [{"input_ids": [None] * 8, "input_mask": [1] * 8}]}, "got null"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "named"), REFUSED_BY_TWO_INPUTS)
def test_refuses_bad_named_inputs(two_inputs: TensorContainer, body: object, named: str) -> None:
    assert named in refusal(call(two_inputs, body))


@pytest.mark.parametrize(
    ("body", "content_type", "named"),
    [
        ("", "application/json", "JSON parse error: the body is empty"),
        ("{", "application/json", "JSON parse error"),
        ("[" * 100_000, "application/json", "JSON parse error: nested too deeply"),
        ('{"instances": [[1,2,3,4]]}\nnot json', "application/jsonlines",
         "JSON lines: line 2 is not JSON"),
        ('[1,2,3,4]\n{"inputs": [[1,2,3,4]]}', "application/jsonlines",
         "line 2 is a columnar 'inputs' body"),
        (b"\xff\xfe[1]", "application/json", "the body is not UTF-8 text"),
        ("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2", "text/csv",
         "text/csv: row 1, column 1: \"sepal_length\" is not a number"),
        ("5.1,3.5,,0.2", "text/csv", "row 1, column 3"),
        ("5.1,3.5,1.4\n", "text/csv", "each instance of input 'features' must have shape (4,)"),
        ("5.1,3.5,1.4,0.2\n5.1,3.5,1.4\n", "text/csv", "instance 1 of input 'features' has "
                                                       "shape (3,)"),
        ("\n\n", "text/csv", "no instances"),
        (b"not a npy", "application/x-npy", "application/x-npy: not a .npy array"),
        (b"", "application/x-npy", "not a .npy array"),
    ],
)  # fmt: skip
def test_refuses_bodies_that_do_not_parse(
    classifier: TensorContainer, body: str | bytes, content_type: str, named: str
) -> None:
    assert named in refusal(call(classifier, body, content_type))


def test_csv_refuses_a_multi_input_model(two_inputs: TensorContainer) -> None:
    message = refusal(call(two_inputs, "1,2,3,4,5,6,7,8", "text/csv"))

    assert message == (
        "text/csv feeds a single input, but this model takes 2: input_ids, input_mask; "
        "send application/json with instances keyed by input name"
    )


def test_npy_refuses_a_multi_input_model(two_inputs: TensorContainer) -> None:
    message = refusal(call(two_inputs, npy(np.zeros((1, 8), np.int32)), "application/x-npy"))

    assert message.startswith("application/x-npy feeds a single input")


@pytest.mark.parametrize(
    ("array", "named"),
    [
        (np.zeros((2, 3), np.float32), "must have shape (4,)"),
        (np.array(["a", "b", "c", "d"])[np.newaxis], "takes numbers, got a string"),
        (np.zeros(4, dtype=[("a", "f4")]), "dtype [('a', '<f4')] is not accepted"),
        (np.float32(1.0), "the .npy array is a scalar"),
        (np.zeros((0, 4), np.float32), "no instances"),
    ],
    ids=["shape", "strings", "structured", "scalar", "empty"],
)
def test_npy_refusals(classifier: TensorContainer, array: np.ndarray, named: str) -> None:
    assert named in refusal(call(classifier, npy(np.asarray(array)), "application/x-npy"))


def test_npy_refuses_object_arrays_without_unpickling(classifier: TensorContainer) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([[1, "x", None, 2]], dtype=object), allow_pickle=True)

    message = refusal(call(classifier, buffer.getvalue(), "application/x-npy"))

    assert "dtype object is not accepted" in message


def test_npy_whose_header_announces_more_than_it_holds_is_refused_cheaply(
    classifier: TensorContainer,
) -> None:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 4), }"
    padded = header + " " * (118 - len(header)) + "\n"
    body = b"\x93NUMPY\x01\x00" + len(padded).to_bytes(2, "little") + padded.encode() + b"\0" * 16

    message = refusal(call(classifier, body, "application/x-npy"))

    assert "announces shape (100000000000, 4)" in message
    assert "but 16 bytes follow" in message


# --- bounds --------------------------------------------------------------------------------


def test_the_default_bound_is_1024_instances(graphs: dict[str, OnnxGraph]) -> None:
    container = TensorContainer(graphs["classifier"])

    assert container.max_instances == DEFAULT_MAX_INSTANCES == 1024
    assert len(answer(call(container, {"instances": [IRIS[0]] * 1024}))["predictions"]) == 1024
    assert "1025 instances is over this endpoint's limit of 1024" in refusal(
        call(container, {"instances": [IRIS[0]] * 1025})
    )


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ({"instances": [IRIS[0]] * 5}, "application/json"),
        ({"inputs": [IRIS[0]] * 5}, "application/json"),
        ("\n".join([json.dumps(IRIS[0])] * 5), "application/jsonlines"),
        ("1,2,3,4\n" * 5, "text/csv"),
        (npy(np.zeros((5, 4), np.float32)), "application/x-npy"),
    ],
    ids=["rows", "columns", "jsonlines", "csv", "npy"],
)
def test_every_format_is_bounded(
    graphs: dict[str, OnnxGraph], body: object, content_type: str
) -> None:
    container = TensorContainer(graphs["classifier"], max_instances=4)

    message = refusal(call(container, body, content_type))

    assert message == "5 instances is over this endpoint's limit of 4 per request; split the batch"


@pytest.mark.parametrize(
    ("row", "content_type"), [("1,2,3,4", "text/csv"), ("[1,2,3,4]", "application/jsonlines")]
)
def test_jsonlines_and_csv_stop_reading_past_the_bound(
    graphs: dict[str, OnnxGraph], row: str, content_type: str
) -> None:
    container = TensorContainer(graphs["classifier"], max_instances=4)
    body = f"{row}\n" * 5 + "garbage\n" * 100  # the garbage is never read

    assert "5 instances is over" in refusal(call(container, body, content_type))


# --- the graph's own failures ---------------------------------------------------------------


class FailingGraph:
    """A graph whose run raises what onnxruntime raises."""

    inputs = (TensorSpec("x", "tensor(float)", np.dtype(np.float32), (None, 2)),)
    outputs = (TensorSpec("y", "tensor(float)", np.dtype(np.float32), (None,)),)

    def __init__(self, error: Exception | None = None, output: Any = None) -> None:
        self.error = error
        self.output = output

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return {"y": self.output}


class InvalidArgument(Exception):
    """Named like onnxruntime's InvalidArgument."""


class Fail(Exception):
    """Named like onnxruntime's Fail."""


def test_an_invalid_argument_from_the_runtime_is_a_400() -> None:
    container = TensorContainer(FailingGraph(InvalidArgument("index out of bounds")))

    message = refusal(call(container, {"instances": [[1, 2]]}))

    assert message == "the model refused the input: index out of bounds"


def test_any_other_runtime_failure_is_a_500() -> None:
    container = TensorContainer(FailingGraph(Fail("kernel exploded")))

    assert (
        refusal(call(container, {"instances": [[1, 2]]}), 500)
        == "the model failed: kernel exploded"
    )


def test_an_output_without_the_batch_axis_cannot_be_split_into_rows() -> None:
    container = TensorContainer(FailingGraph(output=np.float32(3.0)))

    message = refusal(call(container, {"instances": [[1, 2], [3, 4]]}))

    assert message.startswith("output 'y' is a value, not one row per instance (2)")
    assert answer(call(container, {"inputs": [[1, 2], [3, 4]]})) == {"outputs": 3.0}


def test_outputs_become_json_values() -> None:
    assert jsonable(np.array([0.1, 1e-5], dtype=np.float32)) == [0.1, 1e-5]
    assert jsonable(np.array([0.1], dtype=np.float64)) == [0.1]
    assert jsonable(np.array([[1, 2]], dtype=np.int64)) == [[1, 2]]
    assert jsonable(np.array([True])) == [True]
    assert jsonable(np.array(["a", b"b"], dtype=object)) == ["a", "b"]
    assert jsonable([{1: np.float32(0.5)}]) == [{"1": 0.5}]


def test_malformed_output_faults_also_break_tensor_answers(classifier: TensorContainer) -> None:
    body = call(classifier, {"instances": IRIS}).body

    nan = json.loads(faults.REQUESTED_MALFORMED_KINDS["nan"](body))
    short = json.loads(faults.REQUESTED_MALFORMED_KINDS["wrong-length"](body))

    assert math.isnan(nan["predictions"][0][0])
    assert not any(math.isnan(value) for row in nan["predictions"][1:] for value in row)
    assert len(short["predictions"]) == 2


def test_the_nan_fault_still_hits_the_first_probability_of_a_classifier() -> None:
    assert "NaN" in faults.REQUESTED_MALFORMED_KINDS["nan"](b"[0.5, 0.5]").decode()[:4]
    line = json.loads(faults.REQUESTED_MALFORMED_KINDS["nan"](b'{"prediction": [0.5, 0.5]}'))
    assert math.isnan(line["prediction"][0])
    assert line["prediction"][1] == 0.5


# --- fuzz: any body gets an answer, never an exception -------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=30,
)  # fmt: skip
KEYS = st.sampled_from(["instances", "inputs", "signature_name", "features", "b64", "x"])
TFS_BODIES = st.dictionaries(KEYS, JSON_VALUES, max_size=3)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=JSON_VALUES | TFS_BODIES,
    content_type=st.sampled_from(
        ["application/json", "application/jsonlines", "text/csv", "application/x-npy"]
    ),
)
def test_any_json_gets_an_answer_or_a_400(
    graphs: dict[str, OnnxGraph], body: object, content_type: str
) -> None:
    for name in ("classifier", "two-inputs", "two-outputs"):
        reply = call(TensorContainer(graphs[name]), json.dumps(body), content_type)

        assert reply.status in (200, 400), reply.body
        assert isinstance(json.loads(reply.body), dict)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.binary(max_size=300),
    content_type=st.sampled_from(["application/json", "text/csv", "application/x-npy"]),
)
def test_any_bytes_get_an_answer_or_a_400(
    graphs: dict[str, OnnxGraph], body: bytes, content_type: str
) -> None:
    reply = call(TensorContainer(graphs["classifier"]), body, content_type)

    assert reply.status in (200, 400), reply.body


def test_random_npy_headers_never_get_past_the_header_check(classifier: TensorContainer) -> None:
    rng = random.Random(5)
    for _ in range(200):
        shape = tuple(rng.choice([0, 1, 4, 10**6, 10**12]) for _ in range(rng.randint(0, 3)))
        header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
        padded = header + " " * (118 - len(header)) + "\n"
        body = b"\x93NUMPY\x01\x00" + len(padded).to_bytes(2, "little") + padded.encode()

        reply = call(classifier, body + b"\0" * rng.randint(0, 64), "application/x-npy")

        assert reply.status == 400, (shape, reply.body)


# --- configuration, loading and the runtime's ModelError ------------------------------------


def tensor_config(path: Path, **model: object) -> dict[str, object]:
    return {
        "models": {"iris": {"kind": "tensor", "path": str(path), **model}},
        "endpoints": {"iris": {"variants": [{"name": "AllTraffic", "model": "iris"}]}},
    }


def test_config_reads_the_tensor_kind(tmp_path: Path) -> None:
    config = parse_config(tensor_config(tmp_path / "m.onnx", max_instances=8, threads=1), tmp_path)

    spec = config.models["iris"]
    assert (spec.kind, spec.max_instances, spec.threads) == (TENSOR, 8, 1)


def test_config_defaults_to_the_image_classifier(tmp_path: Path) -> None:
    raw = {"models": {"m": {"path": "m.onnx"}},
           "endpoints": {"e": {"variants": [{"name": "A", "model": "m"}]}}}  # fmt: skip

    spec = parse_config(raw, tmp_path).models["m"]

    assert (spec.kind, spec.preprocess.crop) == ("image-classifier", 224)


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"kind": "tabular"},
         "models.iris.kind: must be one of ['image-classifier', 'tensor', 'llm']"),
        ({"kind": 3}, "models.iris.kind: must be a non-empty string"),
        ({"crop": 224}, "models.iris.crop: unknown key"),
        ({"max_instances": 0}, "models.iris.max_instances: must be an integer >= 1"),
        ({"max_instances": True}, "models.iris.max_instances"),
    ],
)
def test_config_refuses_bad_tensor_settings(
    tmp_path: Path, model: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_config(tensor_config(tmp_path / "m.onnx", **model), tmp_path)


def test_config_refuses_max_instances_on_an_image_classifier(tmp_path: Path) -> None:
    raw = {"models": {"m": {"path": "m.onnx", "max_instances": 3}},
           "endpoints": {"e": {"variants": [{"name": "A", "model": "m"}]}}}  # fmt: skip

    with pytest.raises(ConfigError, match=r"models\.m\.max_instances: unknown key"):
        parse_config(raw, tmp_path)


def test_loader_builds_a_tensor_container(model_paths: dict[str, Path], tmp_path: Path) -> None:
    config = parse_config(tensor_config(model_paths["classifier"], max_instances=7), tmp_path)

    container = load_containers(config)["iris"]

    assert isinstance(container, TensorContainer)
    assert container.max_instances == 7
    assert [spec.name for spec in container.graph.inputs] == ["features"]


def test_a_missing_tensor_model_file_is_a_start_up_error(tmp_path: Path) -> None:
    config = parse_config(tensor_config(tmp_path / "absent.onnx"), tmp_path)

    with pytest.raises(ConfigError, match=r"models\.iris\.path: model file not found"):
        load_containers(config)


def test_a_file_that_is_not_onnx_is_a_start_up_error(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    config = parse_config(tensor_config(tmp_path / "bad.onnx"), tmp_path)

    with pytest.raises(ConfigError, match=r"models\.iris\.path: ONNX Runtime cannot load"):
        load_containers(config)


def test_the_runtime_turns_a_400_into_a_model_error(
    model_paths: dict[str, Path], tmp_path: Path
) -> None:
    runtime = build_runtime(parse_config(tensor_config(model_paths["classifier"]), tmp_path))
    body = json.dumps({"instances": [[1, 2, 3]]}).encode()

    with pytest.raises(errors.ModelError) as raised:
        runtime.invoke(InvokeRequest("iris", body, len(body), "application/json"))

    error = raised.value
    assert (error.STATUS, error.original_status) == (424, 400)
    assert json.loads(error.original_message)["error"].startswith(
        "each instance of input 'features' must have shape (4,)"
    )
    wire = error.wire_body()
    assert wire["ErrorCode"] == "CLIENT_ERROR_FROM_MODEL"
    assert str(wire["Message"]).startswith(
        'Received client error (400) from primary with message "{'
    )


def test_the_runtime_answers_predictions(model_paths: dict[str, Path], tmp_path: Path) -> None:
    runtime = build_runtime(parse_config(tensor_config(model_paths["classifier"]), tmp_path))
    body = json.dumps({"instances": IRIS}).encode()

    result = runtime.invoke(InvokeRequest("iris", body, len(body), "application/json"))

    assert result.variant == "AllTraffic"
    predictions = json.loads(result.reply.body)["predictions"]
    np.testing.assert_allclose(predictions, expected(IRIS), rtol=1e-6)


REPO = Path(__file__).resolve().parents[3]


def test_the_default_config_serves_iris_and_sentiment_as_tensor_models() -> None:
    config = load_config(REPO / "emulator" / "config.json")
    containers = load_containers(config)

    assert config.default_endpoint == "efficientnet-lite0"
    signatures = {}
    for endpoint in ("iris", "sentiment"):
        variant = config.endpoints[endpoint].variants[0]
        assert variant.name == "AllTraffic"
        assert config.models[variant.model].kind == TENSOR
        container = containers[variant.model]
        assert isinstance(container, TensorContainer)
        signatures[endpoint] = [
            [spec.describe() for spec in container.graph.inputs],
            [spec.describe() for spec in container.graph.outputs],
        ]
    assert signatures == {
        "iris": [["features tensor(float) (-1, 4)"], ["probabilities tensor(float) (-1, 3)"]],
        "sentiment": [
            ["input_ids tensor(int32) (-1, 64)", "input_mask tensor(int32) (-1, 64)"],
            ["outputs tensor(float) (-1, 1)"],
        ],
    }


# --- hostile bodies the front-end refuses (issue 18): the container refuses them too -------


@pytest.mark.parametrize("field", ["\uff15.1", "\u0665", "1\u0662", "5.1\u00a0", "\u20035.1"])
def test_csv_numbers_are_ascii_digits(classifier: TensorContainer, field: str) -> None:
    # a str pattern's \d also matches other scripts' digits, which int() and float() then
    # read; str.strip() strips every Unicode space
    message = refusal(call(classifier, f"{field},3.5,1.4,0.2".encode(), "text/csv"))
    assert message.startswith("text/csv: row 1, column 1: ") and "is not a number" in message


@pytest.mark.parametrize(
    ("body", "content_type", "named"),
    [
        ({"instances": [[1e39, 3.5, 1.4, 0.2]]}, "application/json",
         "1e+39 is out of range for float32"),
        ("1e39,3.5,1.4,0.2", "text/csv", "1e+39 is out of range for float32"),
        (npy(np.array([[1e39, 3.5, 1.4, 0.2]])), NPY, "1e+39 is out of range for float32"),
        ("1,2,3," + "1" * 131073, "text/csv", "text/csv: field larger than field limit"),
        (npy(np.zeros((DEFAULT_MAX_INSTANCES + 1, 4), np.float32)), NPY,
         "1025 instances is over this endpoint's limit of 1024"),
        (npy(np.array([[1, 2, 3, 4]], dtype="datetime64[s]")), NPY, "dtype datetime64[s]"),
        (npy(np.array([[1j, 2, 3, 4]])), NPY, "dtype complex128"),
        (npy(np.zeros((1, 4), dtype=[("a", "f4")])), NPY, "is not accepted"),
        (npy(np.ones((1, 4), dtype=bool)), NPY, "takes numbers, not true/false"),
        ({"instances": [["1_000", 3.5, 1.4, 0.2]]}, "application/json", "takes numbers"),
        ("1_000,3.5,1.4,0.2", "text/csv", '"1_000" is not a number'),
    ],
)  # fmt: skip
def test_refuses_what_the_front_end_refuses(
    classifier: TensorContainer, body: object, content_type: str, named: str
) -> None:
    assert named in refusal(call(classifier, body, content_type))


def test_non_finite_values_are_read_as_tf_serving_reads_them(
    classifier: TensorContainer,
) -> None:
    # TF Serving's JSON reader counts NaN and infinities as lossless for float inputs
    # (json_tensor.cc, IsLosslessDecimal): the model's answer is the container's, NaN included
    # (the front-end never sends them, and refuses an answer holding them)
    reply = call(classifier, '{"instances": [[NaN, 3.5, 1.4, 0.2]]}')
    assert reply.status == 200 and b"NaN" in reply.body


@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_npy_strings_beyond_unicode_are_refused(byteorder: str) -> None:
    # numpy reads any 32-bit value as a code point; a str made of one is a SystemError
    spec = TensorSpec("text", "tensor(string)", np.dtype(object), (None,))
    body = npy(np.array(["ab", "cd"], dtype=f"{byteorder}U2"))
    assert to_batch(parse_npy(body, [spec]), [spec], 8).feeds["text"].tolist() == ["ab", "cd"]
    beyond = (0x110000).to_bytes(4, "little" if byteorder == "<" else "big")
    with pytest.raises(TensorRequestError, match="code points beyond Unicode"):
        to_batch(parse_npy(body[:-4] + beyond, [spec]), [spec], 8)
