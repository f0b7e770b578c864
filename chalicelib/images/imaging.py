"""Pure OpenCV image handling: probe the header, decode within limits, resize, encode.

Nothing here touches the network. The probe reads only the container header, so an image
over the pixel limit is refused before any large allocation; the decoder then uses libjpeg's
scaled DCT decoding whenever the reduced image still covers the size the resize will produce.
"""
from __future__ import annotations

import math
import struct
import zlib

import cv2
import numpy as np

from chalicelib.core.errors import ImageTooLargeError, InvalidImageError, InvalidParameterError
from chalicelib.core.media import JPEG_EOI, PNG_SIGNATURE, ImageFormat, ResizeMode
from chalicelib.images import jpegscan
from chalicelib.images.probe import ImageInfo, probe
from chalicelib.images.sizing import Encoding, Limits, ResizePlan, scaled_length

_REDUCED_FLAGS = ((8, cv2.IMREAD_REDUCED_COLOR_8), (4, cv2.IMREAD_REDUCED_COLOR_4),
                  (2, cv2.IMREAD_REDUCED_COLOR_2))
# libjpeg's scaled IDCT is not a box filter. Measured against a full decode on real photos
# (EfficientNet-Lite0, top-5 probabilities): a reduced image that barely covers the target
# moved them by up to 0.06; one at least twice the target, so that the final area resize
# still averages 2x2 pixels or more, by at most 0.02, and still decodes a fraction of the pixels.
REDUCED_DECODE_MARGIN = 2.0


def check_pixels(info: ImageInfo, max_pixels: int) -> None:
    """Refuse (ImageTooLargeError) an image whose header declares over ``max_pixels``."""
    if info.width * info.height > max_pixels:
        raise ImageTooLargeError(
            f"The image is {info.width}x{info.height} ({info.width * info.height} pixels); the "
            f"limit is {max_pixels} pixels. Send a smaller image."
        )


def check_geometry(info: ImageInfo, plan: ResizePlan, limits: Limits) -> None:
    """Refuse, from the header alone, an image too big to decode, too elongated, with too
    many JPEG scans, or whose resize would produce an image over the pixel limit.

    Raises:
        ImageTooLargeError: over ``max_pixels``, decoded or resized.
        InvalidImageError: over ``max_aspect_ratio`` or ``max_jpeg_scans``.
    """
    check_pixels(info, limits.max_pixels)
    ratio = max(info.width, info.height) / min(info.width, info.height)
    if ratio > limits.max_aspect_ratio:
        raise InvalidImageError(
            f"The image is {info.width}x{info.height}, an aspect ratio of {ratio:.1f}:1; at "
            f"most {limits.max_aspect_ratio:g}:1 is accepted. Crop it first.")
    produced = plan.allocated_pixels(info.width, info.height)
    if produced > limits.max_pixels:
        raise ImageTooLargeError(
            f"Resizing the {info.width}x{info.height} image would produce {produced} pixels; "
            f"the limit is {limits.max_pixels}. Ask for a smaller size.")
    if info.scans > limits.max_jpeg_scans:
        raise InvalidImageError(
            f"The JPEG image has {info.scans} scans; at most {limits.max_jpeg_scans} are "
            "accepted. Re-encode it (baseline, or a standard progressive encoder).")


def inspect(data: bytes, plan: ResizePlan, limits: Limits) -> ImageInfo:
    """Probe an upload and check it against every limit before any pixel is decoded.

    Raises:
        InvalidImageError: not a supported, well-formed image; too elongated; a progressive
            JPEG with scans missing (unless ``limits.allow_corrupt``).
        ImageTooLargeError: over the pixel limit, decoded or resized.
    """
    info = probe(data)
    check_geometry(info, plan, limits)
    if info.progressive and not limits.allow_corrupt:
        # a decode cannot show that a scan is missing (each one refines every block); for
        # baseline files the marker walk waits for a sign of damage (jpegscan.check_decoded),
        # so a large upload's decode path pays nothing for it
        jpegscan.check_complete(data)
    return info


def reduction_for(info: ImageInfo, needed: tuple[int, int],
                  margin: float = REDUCED_DECODE_MARGIN) -> int:
    """The largest libjpeg scale denominator (1, 2, 4, 8) for decoding this image: the
    reduced image must still be ``margin`` times the resize's output (see
    :data:`REDUCED_DECODE_MARGIN`). Only JPEG decodes at reduced scale natively."""
    if info.format != ImageFormat.JPEG:
        return 1
    for denominator, _ in _REDUCED_FLAGS:
        if (math.ceil(info.width / denominator) >= needed[0] * margin
                and math.ceil(info.height / denominator) >= needed[1] * margin):
            return denominator
    return 1


def decode(data: bytes, info: ImageInfo, reduction: int = 1) -> np.ndarray:
    """Decode to 8-bit, 3-channel BGR, applying EXIF orientation (InvalidImageError when
    it does not decode). Grey, alpha and 16-bit inputs come out as 8-bit BGR, alpha dropped as
    the endpoint's own decoder would drop it."""
    flag = dict(_REDUCED_FLAGS).get(reduction, cv2.IMREAD_COLOR)
    image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flag)
    if image is None:
        raise InvalidImageError(f"The {info.format.upper()} image could not be decoded.")
    return image


def resize(image: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """Resize ``image`` following ``plan``: area interpolation to shrink, cubic to enlarge."""
    height, width = image.shape[:2]
    if plan.mode == ResizeMode.FILL:
        return _fill(image, plan)
    image = _scale(image, plan.scaled_size(width, height))
    if plan.mode == ResizeMode.FIT:
        return _letterbox(image, plan.width, plan.height)
    return image


def _scale(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    height, width = image.shape[:2]
    if size == (width, height):
        return image
    shrinking = size[0] <= width and size[1] <= height
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC
    return cv2.resize(image, size, interpolation=interpolation)


def _fill(image: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """Scale to cover the box and centre-crop, cropping first: the intermediate image is never
    larger than the box, however elongated the input (a 20000x1 strip filled to 224x224 would
    otherwise be scaled to 4480000x224 before the crop)."""
    rows, cols = image.shape[:2]
    scale = plan.fill_scale(cols, rows)
    crop = _centre_crop(image, min(cols, scaled_length(plan.width, 1 / scale)),
                        min(rows, scaled_length(plan.height, 1 / scale)))
    size = (min(plan.width, scaled_length(cols, scale)),
            min(plan.height, scaled_length(rows, scale)))
    return np.ascontiguousarray(_scale(crop, size))


def _centre_crop(image: np.ndarray, width: int, height: int) -> np.ndarray:
    rows, cols = image.shape[:2]
    width, height = min(width, cols), min(height, rows)
    top, left = (rows - height) // 2, (cols - width) // 2
    return image[top:top + height, left:left + width]


def _letterbox(image: np.ndarray, width: int, height: int) -> np.ndarray:
    rows, cols = image.shape[:2]
    top, left = (height - rows) // 2, (width - cols) // 2
    return cv2.copyMakeBorder(image, top, height - rows - top, left, width - cols - left,
                              cv2.BORDER_CONSTANT, value=(0, 0, 0))


def encode(image: np.ndarray, encoding: Encoding) -> bytes:
    """Encode a BGR ``uint8`` image (InvalidParameterError for an unknown format)."""
    if encoding.format == ImageFormat.PNG:
        return encode_png(image, encoding.png_compression)
    if encoding.format == ImageFormat.JPEG:
        params = [cv2.IMWRITE_JPEG_QUALITY, encoding.quality]
    elif encoding.format == ImageFormat.WEBP:
        params = [cv2.IMWRITE_WEBP_QUALITY, encoding.quality]
    else:
        raise InvalidParameterError(f'"format" must be one of: {", ".join(ImageFormat)}.')
    return _imencode(image, "." + encoding.format, params)


def _imencode(image: np.ndarray, extension: str, params: list[int]) -> bytes:
    ok, buffer = cv2.imencode(extension, image, params)
    if not ok:
        raise InvalidImageError(f"The image could not be encoded as {extension[1:]}.")
    return bytes(buffer.tobytes())


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind))))


def encode_png(image: np.ndarray, level: int = 0) -> bytes:
    """Lossless PNG of a BGR (or grey) ``uint8`` image at zlib ``level`` (0-9).

    Level 0, what sagegate sends the endpoint, is written directly, rows stored unfiltered:
    libpng spends longer choosing row filters even at level 0 than storing takes, and a stored
    341x256 image (about 260 KB) is far inside InvokeEndpoint's 6 MB. At levels 1-9 the
    filters pay for themselves, and libpng writes it.
    """
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or \
            (image.ndim == 3 and image.shape[2] != 3):
        raise ValueError("encode_png takes 8-bit grey or BGR images")
    if not 0 <= level <= 9:
        raise ValueError(f"PNG compression level {level} is not 0-9")
    if level:
        return _imencode(image, ".png", [cv2.IMWRITE_PNG_COMPRESSION, level])
    height, width = image.shape[:2]
    channels = 1 if image.ndim == 2 else 3
    rows = np.empty((height, width * channels + 1), np.uint8)
    rows[:, 0] = 0  # filter type None for every row
    pixels = image if channels == 1 else image[:, :, ::-1]  # PNG stores RGB
    rows[:, 1:] = pixels.reshape(height, width * channels)
    header = struct.pack(">IIBBBBB", width, height, 8, 0 if channels == 1 else 2, 0, 0, 0)
    return b"".join((PNG_SIGNATURE, _png_chunk(b"IHDR", header),
                     _png_chunk(b"IDAT", zlib.compress(rows.data, 0)),
                     _png_chunk(b"IEND", b"")))


def can_pass_through(data: bytes, info: ImageInfo, plan: ResizePlan) -> bool:
    """Whether sending the upload untouched is as faithful as, and cheaper than, resizing it.

    True for a complete JPEG that no EXIF block rotates (the endpoint's decoder may read
    another of several blocks than OpenCV does), under a ``shorter-side`` plan when no
    reduced-scale decode applies: sagegate would then decode every pixel as the endpoint
    will, re-encode, and send more bytes than the upload.
    """
    return (plan.mode == ResizeMode.SHORTER_SIDE and info.format == ImageFormat.JPEG
            and info.upright
            and data.endswith(JPEG_EOI)
            and reduction_for(info, plan.scaled_size(info.width, info.height)) == 1)


def check_forwardable(data: bytes, info: ImageInfo, limits: Limits) -> None:
    """Check a JPEG that goes to the endpoint untouched: its markers, then its data at 1/8 scale.

    The marker walk reads no pixel; only a decode shows a baseline file cut short with an
    EOI appended. At 1/8 scale libjpeg still reads every bit of the data but computes only
    each block's DC term, against the full decode, resize and encode passthrough saves.
    """
    if limits.allow_corrupt:
        return
    if not info.progressive:  # (inspect walked the progressive ones)
        jpegscan.check_complete(data)
    image = decode(data, info, 8)
    jpegscan.check_decoded(data, image, 8)


def prepare(data: bytes, plan: ResizePlan, limits: Limits) -> tuple[np.ndarray, ImageInfo]:
    """Probe, check limits (as :func:`inspect`), decode at the cheapest sufficient scale
    and resize; answers the resized image and the original's header."""
    info = inspect(data, plan, limits)
    return decode_and_resize(data, info, plan, limits), info


def decode_and_resize(data: bytes, info: ImageInfo, plan: ResizePlan,
                      limits: Limits) -> np.ndarray:
    """Decode an inspected image at the cheapest sufficient scale, then resize it.
    InvalidImageError also when (unless ``limits.allow_corrupt``) the decoder ran out of JPEG
    data."""
    reduction = reduction_for(info, plan.scaled_size(info.width, info.height))
    image = decode(data, info, reduction)
    if info.format == ImageFormat.JPEG and not limits.allow_corrupt:
        jpegscan.check_decoded(data, image, reduction)
    return resize(image, plan)
