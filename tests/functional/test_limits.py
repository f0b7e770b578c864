"""Lambda's payload limits, answered by sagegate with advice rather than by Lambda failing."""
from __future__ import annotations

import numpy as np
import pytest

from chalicelib.core.errors import ImageTooLargeError
from chalicelib.images import resizer
from chalicelib.images.resizer import resize_image
from chalicelib.images.sizing import Limits, ResizeOptions
from tests import imagefactory
from tests.functional.conftest import Harness

LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024


def noise_jpeg(width: int, height: int) -> bytes:
    pixels = np.random.default_rng(7).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return imagefactory.jpeg(image=pixels, quality=95)


def test_the_largest_resize_answer_fits_in_a_lambda_response_base64_encoded() -> None:
    headroom = LAMBDA_RESPONSE_LIMIT - resizer.MAX_OUTPUT_BYTES * 4 / 3
    assert 8 * 1024 <= headroom <= 32 * 1024  # room for headers and the JSON around it


def test_a_resize_answer_over_the_limit_is_413_with_advice(harness: Harness) -> None:
    upload = noise_jpeg(1800, 1400)
    assert len(upload) < 6 * 1024 * 1024  # the request itself is fine...
    response = harness.post("/resize?width=1800&height=1400&format=png", upload, "image/jpeg",
                            Accept="image/png")
    assert response.status_code == 413  # ...the PNG it asks for is not
    body = response.json_body
    assert body["Code"] == "ImageTooLarge"
    assert "smaller width and height" in body["Message"]


def test_the_output_limit_is_checked_on_the_encoded_bytes() -> None:
    options = ResizeOptions(width=320, height=240, format="png")
    image = noise_jpeg(320, 240)
    assert resize_image(image, options, Limits(max_pixels=10**8)).width == 320
    with pytest.raises(ImageTooLargeError, match="at most 1000 bytes fit"):
        resize_image(image, options, Limits(max_pixels=10**8), max_output_bytes=1000)


def test_an_output_the_estimate_let_through_is_still_checked_when_encoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resizer, "estimated_size", lambda *_: 0)  # an estimate far too low
    options = ResizeOptions(width=320, height=240, format="png")
    with pytest.raises(ImageTooLargeError, match=r"is \d+ bytes; at most 1000 bytes fit"):
        resize_image(noise_jpeg(320, 240), options, Limits(max_pixels=10**8),
                     max_output_bytes=1000)
