"""Truncated and corrupt JPEGs are found without trusting libjpeg's (unreported) warnings."""
from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
from PIL import Image

from chalicelib.core.errors import InvalidImageError
from chalicelib.images import imaging, jpegscan, sizing
from chalicelib.images.probe import probe
from tests import imagefactory
from tests.corpus.generate import _photo

PHOTO = _photo(640, 480)


def pil_jpeg(mode: str = "RGB", **options: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(PHOTO[:, :, ::-1]).convert(mode).save(out, "JPEG", **options)
    return out.getvalue()


def encoded(*params: int) -> bytes:
    ok, buffer = cv2.imencode(".jpg", PHOTO, list(params))
    assert ok
    return buffer.tobytes()


WHOLE = {
    "baseline": imagefactory.jpeg(image=PHOTO),
    "grey": pil_jpeg("L"),
    "cmyk": pil_jpeg("CMYK"),
    "optimized": pil_jpeg(optimize=True),
    "progressive": pil_jpeg(progressive=True),
    "progressive-optimized": pil_jpeg(progressive=True, optimize=True),
    "opencv-progressive": encoded(cv2.IMWRITE_JPEG_PROGRESSIVE, 1),
    "restart-markers": encoded(cv2.IMWRITE_JPEG_RST_INTERVAL, 4),
    "444": encoded(cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444),
    "411": encoded(cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411),
    "flat-grey-128": imagefactory.jpeg(image=np.full((240, 320, 3), 128, np.uint8)),
    "1x1": imagefactory.jpeg(image=np.full((1, 1, 3), 128, np.uint8)),
    "exif-rotated": imagefactory.jpeg_with_orientation(PHOTO, 6),
    "trailing-data-after-eoi": imagefactory.jpeg(image=PHOTO) + b"MP4 of a motion photo",
}


def decode_checked(data: bytes, reduction: int = 1) -> None:
    jpegscan.check_complete(data)
    image = imaging.decode(data, probe(data), reduction)
    jpegscan.check_decoded(data, image, reduction)


@pytest.mark.parametrize("name", sorted(WHOLE))
@pytest.mark.parametrize("reduction", [1, 8])
def test_whole_jpegs_pass(name: str, reduction: int) -> None:
    decode_checked(WHOLE[name], reduction)


def with_eoi(data: bytes, keep: float) -> bytes:
    return data[: int(len(data) * keep)] + b"\xff\xd9"


@pytest.mark.parametrize("name,data", [
    ("cut", WHOLE["baseline"][:40_000]),
    ("cut-in-header", WHOLE["baseline"][:300]),
    ("restart-half", with_eoi(WHOLE["restart-markers"], 0.5)),
    ("progressive-cut-before-last-scans", with_eoi(WHOLE["progressive"], 0.3)),
    ("opencv-progressive-half", with_eoi(WHOLE["opencv-progressive"], 0.5)),
    ("no-scan", WHOLE["baseline"][: WHOLE["baseline"].find(b"\xff\xda")] + b"\xff\xd9"),
])
def test_structurally_truncated_jpegs_are_found_without_decoding(name: str, data: bytes) -> None:
    with pytest.raises(InvalidImageError, match="truncated"):
        jpegscan.check_complete(data)


def test_a_header_declaring_more_than_its_data_can_hold_is_truncated() -> None:
    data = bytearray(imagefactory.jpeg(451, 300))
    struct.pack_into(">HH", data, data.find(b"\xff\xc0") + 5, 6000, 6000)
    with pytest.raises(InvalidImageError, match="too few for a 6000x6000"):
        jpegscan.check_complete(bytes(data))


@pytest.mark.parametrize("name,data,says", [
    ("marker-in-data", WHOLE["baseline"][:30_000] + b"\xff\x12" + WHOLE["baseline"][30_002:],
     "unexpected marker"),
    ("restarts-out-of-order", WHOLE["restart-markers"].replace(b"\xff\xd3", b"\xff\xd5", 1),
     "out of order"),
    ("second-frame", WHOLE["baseline"].replace(b"\xff\xda", WHOLE["baseline"][
        WHOLE["baseline"].find(b"\xff\xc0"):WHOLE["baseline"].find(b"\xff\xc0") + 19]
        + b"\xff\xda", 1), "second frame"),
])
def test_corrupt_structure_is_found(name: str, data: bytes, says: str) -> None:
    with pytest.raises(InvalidImageError, match=says):
        jpegscan.check_complete(data)


@pytest.mark.parametrize("name", ["baseline", "grey", "optimized", "444", "411"])
@pytest.mark.parametrize("keep", [0.3, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("reduction", [1, 2, 8])
def test_a_baseline_jpeg_cut_with_an_eoi_appended_is_found_after_decoding(
        name: str, keep: float, reduction: int) -> None:
    data = with_eoi(WHOLE[name], keep)
    jpegscan.check_complete(data)  # structurally, nothing is missing...
    image = imaging.decode(data, probe(data), reduction)
    assert (image[-1, -1] == 128).all()  # ...but libjpeg filled the rest with grey...
    with pytest.raises(InvalidImageError, match="ends before the image does"):
        jpegscan.check_decoded(data, image, reduction)  # ...which is found


def test_the_second_decode_happens_only_for_a_grey_corner(monkeypatch: pytest.MonkeyPatch) -> None:
    whole, grey = WHOLE["baseline"], WHOLE["flat-grey-128"]
    decoded = {data: imaging.decode(data, probe(data)) for data in (whole, grey)}
    calls: list[int] = []
    real = cv2.imdecode
    monkeypatch.setattr(cv2, "imdecode", lambda *args: calls.append(1) or real(*args))
    jpegscan.check_decoded(whole, decoded[whole], 1)
    assert calls == []  # the common case costs nothing
    jpegscan.check_decoded(grey, decoded[grey], 1)
    assert calls == [1]  # a grey corner costs one more decode, and a whole file passes it


def count_walks(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    walked: list[bytes] = []
    real = jpegscan.check_complete
    monkeypatch.setattr(jpegscan, "check_complete", lambda data: walked.append(data) or real(data))
    return walked


def test_a_baseline_decode_path_walks_no_markers_unless_the_decode_shows_damage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    walked = count_walks(monkeypatch)
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    imaging.prepare(WHOLE["baseline"], plan, sizing.Limits())
    assert walked == []  # a large upload's decode costs what it did
    cut = with_eoi(WHOLE["baseline"], 0.5)
    with pytest.raises(InvalidImageError, match="truncated"):
        imaging.prepare(cut, plan, sizing.Limits())
    assert walked == [cut]


def test_progressive_and_forwarded_jpegs_are_always_walked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    walked = count_walks(monkeypatch)
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    progressive = WHOLE["progressive"]
    assert probe(progressive).progressive and not probe(WHOLE["baseline"]).progressive
    imaging.inspect(progressive, plan, sizing.Limits())
    assert walked == [progressive]
    baseline = WHOLE["baseline"]
    imaging.check_forwardable(baseline, probe(baseline), sizing.Limits())
    assert walked == [progressive, baseline]


def test_allow_corrupt_skips_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    walked = count_walks(monkeypatch)
    cut = with_eoi(WHOLE["baseline"], 0.5)
    lenient = sizing.Limits(allow_corrupt=True)
    imaging.check_forwardable(cut, probe(cut), lenient)
    imaging.prepare(cut, sizing.plan_resize("shorter-side", 224, 224, 256), lenient)
    imaging.inspect(with_eoi(WHOLE["progressive"], 0.3),
                    sizing.plan_resize("shorter-side", 224, 224, 256), lenient)
    assert walked == []


def test_hostile_marker_counts_are_refused_and_fill_bytes_skipped() -> None:
    flood = b"\xff\xd8" + b"\xff\xfe\x00\x02" * 1_000_000 + WHOLE["baseline"][2:]
    with pytest.raises(InvalidImageError, match="more than 1000 markers"):
        probe(flood)
    sos = WHOLE["baseline"].find(b"\xff\xda")
    between = WHOLE["baseline"][:sos] + b"\xff\xd0" * 1_000_000 + WHOLE["baseline"][sos:]
    with pytest.raises(InvalidImageError, match="1000 markers"):
        probe(between)
    filled = b"\xff\xd8" + b"\xff" * 5_000_000 + WHOLE["baseline"][2:]  # legal, if odd
    assert probe(filled).width == 640
    jpegscan.check_complete(filled)


HEADER_END = WHOLE["baseline"].find(b"\xff\xda")
SECOND_SEGMENT = 4 + int.from_bytes(WHOLE["baseline"][4:6], "big")  # after SOI and APP0


@pytest.mark.parametrize("name,data", [
    ("ends-inside-a-segment", WHOLE["baseline"][:HEADER_END - 3]),
    ("ends-between-segments", WHOLE["baseline"][:HEADER_END] + b"\xff"),
    ("bytes-where-a-marker-should-be", WHOLE["baseline"][:SECOND_SEGMENT] + b"\x00"
     + WHOLE["baseline"][SECOND_SEGMENT:]),
    ("a-segment-shorter-than-its-length", b"\xff\xd8\xff\xe0\x00\x01" + WHOLE["baseline"][2:]),
])
def test_the_header_walk_and_the_marker_walk_read_segments_alike(name: str, data: bytes) -> None:
    """One segment reader: a header defect gets the same answer from the probe and the walk."""
    with pytest.raises(InvalidImageError) as probed:
        probe(data)
    with pytest.raises(InvalidImageError) as walked:
        jpegscan.check_complete(data)
    assert str(probed.value) == str(walked.value)
