from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import PIL.Image
import pytest

from chalicelib.core.errors import ImageTooLargeError, InvalidImageError, InvalidParameterError
from chalicelib.core.media import ImageFormat
from chalicelib.images import imaging, sizing
from chalicelib.images.probe import ImageInfo, probe
from tests import imagefactory
from tests.corpus import generate

LIMIT = sizing.Limits(max_pixels=40_000_000)


def test_probe_reads_jpeg_png_webp_sizes() -> None:
    assert probe(imagefactory.jpeg(640, 480)) == ImageInfo("jpeg", 640, 480, scans=1)
    assert probe(imagefactory.png_rgba(64, 48)) == ImageInfo("png", 64, 48)
    assert probe(imagefactory.webp(320, 200)) == ImageInfo("webp", 320, 200)
    assert probe(imagefactory.webp(320, 200, lossless=True)) == ImageInfo(
        "webp", 320, 200)


@pytest.mark.parametrize("orientation,size", [(1, (60, 40)), (3, (60, 40)), (6, (40, 60)),
                                              (8, (40, 60))])
def test_probe_applies_exif_orientation(orientation: int, size: tuple[int, int]) -> None:
    data = imagefactory.jpeg_with_orientation(imagefactory.gradient(60, 40), orientation)
    info = probe(data)
    assert (info.width, info.height, info.orientation) == (*size, orientation)


@pytest.mark.parametrize("orientations", [(6, 1), (1, 6), (6, 8), (8, 6), (3, 6), (1, 1)],
                         ids=str)
def test_probe_reads_the_exif_block_the_decoders_apply(orientations: tuple[int, int]) -> None:
    """Several EXIF blocks: OpenCV and Pillow apply the first (decoded here, not assumed), so
    the probe's size and orientation are the first's; any block's rotation is remembered."""
    data = generate.jpeg_with_exif_blocks(imagefactory.gradient(60, 40), orientations)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    pillow = PIL.Image.open(io.BytesIO(data)).getexif().get(0x0112)
    info = probe(data)
    assert (info.height, info.width) == decoded.shape[:2]
    assert info.orientation == pillow == orientations[0]
    assert info.exif_orientations == orientations
    assert info.upright is (orientations == (1, 1))


def _exif_jpeg(entries: list[tuple[int, int, int]], order: str) -> bytes:
    """A 80x40 JPEG with one EXIF block whose IFD0 holds ``entries`` (tag, type, value)."""
    packed = b"".join(struct.pack(order + "HHIHH", tag, kind, 1, value, 0) if kind == 3
                      else struct.pack(order + "HHII", tag, kind, 1, value)
                      for tag, kind, value in entries)
    tiff = ((b"II*\x00" if order == "<" else b"MM\x00*") + struct.pack(order + "I", 8)
            + struct.pack(order + "H", len(entries)) + packed + struct.pack(order + "I", 0))
    payload = b"Exif\x00\x00" + tiff
    jpeg = imagefactory.jpeg(80, 40)
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


_FILLER = [(0x9000 + index, 3, 1) for index in range(300)]


@pytest.mark.parametrize("entries", [
    [(0x0112, 4, 6)],  # a LONG: OpenCV reads its first two bytes, Pillow the whole
    [(0x0132, 3, 1), (0x0112, 3, 6)],
    [*_FILLER, (0x0112, 3, 6)],  # past the 256th entry
    [(0x0112, 3, 6), (0x0112, 3, 1)], [(0x0112, 3, 1), (0x0112, 3, 6)],  # the tag twice
], ids=["long", "second", "after-300", "twice-rotated-first", "twice-rotated-last"])
@pytest.mark.parametrize("order", ["<", ">"], ids=["II", "MM"])
def test_an_exif_rotation_any_decoder_reads_is_never_ignored(
        entries: list[tuple[int, int, int]], order: str) -> None:
    """However the tag is stored, an image OpenCV or Pillow would turn, or that declares a
    rotation at all, is not upright to the probe (so it is never forwarded untouched); where
    OpenCV turns it, the probe's size is the turned one."""
    data = _exif_jpeg(entries, order)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    opencv_turns = decoded.shape[:2] != (40, 80)
    pillow_turns = PIL.Image.open(io.BytesIO(data)).getexif().get(0x0112, 1) != 1
    info = probe(data)
    # a decoder turns each one (but the last case, whose rotation only a later tag declares)
    assert opencv_turns or pillow_turns or entries[0][2] == 1
    assert not info.upright
    if opencv_turns:
        assert (info.height, info.width) == decoded.shape[:2]


@pytest.mark.parametrize("orientations", [(6, 1), (1, 6)], ids=str)
def test_a_jpeg_any_exif_block_rotates_is_never_passed_through(
        orientations: tuple[int, int]) -> None:
    data = generate.jpeg_with_exif_blocks(imagefactory.gradient(60, 40), orientations)
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    assert not imaging.can_pass_through(data, probe(data), plan)
    upright = generate.jpeg_with_exif_blocks(imagefactory.gradient(60, 40), (1, 1))
    assert imaging.can_pass_through(upright, probe(upright), plan)


@pytest.mark.parametrize("data", [b"", b"GIF89a....", b"hello world", b"\xff\xd8\xff",
                                  b"\x89PNG\r\n\x1a\n" + b"\x00" * 8, b"RIFF\x00\x00\x00\x00WEBP"])
def test_probe_rejects_non_images(data: bytes) -> None:
    with pytest.raises(InvalidImageError):
        probe(data)


@pytest.mark.parametrize("make", [lambda: imagefactory.jpeg(640, 480),
                                  lambda: imagefactory.png(imagefactory.gradient(64, 48)),
                                  lambda: imagefactory.webp(320, 200)])
def test_truncated_images_are_invalid(make: object) -> None:
    data = imagefactory.truncated(make())  # type: ignore[operator]
    with pytest.raises(InvalidImageError):
        imaging.prepare(data, sizing.plan_resize("shorter-side", 224, 224), LIMIT)


def test_corrupt_jpeg_is_invalid() -> None:
    with pytest.raises(InvalidImageError):
        imaging.prepare(imagefactory.corrupt_jpeg(), sizing.plan_resize("stretch", 32, 32), LIMIT)


@pytest.mark.parametrize("bomb", [imagefactory.png_bomb, imagefactory.jpeg_bomb])
def test_decompression_bombs_are_refused_before_decoding(bomb: object) -> None:
    data = bomb()  # type: ignore[operator]
    assert len(data) < 2000
    with pytest.raises(ImageTooLargeError) as caught:
        imaging.prepare(data, sizing.plan_resize("shorter-side", 224, 224), LIMIT)
    assert "pixels" in caught.value.message


@pytest.mark.parametrize("data", [imagefactory.png_rgba(), imagefactory.png_grey(),
                                  imagefactory.png_16bit()])
def test_grey_alpha_and_16_bit_become_8_bit_bgr(data: bytes) -> None:
    image = imaging.decode(data, probe(data))
    assert image.dtype == np.uint8
    assert image.shape == (48, 64, 3)


def test_16_bit_values_are_scaled_not_clipped() -> None:
    data = imagefactory.png_16bit()
    image = imaging.decode(data, probe(data))
    assert image.max() > 200  # 65535 must map near 255, not saturate or vanish


def test_exif_orientation_is_honoured_at_every_reduction() -> None:
    stored = np.zeros((400, 800, 3), np.uint8)
    stored[:, :400] = (0, 0, 255)  # left half red
    data = imagefactory.jpeg_with_orientation(stored, 6)  # rotate 90 CW to display
    for reduction in (1, 2, 4, 8):
        image = imaging.decode(data, probe(data), reduction)
        assert image.shape == (800 // reduction, 400 // reduction, 3)
        top, bottom = image[2, image.shape[1] // 2], image[-3, image.shape[1] // 2]
        assert top[2] > 200 and bottom[2] < 50, reduction


@pytest.mark.parametrize("size,needed,expected", [
    ((4032, 3024), (341, 256), 4), ((1920, 1080), (455, 256), 2), ((640, 480), (341, 256), 1),
    ((2048, 1536), (341, 256), 2), ((4096, 4096), (256, 256), 8), ((1024, 1024), (256, 256), 2),
    ((1022, 1022), (256, 256), 1),
])
def test_reduction_keeps_twice_the_target_size(
        size: tuple[int, int], needed: tuple[int, int], expected: int) -> None:
    assert imaging.reduction_for(ImageInfo("jpeg", *size), needed) == expected


def test_no_reduction_for_png() -> None:
    assert imaging.reduction_for(ImageInfo("png", 4000, 3000), (100, 100)) == 1


def test_shorter_side_keeps_aspect() -> None:
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    out = imaging.resize(imagefactory.gradient(1920, 1080), plan)
    assert out.shape == (256, 455, 3)


def test_shorter_side_does_not_upscale_by_default() -> None:
    small = imagefactory.gradient(200, 100)
    assert imaging.resize(small, sizing.plan_resize("shorter-side", 224, 224, 256)).shape == (
        100, 200, 3)
    upscaled = imaging.resize(small, sizing.plan_resize("shorter-side", 224, 224, 256, True))
    assert upscaled.shape == (256, 512, 3)


def test_fill_scales_then_centre_crops() -> None:
    out = imaging.resize(imagefactory.gradient(1000, 500), sizing.plan_resize("fill", 224, 224))
    assert out.shape == (224, 224, 3)
    # 1000x500 scales to 448x224; a centred crop starts a quarter in, where blue (which ramps
    # 0..255 along x) is about 64, not at the source's left edge (0)
    assert 58 < int(out[112, 0, 0]) < 70


def test_fit_letterboxes() -> None:
    out = imaging.resize(imagefactory.gradient(1000, 500), sizing.plan_resize("fit", 224, 224))
    assert out.shape == (224, 224, 3)
    assert out[0].max() == 0 and out[-1].max() == 0  # padded rows
    assert out[112].max() > 0


def test_stretch_width_and_height_mean_what_they_say() -> None:
    out = imaging.resize(imagefactory.gradient(1000, 500), sizing.plan_resize("stretch", 300, 100))
    assert out.shape == (100, 300, 3)  # rows = height, columns = width


def test_shrinking_uses_area_interpolation() -> None:
    checker = np.indices((400, 400)).sum(axis=0) % 2 * 255
    image = np.dstack([checker] * 3).astype(np.uint8)
    out = imaging.resize(image, sizing.plan_resize("stretch", 100, 100))
    assert abs(float(out.mean()) - 127.5) < 2 and out.std() < 2  # averaged, not aliased


def test_unknown_mode_and_format() -> None:
    with pytest.raises(InvalidParameterError):
        sizing.plan_resize("zoom", 1, 1)
    with pytest.raises(InvalidParameterError):
        imaging.encode(imagefactory.gradient(8, 8), sizing.Encoding("gif"))  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt,magic", [("jpeg", b"\xff\xd8"), ("png", b"\x89PNG"),
                                       ("webp", b"RIFF")])
def test_encode_formats(fmt: str, magic: bytes) -> None:
    encoding = sizing.Encoding(ImageFormat(fmt), 80)
    assert imaging.encode(imagefactory.gradient(32, 16), encoding).startswith(magic)


def test_every_encoding_setting_is_used() -> None:
    """Quality and PNG level each change the output (no argument is ignored), and PNG is
    written by one encoder whatever the level."""
    # a real photo (scikit-image's, made here: no test reads what another command wrote)
    photo = cv2.resize(imagefactory.photo("chelsea"), (320, 240), interpolation=cv2.INTER_AREA)
    sizes = {(fmt, quality, level): len(imaging.encode(photo, sizing.Encoding(fmt, quality,
                                                                               level)))
             for fmt in ImageFormat for quality in (30, 95) for level in (0, 1, 9)}
    for fmt in (ImageFormat.JPEG, ImageFormat.WEBP):
        assert sizes[fmt, 30, 0] < sizes[fmt, 95, 0]
    assert sizes[ImageFormat.PNG, 30, 0] == sizes[ImageFormat.PNG, 95, 0]  # lossless
    assert sizes[ImageFormat.PNG, 95, 9] < sizes[ImageFormat.PNG, 95, 1] < \
        sizes[ImageFormat.PNG, 95, 0]
    for level in (0, 1, 9):
        assert imaging.encode(photo, sizing.Encoding(ImageFormat.PNG, 90, level)) == \
            imaging.encode_png(photo, level)


def test_prepare_large_jpeg_matches_full_decode_closely() -> None:
    rng = np.random.default_rng(0)
    base = imagefactory.gradient(4032, 3024).astype(np.int16)
    noisy = np.clip(base + rng.integers(-8, 8, base.shape), 0, 255).astype(np.uint8)
    data = imagefactory.jpeg(image=noisy, quality=92)
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    fast, info = imaging.prepare(data, plan, LIMIT)
    slow = imaging.resize(imaging.decode(data, info, 1), plan)
    assert fast.shape == slow.shape == (256, 341, 3)
    assert np.abs(fast.astype(int) - slow.astype(int)).mean() < 2.0


@pytest.mark.parametrize("level", [0, 1, 9])
@pytest.mark.parametrize("shape", [(31, 17, 3), (256, 341, 3), (20, 9)])
def test_encode_png_is_lossless_and_standard(level: int, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(shape) + level)
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    data = imaging.encode_png(image, level)
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED).tolist() == \
        image.tolist()
    with PIL.Image.open(io.BytesIO(data)) as pil:  # an independent decoder, checking CRCs
        pil.load()
        assert pil.size == (shape[1], shape[0])
        expected = image if image.ndim == 2 else image[:, :, ::-1]
        assert np.asarray(pil).tolist() == expected.tolist()


def test_encode_png_stores_at_level_0_and_compresses_above() -> None:
    image = np.zeros((100, 100, 3), np.uint8)
    assert len(imaging.encode_png(image, 0)) > 30_000 > 1_000 > len(imaging.encode_png(image, 6))


def test_encode_png_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError):
        imaging.encode_png(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ValueError):
        imaging.encode_png(np.zeros((4, 4, 3), np.uint16))


# --- one bound on pixels and aspect ratio, on the header, for every path ------------------


def png_header(width: int, height: int) -> bytes:
    return imagefactory.png_bomb(width, height)


@pytest.mark.parametrize("size", [(65_500, 1), (100_000, 1), (1, 30_000), (21, 1), (2100, 100)])
def test_elongated_images_are_refused_from_the_header(size: tuple[int, int]) -> None:
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    with pytest.raises(InvalidImageError, match="aspect ratio"):
        imaging.inspect(png_header(*size), plan, LIMIT)


@pytest.mark.parametrize("size", [(20, 1), (1, 20), (3600, 400), (2000, 100), (1, 1)])
def test_panoramas_up_to_the_limit_pass(size: tuple[int, int]) -> None:
    data = imagefactory.png(imagefactory.gradient(*size))
    assert imaging.inspect(data, sizing.plan_resize("fill", 224, 224), LIMIT).width == size[0]


def test_the_aspect_limit_is_a_setting() -> None:
    data = png_header(100, 1)
    plan = sizing.plan_resize("shorter-side", 224, 224)
    imaging.inspect(data, plan, sizing.Limits(max_aspect_ratio=100))
    with pytest.raises(InvalidImageError, match="at most 99:1"):
        imaging.inspect(data, plan, sizing.Limits(max_aspect_ratio=99))


@pytest.mark.parametrize("mode,width,height", [("shorter-side", 8192, 8192),
                                               ("stretch", 8192, 8192)])
def test_what_a_resize_would_produce_is_bounded_too(mode: str, width: int, height: int) -> None:
    plan = sizing.plan_resize(mode, width, height, shorter_side=8192, upscale=True)
    data = imagefactory.png(imagefactory.gradient(100, 20))  # 5:1, 2000 pixels
    with pytest.raises(ImageTooLargeError, match="would produce"):
        imaging.inspect(data, plan, sizing.Limits(max_pixels=10_000_000))


@pytest.mark.parametrize("source", [(20_000, 1), (2000, 100), (100, 2000), (640, 480)])
@pytest.mark.parametrize("box", [(224, 224), (2048, 2048), (300, 20)])
def test_fill_never_allocates_more_than_its_box(
        monkeypatch: pytest.MonkeyPatch, source: tuple[int, int], box: tuple[int, int]) -> None:
    sizes: list[tuple[int, int]] = []
    real = cv2.resize

    def recording(image: np.ndarray, size: tuple[int, int], **kwargs: object) -> np.ndarray:
        sizes.append(size)
        return real(image, size, **kwargs)

    monkeypatch.setattr(imaging.cv2, "resize", recording)
    plan = sizing.plan_resize("fill", *box, upscale=True)
    out = imaging.resize(imagefactory.gradient(*source), plan)
    assert out.shape[:2] == (box[1], box[0])
    assert all(w * h <= box[0] * box[1] for w, h in sizes), sizes  # not 4480000x224 first


def test_fill_without_upscale_still_crops_small_images() -> None:
    out = imaging.resize(imagefactory.gradient(100, 50), sizing.plan_resize("fill", 224, 224))
    assert out.shape == (50, 100, 3)
    out = imaging.resize(imagefactory.gradient(300, 50), sizing.plan_resize("fill", 224, 224))
    assert out.shape == (50, 224, 3)
