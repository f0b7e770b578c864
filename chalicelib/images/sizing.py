"""The resize plan and the image options: what is asked of an image, checked without decoding it.

Light on purpose: request options and settings import this, and none of it needs OpenCV or numpy.
"""
from __future__ import annotations

import dataclasses

from chalicelib.core.errors import InvalidParameterError
from chalicelib.core.media import MODES, ImageFormat, ResizeMode

MAX_SIDE = 8192
# /resize's PNG: libpng's row filters at zlib level 1 (a photo's PNG is several times smaller
# than stored rows, and the answer must fit in MAX_OUTPUT_BYTES).
PNG_COMPRESSION = 1


@dataclasses.dataclass(frozen=True)
class ResizePlan:
    """How to resize one image: ``shorter-side`` (to ``shorter_side``), ``fill`` (scale then
    centre-crop), ``fit`` (letterbox) or ``stretch`` (to ``width`` x ``height``)."""

    mode: ResizeMode
    width: int = 224
    height: int = 224
    shorter_side: int = 256
    upscale: bool = False

    def scaled_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the image is scaled to before any crop or padding."""
        if self.mode == ResizeMode.STRETCH:
            sx, sy = self.width / width, self.height / height
            if not self.upscale:
                sx, sy = min(sx, 1.0), min(sy, 1.0)
            return scaled_length(width, sx), scaled_length(height, sy)
        scale = self._uniform_scale(width, height)
        if not self.upscale:
            scale = min(scale, 1.0)
        if self.mode == ResizeMode.FILL:  # never fall short of the crop box through rounding
            return (max(scaled_length(width, scale), min(self.width, width)),
                    max(scaled_length(height, scale), min(self.height, height)))
        return scaled_length(width, scale), scaled_length(height, scale)

    def allocated_pixels(self, width: int, height: int) -> int:
        """The largest image the resize allocates for a ``width`` x ``height`` input: the
        scaled image, or the target box (``fill`` crops before it scales, ``fit`` pads)."""
        if self.mode in (ResizeMode.FILL, ResizeMode.FIT):
            return self.width * self.height
        scaled_width, scaled_height = self.scaled_size(width, height)
        return scaled_width * scaled_height

    def fill_scale(self, width: int, height: int) -> float:
        """The smallest scale that covers the box (at most 1 unless upscaling)."""
        scale = max(self.width / width, self.height / height)
        return scale if self.upscale else min(scale, 1.0)

    def _uniform_scale(self, width: int, height: int) -> float:
        if self.mode == ResizeMode.SHORTER_SIDE:
            return self.shorter_side / min(width, height)
        if self.mode == ResizeMode.FILL:
            return max(self.width / width, self.height / height)
        return min(self.width / width, self.height / height)


def plan_resize(mode: str, width: int, height: int, shorter_side: int = 256,
                upscale: bool = False) -> ResizePlan:
    """A :class:`ResizePlan` (InvalidParameterError for an unknown mode)."""
    if mode not in MODES:
        raise InvalidParameterError(f'"mode" must be one of: {", ".join(MODES)}.')
    return ResizePlan(ResizeMode(mode), width, height, shorter_side, upscale)


def scaled_length(length: int, scale: float) -> int:
    return max(1, round(length * scale))


@dataclasses.dataclass(frozen=True)
class Limits:
    """What sagegate accepts of an image, checked on its header before anything is allocated.

    Attributes:
        max_pixels: decoded pixels, and pixels of any image the resize produces.
        max_jpeg_scans: each scan is a decoder pass over the whole image, so the work is
            scans x pixels; real progressive files have 6 to about 20.
    """

    max_pixels: int = 40_000_000
    max_aspect_ratio: float = 20.0
    allow_corrupt: bool = False
    max_jpeg_scans: int = 64


@dataclasses.dataclass(frozen=True)
class Encoding:
    """How an image is encoded: ``quality`` 1-100 for JPEG and WebP; ``png_compression``
    0-9, 0 storing the rows (what the endpoint is sent, fastest), 1-9 libpng's filters."""

    format: ImageFormat = ImageFormat.JPEG
    quality: int = 90
    png_compression: int = 0


@dataclasses.dataclass(frozen=True)
class ResizeOptions:
    """A resize, as :func:`chalicelib.reading.resize.read_resize` validated it (``binary``:
    answer the image itself rather than JSON with base64)."""

    width: int
    height: int
    mode: str = ResizeMode.STRETCH
    format: ImageFormat = ImageFormat.JPEG
    quality: int = 90
    binary: bool = False

    @property
    def content_type(self) -> str:
        return ImageFormat(self.format).media_type

    @property
    def encoding(self) -> Encoding:
        return Encoding(ImageFormat(self.format), self.quality, PNG_COMPRESSION)
