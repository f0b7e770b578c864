"""Media types and image formats: the one home of every name sagegate reads or sends.

Like the SageMaker inference toolkit's ``content_types`` module: the request side (what a
client may upload), the endpoint side (what an endpoint is sent and answers) and the image
formats, with the maps between them.
"""
from __future__ import annotations

import enum


class MediaType(enum.StrEnum):
    """The media types sagegate reads, sends or answers."""

    JSON = "application/json"
    JSONLINES = "application/jsonlines"
    CSV = "text/csv"
    X_IMAGE = "application/x-image"
    """SageMaker's "any image" type: the built-in image classifier reads JPEG and PNG."""
    OCTET_STREAM = "application/octet-stream"
    JPEG = "image/jpeg"
    PNG = "image/png"
    WEBP = "image/webp"


class ImageFormat(enum.StrEnum):
    """The image formats sagegate decodes and encodes (the names clients use in ``format``)."""

    JPEG = "jpeg"
    PNG = "png"
    WEBP = "webp"

    @property
    def media_type(self) -> MediaType:
        """The image's media type (``image/jpeg`` ...)."""
        return MediaType(f"image/{self.value}")

    @classmethod
    def for_media_type(cls, media_type: str) -> ImageFormat | None:
        """The format an ``image/*`` media type names, or None."""
        return _FORMAT_FOR_TYPE.get(media_type)


_FORMAT_FOR_TYPE: dict[str, ImageFormat] = {fmt.media_type: fmt for fmt in ImageFormat}

# What a client may send as the raw request body (options then come in the query string).
UPLOAD_TYPES = (MediaType.JPEG, MediaType.PNG, MediaType.WEBP, MediaType.X_IMAGE,
                MediaType.OCTET_STREAM)
# Every request type: JSON (base64 or a data URL in a field) and the raw uploads.
REQUEST_TYPES = (MediaType.JSON, *UPLOAD_TYPES)
# Common misspellings of a media type, read as the type meant.
ALIASES = {"image/jpg": MediaType.JPEG, "image/pjpeg": MediaType.JPEG}
# What app.py registers as binary with Chalice and API Gateway: the upload types, their
# misspellings, and "image/*", so that /resize can answer an image to `Accept: image/*`
# (Chalice sends a binary body only when the Accept header names one of these, or */*).
BINARY_TYPES = (*UPLOAD_TYPES, *ALIASES, "image/*")
# What an image endpoint may be sent, and may answer.
ENDPOINT_IMAGE_TYPES = (MediaType.X_IMAGE, MediaType.JPEG, MediaType.PNG)
ENDPOINT_ANSWER_TYPES = (MediaType.JSON, MediaType.JSONLINES)
# Endpoints told they may receive any image (or a JPEG) are sent a JPEG upload untouched.
PASSTHROUGH_TYPES = (MediaType.X_IMAGE, MediaType.JPEG)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8\xff"
JPEG_EOI = b"\xff\xd9"


def is_binary(content_type: str) -> bool:
    """Whether an answer of this type is bytes to the API (not text): images and octets."""
    kind = content_type.split(";", 1)[0].strip().lower()  # (bare: its aliases are images)
    return kind.startswith("image/") or kind in (MediaType.OCTET_STREAM, "application/x-npy")


def bare(content_type: str | None, default: str = MediaType.JSON) -> str:
    """The bare, lower-cased media type of a Content-Type header (``default`` if absent); known
    misspellings (``image/jpg``) come back as the type meant."""
    if not content_type:
        return default
    kind = content_type.split(";", 1)[0].strip().lower()
    return ALIASES.get(kind, kind)


class ResizeMode(enum.StrEnum):
    """How an image is brought to the size a model or a client asked for."""

    SHORTER_SIDE = "shorter-side"
    """Scale so the shorter side is ``shorter_side`` (the endpoint crops; the ImageNet rule)."""
    FILL = "fill"
    """Scale to cover ``width`` x ``height``, then centre-crop."""
    FIT = "fit"
    """Scale to fit inside ``width`` x ``height``, then pad (letterbox)."""
    STRETCH = "stretch"
    """Scale each side to ``width`` and ``height``."""


MODES = tuple(ResizeMode)
# What /resize offers: an exact output size (shorter-side is a model's preprocessing rule).
RESIZER_MODES = (ResizeMode.STRETCH, ResizeMode.FIT, ResizeMode.FILL)
