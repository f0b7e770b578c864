"""The ``image-classification`` kind: an image (JSON with base64 or a data URL, or the image
itself), resized with OpenCV as the model's settings say, its top-k labelled classes answered
(:class:`~chalicelib.inference.pipeline.Predictor`)."""
from __future__ import annotations

import dataclasses
from typing import Any

from chalicelib.calls import Call, CallOptions, ModelRequest
from chalicelib.core.media import REQUEST_TYPES, MediaType
from chalicelib.inference.pipeline import Predictor
from chalicelib.inference.serving import ModelServer
from chalicelib.kinds.base import Parts, preprocess_now
from chalicelib.reading.options import HttpRequest, read_predict
from chalicelib.registry.specs import ModelSpec

ACCEPTED = tuple(str(kind) for kind in REQUEST_TYPES)


class ImageKind:
    """See the module."""

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    def read(self, request: HttpRequest, model: ModelSpec, *,
             max_body_bytes: int) -> ModelRequest:
        read = read_predict(request, max_body_bytes=max_body_bytes, default_k=model.default_k,
                            model=model)
        return ModelRequest(Call(read.image, MediaType.OCTET_STREAM,
                                 request.headers.get("accept"), read.options.custom_attributes),
                            read.options)

    def read_job(self, body: bytes, content_type: str, options: CallOptions,
                 model: ModelSpec, *, max_body_bytes: int) -> ModelRequest:
        # the body's own fields (a JSON upload's "k") meet the job's options as a request's
        # fields meet its query string: one given in both is refused
        return self.read(HttpRequest(body, content_type, query=options.as_query()), model,
                         max_body_bytes=max_body_bytes)

    def pipeline(self, model: ModelSpec, parts: Parts) -> Predictor:
        assert model.settings is not None  # the registry gives every image model its settings
        settings = dataclasses.replace(model.settings, endpoint_name=model.endpoint)
        if parts.max_image_pixels is not None:
            settings = dataclasses.replace(settings, max_image_pixels=parts.max_image_pixels)
        return Predictor(settings, parts.endpoint, model.labels)

    preflight = staticmethod(preprocess_now)

    def applied_k(self, model: ModelSpec, k: int | None) -> int | None:
        return model.default_k if k is None else k  # the image reader applies the default

    def load(self, model: ModelSpec, server: ModelServer) -> None:
        return None

    def example(self, model: ModelSpec) -> Any:
        return {"image": "<base64 of a JPEG, PNG or WebP>", "k": model.default_k}

    def describe(self, model: ModelSpec) -> dict[str, Any]:
        s = model.settings
        if s is None:
            return {}
        return {"image": {
            "resize": {"mode": s.resize_mode, "shorter_side": s.resize_shorter_side,
                       "width": s.input_width, "height": s.input_height, "upscale": s.upscale},
            "passthrough": s.passthrough, "max_pixels": s.max_image_pixels}}


KIND = ImageKind()
