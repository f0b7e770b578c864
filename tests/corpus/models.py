"""The hostile corpus of the model routes (``/models/<name>/predict``): tensor bodies that must
be refused with a 4xx before the endpoint is called, each with the answer it must give.

The same :class:`~tests.corpus.generate.Case` as the image corpus. The tests call
:func:`cases` (tests/functional/test_corpus.py through Chalice's test client, where the
endpoint must not be called; tests/integration/test_corpus.py through ``chalice local`` and the
emulator). Add a class of cases as a new generator function and one entry in :func:`cases`.
"""
from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from tests.corpus.generate import Case

IRIS = "/models/iris/predict"
CORTEX = "/models/iris-cortex/predict"
SENTIMENT = "/models/sentiment/predict"
JSON = "application/json"
CSV = "text/csv"
JSONLINES = "application/jsonlines"
NPY = "application/x-npy"
ROW = [5.1, 3.5, 1.4, 0.2]
MAX_INSTANCES = 1024  # chalicelib.inference.tensors.MAX_INSTANCES, the emulator's bound too
MISMATCH = "SignatureMismatch"


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _mismatch(name: str, body: bytes, content_type: str, says: str,
              route: str = IRIS) -> Case:
    return Case(f"model-{name}", route, body, content_type, 400, MISMATCH, says=says)


def _overflow_cases() -> Iterator[Case]:
    """Values beyond float32 (the input's dtype): once sent to the endpoint as ``Infinity``."""
    says = "got 1e+39, outside float32's range"
    big = [1e39, 3.5, 1.4, 0.2]
    yield _mismatch("float32-overflow-instances", _json({"instances": [big]}), JSON, says)
    yield _mismatch("float32-overflow-negative-columns",
                    _json({"inputs": {"features": [[-1e39, 3.5, 1.4, 0.2]]}}), JSON,
                    "got -1e+39, outside float32's range")
    yield _mismatch("float32-overflow-string", _json({"instances": [["1e39", 3.5, 1.4, 0.2]]}),
                    JSON, says)
    yield _mismatch("float32-overflow-csv", b"1e39,3.5,1.4,0.2\n", CSV, says)
    yield _mismatch("float32-overflow-jsonlines", _json(big) + b"\n", JSONLINES, says)
    yield _mismatch("float32-overflow-npy-float64", _npy(np.array([big])), NPY, says)
    yield _mismatch("float32-overflow-cortex",
                    _json({"sepal_length": 1e39, "sepal_width": 3.5, "petal_length": 1.4,
                           "petal_width": 0.2}), JSON, says, route=CORTEX)
    yield _mismatch("non-finite-nan-literal", b'{"instances": [[NaN, 3.5, 1.4, 0.2]]}', JSON,
                    "not a finite number")


def _csv_parser_cases() -> Iterator[Case]:
    """What the csv module itself refuses: a field over its 131072-character limit."""
    says = "the CSV body is not valid CSV: field larger than field limit"
    yield _mismatch("csv-field-over-limit", b"1,2,3," + b"1" * 131073 + b"\n", CSV, says)
    yield _mismatch("csv-quoted-field-over-limit", b'1,2,3,"' + b"1" * 200_000 + b'"\n', CSV,
                    says)
    yield _mismatch("csv-quote-never-closed", b'1,2,3,"' + b"1" * 200_000, CSV, says)


def _batch_cases() -> Iterator[Case]:
    """One row over the batch bound, in every body shape."""
    rows = [ROW] * (MAX_INSTANCES + 1)
    says = f"at most {MAX_INSTANCES}"
    bodies = [("instances", _json({"instances": rows}), JSON),
              ("bare-list", _json(rows), JSON),
              ("columns", _json({"inputs": {"features": rows}}), JSON),
              ("named", _json({"features": rows}), JSON),
              ("jsonlines", b"".join(_json(row) + b"\n" for row in rows), JSONLINES),
              ("csv", b"5.1,3.5,1.4,0.2\n" * len(rows), CSV),
              ("npy", _npy(np.zeros((len(rows), 4), np.float32)), NPY)]
    for name, body, content_type in bodies:
        yield _mismatch(f"batch-1025-{name}", body, content_type, says)


def _npy_dtype_cases() -> Iterator[Case]:
    """``.npy`` arrays whose dtype is not numbers (bool: true/false feed bool inputs only)."""
    arrays = {"datetime64": np.array([[1, 2, 3, 4]], dtype="datetime64[s]"),
              "timedelta64": np.array([[1, 2, 3, 4]], dtype="timedelta64[s]"),
              "complex": np.array([[1 + 2j, 3.5, 1.4, 0.2]]),
              "structured": np.zeros((1, 4), dtype=[("a", "f4"), ("b", "i4")]),
              "bool": np.ones((1, 4), dtype=bool),
              "bytes": np.array([[b"5.1", b"3.5", b"1.4", b"0.2"]])}
    for name, array in arrays.items():
        yield _mismatch(f"npy-dtype-{name}", _npy(array), NPY, "got an array of ")
    yield _mismatch("npy-strings-1_000", _npy(np.array([["1_000", "3.5", "1.4", "0.2"]])), NPY,
                    "'1_000', which is not a number")
    strings = _npy(np.array([["5.1", "3.5", "1.4", "0.2"]]))
    yield _mismatch("npy-strings-beyond-unicode", strings[:-4] + (0x7FFFFFFF).to_bytes(4, "little"),
                    NPY, "code points beyond Unicode")
    yield _mismatch("npy-header-claims-terabytes", forged_npy((10**12, 4)), NPY,
                    "the .npy header announces 16000000000000 bytes of data; 32 follow")


def forged_npy(shape: tuple[int, ...], data: bytes = bytes(32)) -> bytes:
    """A valid ``.npy`` header of float32 ``shape`` over ``data`` (a few bytes may claim
    terabytes)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


def _number_text_cases() -> Iterator[Case]:
    """Numbers sent as text that Python's float() reads but JSON and CSV do not write."""
    texts = {"underscore": "1_000", "nan": "nan", "infinity": "Infinity", "inf": "-inf",
             "full-width": "\uff11\uff12", "arabic-indic": "\u0661", "nbsp": "1\u00a0",
             "newline": "1\n", "hex": "0x10"}
    for name, text in texts.items():
        yield _mismatch(f"number-text-{name}", _json({"instances": [[text, 3.5, 1.4, 0.2]]}),
                        JSON, "which is not a number")
    for name in ("underscore", "nan", "full-width"):
        yield _mismatch(f"number-csv-{name}", f"{texts[name]},3.5,1.4,0.2\n".encode(), CSV,
                        "which is not a number")
    yield _mismatch("number-text-megabyte", _json({"instances": [["9" * 1_000_000 + "_", 1, 1,
                                                                  1]]}), JSON, "...")


def _handler_model_cases() -> Iterator[Case]:
    """Bodies for the handler models (``sentiment``'s inference.py, ``iris-cortex``'s
    handler.py) that once reached the endpoint (502) or a RecursionError in the handler (500):
    the batch a handler builds is bounded as the tensor pipeline's, JSON depth before it runs."""
    deep = b"[" * 100_000 + b"]" * 100_000
    depth = "deeper than 512 levels"
    yield _mismatch("sentiment-1025-jsonlines", b'{"text": "fine"}\n' * (MAX_INSTANCES + 1),
                    JSONLINES, f"1025 instances; at most {MAX_INSTANCES}", route=SENTIMENT)
    yield Case("model-sentiment-deep-json", SENTIMENT, deep, JSON, 400, "InvalidJSON",
               says=depth)
    yield Case("model-sentiment-deep-jsonlines", SENTIMENT, b'{"text": "ok"}\n' + deep,
               JSONLINES, 400, "InvalidJSON", says=depth)
    yield Case("model-cortex-deep-json", CORTEX, deep, JSON, 400, "InvalidJSON", says=depth)
    yield Case("model-cortex-deep-objects", CORTEX, b'{"a":' * 600 + b"1" + b"}" * 600, JSON,
               400, "InvalidJSON", says=depth)


def _existing_cases() -> Iterator[Case]:
    """A handful of classes refused before issue 18, kept refused."""
    yield _mismatch("shape-3-features", _json({"instances": [[5.1, 3.5, 1.4]]}), JSON,
                    "expected float32 of shape (-1, 4), got 1 row of 3")
    yield _mismatch("not-a-number", _json({"instances": [[5.1, "x", 1.4, 0.2]]}), JSON,
                    "'x', which is not a number")
    yield _mismatch("unknown-field", _json({"feature": ROW}), JSON, "Unknown field 'feature'")
    yield _mismatch("boolean", _json({"instances": [[True, 3.5, 1.4, 0.2]]}), JSON,
                    "a boolean, which is not a number")
    yield _mismatch("npy-garbage", b"\x93NUMPY garbage", NPY, "not a valid .npy array")
    yield _mismatch("csv-not-utf8", b"\xff\xfe1,2,3,4\n", CSV, "not UTF-8")
    yield Case("model-invalid-json", IRIS, b'{"instances": [[5.1, 3.5', JSON, 400,
               "InvalidJSON")
    yield Case("model-content-type-xml", IRIS, b"<xml/>", "application/xml", 415,
               "UnsupportedMediaType", says="Unsupported Content-Type")
    yield Case("model-cortex-csv", CORTEX, b"5.1,3.5,1.4,0.2\n", CSV, 415,
               "UnsupportedMediaType", says="Unsupported Content-Type")


def cases() -> list[Case]:
    """Every model-route case, in a stable order, with unique names (all answered 4xx before
    the endpoint is called)."""
    everything = [*_overflow_cases(), *_csv_parser_cases(), *_batch_cases(),
                  *_npy_dtype_cases(), *_number_text_cases(), *_existing_cases(),
                  *_handler_model_cases()]
    names = [case.name for case in everything]
    assert len(names) == len(set(names)), "corpus case names must be unique"
    return everything
