"""The resizer service (``POST /resize``): the 2018 companion service, done right.

Width and height mean what they say (``cv2.resize`` takes ``(width, height)``; the 2018 code
passed them swapped), bytes come back as real base64 or as binary, and output size is capped.
"""
from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from chalicelib import imaging, negotiation, requests
from chalicelib.errors import ImageTooLargeError, InvalidParameterError, NotAcceptableError

MAX_SIDE = 8192
# Lambda answers at most 6 MB, and an image travels base64-encoded in that answer (binary
# bodies too: API Gateway decodes them), so the encoded image must stay under about 4.5 MB.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
MAX_OUTPUT_BYTES = (LAMBDA_RESPONSE_LIMIT - 16 * 1024) * 3 // 4
RESIZE_MODES = ("stretch", "fit", "fill")
# Every option of /resize and its kind, checked as /predict checks its own.
OPTION_KINDS = {"width": requests.INT, "height": requests.INT, "mode": requests.TEXT,
                "format": requests.TEXT, "quality": requests.INT}
JSON_TYPE = "application/json"


@dataclasses.dataclass(frozen=True)
class ResizeOptions:
    """A validated resize request."""

    width: int
    height: int
    mode: str = "stretch"
    format: str = "jpeg"
    quality: int = 90
    binary: bool = False

    @property
    def content_type(self) -> str:
        """The media type of the output image."""
        return imaging.CONTENT_TYPES[self.format]

    @classmethod
    def parse(cls, options: Mapping[str, Any], accept: str | None,
              max_output_pixels: int, source: str = requests.FIELD) -> ResizeOptions:
        """Validate the fields of a resize request against the client's Accept header.

        Args:
            options: JSON fields or query parameters, unvalidated.
            accept: the request's Accept header.
            max_output_pixels: the largest output allowed.
            source: where the options came from (:data:`requests.FIELD` or ``QUERY``).

        Raises:
            InvalidParameterError: unknown field or bad value.
            ImageTooLargeError: the requested output is over ``max_output_pixels``.
            NotAcceptableError: Accept allows neither JSON nor the output image type.
        """
        requests.check_fields(options, OPTION_KINDS, source)
        width = _required_int(options, "width")
        height = _required_int(options, "height")
        if width * height > max_output_pixels:
            raise ImageTooLargeError(
                f"The output would be {width}x{height}; the limit is {max_output_pixels} pixels.")
        mode = options.get("mode", "stretch")
        if mode not in RESIZE_MODES:
            raise InvalidParameterError(f'"mode" must be one of: {", ".join(RESIZE_MODES)}.')
        fmt, binary = _negotiate(options.get("format"), accept)
        quality = requests.parse_positive_int("quality", options.get("quality", 90), maximum=100)
        return cls(width, height, mode, fmt, quality, binary)


def _required_int(options: Mapping[str, Any], name: str) -> int:
    if options.get(name) is None:
        raise InvalidParameterError(f'"{name}" is required.')
    return requests.parse_positive_int(name, options[name], maximum=MAX_SIDE)


def _negotiate(fmt: str | None, accept: str | None) -> tuple[str, bool]:
    """Choose the output format and whether to answer in binary (RFC 9110 negotiation)."""
    ranges = negotiation.parse_accept(accept)
    if fmt is None:  # the image type the client prefers, JPEG if it has no preference
        preferred = negotiation.choose(list(imaging.CONTENT_TYPES.values()), ranges)
        fmt = _FORMAT_BY_TYPE[preferred] if preferred else "jpeg"
    if fmt not in imaging.CONTENT_TYPES:
        raise InvalidParameterError(f'"format" must be one of: {", ".join(imaging.FORMATS)}.')
    image_type = imaging.CONTENT_TYPES[fmt]
    chosen = negotiation.choose([JSON_TYPE, image_type], ranges)
    if chosen is None:
        raise NotAcceptableError(f"Accept allows neither {JSON_TYPE} nor {image_type}.")
    if chosen == image_type and not _gateway_sends_binary(ranges) and \
            negotiation.quality(JSON_TYPE, ranges)[0] > 0:
        chosen = JSON_TYPE
    return fmt, chosen == image_type


def _gateway_sends_binary(ranges: tuple[negotiation.MediaRange, ...]) -> bool:
    """Whether API Gateway would deliver a binary answer: it decodes the function's base64
    only when the *first* type of the Accept header is one of the API's binary media types
    (requests.BINARY_MEDIA_TYPES), whatever the q-values say. `application/json;q=0.1,
    image/png` therefore gets JSON, which it accepts, rather than base64 text labelled PNG."""
    first = min(ranges, key=lambda media_range: media_range.order)
    return first.type in ("*", "image") or \
        f"{first.type}/{first.subtype}" in requests.BINARY_MEDIA_TYPES


_FORMAT_BY_TYPE = {ctype: fmt for fmt, ctype in imaging.CONTENT_TYPES.items()}


@dataclasses.dataclass(frozen=True)
class ResizedImage:
    """The resizer's output."""

    data: bytes
    width: int
    height: int
    format: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer: the image as base64 text (not a ``"b'...'"`` repr)."""
        return {"image": base64.b64encode(self.data).decode("ascii"), "width": self.width,
                "height": self.height, "format": self.format}


def resize_image(data: bytes, options: ResizeOptions, limits: imaging.Limits,
                 max_output_bytes: int = MAX_OUTPUT_BYTES) -> ResizedImage:
    """Decode, resize and re-encode one image.

    Args:
        data: the encoded upload.
        options: the validated request.
        limits: what is accepted of the upload and of the resize (see :func:`imaging.inspect`).
        max_output_bytes: the largest encoded answer.

    Raises:
        InvalidImageError, ImageTooLargeError: as for prediction, or the encoded result is
            over ``max_output_bytes`` (it would not fit in a Lambda response).
    """
    plan = imaging.plan_resize(options.mode, options.width, options.height, upscale=True)
    resized, _info = imaging.prepare(data, plan, limits)
    encoded = imaging.encode(resized, options.format, options.quality)
    if len(encoded) > max_output_bytes:
        raise ImageTooLargeError(
            f"The resized image is {len(encoded)} bytes; at most {max_output_bytes} fit in a "
            "response. Ask for a smaller width and height, JPEG, or a lower quality.")
    return ResizedImage(encoded, resized.shape[1], resized.shape[0], options.format)
