"""Preprocessing on synthetic images: shape, dtype, channel order, normalisation, guards."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import imaging
from emulator.imaging import ImageError, PreprocessSpec
from tests import imagefactory

SPEC = PreprocessSpec()


def solid_png(rgb: tuple[int, int, int], width: int = 300, height: int = 260) -> bytes:
    image = np.zeros((height, width, 3), np.uint8)
    image[:] = rgb[::-1]  # OpenCV writes BGR
    return imagefactory.png(image)


def test_batch_is_one_float32_chw_image_of_the_crop_size() -> None:
    batch = imaging.preprocess(imagefactory.jpeg(640, 480), SPEC)

    assert batch.shape == (1, 3, 224, 224)
    assert batch.dtype == np.float32
    assert batch.flags.c_contiguous


def test_normalises_with_127_and_128_in_rgb_order() -> None:
    batch = imaging.preprocess(solid_png((255, 127, 0)), SPEC)

    assert np.allclose(batch[0, 0], 1.0)
    assert np.allclose(batch[0, 1], 0.0)
    assert np.allclose(batch[0, 2], -127 / 128)


def test_normalisation_follows_the_spec() -> None:
    spec = PreprocessSpec(mean=(255.0, 0.0, 100.0), std=(255.0, 2.0, 50.0))

    batch = imaging.preprocess(solid_png((0, 10, 200)), spec)

    assert [float(batch[0, c, 0, 0]) for c in range(3)] == pytest.approx([-1.0, 5.0, 2.0])


@pytest.mark.parametrize(("width", "height"), [(640, 480), (480, 640), (100, 60), (2000, 256)])
def test_shorter_side_becomes_resize_keeping_the_aspect(width: int, height: int) -> None:
    image = imagefactory.gradient(width, height)

    resized = imaging.resize_shorter(image, 256)

    assert min(resized.shape[:2]) == 256
    assert resized.shape[1] / resized.shape[0] == pytest.approx(width / height, rel=0.01)


def test_centre_crop_keeps_the_middle() -> None:
    image = np.arange(10 * 12).reshape(10, 12)

    crop = imaging.center_crop(image, 4)

    assert crop.tolist() == image[3:7, 4:8].tolist()


def test_crop_of_a_wide_image_is_taken_from_the_centre_column() -> None:
    image = np.zeros((256, 600, 3), np.uint8)
    image[:, 300 - 112 : 300 + 112] = 255  # a white band exactly the crop's width

    crop = imaging.center_crop(imaging.resize_shorter(image, 256), 224)

    assert crop.min() == 255


def test_honours_exif_orientation() -> None:
    stored = imagefactory.gradient(64, 32)  # 64 wide as stored, rotated 90 degrees by EXIF

    image = imaging.decode_rgb(imagefactory.jpeg_with_orientation(stored, 6))

    assert image.shape == (64, 32, 3)


@pytest.mark.parametrize(
    "data",
    [
        imagefactory.png_rgba(),
        imagefactory.png_grey(),
        imagefactory.png_16bit(),
        imagefactory.webp(),
    ],
    ids=["rgba", "grey", "16-bit", "webp"],
)
def test_decodes_other_pixel_formats_to_rgb_uint8(data: bytes) -> None:
    image = imaging.decode_rgb(data)

    assert (image.ndim, image.shape[2], image.dtype) == (3, 3, np.uint8)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty payload"),
        (b"not an image at all", "not recognised"),
        (imagefactory.corrupt_jpeg(), "could not be decoded"),
        (imagefactory.png_bomb(), "too many pixels"),
        (imagefactory.jpeg_bomb(), "too many pixels"),
        (imagefactory.png_bomb(9_000, 9_000), "9000x9000 pixels exceeds 50000000 pixels"),
    ],
    ids=["empty", "garbage", "corrupt", "png-bomb", "jpeg-bomb", "png-81mp"],
)
def test_refuses_bad_payloads(data: bytes, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        imaging.preprocess(data, SPEC)


def test_pixel_limit_is_read_from_the_header_before_decoding() -> None:
    data = imagefactory.jpeg(100, 100)

    assert imaging.probe_size(data) == (100, 100)
    with pytest.raises(ImageError, match="exceeds 9999 pixels"):
        imaging.decode_rgb(data, max_pixels=9_999)
    assert imaging.decode_rgb(data, max_pixels=10_000).shape == (100, 100, 3)
