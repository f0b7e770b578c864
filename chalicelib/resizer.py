"""The resizer service (``POST /resize``): the 2018 companion service, done right.

Width and height mean what they say (``cv2.resize`` takes ``(width, height)``; the 2018 code
passed them swapped), bytes come back as real base64 or as binary, and output size is capped.
"""
from __future__ import annotations

import base64
import dataclasses
from typing import Any

from chalicelib import imaging
from chalicelib.errors import ImageTooLargeError
from chalicelib.imaging import ResizeMode
from chalicelib.media import ImageFormat

MAX_SIDE = 8192
# Lambda answers at most 6 MB, and an image travels base64-encoded in that answer (binary
# bodies too: API Gateway decodes them), so the encoded image must stay under about 4.5 MB.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
MAX_OUTPUT_BYTES = (LAMBDA_RESPONSE_LIMIT - 16 * 1024) * 3 // 4
# /resize's PNG: libpng's row filters at zlib level 1 (a photo's PNG is several times smaller
# than stored rows, and the answer must fit in MAX_OUTPUT_BYTES).
PNG_COMPRESSION = 1


@dataclasses.dataclass(frozen=True)
class ResizeOptions:
    """A resize, as :func:`chalicelib.options.read_resize` validated it.

    Attributes:
        width, height: the output size.
        mode: one of :data:`~chalicelib.imaging.RESIZER_MODES`.
        format: the output format.
        quality: JPEG and WebP quality, 1-100 (PNG is lossless).
        binary: answer the image itself rather than JSON with base64.
    """

    width: int
    height: int
    mode: str = ResizeMode.STRETCH
    format: ImageFormat = ImageFormat.JPEG
    quality: int = 90
    binary: bool = False

    @property
    def content_type(self) -> str:
        """The media type of the output image."""
        return ImageFormat(self.format).media_type

    @property
    def encoding(self) -> imaging.Encoding:
        """How the output is encoded."""
        return imaging.Encoding(ImageFormat(self.format), self.quality, PNG_COMPRESSION)


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
    encoded = imaging.encode(resized, options.encoding)
    if len(encoded) > max_output_bytes:
        raise ImageTooLargeError(
            f"The resized image is {len(encoded)} bytes; at most {max_output_bytes} fit in a "
            "response. Ask for a smaller width and height, JPEG, or a lower quality.")
    return ResizedImage(encoded, resized.shape[1], resized.shape[0], str(options.format))
