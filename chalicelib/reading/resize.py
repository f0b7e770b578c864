"""Read a ``/resize`` request: the upload, the output's size, and its format chosen against
the Accept header (RFC 9110 negotiation, as API Gateway delivers binary answers)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from chalicelib.core.errors import ImageTooLargeError, InvalidParameterError, NotAcceptableError
from chalicelib.core.media import BINARY_TYPES, RESIZER_MODES, ImageFormat, MediaType, ResizeMode
from chalicelib.images.sizing import MAX_SIDE, ResizeOptions
from chalicelib.reading import negotiation
from chalicelib.reading.bodies import read_upload
from chalicelib.reading.options import HttpRequest, Kind, parse_positive_int, read_options

RESIZE_OPTIONS = {"width": Kind.INT, "height": Kind.INT, "mode": Kind.TEXT,
                  "format": Kind.TEXT, "quality": Kind.INT}


@dataclasses.dataclass(frozen=True)
class ResizeRequest:
    """A ``/resize`` request, read: the upload and its validated options."""

    image: bytes
    options: ResizeOptions


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


def _required_side(fields: Mapping[str, Any], name: str) -> int:
    if fields.get(name) is None:
        raise InvalidParameterError(f'"{name}" is required.')
    return parse_positive_int(name, fields[name], maximum=MAX_SIDE)


def negotiate_image(fmt: str | None, accept: str | None) -> tuple[ImageFormat, bool]:
    """Choose an image answer's format and whether to send it binary (RFC 9110 negotiation):
    True to answer the image itself, False JSON with base64.

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
