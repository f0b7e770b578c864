"""Where ``fill`` crops, and which way round an EXIF-rotated image's sides are: checked on the
pixels and against the decoders, not only on output shapes (a crop from the top edge, or an
orientation that forgets to swap, has the right shape)."""
from __future__ import annotations

import io

import cv2
import numpy as np
import PIL.Image
import PIL.ImageOps
import pytest

from chalicelib.images import imaging, sizing
from chalicelib.images.probe import probe
from tests import imagefactory

# three bands across the long axis, each a colour far from the others (BGR)
BANDS = ((255, 0, 0), (0, 255, 0), (0, 0, 255))


def banded(width: int, height: int) -> np.ndarray:
    """Blue, green, red thirds along the longer side: a centred crop of the square keeps
    only green; a crop anchored at either end shows blue or red."""
    image = np.zeros((height, width, 3), np.uint8)
    length = max(width, height)
    for index, colour in enumerate(BANDS):
        start, stop = index * length // 3, (index + 1) * length // 3
        if height > width:
            image[start:stop] = colour
        else:
            image[:, start:stop] = colour
    return image


@pytest.mark.parametrize("size", [(300, 900), (900, 300)], ids=["portrait", "landscape"])
@pytest.mark.parametrize("box", [(100, 100), (300, 300)], ids=["shrink", "same-scale"])
def test_fill_keeps_the_centre_of_either_axis(size: tuple[int, int],
                                              box: tuple[int, int]) -> None:
    out = imaging.resize(banded(*size), sizing.plan_resize("fill", *box))
    assert out.shape == (box[1], box[0], 3)
    # the square cut from the middle third is green at every edge, not only in its centre
    for row, col in [(0, box[0] // 2), (-1, box[0] // 2), (box[1] // 2, 0),
                     (box[1] // 2, -1), (box[1] // 2, box[0] // 2)]:
        assert tuple(int(v) for v in out[row, col]) == BANDS[1], (row, col)


def test_fill_crops_an_odd_remainder_evenly() -> None:
    """A 10-row surplus is cut 5 above and 5 below: the rows kept are 5 to 14."""
    rows = np.repeat(np.arange(20, dtype=np.uint8)[:, None], 10, axis=1)
    image = np.dstack([rows] * 3)
    out = imaging.resize(image, sizing.plan_resize("fill", 10, 10))
    assert out[:, :, 0].tolist() == [[value] * 10 for value in range(5, 15)]


def decoded_by_opencv(data: bytes) -> tuple[int, int]:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image.shape[1], image.shape[0]


def decoded_by_pillow(data: bytes) -> tuple[int, int]:
    upright = PIL.ImageOps.exif_transpose(PIL.Image.open(io.BytesIO(data)))
    assert upright is not None
    return upright.size


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_gives_the_sides_the_decoders_give(orientation: int) -> None:
    """Orientations 5 to 8 turn the picture a quarter (5 and 7 are the transposes, flipped
    and turned): width and height swap. The probe must agree with OpenCV and Pillow, which
    decode the real file here, and with sagegate's own decode."""
    data = imagefactory.jpeg_with_orientation(imagefactory.gradient(64, 32), orientation)
    info = probe(data)
    opencv, pillow = decoded_by_opencv(data), decoded_by_pillow(data)
    assert opencv == pillow, "the decoders disagree: the test's file is wrong"
    assert (info.width, info.height) == opencv
    assert (info.width, info.height) == ((32, 64) if orientation >= 5 else (64, 32))
    image = imaging.decode(data, info)
    assert (image.shape[1], image.shape[0]) == (info.width, info.height)


@pytest.mark.parametrize("orientation", [5, 7])
def test_a_transposed_image_is_checked_against_its_upright_sides(orientation: int) -> None:
    """The plan and the limits see the image as displayed: a 64x32 file shown 32x64."""
    data = imagefactory.jpeg_with_orientation(imagefactory.gradient(64, 32), orientation)
    plan = sizing.plan_resize("fill", 32, 64)
    info = imaging.inspect(data, plan, sizing.Limits(max_pixels=64 * 32))
    assert plan.scaled_size(info.width, info.height) == (32, 64)
    out = imaging.resize(imaging.decode(data, info), plan)
    assert out.shape[:2] == (64, 32)
