"""Read an image's format and size from its header alone, without decoding pixels.

This is what lets sagegate refuse a decompression bomb (a small file declaring a huge image)
before OpenCV allocates anything. JPEG, PNG and WebP are supported; JPEG's EXIF orientation is
read so that the reported size is the size as displayed.
"""
from __future__ import annotations

import dataclasses
import re
import struct
from collections.abc import Iterator

import numpy as np

from chalicelib.core.errors import InvalidImageError
from chalicelib.core.media import JPEG_EOI, JPEG_SOI, PNG_SIGNATURE, ImageFormat

# JPEG's markers (ITU-T T.81, table B.1): the one table of them, read by jpegscan too
SOF = frozenset({*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC),
                 *range(0xCD, 0xD0)})  # start of frame, every coding process (not DHT/JPG/DAC)
SOF_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
DHT, DAC, DQT, DRI, DNL, SOS = 0xC4, 0xCC, 0xDB, 0xDD, 0xDC, 0xDA
SOI, EOI, COM, APP1 = 0xD8, 0xD9, 0xFE, 0xE1
APPN = frozenset(range(0xE0, 0xF0))
RESTARTS = frozenset(range(0xD0, 0xD8))
STANDALONE = frozenset({0x01, SOI, EOI, *RESTARTS})  # the markers without a length
TRUNCATED = "The JPEG image is truncated"
CORRUPT = "The JPEG image has corrupt data"
_ORIENTATION_TAG = 0x0112
_LONG = 4  # the TIFF type of a 32-bit value
# an IFD entry: tag, type, count, then the value (a SHORT in its first two bytes)
_IFD_ENTRY = np.dtype({"names": ["tag", "type", "count", "short", "value"],
                       "formats": ["u2", "u2", "u4", "u2", "u4"],
                       "offsets": [0, 2, 4, 8, 8], "itemsize": 12})
_MAX_ORIENTATION_TAGS = 16  # one is normal; past a few, more tell nothing new
_FILL = re.compile(rb"\xff+")
# a real JPEG has a few dozen markers (APPn, tables, scans); a file with more is hostile
MAX_JPEG_MARKERS = 1000
_SUPPORTED = "Send a JPEG, PNG or WebP image."


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What an image's header says.

    Attributes:
        width, height: as displayed (EXIF orientation applied).
        scans: a JPEG's start-of-scan markers (0xFF is always stuffed in entropy-coded data,
            so every FF DA is one, an EXIF thumbnail's included); each is a decoder pass over
            the whole image. 0 for other formats.
        exif_orientations: every EXIF block's, in file order (OpenCV and Pillow apply the
            first block's, ``orientation``, and ignore the others).
    """

    format: ImageFormat
    width: int
    height: int
    orientation: int = 1
    progressive: bool = False
    scans: int = 0
    exif_orientations: tuple[int, ...] = ()

    @property
    def upright(self) -> bool:
        """No EXIF block declares a rotation or flip: no decoder, whichever block it reads,
        can show the image other than as stored."""
        return all(value == 1 for value in (self.orientation, *self.exif_orientations))

    @property
    def pixels(self) -> int:
        return self.width * self.height


def probe(data: bytes) -> ImageInfo:
    """Identify an image and read its size from the header (InvalidImageError: not a JPEG,
    PNG or WebP, or a malformed or truncated one)."""
    if data[:3] == JPEG_SOI:
        return _probe_jpeg(data)
    if data[:8] == PNG_SIGNATURE:
        return _probe_png(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _probe_webp(data)
    raise InvalidImageError(f"The data is not a supported image. {_SUPPORTED}")


def _checked(fmt: ImageFormat, width: int, height: int, orientation: int = 1,
             progressive: bool = False, scans: int = 0,
             declared: tuple[int, ...] = ()) -> ImageInfo:
    if width <= 0 or height <= 0:
        raise InvalidImageError(f"The {fmt.upper()} header declares an empty image.")
    if orientation in (5, 6, 7, 8):
        width, height = height, width
    return ImageInfo(fmt, width, height, orientation, progressive, scans, declared)


def _probe_png(data: bytes) -> ImageInfo:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise InvalidImageError("The PNG header is malformed.")
    width, height = struct.unpack(">II", data[16:24])
    if data.rfind(b"IEND") == -1:
        raise InvalidImageError("The PNG image is truncated (no IEND chunk).")
    return _checked(ImageFormat.PNG, width, height)


def _probe_webp(data: bytes) -> ImageInfo:
    (riff_size,) = struct.unpack("<I", data[4:8])
    if len(data) < riff_size + 8 or len(data) < 30:
        raise InvalidImageError("The WebP image is truncated.")
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
    elif chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
    else:
        raise InvalidImageError("The WebP header is malformed.")
    return _checked(ImageFormat.WEBP, width, height)


def _probe_jpeg(data: bytes) -> ImageInfo:
    size: tuple[int, int] | None = None
    blocks: list[list[int]] = []  # every EXIF block's orientations: the decoders apply the first
    progressive = False
    for marker, start, end in _jpeg_segments(data):
        if marker == APP1 and data[start:start + 6] == b"Exif\x00\x00":
            blocks.append(_exif_orientations(data[start + 6:end]))
        elif marker in SOF and end - start >= 5:
            height, width = struct.unpack(">HH", data[start + 1:start + 5])
            size, progressive = (width, height), marker in SOF_PROGRESSIVE
        elif marker == SOS:
            if size is None:
                break
            # Entropy-coded data can never hold FF D9 (0xFF is always stuffed), so an EOI
            # after the first scan is the only sign the file is complete.
            if data.rfind(JPEG_EOI, end) == -1:
                raise InvalidImageError(f"{TRUNCATED} (no end-of-image marker).")
            return _checked(ImageFormat.JPEG, size[0], size[1],
                            blocks[0][0] if blocks and blocks[0] else 1, progressive,
                            data.count(b"\xff\xda", start - 4),
                            tuple(value for block in blocks for value in block))
    raise InvalidImageError("The JPEG header is malformed or truncated.")


def read_segment(data: bytes, pos: int) -> tuple[int, int, int]:
    """The JPEG marker segment at ``pos``, after any fill bytes (skipped in one C call): the
    marker and its payload's (start, end), equal for a marker without a length. The one
    segment reader, of the header walk here and of :mod:`.jpegscan`.

    Raises:
        InvalidImageError: the data ends, or no marker is at ``pos``.
    """
    run = _FILL.match(data, pos)
    if run and run.end() - pos > 1:
        pos = run.end() - 1  # the last 0xFF of the run starts the marker
    if pos + 2 > len(data):
        raise InvalidImageError(f"{TRUNCATED} (no end-of-image marker).")
    if data[pos] != 0xFF:
        raise InvalidImageError(f"{CORRUPT} (bytes where a marker should be).")
    marker = data[pos + 1]
    if marker in STANDALONE:
        return marker, pos + 2, pos + 2
    if pos + 4 > len(data):
        raise InvalidImageError(f"{TRUNCATED} (it ends inside a header).")
    (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
    if length < 2 or pos + 2 + length > len(data):
        raise InvalidImageError(f"{TRUNCATED} (it ends inside a header).")
    return marker, pos + 4, pos + 2 + length


def _jpeg_segments(data: bytes) -> Iterator[tuple[int, int, int]]:
    """Each segment up to the first scan or EOI; a hostile file of a million empty segments
    is refused after :data:`MAX_JPEG_MARKERS`, not walked to its end."""
    pos = 2
    for _ in range(MAX_JPEG_MARKERS):
        marker, start, end = read_segment(data, pos)
        yield marker, start, end
        if marker in (SOS, EOI):
            return
        pos = end
    raise InvalidImageError(f"The JPEG header has more than {MAX_JPEG_MARKERS} markers.")


def _exif_orientations(tiff: bytes) -> list[int]:
    """The orientation tags of IFD0, in order, each read as a SHORT as OpenCV reads it (1 when
    not 1-8; the decoders apply the first tag), one stored as a LONG also read whole, as Pillow
    reads it. Empty when absent or unreadable (decoders then apply none)."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return []
    (ifd,) = struct.unpack(order + "I", tiff[4:8])
    if ifd + 2 > len(tiff):
        return []
    (count,) = struct.unpack(order + "H", tiff[ifd:ifd + 2])
    count = min(count, (len(tiff) - ifd - 2) // 12)
    # every entry at once (a block may hold 5,000 and a file 1,000 blocks): numpy, not a loop
    layout = _IFD_ENTRY.newbyteorder("<" if order == "<" else ">")
    entries = np.frombuffer(tiff, layout, count, ifd + 2)
    found = entries[entries["tag"] == _ORIENTATION_TAG]
    readings: list[int] = []
    for entry in found[:_MAX_ORIENTATION_TAGS]:
        readings.append(int(entry["short"]))
        if entry["type"] == _LONG:
            readings.append(int(entry["value"]))
    return [value if 1 <= value <= 8 else 1 for value in readings]
