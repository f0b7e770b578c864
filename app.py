"""sagegate: HTTP routes only. Each view reads the request, calls chalicelib, renders."""
from __future__ import annotations

import functools
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

from chalice import Chalice, Response
from chalice.app import Request

from chalicelib import requests as body_parsing
from chalicelib.config import Settings
from chalicelib.errors import ConfigurationError, SagegateError
from chalicelib.pipeline import PredictOptions, Predictor, StageTimer
from chalicelib.resizer import ResizeOptions, resize_image

app = Chalice(app_name="sagegate")
app.debug = False  # a traceback must never reach a client, in any stage
for _media_type in body_parsing.BINARY_TYPES:
    if _media_type not in app.api.binary_types:
        app.api.binary_types.append(_media_type)

_ANY_CONTENT_TYPE = ["*/*"]  # sagegate checks the type itself, answering its own 415
_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_HEADER_OPTIONS = {"x-target-variant": "variant", "x-custom-attributes": "custom_attributes"}

_SETTINGS: Settings | None = None
_PREDICTOR: Predictor | None = None
_PREDICTOR_LOCK = threading.Lock()
# Chalice keeps the request on the app object, shared by every thread. Lambda serves one
# request per container, but `chalice local` is threaded: two concurrent requests would read
# each other's bodies. The middleware pins each thread's own request here instead.
_SERVING = threading.local()


def get_settings() -> Settings:
    """Settings, read from the environment on first use and kept for warm invocations."""
    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = Settings.from_env()
    return _SETTINGS


def get_predictor() -> Predictor:
    """The prediction pipeline with its boto3 client, built once per container."""
    global _PREDICTOR
    with _PREDICTOR_LOCK:
        if _PREDICTOR is None:
            from chalicelib.endpoint import EndpointClient, make_client, policy_from
            from chalicelib.predictions import load_labels

            settings = get_settings()
            client = EndpointClient(make_client(settings), policy_from(settings))
            _PREDICTOR = Predictor(settings, client, load_labels(settings.labels))
        return _PREDICTOR


def current_request() -> Request:
    """The request this thread is serving (pinned by :func:`correlate`, else Chalice's)."""
    request: Request | None = getattr(_SERVING, "request", None) or app.current_request
    assert request is not None, "only called while serving a request"
    return request


def request_id() -> str:
    """The correlation id: the client's ``X-Request-Id``, else API Gateway's, else new."""
    request = current_request()
    context = request.context
    if "sagegate_request_id" not in context:
        candidate = request.headers.get("x-request-id", "")
        if not _REQUEST_ID_RE.match(candidate):
            candidate = context.get("requestId") or str(uuid.uuid4())
        context["sagegate_request_id"] = candidate
    return str(context["sagegate_request_id"])


def error_response(error: SagegateError) -> Response:
    """Render any sagegate error as ``{"Code", "Message", "request_id", ...details}``."""
    if isinstance(error, ConfigurationError):
        app.log.error("configuration error: %s", error.message)
        body: dict[str, Any] = {"Code": error.CODE, "Message": "The service is misconfigured."}
    else:
        body = {"Code": error.CODE, "Message": error.message, **error.details}
    body["request_id"] = request_id()
    return Response(body=body, status_code=error.STATUS_CODE, headers=dict(error.headers))


def renders_errors(view: Callable[[], Response]) -> Callable[[], Response]:
    """Turn sagegate's errors raised by a view into their HTTP answers."""
    @functools.wraps(view)
    def wrapper() -> Response:
        try:
            return view()
        except SagegateError as error:
            return error_response(error)
    return wrapper


@app.middleware("http")
def correlate(event: Any, get_response: Callable[[Any], Response]) -> Response:
    """Pin the thread's request; tag every answer, Chalice's own errors too, with its id."""
    _SERVING.request = event
    try:
        rid = request_id()
        response = get_response(event)
    finally:
        _SERVING.request = None
    response.headers["X-Request-Id"] = rid
    if response.status_code >= 400 and isinstance(response.body, dict):
        response.body.setdefault("request_id", rid)
    return response


def _read_body() -> body_parsing.ImageRequest:
    request = current_request()
    raw = request.raw_body or b""
    parsed = body_parsing.parse_body(
        raw if isinstance(raw, bytes) else raw.encode("utf-8"),
        request.headers.get("content-type"), request.query_params,
        max_body_bytes=get_settings().max_body_bytes)
    return parsed


def _with_header_options(parsed: body_parsing.ImageRequest) -> dict[str, Any]:
    options = dict(parsed.options)
    for header, name in _HEADER_OPTIONS.items():
        value = current_request().headers.get(header)
        if value and name not in options:
            options[name] = value
    return options


def _server_timing(durations: dict[str, float]) -> str:
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in durations.items())


@app.route("/predict", methods=["POST"], content_types=_ANY_CONTENT_TYPE)
@renders_errors
def predict() -> Response:
    """Classify one image: JSON (base64 or data URL) or a binary body."""
    timer = StageTimer()
    with timer.stage("parse"):
        parsed = _read_body()
        options = PredictOptions.parse(_with_header_options(parsed), get_settings().default_k)
    result = get_predictor().predict(parsed.image, options, request_id(), timer)
    headers: dict[str, str | list[str]] = {"Server-Timing": _server_timing(timer.durations)}
    if result.custom_attributes:
        headers["X-Custom-Attributes"] = result.custom_attributes
    return Response(body=result.to_dict(request_id()), headers=headers)


@app.route("/resize", methods=["POST"], content_types=_ANY_CONTENT_TYPE)
@renders_errors
def resize() -> Response:
    """Resize one image to exactly the width and height asked for."""
    settings = get_settings()
    parsed = _read_body()
    options = ResizeOptions.parse(parsed.options, current_request().headers.get("accept"),
                                  settings.max_output_pixels)
    resized = resize_image(parsed.image, options, settings.max_image_pixels)
    if options.binary:
        return Response(body=resized.data, headers={"Content-Type": options.content_type})
    return Response(body=resized.to_dict())


@app.route("/health", methods=["GET"])
@renders_errors
def health() -> Response:
    """Cheap liveness: configuration as loaded, no call to the endpoint."""
    from chalicelib.predictions import load_labels

    settings = get_settings()
    labels = load_labels(settings.labels)
    return Response(body={
        "status": "ok",
        "endpoint": settings.endpoint_name,
        "model_input": {"width": settings.input_width, "height": settings.input_height},
        "resize": {"mode": settings.resize_mode, "shorter_side": settings.resize_shorter_side},
        "labels": len(labels) if labels is not None else 0,
    })
