"""Image preprocessing of SageMaker's built-in image classifier, in one place.

decode (EXIF orientation honoured) -> RGB -> shorter side to ``resize`` -> centre crop
``crop`` -> ``(x - mean) / std`` as float32 -> CHW -> a batch of one.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

DEFAULT_MAX_PIXELS = 50_000_000
"""Decoded pixels allowed by default: 150 MB of RGB, a 50-megapixel photo."""
DEFAULT_MAX_ASPECT_RATIO = 32.0
"""Longer side over shorter side allowed by default (a 32:1 panorama still passes)."""
DEFAULT_MAX_RESIZED_PIXELS = 4_194_304
"""Pixels the shorter-side resize may produce by default (2048x2048; 256x8192 at 32:1)."""
LARGE_DECODE_PIXELS = 4_000_000
"""Images above this many pixels decode a few at a time, so concurrency cannot multiply the
largest allowed decode into an unbounded amount of memory."""
CONCURRENT_LARGE_DECODES = 2
FORMATS = frozenset({"JPEG", "MPO", "PNG", "WEBP", "BMP"})
"""What the built-in image classifier decodes (Pillow's names); anything else is refused."""
_LARGE_DECODES = threading.BoundedSemaphore(CONCURRENT_LARGE_DECODES)


class ImageError(ValueError):
    """The payload is not an image the classifier accepts."""


@dataclass(frozen=True)
class PreprocessSpec:
    """How an encoded image becomes the model's input.

    Attributes:
        resize: the length the shorter side is scaled to.
        crop: the side of the centre square kept (the model's input size).
        mean: per RGB channel, subtracted from 0..255 pixel values.
        std: per RGB channel, what the centred values are divided by.
        max_pixels: images with more pixels than this are refused before decoding.
        max_aspect_ratio: images whose longer side is more than this many times the shorter
            one are refused before decoding (the resize would make a huge strip).
        max_resized_pixels: images whose shorter-side resize would produce more pixels than
            this are refused before decoding.
    """

    resize: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = (127.0, 127.0, 127.0)
    std: tuple[float, float, float] = (128.0, 128.0, 128.0)
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_aspect_ratio: float = DEFAULT_MAX_ASPECT_RATIO
    max_resized_pixels: int = DEFAULT_MAX_RESIZED_PIXELS


def warm_up() -> None:
    """Registers every Pillow format plugin now rather than on the first odd payload."""
    Image.init()


def probe_size(data: bytes) -> tuple[int, int]:
    """Reads an image's size from its header without decoding the pixels.

    Args:
        data: the encoded image.

    Returns:
        ``(width, height)``.

    Raises:
        ImageError: the format is not one the classifier decodes, or the header is broken.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            kind = image.format
    except Image.DecompressionBombError as error:
        raise ImageError("image has too many pixels") from error
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise ImageError("image format not recognised") from error
    if kind not in FORMATS:
        raise ImageError(f"image format {kind} not supported; send JPEG, PNG, WebP or BMP")
    return int(width), int(height)


def resized_size(width: int, height: int, target: int) -> tuple[int, int]:
    """The ``(width, height)`` that :func:`resize_shorter` gives an image of this size."""
    scale = target / min(height, width)
    if width <= height:
        return target, max(target, round(height * scale))
    return max(target, round(width * scale)), target


def check_size(width: int, height: int, spec: PreprocessSpec) -> None:
    """Refuses, from the header's size alone, what would take too much memory or time.

    Args:
        width: the image's width in pixels.
        height: the image's height in pixels.
        spec: the limits and the resize target.

    Raises:
        ImageError: no pixels, too many pixels, too elongated, or a resize too large.
    """
    if width < 1 or height < 1:
        raise ImageError("image has no pixels")
    if width * height > spec.max_pixels:
        raise ImageError(f"image of {width}x{height} pixels exceeds {spec.max_pixels} pixels")
    ratio = max(width, height) / min(width, height)
    if ratio > spec.max_aspect_ratio:
        raise ImageError(
            f"image of {width}x{height} pixels has an aspect ratio of {ratio:.0f}:1, "
            f"over {spec.max_aspect_ratio:g}:1"
        )
    out_width, out_height = resized_size(width, height, spec.resize)
    if out_width * out_height > spec.max_resized_pixels:
        raise ImageError(
            f"image of {width}x{height} pixels would resize to {out_width}x{out_height}, "
            f"over {spec.max_resized_pixels} pixels"
        )


def decode_rgb(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decodes an image to an RGB ``uint8`` array, refusing decompression bombs.

    Args:
        data: the encoded image (JPEG, PNG, WebP, BMP).
        max_pixels: the most pixels the header may announce.

    Returns:
        A ``[H, W, 3]`` array, rotated as its EXIF orientation says.

    Raises:
        ImageError: empty, unrecognised, too large or undecodable.
    """
    spec = PreprocessSpec(max_pixels=max_pixels, max_aspect_ratio=float("inf"),
                          max_resized_pixels=2**62)  # fmt: skip
    return cv2.cvtColor(_decode_bgr(data, spec), cv2.COLOR_BGR2RGB)


def _decode_bgr(data: bytes, spec: PreprocessSpec) -> np.ndarray:
    if not data:
        raise ImageError("empty payload")
    width, height = probe_size(data)
    check_size(width, height, spec)
    buffer = np.frombuffer(data, dtype=np.uint8)
    if width * height <= LARGE_DECODE_PIXELS:
        image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
    else:
        with _LARGE_DECODES:
            image = cv2.imdecode(buffer, cv2.IMREAD_COLOR)
    if image is None:
        raise ImageError("image could not be decoded")
    return image


def resize_shorter(image: np.ndarray, target: int) -> np.ndarray:
    """Scales an image so that its shorter side is ``target`` pixels, keeping the aspect.

    Args:
        image: ``[H, W, C]``.
        target: the new length of the shorter side.

    Returns:
        The scaled image (INTER_AREA when shrinking, INTER_LINEAR when enlarging).
    """
    height, width = image.shape[:2]
    size = resized_size(width, height, target)
    interpolation = cv2.INTER_AREA if target < min(height, width) else cv2.INTER_LINEAR
    return cv2.resize(image, size, interpolation=interpolation)


def center_crop(image: np.ndarray, size: int) -> np.ndarray:
    """Keeps the centre ``size`` x ``size`` square of an image at least that large."""
    height, width = image.shape[:2]
    top = (height - size) // 2
    left = (width - size) // 2
    return image[top : top + size, left : left + size]


def normalize(image: np.ndarray, spec: PreprocessSpec) -> np.ndarray:
    """Scales ``uint8`` RGB values and moves channels first.

    Args:
        image: ``[H, W, 3]`` RGB.
        spec: supplies ``mean`` and ``std``.

    Returns:
        A contiguous ``[3, H, W]`` float32 array of ``(x - mean) / std``.
    """
    mean = np.asarray(spec.mean, dtype=np.float32)
    std = np.asarray(spec.std, dtype=np.float32)
    scaled = (image.astype(np.float32) - mean) / std
    return np.ascontiguousarray(scaled.transpose(2, 0, 1))


def preprocess(data: bytes, spec: PreprocessSpec) -> np.ndarray:
    """Turns an encoded image into the model's input batch.

    Args:
        data: the encoded image.
        spec: the preprocessing settings.

    Returns:
        A ``[1, 3, crop, crop]`` float32 array.

    Raises:
        ImageError: the image is refused (see :func:`check_size`) or undecodable.
    """
    # Resize and crop in OpenCV's BGR order, then swap to RGB: both act per channel, so the
    # result is the same, and the full-size image is never copied for the swap.
    square = center_crop(resize_shorter(_decode_bgr(data, spec), spec.resize), spec.crop)
    return normalize(cv2.cvtColor(square, cv2.COLOR_BGR2RGB), spec)[np.newaxis]
