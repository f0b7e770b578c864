"""The benchmark's inputs: real photos enlarged to phone-camera sizes, with sensor-like noise.

scikit-image ships small public-domain photos. Enlarged with bicubic interpolation alone they
compress far better than a real photo of that size (the detail is missing), so a little
Gaussian noise is added; at JPEG quality 90 the files then weigh what phone pictures weigh.
Everything is seeded: every run benchmarks the same bytes.
"""
from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from bench.table import human_bytes

JPEG_QUALITY = 90
NOISE_SIGMA = 6.0
SEED = 2018


@dataclasses.dataclass(frozen=True)
class BenchImage:
    """One encoded input.

    Attributes:
        name: what the tables call it (``JPEG 1920x1080``).
        photo: the scikit-image photo it was made from.
        width, height: its size.
        data: the encoded bytes.
    """

    name: str
    photo: str
    width: int
    height: int
    data: bytes

    @property
    def size_label(self) -> str:
        """The encoded size, human readable."""
        return human_bytes(len(self.data))


def _photo(name: str) -> np.ndarray:
    from skimage import data  # deferred: only this module needs scikit-image

    rgb = getattr(data, name)()
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)


def _crop_to_aspect(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Centre-crop to the target aspect ratio, so enlarging does not distort the photo."""
    rows, cols = image.shape[:2]
    if cols * height > rows * width:
        keep = round(rows * width / height)
        left = (cols - keep) // 2
        return image[:, left:left + keep]
    keep = round(cols * height / width)
    top = (rows - keep) // 2
    return image[top:top + keep]


def enlarge(photo: str, width: int, height: int, seed: int = SEED) -> np.ndarray:
    """A scikit-image photo at ``width`` x ``height`` (BGR), bicubic plus a little noise."""
    image = _crop_to_aspect(_photo(photo), width, height)
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_CUBIC)
    noise = np.empty(image.shape, np.int16)
    cv2.setRNGSeed(seed)
    cv2.randn(noise, np.zeros(3), np.full(3, NOISE_SIGMA))  # one value per channel
    return cv2.add(image, noise, dtype=cv2.CV_8U)


def encode(image: np.ndarray, fmt: str) -> bytes:
    """JPEG at quality 90, or PNG at OpenCV's default compression."""
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if fmt == "jpeg" else []
    ok, buffer = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", image, params)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {fmt} image")
    return buffer.tobytes()


def make(photo: str, width: int, height: int, fmt: str = "jpeg") -> BenchImage:
    """Build one input."""
    data = encode(enlarge(photo, width, height), fmt)
    return BenchImage(f"{fmt.upper()} {width}x{height}", photo, width, height, data)


# (photo, width, height, format). Each photo's top-1 on ImageNet stands clear of its second
# (cat 0.37 vs 0.33, missile 0.19 vs 0.08, espresso 0.94 vs 0.01), so the end-to-end check that
# both front-ends agree is not decided by a near tie. (``astronaut`` is not: about 0.06 each.)
FRONTEND_INPUTS = (
    ("chelsea", 640, 480, "jpeg"),
    ("rocket", 1920, 1080, "jpeg"),
    ("coffee", 4032, 3024, "jpeg"),
    ("rocket", 1920, 1080, "png"),
)
E2E_INPUTS = FRONTEND_INPUTS[:3]


def build(specs: tuple[tuple[str, int, int, str], ...]) -> list[BenchImage]:
    """Build the inputs listed in ``specs``."""
    return [make(photo, width, height, fmt) for photo, width, height, fmt in specs]
