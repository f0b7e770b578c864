"""Shrinking on the client: the image sagegate's server would make of an upload, made here.

A phone photo travels as about 2.8 MB only for the server to shrink it to 341x256. The client
shrinks it instead, by the model's own rule (``GET /models/{name}``'s ``image`` block), with the
server's own code: decoded as the server decodes it (a large JPEG at the reduced scale
:func:`chalicelib.images.imaging.reduction_for` allows, EXIF orientation applied), then
:func:`chalicelib.images.imaging.resize` with its :class:`~chalicelib.images.sizing.ResizePlan`
(``shorter-side`` S: area averaging until the shorter side is exactly S, never enlarging;
``fill``/``fit``/``stretch``: the model's input box). Encoded losslessly, that is exactly the
image the server would have made of the original, so the model is given the same tensor.

The original is sent unchanged when the server would forward it untouched
(:func:`chalicelib.images.imaging.can_pass_through`), when the client cannot read it (the server
then answers with its own error code), when the server would enlarge it, and when shrinking would
not make it smaller.

The encoding was chosen by measurement (``python -m bench --part clients``; ``bench/README.md``):
:data:`DEFAULT_ENCODING` is lossless WebP, the smallest upload that keeps the server's promise
(same top-1, top-5 within 0.03; measured, exactly the same). JPEG is not faithful even at quality
95 without chroma subsampling. PNG is larger but costs less CPU: on a fast uplink it is the
quicker end to end (``Client(encoding="png")``, ``sagegate predict --encoding png``).
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np

from chalicelib.core import media
from chalicelib.core.errors import SagegateError
from chalicelib.core.media import JPEG_SOI, PNG_SIGNATURE, ImageFormat, MediaType
from chalicelib.images import imaging, jpegscan, sizing
from chalicelib.images.probe import ImageInfo, probe

__all__ = ["DEFAULT_ENCODING", "OCTET_STREAM", "Encoding", "ShrinkRule", "content_type_of",
           "encode", "shrink"]

OCTET_STREAM = "application/octet-stream"


class Encoding(enum.StrEnum):

    PNG = "png"
    """Lossless PNG, zlib level 9 with libpng's row filters."""
    WEBP = "webp"
    JPEG = "jpeg"
    """JPEG at quality 95 with 4:4:4 chroma: not faithful (see above)."""


DEFAULT_ENCODING = Encoding.WEBP
_CONTENT_TYPES = {Encoding.PNG: "image/png", Encoding.WEBP: "image/webp",
                  Encoding.JPEG: "image/jpeg"}
_JPEG_444 = getattr(cv2, "IMWRITE_JPEG_SAMPLING_FACTOR_444", 0x111111)


@dataclasses.dataclass(frozen=True)
class ShrinkRule:
    """What an image model's server does to an upload, as ``GET /models/{name}`` says it.

    Attributes:
        passthrough: whether the server forwards small upright JPEGs untouched.
        max_pixels: the largest image the server decodes.
    """

    plan: sizing.ResizePlan
    passthrough: bool = True
    max_pixels: int = 40_000_000

    @classmethod
    def from_model(cls, document: Mapping[str, Any]) -> ShrinkRule | None:
        """The rule from a model's description or its ``image`` block; None for a model that
        takes no images."""
        image = document.get("image", document)
        if not isinstance(image, Mapping) or "resize" not in image:
            return None
        resize = image["resize"]
        plan = sizing.plan_resize(str(resize["mode"]), int(resize["width"]),
                                   int(resize["height"]), int(resize["shorter_side"]),
                                   bool(resize.get("upscale", False)))
        return cls(plan, bool(image.get("passthrough", True)),
                   int(image.get("max_pixels", 40_000_000)))


def content_type_of(data: bytes) -> str:
    if data[:3] == JPEG_SOI:
        return str(MediaType.JPEG)
    if data[:8] == PNG_SIGNATURE:
        return str(MediaType.PNG)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return str(MediaType.WEBP)
    return OCTET_STREAM


def encode(image: np.ndarray, encoding: Encoding) -> tuple[bytes, str]:
    if encoding == Encoding.PNG:
        params = [cv2.IMWRITE_PNG_COMPRESSION, 9]
    elif encoding == Encoding.WEBP:
        params = [cv2.IMWRITE_WEBP_QUALITY, 101]  # over 100: lossless
    else:
        params = [cv2.IMWRITE_JPEG_QUALITY, 95, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, _JPEG_444]
    ok, buffer = cv2.imencode("." + str(encoding), image, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode the image as {encoding}")
    return bytes(buffer.tobytes()), _CONTENT_TYPES[encoding]


def _enlarges(plan: sizing.ResizePlan, width: int, height: int) -> bool:
    if plan.mode == media.ResizeMode.STRETCH:
        return plan.width > width or plan.height > height
    if plan.mode == media.ResizeMode.SHORTER_SIDE:
        return plan.shorter_side > min(width, height)
    if plan.mode == media.ResizeMode.FILL:
        return max(plan.width / width, plan.height / height) > 1
    return min(plan.width / width, plan.height / height) > 1


def _sends_original(data: bytes, info: ImageInfo, rule: ShrinkRule) -> bool:
    plan = rule.plan
    if info.pixels > rule.max_pixels:
        return True  # the server's 413 says it best
    if rule.passthrough and imaging.can_pass_through(data, info, plan):
        return True
    if plan.upscale and _enlarges(plan, info.width, info.height):
        return True  # the server enlarges the original itself
    return plan.mode in (media.ResizeMode.SHORTER_SIDE, media.ResizeMode.STRETCH) and \
        plan.scaled_size(info.width, info.height) == (info.width, info.height)


def _decoded(data: bytes, info: ImageInfo, plan: sizing.ResizePlan) -> np.ndarray | None:
    """The image decoded as the server decodes it, or None for a file the server must judge (a
    truncated or corrupt JPEG, or one OpenCV cannot decode)."""
    reduction = imaging.reduction_for(info, plan.scaled_size(info.width, info.height))
    try:
        if info.format == ImageFormat.JPEG:
            jpegscan.check_complete(data)
        image = imaging.decode(data, info, reduction)
        if info.format == ImageFormat.JPEG:
            jpegscan.check_decoded(data, image, reduction)
    except SagegateError:
        return None
    return image


def shrink(data: bytes, rule: ShrinkRule | Mapping[str, Any],
           encoding: Encoding | str = DEFAULT_ENCODING) -> tuple[bytes, str]:
    """The bytes to upload for ``data`` under a model's ``rule`` (a :class:`ShrinkRule`, or the
    model's description), and their media type: the shrunk image, or the original unchanged (the
    module docstring says when)."""
    if not isinstance(rule, ShrinkRule):
        parsed = ShrinkRule.from_model(rule)
        if parsed is None:
            return data, content_type_of(data)
        rule = parsed
    try:
        info = probe(data)
    except SagegateError:
        return data, OCTET_STREAM  # not an image the server takes: it says why
    original = data, str(info.format.media_type)
    if _sends_original(data, info, rule):
        return original
    plan = dataclasses.replace(rule.plan, upscale=False)
    image = _decoded(data, info, plan)
    if image is None:
        return original
    encoded = encode(imaging.resize(image, plan), Encoding(encoding))
    return encoded if len(encoded[0]) < len(data) else original
