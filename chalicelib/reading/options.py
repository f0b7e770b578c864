"""Read a request (body, headers, query) into what a route runs on: validated, once.

The readers: :func:`read_predict` for an image upload (``/predict``, an image model's route),
:func:`read_model_options` for any other model's route (its body is its own), and, beside this
module, :mod:`.resize` for ``/resize`` and :mod:`.jobrequest` for a job. Each pipeline kind
(:mod:`chalicelib.kinds`) reads its requests with them. A reader takes the request as
:class:`HttpRequest`, reads the body's shape with :mod:`.bodies`, refuses unknown options and
options of the wrong type, validates every value, and returns the upload with the options the
pipeline receives (:class:`~chalicelib.calls.CallOptions`,
:class:`~chalicelib.images.sizing.ResizeOptions`).
Nothing downstream reads the request or validates an option again.

One rule for every body shape (:func:`read_options`): the query string's options apply to a
JSON body as they do to a raw upload; an unknown query parameter is refused either way; and an
option set both in the JSON body and in the query string is refused, naming both, rather than
one silently winning (the two are often written by different code, and a client whose ``?k=1``
is ignored gets the wrong number of classes without a word). Headers come last: they fill in
only the options neither the body nor the query string gives.
"""
from __future__ import annotations

import dataclasses
import enum
import heapq
import re
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.calls import Call, CallOptions, ModelRequest
from chalicelib.core.config_names import SAGEMAKER_NAME
from chalicelib.core.errors import (
    InvalidParameterError,
    PayloadTooLargeError,
)
from chalicelib.core.media import bare
from chalicelib.reading.bodies import Source, Upload, echo, read_upload
from chalicelib.registry.loading import INFERENCE_COMPONENT
from chalicelib.registry.specs import ModelSpec

# k: a k above the number of classes answers every class; this bounds the text clients send.
MAX_K = 1_000_000
MAX_CUSTOM_ATTRIBUTES = 1024  # SageMaker's limit for CustomAttributes
_INT_TEXT = re.compile(r"^[0-9]{1,9}\Z")
_PRINTABLE = re.compile(r"^[\x20-\x7e]*\Z")


class Kind(enum.StrEnum):
    """The JSON kind an option takes (the name messages use)."""

    INT = "whole number"
    TEXT = "string"


# Every option of /predict and its kind; "topk" is the 2018 clients' name for "k".
PREDICT_OPTIONS = {"k": Kind.INT, "topk": Kind.INT, "variant": Kind.TEXT,
                   "target_model": Kind.TEXT, "inference_component": Kind.TEXT,
                   "custom_attributes": Kind.TEXT}
# Options a header may give when the body or query does not (they win over a header).
PREDICT_HEADERS = {"x-target-variant": "variant", "x-target-model": "target_model",
                   "x-target-inference-component": "inference_component",
                   "x-custom-attributes": "custom_attributes"}
# A model route's options: the body is the model's, so they come from the query and headers.
MODEL_OPTIONS = {"k": Kind.INT, "variant": Kind.TEXT, "target_model": Kind.TEXT,
                 "inference_component": Kind.TEXT, "custom_attributes": Kind.TEXT}
MAX_TARGET_MODEL = 1024  # SageMaker's limit for TargetModel
_TARGET_MODEL = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,1023}\Z")  # SageMaker: \A\S[\p{Print}]*\z
MAX_INFERENCE_COMPONENT = 63  # SageMaker's limit for InferenceComponentName



@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """The parts of an HTTP request a reader looks at (``headers``' names lower-cased)."""

    body: bytes
    content_type: str | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    query: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    """A ``/predict`` request, read: the upload and its validated options."""

    image: bytes
    options: CallOptions


def read_predict(request: HttpRequest, *, max_body_bytes: int, default_k: int,
                 model: ModelSpec | None = None) -> PredictRequest:
    """Read a ``/predict`` request.

    Options come from the JSON fields and the query string (:func:`read_options`), then from
    the ``X-Target-*`` / ``X-Custom-Attributes`` headers for those not given there, then from
    ``model``'s ``model.json`` (variant, target model, inference component).

    Raises:
        SagegateError: (a 4xx subclass) the body, an option or a header is not acceptable.
    """
    upload = read_upload(request.body, request.content_type, request.query,
                         max_body_bytes=max_body_bytes)
    fields = _with_headers(read_options(upload, request.query, PREDICT_OPTIONS),
                           request.headers)
    k_name = "topk" if "topk" in fields else "k"  # messages name the field as sent
    if "k" in fields and "topk" in fields:
        raise InvalidParameterError('Send "k" or "topk", not both.')
    k = fields.get(k_name)
    variant, target_model, component = (model.variant, model.target_model,
                                         model.inference_component) if model else (None,) * 3
    return PredictRequest(upload.data, CallOptions(
        k=default_k if k is None else parse_positive_int(k_name, k, maximum=MAX_K),
        variant=parse_variant(fields.get("variant")) or variant,
        custom_attributes=parse_custom_attributes(fields.get("custom_attributes")),
        target_model=parse_target_model(fields.get("target_model")) or target_model,
        inference_component=parse_inference_component(fields.get("inference_component"))
        or component,
    ))


def read_options(upload: Upload, query: Mapping[str, str],
                 kinds: Mapping[str, Kind]) -> dict[str, Any]:
    """A request's options, one rule for every body shape (see the module docstring): both
    sources are checked against ``kinds``.

    Raises:
        InvalidParameterError: an unknown field or query parameter, a value of the wrong
            type, or an option set in both places.
    """
    check_fields(upload.fields, kinds, upload.source)
    if upload.source == Source.QUERY:
        return dict(upload.fields)
    check_fields(query, kinds, Source.QUERY)
    twice = heapq.nsmallest(5, (name for name in query if name in upload.fields))
    if twice:
        shown = ", ".join(echo(name) for name in twice)
        raise InvalidParameterError(
            f"{shown} sent both as a {Source.FIELD} of the JSON body and as a "
            f"{Source.QUERY}; send each option once.")
    return {**query, **upload.fields}


def read_model_options(request: HttpRequest, *, max_body_bytes: int) -> CallOptions:
    """Read a model route's options: the query string, then the ``X-Target-Variant``,
    ``X-Target-Model``, ``X-Target-Inference-Component`` and ``X-Custom-Attributes`` headers
    for those it does not give. The body is the model's own and is read by its pipeline; only
    its size is checked here.

    Raises:
        PayloadTooLargeError: the body is over ``max_body_bytes``.
        InvalidParameterError: an unknown query parameter or a bad value.
    """
    if len(request.body) > max_body_bytes:
        raise PayloadTooLargeError(f"Request body is {len(request.body)} bytes; the limit is "
                                   f"{max_body_bytes}.")
    check_fields(request.query, MODEL_OPTIONS, Source.QUERY)
    fields = _with_headers(request.query, request.headers)
    # only what was given is parsed (each parser reads None as None), in this order
    return CallOptions(**{name: parse(fields[name]) for name, parse in _MODEL_PARSERS.items()
                          if name in fields})


def read_model_request(request: HttpRequest, model: ModelSpec, *,
                       max_body_bytes: int) -> ModelRequest:
    """A model route's request whose body is the model's own (every kind's but the image
    classifier's): its options (:func:`read_model_options`) and its body as sent."""
    asked = read_model_options(request, max_body_bytes=max_body_bytes)
    return ModelRequest(Call(request.body, bare(request.content_type),
                             request.headers.get("accept"), asked.custom_attributes), asked)


def _parse_k(value: Any) -> int:
    return parse_positive_int("k", value, maximum=MAX_K)


def _with_headers(fields: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """The options, plus those the headers give that the body or query does not."""
    merged = dict(fields)
    for header, name in PREDICT_HEADERS.items():
        value = headers.get(header)
        if value and name not in merged:
            merged[name] = value
    return merged


def parse_target_model(value: Any) -> str | None:
    """Validate SageMaker TargetModel (a multi-model endpoint's model path), or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _TARGET_MODEL.match(value):
        raise InvalidParameterError(
            f'"target_model" must be 1 to {MAX_TARGET_MODEL} printable ASCII characters, '
            "not starting with a space.")
    return value


def parse_inference_component(value: Any) -> str | None:
    """Validate SageMaker InferenceComponentName, or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_INFERENCE_COMPONENT \
            or not INFERENCE_COMPONENT.match(value):
        raise InvalidParameterError(
            '"inference_component" must be a SageMaker inference component name: 1 to '
            f"{MAX_INFERENCE_COMPONENT} letters, digits and inner hyphens.")
    return value


def check_fields(fields: Mapping[str, Any], kinds: Mapping[str, Kind], source: Source) -> None:
    """Refuse unknown options and options of the wrong JSON type, on every route alike.

    Values are checked further (ranges, names) by the ``parse_*`` functions; this makes sure
    they are of a type those can handle at all (``"format": []`` is not hashable).

    Raises:
        InvalidParameterError: an unknown name or a value of the wrong type.
    """
    unknown = heapq.nsmallest(5, [name for name in fields if name not in kinds])
    if unknown:  # (the first few, in order, however many a hostile body holds)
        known = sorted(kinds) if source == Source.QUERY else ["image", *sorted(kinds)]
        shown = ", ".join(echo(name) for name in unknown)
        raise InvalidParameterError(
            f"Unknown {source}(s) {shown}; known: {', '.join(known)}.")
    for name, kind in kinds.items():
        value = fields.get(name)
        if value is not None and not _is_kind(value, kind):
            raise InvalidParameterError(f'"{name}" must be a {kind}, not {_json_type(value)}.')


def _is_kind(value: Any, kind: Kind) -> bool:
    if isinstance(value, str):
        return True  # query parameters are all text; their content is checked later
    if kind == Kind.INT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", dict: "an object", list: "an array", int: "a number",
             float: "a number"}
    return names.get(type(value), "a " + type(value).__name__)


def parse_positive_int(name: str, value: Any, *, maximum: int) -> int:
    """Validate a whole number in ``1..maximum`` given as a JSON int or as decimal text.

    Raises:
        InvalidParameterError: anything else, booleans and floats included.
    """
    if isinstance(value, str) and _INT_TEXT.match(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidParameterError(f'"{name}" must be a whole number from 1 to {maximum}.')
    return value


def parse_variant(value: Any) -> str | None:
    """Validate a production variant name (SageMaker's naming rule), or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not SAGEMAKER_NAME.fullmatch(value):
        raise InvalidParameterError('"variant" must be a SageMaker production variant name.')
    return value


def parse_custom_attributes(value: Any) -> str | None:
    """Validate SageMaker CustomAttributes: printable ASCII, at most 1024 characters."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_CUSTOM_ATTRIBUTES or not _PRINTABLE.match(
        value
    ):
        raise InvalidParameterError(
            f'"custom_attributes" must be printable ASCII of at most {MAX_CUSTOM_ATTRIBUTES} '
            "characters."
        )
    return value


_MODEL_PARSERS: dict[str, Callable[[Any], Any]] = {
    "k": _parse_k, "variant": parse_variant, "target_model": parse_target_model,
    "inference_component": parse_inference_component,
    "custom_attributes": parse_custom_attributes}
"""A model route's options (:data:`MODEL_OPTIONS`), each with its parser."""
