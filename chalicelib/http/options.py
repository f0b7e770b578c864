"""Read a request (body, headers, query) into what a route runs on: validated, once.

Each route has one reader here: :func:`read_predict` for ``/predict``, :func:`read_resize` for
``/resize``. A reader takes the request as :class:`HttpRequest`, reads the body's shape with
:mod:`chalicelib.http.bodies`, refuses unknown options and options of the wrong type, validates
every value, and returns the upload with the options the pipeline receives
(:class:`~chalicelib.calls.CallOptions`, :class:`~chalicelib.images.sizing.ResizeOptions`).
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
from collections.abc import Mapping
from typing import Any

from chalicelib.calls import Call, CallOptions, ModelRequest
from chalicelib.core.config import SAGEMAKER_NAME
from chalicelib.core.errors import (
    ImageTooLargeError,
    InvalidJSONError,
    InvalidParameterError,
    InvalidUploadError,
    NotAcceptableError,
    PayloadTooLargeError,
)
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import (
    BINARY_TYPES,
    RESIZER_MODES,
    ImageFormat,
    MediaType,
    ResizeMode,
    bare,
)
from chalicelib.http import negotiation
from chalicelib.http.bodies import Source, Upload, echo, read_upload
from chalicelib.images.sizing import MAX_SIDE, ResizeOptions
from chalicelib.registry.loading import INFERENCE_COMPONENT
from chalicelib.registry.specs import ModelSpec, Pipeline

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
RESIZE_OPTIONS = {"width": Kind.INT, "height": Kind.INT, "mode": Kind.TEXT,
                  "format": Kind.TEXT, "quality": Kind.INT}


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """The parts of an HTTP request a reader looks at.

    Attributes:
        body: the raw body.
        content_type: the Content-Type header (None when absent).
        headers: the headers, names lower-cased.
        query: the query-string parameters.
    """

    body: bytes
    content_type: str | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    query: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    """A ``/predict`` request, read: the upload and its validated options."""

    image: bytes
    options: CallOptions


@dataclasses.dataclass(frozen=True)
class ResizeRequest:
    """A ``/resize`` request, read: the upload and its validated options."""

    image: bytes
    options: ResizeOptions


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


def read_request(request: HttpRequest, model: ModelSpec, *,
                 max_body_bytes: int) -> ModelRequest:
    """Read a model request, whatever its pipeline: the one reader the route calls.

    An image model's body is an upload (:func:`read_predict`: JSON with base64, a data URL,
    or the image itself) and its options come with it; any other model's body is its own, and
    its options come from the query string and headers (:func:`read_model_options`).

    Raises:
        SagegateError: (a 4xx subclass) the body, an option or a header is not acceptable.
    """
    accept = request.headers.get("accept")
    if model.pipeline == Pipeline.IMAGE_CLASSIFICATION:
        read = read_predict(request, max_body_bytes=max_body_bytes, default_k=model.default_k,
                            model=model)
        return ModelRequest(Call(read.image, MediaType.OCTET_STREAM, accept,
                                 read.options.custom_attributes), read.options)
    asked = read_model_options(request, max_body_bytes=max_body_bytes)
    return ModelRequest(Call(request.body, bare(request.content_type), accept,
                             asked.custom_attributes), asked)


def read_options(upload: Upload, query: Mapping[str, str],
                 kinds: Mapping[str, Kind]) -> dict[str, Any]:
    """A request's options, one rule for every body shape.

    A raw upload's options are its query parameters. A JSON body's are its fields and the
    query parameters together: both are checked against ``kinds``, and an option given in
    both is refused, naming both, rather than one of them silently winning.

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
    k = fields.get("k")
    return CallOptions(
        k=None if k is None else parse_positive_int("k", k, maximum=MAX_K),
        variant=parse_variant(fields.get("variant")),
        target_model=parse_target_model(fields.get("target_model")),
        inference_component=parse_inference_component(fields.get("inference_component")),
        custom_attributes=parse_custom_attributes(fields.get("custom_attributes")))


@dataclasses.dataclass(frozen=True)
class JobRequest:
    """A ``POST /models/{name}/jobs`` request, read.

    Attributes:
        inline: the body is the job's input itself (not ``{"upload_id": ...}``).
        upload_id: the upload to run on, as sent (checked by the jobs service); None inline.
        options: the query options, validated as the model route validates them, kept as
            sent (the job's input is read with them when it runs).
    """

    inline: bool
    upload_id: object
    options: Mapping[str, str]


def read_job(request: HttpRequest, *, max_body_bytes: int) -> JobRequest:
    """Read a job request: JSON ``{"upload_id": ID}``, or any other body as the job's inline
    input; the query string's options are checked now, as the model route checks them.

    Raises:
        InvalidUploadError: a JSON object with ``upload_id`` and other fields.
        PayloadTooLargeError: an inline body over ``max_body_bytes``.
        InvalidParameterError: an unknown query parameter or a bad value.
    """
    read_model_options(HttpRequest(body=b"", query=request.query), max_body_bytes=1)
    options = {name: str(value) for name, value in request.query.items()}
    document = None
    if bare(request.content_type) == MediaType.JSON and len(request.body) <= max_body_bytes:
        try:
            document = load_json(request.body)
        except InvalidJSONError:
            document = None  # not JSON after all: an inline body the model's reader judges
    if isinstance(document, dict) and "upload_id" in document:
        if set(document) != {"upload_id"}:
            raise InvalidUploadError('A job on an upload is {"upload_id": ID}; send options '
                                     "such as k in the query string.")
        return JobRequest(False, document["upload_id"], options)
    if not request.body:
        raise InvalidUploadError('Send {"upload_id": ID} (from POST /uploads), or the '
                                 "model's input itself.")
    if len(request.body) > max_body_bytes:
        raise PayloadTooLargeError(
            f"Request body is {len(request.body)} bytes; the limit inline is {max_body_bytes}: "
            "send a larger input through POST /uploads and {\"upload_id\": ...}.")
    return JobRequest(True, None, options)


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
    """Validate SageMaker InferenceComponentName (the component of an endpoint to run), or
    None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_INFERENCE_COMPONENT \
            or not INFERENCE_COMPONENT.match(value):
        raise InvalidParameterError(
            '"inference_component" must be a SageMaker inference component name: 1 to '
            f"{MAX_INFERENCE_COMPONENT} letters, digits and inner hyphens.")
    return value


def read_resize(request: HttpRequest, *, max_body_bytes: int,
                max_output_pixels: int) -> ResizeRequest:
    """Read a ``/resize`` request, choosing the answer's format against its Accept header.

    Raises:
        InvalidParameterError: unknown field or bad value.
        ImageTooLargeError: the requested output is over ``max_output_pixels``.
        NotAcceptableError: Accept allows neither JSON nor the output image type.
        SagegateError: (a 4xx subclass) the body is not acceptable.
    """
    upload = read_upload(request.body, request.content_type, request.query,
                         max_body_bytes=max_body_bytes)
    fields = read_options(upload, request.query, RESIZE_OPTIONS)
    width, height = _required_side(fields, "width"), _required_side(fields, "height")
    if width * height > max_output_pixels:
        raise ImageTooLargeError(
            f"The output would be {width}x{height}; the limit is {max_output_pixels} pixels.")
    mode = fields.get("mode", ResizeMode.STRETCH)
    if mode not in RESIZER_MODES:
        raise InvalidParameterError(f'"mode" must be one of: {", ".join(RESIZER_MODES)}.')
    fmt, binary = negotiate_image(fields.get("format"), request.headers.get("accept"))
    quality = parse_positive_int("quality", fields.get("quality", 90), maximum=100)
    return ResizeRequest(upload.data, ResizeOptions(width, height, mode, fmt, quality, binary))


def check_fields(fields: Mapping[str, Any], kinds: Mapping[str, Kind], source: Source) -> None:
    """Refuse unknown options and options of the wrong JSON type, on every route alike.

    Values are checked further (ranges, names) by the ``parse_*`` functions; this makes sure
    they are of a type those can handle at all (``"format": []`` is not hashable).

    Raises:
        InvalidParameterError: an unknown name or a value of the wrong type.
    """
    unknown = heapq.nsmallest(5, (name for name in fields if name not in kinds))
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


def _required_side(fields: Mapping[str, Any], name: str) -> int:
    if fields.get(name) is None:
        raise InvalidParameterError(f'"{name}" is required.')
    return parse_positive_int(name, fields[name], maximum=MAX_SIDE)


def negotiate_image(fmt: str | None, accept: str | None) -> tuple[ImageFormat, bool]:
    """Choose an image answer's format and whether to send it binary (RFC 9110 negotiation).

    Args:
        fmt: the format the client named, if any.
        accept: the request's Accept header.

    Returns:
        The format, and True to answer the image itself, False to answer JSON with base64.

    Raises:
        InvalidParameterError: an unknown format.
        NotAcceptableError: Accept allows neither JSON nor the image type.
    """
    ranges = negotiation.parse_accept(accept)
    if fmt is None:  # the image type the client prefers, JPEG if it has no preference
        preferred = negotiation.choose([f.media_type for f in ImageFormat], ranges)
        fmt = ImageFormat.for_media_type(preferred) if preferred else ImageFormat.JPEG
    if fmt not in tuple(ImageFormat):
        raise InvalidParameterError(f'"format" must be one of: {", ".join(ImageFormat)}.')
    image_format = ImageFormat(fmt)
    image_type = image_format.media_type
    chosen = negotiation.choose([MediaType.JSON, image_type], ranges)
    if chosen is None:
        raise NotAcceptableError(f"Accept allows neither {MediaType.JSON} nor {image_type}.")
    if chosen == image_type and not _gateway_sends_binary(ranges) and \
            negotiation.quality(MediaType.JSON, ranges)[0] > 0:
        chosen = MediaType.JSON
    return image_format, chosen == image_type


def _gateway_sends_binary(ranges: tuple[negotiation.MediaRange, ...]) -> bool:
    """Whether API Gateway would deliver a binary answer: it decodes the function's base64
    only when the *first* type of the Accept header is one of the API's binary media types
    (:data:`~chalicelib.core.media.BINARY_TYPES`), whatever the q-values say. `application/json;
    q=0.1, image/png` therefore gets JSON, which it accepts, rather than base64 text labelled
    PNG."""
    first = min(ranges, key=lambda media_range: media_range.order)
    return first.type in ("*", "image") or f"{first.type}/{first.subtype}" in BINARY_TYPES
