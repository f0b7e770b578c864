"""The prediction pipeline: image in -> resize -> InvokeEndpoint -> labelled top-k out.

Collaborators (the endpoint client, the labels) are injected; everything the pipeline needs
from the settings is checked once, when it is built.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from chalicelib.cache.prediction import CacheUse
from chalicelib.calls import Answer, Call, CallOptions, InvokeResult, ModelRequest, Served
from chalicelib.core.config import Settings
from chalicelib.core.errors import (
    InvalidEndpointResponseError,
    InvalidImageError,
    ModelError,
)
from chalicelib.core.media import ENDPOINT_ANSWER_TYPES, PASSTHROUGH_TYPES, ImageFormat, MediaType
from chalicelib.images import imaging, sizing
from chalicelib.images.probe import ImageInfo
from chalicelib.inference import predictions
from chalicelib.inference.endpoint import EndpointClient, Invocation
from chalicelib.inference.timing import StageTimer


def limits_from(settings: Settings) -> sizing.Limits:
    """The image limits the settings describe."""
    return sizing.Limits(max_pixels=settings.max_image_pixels,
                          max_aspect_ratio=settings.max_aspect_ratio,
                          allow_corrupt=settings.allow_corrupt_images,
                          max_jpeg_scans=settings.max_jpeg_scans)


@dataclasses.dataclass(frozen=True)
class PredictResult:
    """A prediction and what it took to make it."""

    predictions: list[predictions.Prediction]
    endpoint: str
    variant: str | None
    custom_attributes: str | None
    image_in: ImageInfo | None
    """The upload's header (None: answered from the cache, which reads none)."""
    image_out: tuple[int, int] | None
    """The size sent to the endpoint (None: answered from the cache)."""
    sent: bytes = dataclasses.field(repr=False)
    """The resized, re-encoded image."""
    sent_content_type: str
    received: bytes = dataclasses.field(repr=False)
    received_content_type: str
    attempts: int = 1
    passthrough: bool = False
    """The upload went to the endpoint untouched (see :func:`imaging.can_pass_through`)."""
    cached: bool = False
    """The endpoint's answer came from the prediction cache: nothing was sent."""

    @property
    def bytes_sent(self) -> int:
        """The size of :attr:`sent`."""
        return len(self.sent)

    def to_dict(self, request_id: str) -> dict[str, Any]:
        """The JSON body of a 200 answer."""
        return {
            "predictions": [p.to_dict() for p in self.predictions],
            "endpoint": self.endpoint,
            "variant": self.variant,
            "request_id": request_id,
        }

    def served(self, request_id: str, upload: bytes) -> Served:
        """This prediction as every pipeline answers: the JSON body (it names the variant),
        the endpoint exchange, and the upload's and the endpoint image's sizes for the log."""
        image_in: dict[str, Any] = {"bytes": len(upload)}  # a cached answer read no header
        if self.image_in is not None:
            image_in.update(format=self.image_in.format, width=self.image_in.width,
                            height=self.image_in.height)
        image_out = None if self.image_out is None else {
            "width": self.image_out[0], "height": self.image_out[1],
            "bytes": self.bytes_sent, "passthrough": self.passthrough}
        invoked = not self.cached and self.image_in is not None
        return Served(
            Answer.json(self.to_dict(request_id)), self.endpoint, variant=self.variant,
            attempts=self.attempts, sent=self.sent, sent_content_type=self.sent_content_type,
            received=self.received, received_content_type=self.received_content_type,
            custom_attributes=self.custom_attributes, invoked=invoked, cached=self.cached,
            original=upload,
            original_content_type=f"image/{self.image_in.format}" if self.image_in
            else MediaType.X_IMAGE,  # a hit reads no header: the type SageMaker's images use
            variant_header=False, image_in=image_in, image_out=image_out)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """An upload made ready for the endpoint."""

    info: ImageInfo
    payload: bytes
    size: tuple[int, int]
    passthrough: bool


def _pipeline_fields(settings: Settings, passthrough: bool) -> dict[str, Any]:
    """The settings that change what an image model's endpoint is sent or answers, or which
    uploads get through (the cache key's, besides the upload's bytes)."""
    s = settings
    return {"endpoint": s.endpoint_name, "resize_mode": s.resize_mode,
            "shorter_side": s.resize_shorter_side, "size": [s.input_width, s.input_height],
            "upscale": s.upscale, "encode": [s.encode_format, s.jpeg_quality, s.png_compression],
            "passthrough": passthrough, "content_type": s.endpoint_content_type,
            "accept": s.endpoint_accept,
            "limits": [s.max_image_pixels, s.max_aspect_ratio, s.allow_corrupt_images,
                       s.max_jpeg_scans, s.max_body_bytes]}


def warm_up_codecs(settings: Settings) -> None:
    """Preprocess a generated 800x600 JPEG once as ``settings`` say, endpoint aside, so
    OpenCV's lazy set-up (codec tables, its thread pool) happens during init, not in the first
    request."""
    ramp = np.arange(800, dtype=np.uint16)[None, :] + np.arange(600, dtype=np.uint16)[:, None]
    image = np.repeat((ramp % 256).astype(np.uint8)[:, :, None], 3, axis=2)
    upload = imaging.encode(image, sizing.Encoding(ImageFormat.JPEG, 90))
    resized, _ = imaging.prepare(upload, _plan(settings), limits_from(settings))
    imaging.encode(resized, _encoding(settings))


def _plan(settings: Settings) -> sizing.ResizePlan:
    return sizing.plan_resize(settings.resize_mode, settings.input_width, settings.input_height,
                              settings.resize_shorter_side, settings.upscale)


def _encoding(settings: Settings) -> sizing.Encoding:
    return sizing.Encoding(ImageFormat(settings.encode_format), settings.jpeg_quality,
                           settings.png_compression)


class Predictor:
    """Runs one prediction end to end (``labels`` None: report indices)."""

    def __init__(self, settings: Settings, endpoint: EndpointClient,
                 labels: Sequence[str] | None) -> None:
        self._settings = settings
        self._endpoint = endpoint
        self._labels = labels
        self._plan = _plan(settings)
        self._limits = limits_from(settings)
        self._encoding = _encoding(settings)
        # The upload may go untouched only where the endpoint is told it may be any image.
        self._passthrough_allowed = (settings.passthrough
                                     and settings.endpoint_content_type in PASSTHROUGH_TYPES)
        self._pipeline_fields = _pipeline_fields(settings, self._passthrough_allowed)

    @property
    def endpoint(self) -> EndpointClient:
        """This pipeline's endpoint client."""
        return self._endpoint

    @property
    def labels(self) -> Sequence[str] | None:
        """The class names, in index order (None: indices)."""
        return self._labels

    def close(self) -> None:
        """Drop the endpoint client's pooled connections (see :mod:`chalicelib.core.lifecycle`)."""
        self._endpoint.close()

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """Serve one request (the upload is ``request.call.body``): see :meth:`predict`."""
        result = self.predict(request.call.body, request.options, request_id, timer,
                              deadline, cache=cache)
        return result.served(request_id, request.call.body)

    def preprocess(self, request: ModelRequest, timer: StageTimer,
                   deadline: float | None = None) -> Call:
        """What the endpoint would be sent for this request (the resized, re-encoded image,
        or the upload passed through): the half of :meth:`serve` before the endpoint call, for
        an asynchronous endpoint.

        Raises:
            SagegateError: (a subclass) a bad image, or preprocessing outlived its budget.
        """
        prepared = self._prepare(request.call.body, timer, deadline)
        return Call(prepared.payload, self._settings.endpoint_content_type,
                    self._settings.endpoint_accept)

    def postprocess(self, request: ModelRequest, result: InvokeResult, request_id: str,
                    sent: bytes = b"") -> Served:
        """The answer :meth:`serve` gives for the endpoint's ``result``: the half after the
        endpoint call, for an asynchronous endpoint's output (``sent``: what it was sent).

        Raises:
            InvalidEndpointResponseError: the output is not the probabilities expected.
        """
        top = self._top_k(result, self._settings.default_k if request.options.k is None
                          else request.options.k)
        served = PredictResult(
            predictions=top, endpoint=self._settings.endpoint_name, variant=result.variant,
            custom_attributes=result.custom_attributes, image_in=None, image_out=None,
            sent=sent, sent_content_type=self._settings.endpoint_content_type,
            received=result.body, received_content_type=result.content_type,
            attempts=result.attempts).served(request_id, request.call.body)
        served.invoked = True  # the endpoint answered, later; this process read no header
        return served

    def predict(self, image: bytes, options: CallOptions, request_id: str,
                timer: StageTimer | None = None, deadline: float | None = None,
                cache: CacheUse | None = None) -> PredictResult:
        """Resize ``image``, invoke the endpoint and return the labelled top-k.

        ``deadline`` (``time.monotonic()``) is when the request's budget ends, counted from
        its start: preprocessing has until one whole endpoint attempt before it (checked after
        the decode and resize, and before the call), and the endpoint then gets that attempt.
        With ``cache``, an answer cached for these exact bytes (and this pipeline, model and
        variant) is used without decoding anything or calling the endpoint; top-k is always
        computed here, per request.

        Raises:
            PreprocessingTimeoutError: preprocessing outlived its share of the budget.
            SagegateError: (a subclass) bad image, endpoint failure or bad endpoint output.
        """
        timer = timer or StageTimer()
        prepared: list[_Prepared] = []

        def compute() -> InvokeResult:
            prepared.append(self._prepare(image, timer, deadline))
            with timer.stage("endpoint"):
                return self._call(prepared[0], options, request_id, deadline)

        if cache is None:
            result = compute()
        else:
            result = cache.fetch(self._key_fields(options, cache), image, compute, deadline)
        with timer.stage("postprocess"):
            top = self._top_k(result, self._settings.default_k if options.k is None
                              else options.k)
        done = prepared[0] if prepared else None
        return PredictResult(
            predictions=top, endpoint=self._settings.endpoint_name, variant=result.variant,
            custom_attributes=result.custom_attributes,
            image_in=done.info if done else None, image_out=done.size if done else None,
            sent=done.payload if done else b"", passthrough=done.passthrough if done else False,
            sent_content_type=self._settings.endpoint_content_type, received=result.body,
            received_content_type=result.content_type, attempts=result.attempts,
            cached=done is None,
        )

    def _prepare(self, image: bytes, timer: StageTimer, deadline: float | None) -> _Prepared:
        with timer.stage("preprocess"):
            # every limit, on the header, whether or not the upload is passed through
            info = imaging.inspect(image, self._plan, self._limits)
            passthrough = self._passthrough_allowed and imaging.can_pass_through(
                image, info, self._plan)
            if passthrough:
                imaging.check_forwardable(image, info, self._limits)
                return _Prepared(info, image, (info.width, info.height), True)
            resized = imaging.decode_and_resize(image, info, self._plan, self._limits)
            # past its share of the budget already: the encode would be wasted
            self._endpoint.check_time_left(deadline)
            return _Prepared(info, imaging.encode(resized, self._encoding),
                             (resized.shape[1], resized.shape[0]), False)

    def _call(self, prepared: _Prepared, options: CallOptions, request_id: str,
              deadline: float | None) -> InvokeResult:
        try:
            return self._endpoint.invoke(
                self._invocation(prepared.payload, options, request_id), deadline)
        except ModelError as error:
            status = error.details.get("original_status_code")
            if prepared.passthrough and isinstance(status, int) and 400 <= status < 500:
                # sagegate forwarded the client's bytes: the model refusing them is the
                # client's error, not a failure of the endpoint.
                raise InvalidImageError(
                    "The image could not be decoded by the model.") from None
            raise

    def _key_fields(self, options: CallOptions, cache: CacheUse) -> dict[str, Any]:
        """Everything besides the upload's bytes that changes the endpoint's answer (and
        whether the upload passes the checks at all)."""
        return {**cache.scope, **self._pipeline_fields, "variant": options.variant,
                "target_model": options.target_model,
                "inference_component": options.inference_component,
                "custom_attributes": options.custom_attributes}

    def _invocation(self, payload: bytes, options: CallOptions, request_id: str) -> Invocation:
        return Invocation(
            endpoint_name=self._settings.endpoint_name, body=payload,
            content_type=self._settings.endpoint_content_type,
            accept=self._settings.endpoint_accept, target_variant=options.variant,
            target_model=options.target_model, inference_component=options.inference_component,
            custom_attributes=options.custom_attributes, inference_id=request_id[:64],
        )

    def _top_k(self, result: InvokeResult, k: int) -> list[predictions.Prediction]:
        expected = len(self._labels) if self._labels is not None else None
        if result.content_type and not result.content_type.startswith(ENDPOINT_ANSWER_TYPES):
            raise InvalidEndpointResponseError(
                f"The endpoint answered {result.content_type!r}, not JSON.")
        probabilities = predictions.parse_probabilities(result.body, expected)
        indices = predictions.top_k(probabilities, k)
        return predictions.label_predictions(probabilities, indices, self._labels)
