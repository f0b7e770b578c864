"""Requests read against a signature: every shape clients send, coerced where the intent is
plain, refused with a message naming the input, what was expected and what arrived."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.errors import (
    InvalidEndpointResponseError,
    InvalidJSONError,
    SagegateError,
    SignatureMismatchError,
    UnsupportedMediaTypeError,
)
from chalicelib.registry import DType, Signature, TensorSpec
from chalicelib.tensors import (
    MAX_INSTANCES,
    coerce,
    read_tensors,
    tfs_outputs,
    tfs_request,
    to_json,
)

IRIS = Signature((TensorSpec("features", DType.FLOAT32, (-1, 4)),),
                 (TensorSpec("probabilities", DType.FLOAT32, (-1, 3)),))
TEXT = Signature((TensorSpec("input_ids", DType.INT32, (-1, 3)),
                  TensorSpec("input_mask", DType.INT32, (-1, 3))),
                 (TensorSpec("outputs", DType.FLOAT32, (-1, 1)),))
ROW = [5.1, 3.5, 1.4, 0.2]


def features(body: object, content_type: str = "application/json") -> np.ndarray:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return read_tensors(raw, content_type, IRIS)["features"]


@pytest.mark.parametrize("body", [
    {"instances": [ROW]},                       # TF Serving rows
    {"signature_name": "serving_default", "instances": [ROW]},
    {"inputs": {"features": [ROW]}},            # columns
    {"inputs": [ROW]},                          # columns, the single input
    [ROW],                                      # a bare list
    ROW,                                        # one sample, no batch axis
    {"features": ROW},                          # the input by name
    {"instances": [[str(x) for x in ROW]]},     # numbers sent as strings
    {"instances": json.dumps([ROW])},           # the list JSON-encoded in a string
    {"features": json.dumps(ROW)},
])
def test_every_shape_of_one_iris_row_reads_the_same(body: object) -> None:
    array = features(body)
    assert array.dtype == np.float32 and array.shape == (1, 4)
    assert np.array_equal(array, np.array([ROW], dtype=np.float32))


def test_csv_jsonlines_and_npy() -> None:
    assert features(b"5.1,3.5,1.4,0.2\n6,3,4.8,1.8\n", "text/csv").shape == (2, 4)
    assert features(b"[5.1,3.5,1.4,0.2]\n\n[6,3,4.8,1.8]\n", "application/jsonlines").shape \
        == (2, 4)
    buffer = io.BytesIO()
    np.save(buffer, np.array([ROW, ROW, ROW], dtype=np.float64))
    assert features(buffer.getvalue(), "application/x-npy").dtype == np.float32


@pytest.mark.parametrize("body,says", [
    ({"instances": [[5.1, 3.5, 1.4]]},
     "input 'features': expected float32 of shape (-1, 4), got 1 row of 3"),
    ([5.1, 3.5, 1.4], "input 'features': expected float32 of shape (-1, 4), got a list of 3 "
                      "numbers"),
    ({"instances": [[5.1, "x", 1.4, 0.2]]}, "holding a value that is not a number"),
    ({"instances": [ROW, [1, 2]]}, "got 2 rows of different lengths (2 to 4)"),
    ({"instances": [[ROW]]}, "expected float32 of shape (-1, 4), got 1 row of 1"),
    ({"instances": []}, '"instances" must be a non-empty list'),
    ({"instances": "not json"}, '"instances" is a string that is not JSON'),
    ({"feature": ROW}, "Unknown field 'feature'; the model's inputs are: features."),
    ({"instances": [ROW], "inputs": [ROW]}, 'Send {"instances": [...]} (rows) or'),
    ("text", "must be a JSON object or list, not a string"),
    ({"instances": [[1e400, 1, 1, 1]]}, "not a finite number"),
    ({"instances": [[True, 1, 1, 1]]}, "holding a value that is not a number"),
    ({"instances": [[None, 1, 1, 1]]}, "holding a value that is not a number"),
])
def test_what_cannot_be_coerced_says_what_was_expected_and_what_arrived(
        body: object, says: str) -> None:
    with pytest.raises(SignatureMismatchError) as caught:
        features(json.dumps(body).encode().replace(b"Infinity", b"1e400"))
    assert says in caught.value.message
    assert caught.value.STATUS_CODE == 400


def test_the_error_details_name_the_input_and_its_spec() -> None:
    with pytest.raises(SignatureMismatchError) as caught:
        features([1, 2, 3])
    assert caught.value.details == {"input": "features",
                                    "expected": {"dtype": "float32", "shape": [-1, 4]}}


def test_several_inputs_read_from_rows_of_objects_or_columns() -> None:
    rows = {"instances": [{"input_ids": [1, 2, 3], "input_mask": [1, 1, 0]},
                          {"input_ids": ["4", 5, 6], "input_mask": [1, 1, 1]}]}
    arrays = read_tensors(json.dumps(rows).encode(), None, TEXT)
    assert arrays["input_ids"].dtype == np.int32 and arrays["input_ids"].shape == (2, 3)
    columns = {"inputs": {"input_ids": [1, 2, 3], "input_mask": [1, 1, 0]}}
    assert read_tensors(json.dumps(columns).encode(), None, TEXT)["input_mask"].shape == (1, 3)
    body = tfs_request(arrays, TEXT)
    assert json.loads(body) == {"signature_name": "serving_default", "instances": [
        {"input_ids": [1, 2, 3], "input_mask": [1, 1, 0]},
        {"input_ids": [4, 5, 6], "input_mask": [1, 1, 1]}]}


@pytest.mark.parametrize("body,says", [
    ([[1, 2, 3]], "This model has 2 inputs ('input_ids', 'input_mask'): a bare list cannot"),
    ({"instances": [[1, 2, 3]]}, "each instance must be an object keyed by input name"),
    ({"instances": [{"input_ids": [1, 2, 3]}]}, "Missing input 'input_mask'"),
    ({"input_ids": [1, 2, 3], "input_mask": [1, 1, 0.5]}, "a number that is not whole"),
    ({"input_ids": [1, 2, 3], "input_mask": [1, 1, 2**40]}, "outside int32's range"),
])
def test_several_inputs_refuse_what_is_ambiguous(body: object, says: str) -> None:
    with pytest.raises(SignatureMismatchError, match=None) as caught:
        read_tensors(json.dumps(body).encode(), "application/json", TEXT)
    assert says in caught.value.message


def test_csv_and_npy_need_a_single_input_model() -> None:
    with pytest.raises(SignatureMismatchError, match="CSV rows cannot say"):
        read_tensors(b"1,2,3\n", "text/csv", TEXT)


def test_bounds_and_bad_bodies() -> None:
    with pytest.raises(SignatureMismatchError, match=f"at most {MAX_INSTANCES}"):
        features({"instances": [ROW] * (MAX_INSTANCES + 1)})
    with pytest.raises(InvalidJSONError):
        features(b"{not json")
    with pytest.raises(SignatureMismatchError, match=r"not a valid \.npy"):
        features(b"\x93NUMPY garbage", "application/x-npy")
    with pytest.raises(SignatureMismatchError, match="not UTF-8"):
        features(b"\xff\xfe1,2", "text/csv")
    with pytest.raises(UnsupportedMediaTypeError):
        features(b"<xml/>", "application/xml")


def test_float32_values_travel_as_their_shortest_decimal() -> None:
    body = tfs_request({"features": features([ROW])}, IRIS)
    assert body == b'{"signature_name":"serving_default","instances":[[5.1,3.5,1.4,0.2]]}'


def test_tf_serving_answers_read_back_per_output() -> None:
    rows = json.dumps({"predictions": [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1]]}).encode()
    (probabilities,) = tfs_outputs(rows, IRIS)
    assert probabilities.shape == (2, 3)
    two = Signature(IRIS.inputs, (TensorSpec("a", DType.FLOAT32, (-1, 1)),
                                  TensorSpec("b", DType.INT64, (-1,))))
    named = json.dumps({"predictions": [{"a": [0.5], "b": 1}, {"a": [0.7], "b": 0}]}).encode()
    a, b = tfs_outputs(named, two)
    assert a.shape == (2, 1) and b.tolist() == [1, 0]
    columns = json.dumps({"outputs": {"b": [1], "a": [[0.5]]}}).encode()
    assert [x.tolist() for x in tfs_outputs(columns, two)] == [[[0.5]], [1]]
    for bad in (b"nope", b'{"error": "x"}', b'{"predictions": 3}',
                b'{"predictions": [[NaN]]}', b'{"predictions": [{"a": 1}]}'):
        with pytest.raises(InvalidEndpointResponseError):
            tfs_outputs(bad, two if b"a" in bad else IRIS)


def test_numpy_results_become_plain_json() -> None:
    assert to_json({"p": np.float32(0.5), "a": np.arange(3), "n": float("nan"),
                    "t": (np.int64(2),)}) == {"p": 0.5, "a": [0, 1, 2], "n": None, "t": [2]}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
                        st.text(max_size=5), inner, max_size=3), max_leaves=30))
def test_any_json_is_read_or_refused_as_the_clients_error(document: object) -> None:
    try:
        body = json.dumps(document).encode()
    except ValueError:
        return
    try:
        arrays = read_tensors(body, "application/json", IRIS)
    except SagegateError as error:
        assert error.STATUS_CODE in (400, 415)
        return
    assert arrays["features"].dtype == np.float32 and arrays["features"].shape[1:] == (4,)


def test_coerce_keeps_a_batch_and_adds_a_missing_one() -> None:
    spec = TensorSpec("x", DType.INT64, (-1, 2, 2))
    assert coerce(spec, [[1, 2], [3, 4]]).shape == (1, 2, 2)
    assert coerce(spec, [[[1, 2], [3, 4]]] * 3).shape == (3, 2, 2)
