"""The tensor kind: any ONNX graph, served the way SageMaker's TensorFlow Serving container does.

Bodies (``Content-Type``), all turned into one predict request for the graph's signature:

- ``application/json`` (also ``application/jsonlines``, ``application/jsons``, as the
  container treats them alike): a TF Serving body, row (``{"instances": [...]}``) or columnar
  (``{"inputs": ...}``); several JSON values one per line (JSON lines: each an instance, or
  a row body whose instances are added); any other JSON value is wrapped as the container
  does (a list whose first item is a list or an object is the instances, else one instance).
- ``text/csv``: each row an instance of the single input.
- ``application/x-npy``: one ``.npy`` array, the single input's batch.

Answers: ``{"predictions": [...]}`` for rows (one entry per instance, an object keyed by
output name when the graph has several outputs), ``{"outputs": ...}`` for columns; as
``application/json`` or, one line, ``application/jsonlines``. Refusals are TF Serving's
``{"error": "message"}`` with HTTP 400 (415 for a content type, 406 for an ``Accept``), which
the runtime turns into a ModelError. See ``emulator/README.md``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from emulator.container import JSON, ContainerReply, choose_accept, media_type
from emulator.models import TensorSpec

DEFAULT_MAX_INSTANCES = 1024
"""Instances (rows of the batch axis) one request may carry by default."""
SIGNATURE = "serving_default"
"""The only signature a graph has (TF Serving's default)."""
JSON_TYPES = frozenset({JSON, "application/jsonlines", "application/jsons"})
CSV = "text/csv"
NPY = "application/x-npy"
CONTENT_TYPES = JSON_TYPES | {CSV, NPY}
ROW_KEYS = ("instances", "inputs", "examples")
"""Top-level keys that make a JSON object a TF Serving body rather than an instance."""
SHOWN = 60
"""Characters of a client's value quoted in an error message."""
RUN_MESSAGE_MAX = 400
INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII digits: a str pattern's \d also matches "１２"
DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
NON_FINITE = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
              "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf}  # fmt: skip


class TensorRequestError(ValueError):
    """A request the container refuses: answered as ``{"error": message}`` with ``status``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class Graph(Protocol):
    """What the container needs of a model: its signature and a way to run it."""

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """The graph's inputs, in order."""
        ...

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        """The graph's outputs, in order."""
        ...

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        """Runs the graph on one array per input; returns every output by name."""
        ...


@dataclass(frozen=True)
class Predict:
    """A parsed predict request.

    Attributes:
        columnar: True for TF Serving's columnar ``inputs``, False for row ``instances``.
        value: the instances (a list, or an array whose first axis is the batch) or the
            columnar value (an object keyed by input name, or the single input's value).
    """

    columnar: bool
    value: Any


@dataclass(frozen=True)
class Batch:
    """The graph's feeds and the number of instances they hold."""

    feeds: dict[str, np.ndarray]
    size: int
    columnar: bool


def shown(value: object) -> str:
    """A client's value for a message: JSON, cut to :data:`SHOWN` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def dims_text(dims: Sequence[int | None]) -> str:
    """``(-1, 4)`` for a shape, -1 for a free axis."""
    items = ["-1" if dim is None else str(dim) for dim in dims]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def quoted(name: str) -> str:
    """A client's name for a message: ``'name'``, cut to :data:`SHOWN` characters."""
    return repr(name if len(name) <= SHOWN else name[: SHOWN - 3] + "...")


def names_text(inputs: Sequence[TensorSpec]) -> str:
    """The input names, for messages: ``input_ids, input_mask``."""
    return ", ".join(spec.name for spec in inputs)


# --- parsing: body -> Predict ---------------------------------------------------------------


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError as error:
        raise ValueError("nested too deeply") from error


def parse_json(text: str, limit: int) -> Predict:
    """Parses a JSON, JSON lines or TF Serving body.

    Args:
        text: the body.
        limit: the most instances accepted (JSON lines stop reading past it).

    Returns:
        The predict request.

    Raises:
        TensorRequestError: not JSON (nor JSON lines), or not a valid TF Serving body.
    """
    if not text.strip():
        raise TensorRequestError("JSON parse error: the body is empty")
    try:
        document = _loads(text)
    except ValueError as whole:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise TensorRequestError(f"JSON parse error: {whole}") from whole
        return _json_lines(lines, limit)
    if isinstance(document, dict) and any(key in document for key in ROW_KEYS):
        return tfs_body(document)
    if isinstance(document, list) and document and isinstance(document[0], (list, dict)):
        return Predict(False, document)
    return Predict(False, [document])


def tfs_body(document: Mapping[str, Any]) -> Predict:
    """Reads a TF Serving predict body (``signature_name``, ``instances`` or ``inputs``).

    Raises:
        TensorRequestError: another signature, both or neither key, instances not a list.
    """
    signature = document.get("signature_name", SIGNATURE)
    if not isinstance(signature, str):
        raise TensorRequestError("'signature_name' must be a string")
    if signature != SIGNATURE:
        raise TensorRequestError(f'Serving signature name: "{signature}" not found in '
                                 f'signature def; this model has only "{SIGNATURE}"')  # fmt: skip
    has_rows, has_columns = "instances" in document, "inputs" in document
    if has_rows and has_columns:
        raise TensorRequestError("expecting only one of 'inputs' or 'instances' keys, not both")
    if has_columns:
        return Predict(True, document["inputs"])
    if not has_rows:
        raise TensorRequestError("Missing 'inputs' or 'instances' key ('examples' bodies are "
                                 "for TF Serving's classify and regress APIs; this endpoint "
                                 "serves predict)")  # fmt: skip
    instances = document["instances"]
    if not isinstance(instances, list):
        raise TensorRequestError(f"'instances' must be a list, got {shown(instances)}")
    return Predict(False, instances)


def _json_lines(lines: Sequence[str], limit: int) -> Predict:
    instances: list[Any] = []
    for number, line in enumerate(lines, 1):
        try:
            value = _loads(line)
        except ValueError as error:
            raise TensorRequestError(f"JSON lines: line {number} is not JSON: {error}") from error
        if isinstance(value, dict) and any(key in value for key in ROW_KEYS):
            body = tfs_body(value)
            if body.columnar:
                raise TensorRequestError(f"JSON lines: line {number} is a columnar 'inputs' "
                                         "body; send it alone, or send rows")  # fmt: skip
            instances.extend(body.value)
        else:
            instances.append(value)
        check_count(len(instances), limit)
    return Predict(False, instances)


def check_count(count: int, limit: int) -> None:
    """Refuses a request of more than ``limit`` instances, or of none."""
    if count > limit:
        raise TensorRequestError(f"{count} instances is over this endpoint's limit of {limit} "
                                 "per request; split the batch")  # fmt: skip
    if count < 1:
        raise TensorRequestError("no instances: send at least one")


def single_input(inputs: Sequence[TensorSpec], body: str) -> TensorSpec:
    """The only input of a graph that ``body`` (``text/csv`` ...) can feed.

    Raises:
        TensorRequestError: the graph takes several inputs.
    """
    if len(inputs) != 1:
        raise TensorRequestError(
            f"{body} feeds a single input, but this model takes {len(inputs)}: "
            f"{names_text(inputs)}; send application/json with instances keyed by input name"
        )
    return inputs[0]


def parse_csv(text: str, inputs: Sequence[TensorSpec], limit: int) -> Predict:
    """Reads CSV rows as instances of the single input (a row of one value feeds a scalar
    instance when the input's instances are scalars, else every row is a list).

    Raises:
        TensorRequestError: several inputs, an input of rank above 2, a field that is not a
            number (for numeric inputs), bad CSV, no rows or too many.
    """
    spec = single_input(inputs, CSV)
    rank = None if spec.shape is None else len(spec.shape) - 1
    if rank is not None and rank not in (0, 1):
        raise TensorRequestError(f"text/csv rows feed an input of shape (-1,) or (-1, n); "
                                 f"input {spec.describe()} needs application/json")  # fmt: skip
    strings = spec.dtype == np.object_
    rows: list[Any] = []
    try:
        for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
            if not any(field.strip() for field in row):
                continue
            values = [field.strip() if strings else _csv_number(field, number, column)
                      for column, field in enumerate(row, 1)]  # fmt: skip
            rows.append(values[0] if rank == 0 and len(values) == 1 else values)
            check_count(len(rows), limit)
    except csv.Error as error:
        raise TensorRequestError(f"text/csv: {error}") from error
    check_count(len(rows), limit)
    return Predict(False, rows)


def _csv_number(field: str, row: int, column: int) -> int | float:
    text = field.strip(" \t")  # not str.strip()'s every Unicode space (a no-break space)
    if INTEGER.fullmatch(text):
        return int(text)
    if DECIMAL.fullmatch(text):
        return float(text)
    if text.lower() in NON_FINITE:
        return NON_FINITE[text.lower()]
    raise TensorRequestError(f"text/csv: row {row}, column {column}: {shown(text)} is not a "
                             "number (no header row, no quoted or empty fields)")  # fmt: skip


def parse_npy(body: bytes, inputs: Sequence[TensorSpec]) -> Predict:
    """Reads a ``.npy`` array as the single input's batch (its first axis).

    The header is read and checked against the body's length before any array is made, so
    a small body announcing a huge shape costs nothing.

    Raises:
        TensorRequestError: several inputs, not a ``.npy`` file, object or structured
            dtype, a header that does not match the data.
    """
    single_input(inputs, NPY)
    stream = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"format version {version} is not supported (1.0 or 2.0 is)")
    except (ValueError, EOFError, OSError, SyntaxError) as error:
        raise TensorRequestError(f"application/x-npy: not a .npy array: {error}") from error
    if dtype.hasobject or dtype.kind not in "biufU":
        raise TensorRequestError(f"application/x-npy: dtype {dtype} is not accepted; send "
                                 "numbers (or strings for a tensor(string) input)")  # fmt: skip
    expected = math.prod(shape) * dtype.itemsize
    present = len(body) - stream.tell()
    if present != expected:
        raise TensorRequestError(
            f"application/x-npy: the header announces shape {shape} of {dtype} "
            f"({expected} bytes) but {present} bytes follow"
        )
    array = np.load(io.BytesIO(body), allow_pickle=False)
    if dtype.kind == "U" and array.size:  # numpy reads any 32-bit value as a code point
        unsigned = np.dtype(np.uint32).newbyteorder(dtype.byteorder)
        if np.ascontiguousarray(array).reshape(-1).view(unsigned).max() > 0x10FFFF:
            raise TensorRequestError(
                "application/x-npy: the strings hold code points beyond Unicode"
            )
    return Predict(False, array)


def parse_body(body: bytes, content_type: str, inputs: Sequence[TensorSpec], limit: int) -> Predict:
    """Parses a body of one of :data:`CONTENT_TYPES` (a media type, lower case).

    Raises:
        TensorRequestError: the body is not valid for its content type.
    """
    if content_type == NPY:
        return parse_npy(body, inputs)
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise TensorRequestError(f"{content_type}: the body is not UTF-8 text ({error})") from error
    if content_type == CSV:
        return parse_csv(text, inputs, limit)
    return parse_json(text, limit)


# --- batching: Predict -> feeds -------------------------------------------------------------


def is_keyed(value: object) -> bool:
    """Whether a value is an object keyed by input name (not a ``{"b64": ...}`` value)."""
    return isinstance(value, dict) and not is_b64(value)


def is_b64(value: object) -> bool:
    """Whether a value is TF Serving's ``{"b64": "..."}`` binary string."""
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def to_batch(request: Predict, inputs: Sequence[TensorSpec], limit: int) -> Batch:
    """Turns a predict request into one array per input, cast to its dtype and checked
    against its shape.

    Raises:
        TensorRequestError: a missing or unknown input, a wrong rank or fixed dimension,
            values of the wrong type, ragged lists, no instances or too many.
    """
    if request.columnar:
        return _columnar(request.value, inputs, limit)
    if isinstance(request.value, np.ndarray):
        spec = inputs[0]
        if request.value.ndim == 0:
            raise TensorRequestError("the .npy array is a scalar; it needs a batch axis")
        check_count(request.value.shape[0], limit)
        return Batch({spec.name: to_tensor(request.value, spec, True)}, len(request.value), False)
    instances = request.value
    check_count(len(instances), limit)
    columns = _row_columns(instances, inputs)
    feeds = {spec.name: to_tensor(columns[spec.name], spec, True) for spec in inputs}
    return Batch(feeds, len(instances), False)


def _row_columns(instances: list[Any], inputs: Sequence[TensorSpec]) -> dict[str, list[Any]]:
    if not is_keyed(instances[0]):
        if len(inputs) > 1:
            raise TensorRequestError(
                f"instances is a plain list, but this model takes {len(inputs)} inputs "
                f"({names_text(inputs)}): send each instance as an object keyed by input name"
            )
        for index, item in enumerate(instances):
            if is_keyed(item):
                raise TensorRequestError(f"instance {index} is an object but instance 0 is "
                                         "not: send every instance the same way")  # fmt: skip
        return {inputs[0].name: instances}
    columns: dict[str, list[Any]] = {spec.name: [] for spec in inputs}
    for index, item in enumerate(instances):
        if not is_keyed(item):
            raise TensorRequestError(f"instance {index} is not an object but instance 0 is: "
                                     "send every instance the same way")  # fmt: skip
        _check_names(item, inputs, f"instance {index}")
        for name, column in columns.items():
            column.append(item[name])
    return columns


def _check_names(item: Mapping[str, Any], inputs: Sequence[TensorSpec], where: str) -> None:
    names = [spec.name for spec in inputs]
    unknown = sorted(key for key in item if key not in names)
    if unknown:
        raise TensorRequestError(f"{where} has unknown input {quoted(unknown[0])}; this "
                                 f"model's inputs are: {', '.join(names)}")  # fmt: skip
    missing = [name for name in names if name not in item]
    if missing:
        raise TensorRequestError(f"{where} is missing input {quoted(missing[0])}; this "
                                 f"model's inputs are: {', '.join(names)}")  # fmt: skip


def _columnar(value: Any, inputs: Sequence[TensorSpec], limit: int) -> Batch:
    if is_keyed(value):
        _check_names(value, inputs, "'inputs'")
        items = value
    elif len(inputs) > 1:
        raise TensorRequestError(
            f"inputs is a plain value/list, but this model takes {len(inputs)} inputs "
            f"({names_text(inputs)}): send an object keyed by input name"
        )
    else:
        items = {inputs[0].name: value}
    feeds = {spec.name: to_tensor(items[spec.name], spec, False) for spec in inputs}
    sizes = {name: (feed.shape[0] if feed.ndim else 1) for name, feed in feeds.items()}
    if len(set(sizes.values())) > 1:
        shares = ", ".join(f"{name} has {size}" for name, size in sizes.items())
        raise TensorRequestError(f"the inputs do not share the batch axis: {shares}")
    size = next(iter(sizes.values()))
    check_count(size, limit)
    return Batch(feeds, size, True)


def to_tensor(values: Any, spec: TensorSpec, row: bool) -> np.ndarray:
    """Makes one input's array: the instances (``row``) or the whole columnar value.

    Raises:
        TensorRequestError: ragged lists, a shape the signature refuses, wrong value types.
    """
    if isinstance(values, np.ndarray):
        array = values
    else:
        try:
            array = np.array(values)
        except (ValueError, RecursionError) as error:
            raise TensorRequestError(_ragged(values, spec, row)) from error
    if array.dtype.kind == "O":  # before the shape: a {"b64": ...} value has no shape of its own
        raise TensorRequestError(_object_message(array, spec))
    check_shape(array.shape, spec, row)
    return cast(array, spec)


def _ragged(values: Any, spec: TensorSpec, row: bool) -> str:
    if row and isinstance(values, list):
        first = _shape_or_none(values[0])
        index, shape = next(
            ((index, shape) for index, item in enumerate(values[1:], 1)
             if (shape := _shape_or_none(item)) != first),
            (0, None),
        )  # fmt: skip
        if first is not None and shape is not None:
            return (f"instance {index} of input {spec.name!r} has shape {dims_text(shape)} "
                    f"but instance 0 has {dims_text(first)}")  # fmt: skip
    where = "instances of input" if row else "input"
    return (
        f"{where} {spec.name!r} are ragged or nested too deeply: the lists of one level "
        "must all have the same length"
    )


def _shape_or_none(value: Any) -> tuple[int, ...] | None:
    try:
        return tuple(np.shape(value))
    except (ValueError, RecursionError):
        return None


def check_shape(shape: tuple[int, ...], spec: TensorSpec, row: bool) -> None:
    """Checks an array's shape against the signature's rank and fixed dimensions.

    Args:
        shape: the array's shape, the batch axis first.
        spec: the input.
        row: the array is a stack of instances (messages speak of one instance).

    Raises:
        TensorRequestError: the rank or a fixed dimension differs.
    """
    expected = spec.shape
    if expected is None:
        return
    if row and not expected:
        raise TensorRequestError(f"input {spec.describe()} has no batch axis; send it in the "
                                 "columnar 'inputs' format")  # fmt: skip
    if _fits(shape, expected):
        return
    if not row:
        raise TensorRequestError(f"input {spec.name!r} must have shape {spec.shape_text()} "
                                 f"({spec.type}), got {dims_text(shape)}")  # fmt: skip
    if _fits(shape[1:], expected[1:]):
        raise TensorRequestError(f"input {spec.describe()} takes exactly {expected[0]} "
                                 f"instances per request, got {shape[0]}")  # fmt: skip
    raise TensorRequestError(f"each instance of input {spec.name!r} must have shape "
                             f"{dims_text(expected[1:])} (the input is {spec.describe()}), "
                             f"got {dims_text(shape[1:])}")  # fmt: skip


def _fits(shape: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    return len(shape) == len(expected) and all(
        want is None or want == got for want, got in zip(expected, shape, strict=True)
    )


def cast(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Casts an array to the input's dtype, refusing what would change the values.

    Numbers go to numeric inputs (integral values only to integer inputs, within range),
    ``true``/``false`` to boolean inputs, strings to ``tensor(string)`` inputs.

    Raises:
        TensorRequestError: the values do not fit the dtype.
    """
    target = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
    kind = array.dtype.kind
    if kind == "O":
        raise TensorRequestError(_object_message(array, spec))
    if target == np.object_:
        if kind != "U":
            raise TensorRequestError(f"input {spec.describe()} takes strings, got "
                                     f"{array.dtype} values")  # fmt: skip
        return array.astype(object)
    if kind in "US":
        first = array.flat[0] if array.size else ""
        raise TensorRequestError(f"input {spec.describe()} takes numbers, got a string "
                                 f"({shown(str(first))})")  # fmt: skip
    if (kind == "b") != (target.kind == "b"):
        wanted = "true/false values" if target.kind == "b" else "numbers, not true/false"
        raise TensorRequestError(f"input {spec.describe()} takes {wanted}")
    if target.kind in "iu":
        _check_integers(array, target, spec)
    with np.errstate(over="ignore", invalid="ignore"):
        converted = array.astype(target)
    if target.kind == "f" and array.size:
        lost = np.isfinite(array) & ~np.isfinite(converted)
        if lost.any():
            value = float(array[lost].flat[0])
            raise TensorRequestError(f"input {spec.describe()}: {value!r} is out of range for "
                                     f"{target}")  # fmt: skip
    return converted


def _check_integers(array: np.ndarray, target: np.dtype, spec: TensorSpec) -> None:
    if not array.size:
        return
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array) | (array != np.floor(array))
        if bad.any():
            value = array[bad].flat[0]
            raise TensorRequestError(f"input {spec.describe()} takes integers, got "
                                     f"{float(value)!r}")  # fmt: skip
    info = np.iinfo(target)
    low, high = array.min(), array.max()
    if low < info.min or high > info.max:
        value = low if low < info.min else high
        raise TensorRequestError(f"input {spec.describe()}: {int(value)} is out of range for "
                                 f"{target} [{info.min}, {info.max}]")  # fmt: skip


def _object_message(array: np.ndarray, spec: TensorSpec) -> str:
    items = list(array.flat)
    if any(is_b64(item) for item in items):
        return (f"input {spec.name!r}: {{\"b64\": ...}} values (binary strings) are not "
                "supported by the emulator's tensor models; send numbers")  # fmt: skip
    for item in items:
        if isinstance(item, dict):
            return f"input {spec.describe()} takes numbers, got an object ({shown(item)})"
        if item is None:
            return f"input {spec.describe()} takes numbers, got null"
    for item in items:
        if isinstance(item, int) and not -(2**63) <= item < 2**64:
            return f"input {spec.describe()}: {shown(item)} is out of range"
    return f"input {spec.describe()}: values of mixed or unsupported types"


# --- answers: outputs -> JSON ---------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """Turns an output into JSON values; floats of 32 bits or fewer as their shortest repr
    (a float32 0.1 is ``0.1``, not ``0.10000000149011612``)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and value.dtype.itemsize < 8:
            return value.astype(str).astype(np.float64).tolist()
        if value.dtype.kind in "OSU":
            return jsonable(value.tolist())
        return value.tolist()
    if isinstance(value, np.generic):
        return jsonable(np.asarray(value))
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _rows_of(value: Any) -> int | None:
    if isinstance(value, np.ndarray):
        return value.shape[0] if value.ndim else None
    return len(value) if isinstance(value, (list, tuple)) else None


def encode(outputs: Mapping[str, Any], batch: Batch) -> dict[str, Any]:
    """Builds TF Serving's answer: ``{"predictions": [...]}`` for rows, ``{"outputs": ...}``
    for columns; objects keyed by output name when the graph has several outputs.

    Raises:
        TensorRequestError: in row format, an output whose first axis is not the batch.
    """
    if batch.columnar:
        columns = {name: jsonable(value) for name, value in outputs.items()}
        return {"outputs": next(iter(columns.values())) if len(columns) == 1 else columns}
    for name, value in outputs.items():
        if _rows_of(value) != batch.size:
            shape = dims_text(np.shape(value)) if isinstance(value, np.ndarray) else "a value"
            raise TensorRequestError(
                f"output {name!r} is {shape}, not one row per instance ({batch.size}); "
                "send the columnar 'inputs' format"
            )
    rows = {name: jsonable(value) for name, value in outputs.items()}
    if len(rows) == 1:
        return {"predictions": next(iter(rows.values()))}
    return {"predictions": [{name: rows[name][index] for name in rows}
                            for index in range(batch.size)]}  # fmt: skip


# --- the container --------------------------------------------------------------------------


def error_reply(status: int, message: str) -> ContainerReply:
    """TF Serving's error answer: ``{"error": "message"}``."""
    return ContainerReply(status, json.dumps({"error": message}).encode(), JSON)


class TensorContainer:
    """SageMaker's TensorFlow Serving container contract over any ONNX graph."""

    def __init__(self, graph: Graph, max_instances: int = DEFAULT_MAX_INSTANCES) -> None:
        """Builds the container.

        Args:
            graph: the model, with its signature.
            max_instances: the most instances (batch rows) one request may carry.
        """
        self.graph = graph
        self.max_instances = max_instances

    def invoke(self, body: bytes, content_type: str | None, accept: str | None) -> ContainerReply:
        """Answers one invocation.

        Returns:
            200 with the predictions; 415 for a content type and 406 for an ``Accept`` it
            does not serve; 400 for a body the signature refuses; 500 when the graph fails.
        """
        kind = media_type(content_type)
        if kind not in CONTENT_TYPES:
            served = ", ".join(sorted(CONTENT_TYPES))
            return error_reply(415, f"Unsupported Media Type: {content_type or 'Unknown'} "
                                    f"(send one of {served})")  # fmt: skip
        answer_type = choose_accept(accept)
        if answer_type is None:
            return error_reply(406, f"Not Acceptable: {accept}; this container answers "
                                    "application/json or application/jsonlines")  # fmt: skip
        try:
            request = parse_body(body, kind, self.graph.inputs, self.max_instances)
            batch = to_batch(request, self.graph.inputs, self.max_instances)
            document = encode(self._run(batch.feeds), batch)
        except TensorRequestError as error:
            return error_reply(error.status, error.message)
        return ContainerReply(200, json.dumps(document).encode(), answer_type)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        try:
            return self.graph.run(feeds)
        except Exception as error:  # onnxruntime raises its own untyped exception classes
            message = str(error)[:RUN_MESSAGE_MAX]
            if type(error).__name__ in ("InvalidArgument", "ValueError"):
                raise TensorRequestError(f"the model refused the input: {message}") from error
            raise TensorRequestError(f"the model failed: {message}", 500) from error
