"""Requests read against a signature: every shape clients send, coerced where the intent is
plain, refused with a message naming the input, what was expected and what arrived."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.core.errors import (
    InvalidEndpointResponseError,
    InvalidJSONError,
    SagegateError,
    SignatureMismatchError,
    UnsupportedMediaTypeError,
)
from chalicelib.inference.tensors import (
    MAX_INSTANCES,
    coerce,
    read_tensors,
    tfs_outputs,
    tfs_request,
    to_json,
)
from chalicelib.registry.specs import DType, Signature, TensorSpec
from tests.corpus.models import forged_npy

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
    ({"instances": [[5.1, "x", 1.4, 0.2]]}, "got 1 row of 4 holding 'x', which is not a number"),
    ({"instances": [ROW, [1, 2]]}, "got 2 rows of different lengths (2 to 4)"),
    ({"instances": [[ROW]]}, "expected float32 of shape (-1, 4), got 1 row of 1"),
    ({"instances": []}, '"instances" must be a non-empty list'),
    ({"instances": "not json"}, '"instances" is a string that is not JSON'),
    ({"feature": ROW}, "Unknown field 'feature'; the model's inputs are: features."),
    ({"instances": [ROW], "inputs": [ROW]}, 'Send {"instances": [...]} (rows) or'),
    ("text", "must be a JSON object or list, not a string"),
    ({"instances": [[1e400, 1, 1, 1]]}, "not a finite number"),
    ({"instances": [[True, 1, 1, 1]]}, "holding a boolean, which is not a number"),
    ({"instances": [[None, 1, 1, 1]]}, "holding null, which is not a number"),
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


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def refusal(body: object, content_type: str = "application/json",
            signature: Signature = IRIS) -> str:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(SignatureMismatchError) as caught:
        read_tensors(raw, content_type, signature)
    assert caught.value.STATUS_CODE == 400
    return caught.value.message


def one(dtype: DType, shape: tuple[int, ...] = (-1,)) -> Signature:
    return Signature((TensorSpec("x", dtype, shape),), ())


@pytest.mark.parametrize("body,content_type", [
    ({"instances": [[1e39, 3.5, 1.4, 0.2]]}, "application/json"),
    ({"inputs": {"features": [[-1e39, 3.5, 1.4, 0.2]]}}, "application/json"),
    ({"instances": [["1e39", 3.5, 1.4, 0.2]]}, "application/json"),
    (b"1e39,3.5,1.4,0.2\n", "text/csv"),
    (b"[1e39,3.5,1.4,0.2]\n", "application/jsonlines"),
    (npy(np.array([[1e39, 3.5, 1.4, 0.2]])), "application/x-npy"),
])
def test_a_value_beyond_float32_is_refused_after_the_cast_not_sent_as_infinity(
        body: object, content_type: str) -> None:
    message = refusal(body, content_type)
    assert message.startswith("input 'features': expected float32")
    assert "e+39, outside float32's range (±3.4028235e+38)" in message


@pytest.mark.parametrize("dtype,value,says", [
    (DType.FLOAT16, 70000, "70000.0, outside float16's range (±6.55e+04)"),
    (DType.FLOAT64, 1e308, ""),
    (DType.INT8, 128, "128, outside int8's range (-128 to 127)"),
    (DType.INT8, "128", "128, outside int8's range (-128 to 127)"),
    (DType.UINT8, -1.0, "-1.0, outside uint8's range (0 to 255)"),
    (DType.INT64, 2**63, "9223372036854775808, outside int64's range"),
    (DType.INT64, 2**63 - 1, ""),
    (DType.INT64, 2**53 + 1, ""),  # exactly, not through float64
    (DType.INT64, -(2**53) - 1, ""),
    (DType.BOOL, 2, "2.0, outside bool's range"),
    (DType.BOOL, 1, ""),
])
def test_every_dtype_is_range_checked_after_the_cast(dtype: DType, value: int | str,
                                                     says: str) -> None:
    spec = TensorSpec("x", dtype, (-1,))
    if not says:
        assert coerce(spec, [value]).tolist() == [value]
        assert coerce(spec, [str(value)]).tolist() == [value]  # a number sent as a string
        return
    with pytest.raises(SignatureMismatchError) as caught:
        coerce(spec, [value])
    assert caught.value.message.startswith("input 'x': expected ") and says in \
        caught.value.message


def test_a_handler_s_float64_array_beyond_float32_is_refused_too() -> None:
    # what a Cortex pre_inference hands to coerce: numpy arrays, Python numbers and ints
    spec = TensorSpec("features", DType.FLOAT32, (-1, 4))
    with pytest.raises(SignatureMismatchError, match=r"1e\+39, outside float32's range"):
        coerce(spec, np.array([1e39, 3.5, 1.4, 0.2]))
    with pytest.raises(SignatureMismatchError, match="not a finite number"):
        coerce(spec, [10**400, 3.5, 1.4, 0.2])  # beyond float64 itself


@pytest.mark.parametrize("field", [
    b'"' + b"1" * 131073 + b'"',  # over the csv module's field limit, quoted or not
    b"1" * 131073,
    b'"' + b"1" * 131073,  # a quote never closed
])
def test_a_csv_body_the_csv_module_cannot_read_is_a_400(field: bytes) -> None:
    message = refusal(b"1,2,3," + field + b"\n", "text/csv")
    assert len(message) < 300
    assert "1" * 100 not in message


def test_a_csv_field_over_the_limit_says_so() -> None:
    assert "input 'features': the CSV body is not valid CSV: field larger than field " \
        "limit" in refusal(
        b"1,2,3," + b"1" * 131073 + b"\n", "text/csv")


@pytest.mark.parametrize("body,content_type", [
    ({"instances": [ROW] * (MAX_INSTANCES + 1)}, "application/json"),
    ([ROW] * (MAX_INSTANCES + 1), "application/json"),
    ({"inputs": [ROW] * (MAX_INSTANCES + 1)}, "application/json"),
    ({"inputs": {"features": [ROW] * (MAX_INSTANCES + 1)}}, "application/json"),
    ({"features": [ROW] * (MAX_INSTANCES + 1)}, "application/json"),
    (b"[5.1,3.5,1.4,0.2]\n" * (MAX_INSTANCES + 1), "application/jsonlines"),
    (b"5.1,3.5,1.4,0.2\n" * (MAX_INSTANCES + 1), "text/csv"),
    (npy(np.zeros((MAX_INSTANCES + 1, 4), np.float32)), "application/x-npy"),
])
def test_one_batch_bound_for_every_body_shape(body: object, content_type: str) -> None:
    assert f"at most {MAX_INSTANCES}" in refusal(body, content_type)
    if isinstance(body, bytes) and content_type != "application/x-npy":
        return
    fits = body[:-1] if isinstance(body, list) else None
    if fits is not None:
        assert features(fits).shape == (MAX_INSTANCES, 4)


def test_the_batch_bound_holds_for_what_a_handler_returns() -> None:
    with pytest.raises(SignatureMismatchError, match="1025 rows"):
        coerce(IRIS.inputs[0], np.zeros((MAX_INSTANCES + 1, 4)))
    assert coerce(IRIS.inputs[0], np.zeros((MAX_INSTANCES, 4))).shape == (MAX_INSTANCES, 4)


@pytest.mark.parametrize("array", [
    np.array([[1, 2, 3, 4]], dtype="datetime64[s]"),
    np.array([[1, 2, 3, 4]], dtype="timedelta64[s]"),
    np.array([[1 + 2j, 2, 3, 4]]),
    np.zeros((1, 4), dtype=[("a", "f4"), ("b", "i4")]),
    np.ones((1, 4), dtype=bool),
    np.array([[b"1", b"2", b"3", b"4"]]),
])
def test_an_npy_array_of_a_kind_that_is_not_numbers_is_refused(array: np.ndarray) -> None:
    message = refusal(npy(array), "application/x-npy")
    assert message.startswith("input 'features': expected float32 of shape (-1, 4), got an "
                              "array of ")


def test_an_object_array_from_a_handler_is_read_value_by_value() -> None:
    spec = IRIS.inputs[0]
    assert coerce(spec, np.array([[5.1, "3.5", 1, np.float32(0.2)]], dtype=object)).dtype \
        == np.float32
    with pytest.raises(SignatureMismatchError, match="holding '1_0', which is not a number"):
        coerce(spec, np.array([["1_0", 1, 1, 1]], dtype=object))
    with pytest.raises(SignatureMismatchError, match="got an array of datetime64"):
        coerce(spec, np.array([[1, 2, 3, 4]], dtype="datetime64[D]"))


def test_bool_arrays_feed_bool_inputs_only() -> None:
    flags = one(DType.BOOL, (-1, 2))
    array = read_tensors(npy(np.array([[True, False]])), "application/x-npy", flags)["x"]
    assert array.dtype == np.bool_ and array.tolist() == [[True, False]]
    assert "true/false" in refusal(npy(np.array([True, False])), "application/x-npy",
                                   one(DType.INT32))


@pytest.mark.parametrize("text", [
    "1_000", " 1_000", "nan", "NaN", "inf", "-inf", "Infinity", "infinity", "1e", "0x10",
    "\uff11\uff12", "\u0661", "1\u00a0", "\n1", "1\n", "", " ", "+", ".", "1.2.3", "1e1.5",
    "--1", "1 2",
])
def test_a_number_sent_as_text_must_look_like_one(text: str) -> None:
    assert "which is not a number" in refusal({"instances": [[text, 1, 1, 1]]})
    assert "which is not a number" in refusal(
        f"{text},1,1,1\n".encode() if text.strip() and "\n" not in text else b'"x",1,1,1\n',
        "text/csv")


@pytest.mark.parametrize("text,number", [
    ("5.1", 5.1), ("-0.5", -0.5), ("+2", 2.0), (".5", 0.5), ("5.", 5.0), ("1e2", 100.0),
    ("1E-2", 0.01), (" 3.5", 3.5), ("3.5\t", 3.5),
])
def test_what_json_and_csv_write_as_numbers_is_read(text: str, number: float) -> None:
    assert features({"instances": [[text, 1, 1, 1]]})[0, 0] == np.float32(number)
    assert features(f"{text},1,1,1\n".encode(), "text/csv")[0, 0] == np.float32(number)


def test_messages_quote_a_client_s_value_bounded() -> None:
    huge = "9" * 1_000_000 + "_"
    for body, content_type in (
            (json.dumps({"instances": [[huge, 1, 1, 1]]}).encode(), "application/json"),
            (json.dumps({"instances": [["1e" + "9" * 100_000, 1, 1, 1]]}).encode(),
             "application/json"),
            (f"{huge},1,1,1\n".encode(), "text/csv")):
        message = refusal(body, content_type)
        assert len(message) < 300 and "'features'" in message


def test_an_npy_header_announcing_more_than_the_body_holds_is_refused_before_loading() -> None:
    for shape, says in (((10**12, 4), "announces 16000000000000 bytes of data; 32 follow"),
                        ((3, 4), "announces 48 bytes of data; 32 follow")):
        assert says in refusal(forged_npy(shape), "application/x-npy")
    assert "format 1.0 or 2.0" in refusal(b"\x93NUMPY\x03\x00" + bytes(40), "application/x-npy")


@pytest.mark.parametrize("value", [
    [2**53 + 1], ["9007199254740993"], np.array([2**53 + 1], dtype=np.int64),
    np.array([2**53 + 1], dtype=object)])
def test_int64_values_are_read_exactly(value: object) -> None:
    assert coerce(TensorSpec("x", DType.INT64, (-1,)), value).tolist() == [2**53 + 1]


def test_integer_arrays_are_range_checked_exactly() -> None:
    spec = TensorSpec("x", DType.INT64, (-1,))
    assert coerce(spec, np.array([2**63 - 1], dtype=np.int64)).tolist() == [2**63 - 1]
    with pytest.raises(SignatureMismatchError, match="18446744073709551615, outside int64's"):
        coerce(spec, np.array([2**64 - 1], dtype=np.uint64))


def test_an_empty_row_is_a_shape_mismatch_for_every_dtype() -> None:
    for dtype in (DType.INT32, DType.FLOAT32, DType.BOOL):
        with pytest.raises(SignatureMismatchError, match="got 1 row of 0"):
            coerce(TensorSpec("x", dtype, (-1, 4)), [[]])


def test_an_npy_string_array_holding_no_unicode_is_a_400() -> None:
    body = npy(np.array([["5.1", "3.5", "1.4", "0.2"]]))
    forged = body[:-4] + (0x7FFFFFFF).to_bytes(4, "little")  # the last code point
    assert refusal(forged, "application/x-npy") == (
        "input 'features': the .npy strings hold code points beyond Unicode.")
    big_endian = npy(np.array([["5.1", "3.5", "1.4", "0.2"]], dtype=">U3"))
    assert "beyond Unicode" in refusal(big_endian[:-4] + b"\x7f\xff\xff\xff",
                                       "application/x-npy")
    assert np.array_equal(features(big_endian, "application/x-npy"),
                          np.array([ROW], np.float32))
    assert np.array_equal(features(body, "application/x-npy"), np.array([ROW], np.float32))
