"""The resizer service (``POST /resize``): the 2018 companion service, done right.

Width and height mean what they say (``cv2.resize`` takes ``(width, height)``; the 2018 code
passed them swapped), bytes come back as real base64 or as binary, and output size is capped.
"""
from __future__ import annotations

import base64
import dataclasses
import math
from typing import Any

import numpy as np

from chalicelib.core.errors import ImageTooLargeError
from chalicelib.images import imaging
from chalicelib.images.sizing import Encoding, Limits, ResizeOptions, plan_resize

# Lambda answers at most 6 MB, and an image travels base64-encoded in that answer (binary
# bodies too: API Gateway decodes them), so the encoded image must stay under about 4.5 MB.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
MAX_OUTPUT_BYTES = (LAMBDA_RESPONSE_LIMIT - 16 * 1024) * 3 // 4
# No encoding of these formats is larger than the stored rows (3 bytes a pixel) plus a little:
# noise, the worst content, measured 3.006 bytes a pixel as PNG (zlib level 1); as JPEG
# quality 100, 1.98 (uniform noise) and 2.30 (each channel 0 or 255 at random); as WebP
# quality 100, 1.11 and 1.27 (OpenCV 5.0). An output whose stored rows fit is encoded at once;
# were one larger after all, the check of the encoded size still refuses it.
_WORST_BYTES_PER_PIXEL = 3
_WORST_OVERHEAD = 64 * 1024  # headers, a PNG row's filter byte, zlib's and WebP's framing
# Otherwise bands of 16 rows (a JPEG MCU's, a WebP macroblock's height) spread over the image,
# 1/SAMPLE_FRACTION of its rows, are encoded first, as one image, and their size scaled up: an
# output estimated over the limit by more than the estimate's error is refused before the
# whole of it is encoded (WebP quality 100 at 4096x4096 takes seconds: the README's
# ``POST /resize``).
_BAND_ROWS = 16
SAMPLE_FRACTION = 16
ESTIMATE_TOLERANCE = 1.25


@dataclasses.dataclass(frozen=True)
class ResizedImage:

    data: bytes
    width: int
    height: int
    format: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer: the image as base64 text (not the 2018 ``"b'...'"`` repr)."""
        return {"image": base64.b64encode(self.data).decode("ascii"), "width": self.width,
                "height": self.height, "format": self.format}


def resize_image(data: bytes, options: ResizeOptions, limits: Limits,
                 max_output_bytes: int = MAX_OUTPUT_BYTES) -> ResizedImage:
    """Decode, resize and re-encode one image.

    Raises:
        InvalidImageError, ImageTooLargeError: as for prediction, or the encoded result is
            over ``max_output_bytes`` (it would not fit in a Lambda response).
    """
    plan = plan_resize(options.mode, options.width, options.height, upscale=True)
    resized, _info = imaging.prepare(data, plan, limits)
    estimate = estimated_size(resized, options.encoding, max_output_bytes)
    if estimate > max_output_bytes * ESTIMATE_TOLERANCE:
        raise _too_large(f"would be about {estimate} bytes", resized, max_output_bytes)
    encoded = imaging.encode(resized, options.encoding)
    if len(encoded) > max_output_bytes:
        raise _too_large(f"is {len(encoded)} bytes", resized, max_output_bytes)
    return ResizedImage(encoded, resized.shape[1], resized.shape[0], str(options.format))


def worst_case_size(width: int, height: int) -> int:
    """The most bytes any of /resize's encodings can take for an image of this size."""
    return width * height * _WORST_BYTES_PER_PIXEL + _WORST_OVERHEAD


def estimated_size(image: np.ndarray, encoding: Encoding, max_output_bytes: int) -> int:
    """What encoding ``image`` will take, known before encoding all of it: the worst case
    when that fits, else the sampled bands' size scaled to the whole."""
    height, width = image.shape[:2]
    worst = worst_case_size(width, height)
    if worst <= max_output_bytes:
        return worst
    bands = max(1, height // (SAMPLE_FRACTION * _BAND_ROWS))
    starts = np.linspace(0, max(0, height - _BAND_ROWS), bands).astype(int)
    sample = np.concatenate([image[start:start + _BAND_ROWS] for start in starts])
    return len(imaging.encode(sample, encoding)) * height // sample.shape[0]


def _too_large(what: str, image: np.ndarray, limit: int) -> ImageTooLargeError:
    height, width = image.shape[:2]
    # what the image would compress to at another size is unknown (a smaller one is less
    # upscaled, so denser): the size offered is one whose worst case fits
    pixels = max(1, (limit - _WORST_OVERHEAD) // _WORST_BYTES_PER_PIXEL)
    scale = min(1.0, math.sqrt(pixels / (width * height)))
    fits = f"{max(1, int(width * scale))}x{max(1, int(height * scale))}"
    return ImageTooLargeError(
        f"The resized image {what}; at most {limit} bytes fit in a response. Ask for a smaller "
        f"width and height ({fits} or less always fits; larger sizes fit when the image "
        "compresses well), JPEG, or a lower quality.")
