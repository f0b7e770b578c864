"""Real encoded images made in the tests: every shape of input sagegate must handle."""
from __future__ import annotations

import io
import struct
import zlib

import cv2
import numpy as np
from PIL import Image


def gradient(width: int, height: int) -> np.ndarray:
    """A BGR image with structure in both axes (so a swapped width/height shows)."""
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    b = np.broadcast_to(x, (height, width))
    g = np.broadcast_to(y, (height, width))
    r = (b + g) / 2
    return np.dstack([b, g, r]).astype(np.uint8)


def jpeg(width: int = 640, height: int = 480, quality: int = 90,
         image: np.ndarray | None = None) -> bytes:
    image = gradient(width, height) if image is None else image
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def png(image: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", image)
    assert ok
    return buf.tobytes()


def webp(width: int = 320, height: int = 200, lossless: bool = False) -> bytes:
    quality = 101 if lossless else 80
    ok, buf = cv2.imencode(".webp", gradient(width, height), [cv2.IMWRITE_WEBP_QUALITY, quality])
    assert ok
    return buf.tobytes()


def jpeg_with_orientation(image_bgr: np.ndarray, orientation: int) -> bytes:
    """A JPEG whose pixels are stored as given, with an EXIF orientation tag (Pillow writes it)."""
    pil = Image.fromarray(np.ascontiguousarray(image_bgr[:, :, ::-1]))
    exif = pil.getexif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    pil.save(out, "JPEG", exif=exif.tobytes(), quality=95)
    return out.getvalue()


def png_rgba(width: int = 64, height: int = 48) -> bytes:
    rgba = np.zeros((height, width, 4), np.uint8)
    rgba[..., :3] = gradient(width, height)
    rgba[..., 3] = 128
    return png(rgba)


def png_grey(width: int = 64, height: int = 48) -> bytes:
    return png(gradient(width, height)[:, :, 0])


def png_16bit(width: int = 64, height: int = 48) -> bytes:
    return png(gradient(width, height).astype(np.uint16) * 257)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny, well-formed PNG whose header declares an enormous image."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + b"\x00" * 3 * min(width, 16)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(row)) + _png_chunk(b"IEND", b""))


def jpeg_bomb(width: int = 65_000, height: int = 65_000) -> bytes:
    """A small real JPEG with its frame header rewritten to declare a huge size."""
    data = bytearray(jpeg(16, 16))
    index = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, index + 5, height, width)
    return bytes(data)


def truncated(data: bytes, keep: float = 0.6) -> bytes:
    return data[: int(len(data) * keep)]


def corrupt_jpeg() -> bytes:
    """A JPEG whose Huffman table header is corrupt (libjpeg refuses it).

    Garbage inside the entropy-coded scan is not detectable this way: libjpeg decodes it with
    a warning, as the endpoint's own decoder would.
    """
    data = bytearray(jpeg(64, 64))
    dht = data.find(b"\xff\xc4")
    data[dht + 4] = 0x55  # table class 5 does not exist
    return bytes(data)


# Phone-sized photos, for the fidelity tests. scikit-image ships small public-domain photos;
# enlarged with bicubic interpolation alone they lack the fine detail of a real camera picture
# (and compress far better), so a little seeded Gaussian noise is added, as bench/images.py
# does. Everything is deterministic: every run sends the same bytes.
PHOTO_NOISE_SIGMA = 6.0
PHOTO_SEED = 2018


def photo(name: str, width: int | None = None, height: int | None = None,
          noise: float = PHOTO_NOISE_SIGMA, seed: int = PHOTO_SEED) -> np.ndarray:
    """A scikit-image photo (``chelsea``, ``coffee``, ``rocket``, ...) as BGR: as shipped when
    no size is given, else centre-cropped to the aspect of ``width`` x ``height``, enlarged
    bicubically to it and given seeded noise of ``noise`` grey levels (0 for none)."""
    from skimage import data  # deferred: only the photo tests need scikit-image

    image = cv2.cvtColor(getattr(data, name)(), cv2.COLOR_RGB2BGR)
    if width is None or height is None:
        return np.ascontiguousarray(image)
    rows, cols = image.shape[:2]
    if cols * height > rows * width:
        keep = round(rows * width / height)
        image = image[:, (cols - keep) // 2:(cols - keep) // 2 + keep]
    else:
        keep = round(cols * height / width)
        image = image[(rows - keep) // 2:(rows - keep) // 2 + keep]
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_CUBIC)
    if noise:
        grain = np.empty(image.shape, np.int16)
        cv2.setRNGSeed(seed)
        cv2.randn(grain, np.zeros(3), np.full(3, noise))
        image = cv2.add(image, grain, dtype=cv2.CV_8U)
    return image


def png_at(image: np.ndarray, level: int) -> bytes:
    """A PNG at zlib ``level`` (0-9): a 12 MP photo fits under 6 MB only well compressed."""
    ok, buf = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, level])
    assert ok
    return buf.tobytes()


def webp_of(image: np.ndarray, quality: int = 80) -> bytes:
    """A lossy WebP of ``image`` (101 for lossless)."""
    ok, buf = cv2.imencode(".webp", image, [cv2.IMWRITE_WEBP_QUALITY, quality])
    assert ok
    return buf.tobytes()


# how each EXIF orientation's stored pixels are made from the upright picture (the inverse of
# the rotation a viewer applies)
_STORED_FOR_ORIENTATION = {3: cv2.ROTATE_180, 6: cv2.ROTATE_90_COUNTERCLOCKWISE,
                           8: cv2.ROTATE_90_CLOCKWISE}


def jpeg_rotated_by_exif(upright_bgr: np.ndarray, orientation: int, quality: int = 90) -> bytes:
    """A JPEG that shows ``upright_bgr`` once its EXIF ``orientation`` (3, 6 or 8) is applied:
    the pixels are stored rotated, as a camera held sideways stores them, and encoded as any
    other test JPEG (OpenCV), with an APP1 EXIF segment holding the tag right after SOI."""
    stored = cv2.rotate(upright_bgr, _STORED_FOR_ORIENTATION[orientation])
    data = jpeg(image=stored, quality=quality)
    exif = Image.Exif()
    exif[0x0112] = orientation
    payload = exif.tobytes()  # b"Exif\0\0" + the TIFF structure
    segment = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return data[:2] + segment + data[2:]
