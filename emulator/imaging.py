"""Image preprocessing of SageMaker's built-in image classifier, in one place.

decode (EXIF orientation honoured) -> RGB -> shorter side to ``resize`` -> centre crop
``crop`` -> ``(x - mean) / std`` as float32 -> CHW -> a batch of one.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

DEFAULT_MAX_PIXELS = 50_000_000
"""Decoded pixels allowed by default: 150 MB of RGB, a 50-megapixel photo."""


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
    """

    resize: int = 256
    crop: int = 224
    mean: tuple[float, float, float] = (127.0, 127.0, 127.0)
    std: tuple[float, float, float] = (128.0, 128.0, 128.0)
    max_pixels: int = DEFAULT_MAX_PIXELS


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
        ImageError: the format is not recognised or the header is broken.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Image.DecompressionBombError as error:
        raise ImageError("image has too many pixels") from error
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise ImageError("image format not recognised") from error
    return int(width), int(height)


def decode_rgb(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decodes an image to an RGB ``uint8`` array, refusing decompression bombs.

    Args:
        data: the encoded image (JPEG, PNG, WebP ...).
        max_pixels: the most pixels the header may announce.

    Returns:
        A ``[H, W, 3]`` array, rotated as its EXIF orientation says.

    Raises:
        ImageError: empty, unrecognised, too large or undecodable.
    """
    if not data:
        raise ImageError("empty payload")
    width, height = probe_size(data)
    if width < 1 or height < 1:
        raise ImageError("image has no pixels")
    if width * height > max_pixels:
        raise ImageError(f"image of {width}x{height} pixels exceeds {max_pixels} pixels")
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ImageError("image could not be decoded")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def resize_shorter(image: np.ndarray, target: int) -> np.ndarray:
    """Scales an image so that its shorter side is ``target`` pixels, keeping the aspect.

    Args:
        image: ``[H, W, C]``.
        target: the new length of the shorter side.

    Returns:
        The scaled image (INTER_AREA when shrinking, INTER_LINEAR when enlarging).
    """
    height, width = image.shape[:2]
    scale = target / min(height, width)
    if width <= height:
        size = (target, max(target, round(height * scale)))
    else:
        size = (max(target, round(width * scale)), target)
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
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
        ImageError: the image is refused (see :func:`decode_rgb`).
    """
    image = decode_rgb(data, spec.max_pixels)
    square = center_crop(resize_shorter(image, spec.resize), spec.crop)
    return normalize(square, spec)[np.newaxis]
