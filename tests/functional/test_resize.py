"""POST /resize through the real Chalice app (no endpoint involved)."""
from __future__ import annotations

import base64
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
from chalice.test import Client

import app as app_module
from chalicelib.images import imaging, resizer, sizing
from tests import imagefactory
from tests.functional.conftest import Harness


def decoded(data: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert image is not None
    return image


def test_json_answer_is_real_base64_with_width_and_height_the_right_way_round(
        harness: Harness) -> None:
    body = json.dumps({"image": base64.b64encode(imagefactory.jpeg(640, 480)).decode(),
                       "width": 300, "height": 100})
    response = harness.post("/resize", body)
    assert response.status_code == 200, response.body
    answer = json.loads(response.body)
    assert (answer["width"], answer["height"], answer["format"]) == (300, 100, "jpeg")
    assert decoded(base64.b64decode(answer["image"])).shape[:2] == (100, 300)


def test_binary_answer_when_the_client_accepts_the_image_type(harness: Harness) -> None:
    response = harness.post("/resize?width=64&height=32&format=png", imagefactory.jpeg(),
                            "image/jpeg", Accept="image/png")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "image/png"
    assert decoded(response.body).shape[:2] == (32, 64)


def test_fit_letterboxes_to_the_exact_box(harness: Harness) -> None:
    white = imagefactory.png(np.full((480, 640, 3), 255, np.uint8))
    response = harness.post("/resize?width=200&height=200&mode=fit&format=png", white,
                            "image/png", Accept="image/png")
    image = decoded(response.body)
    assert image.shape[:2] == (200, 200)
    assert image[:25].max() == 0 and image[-25:].max() == 0  # 200x150 picture, black bars
    assert image[25:175].min() == 255


@pytest.mark.parametrize("size", [(240, 720), (720, 240)], ids=["portrait", "landscape"])
def test_fill_answers_the_middle_of_the_picture(harness: Harness, size: tuple[int, int]) -> None:
    """Thirds blue, green, red along the long side: the square ``fill`` cuts is the green
    middle, edge to edge (a crop anchored at the top or left would show blue)."""
    picture = np.zeros((size[1], size[0], 3), np.uint8)
    third = max(size) // 3
    for index, colour in enumerate([(255, 0, 0), (0, 255, 0), (0, 0, 255)]):
        band = slice(index * third, (index + 1) * third)
        picture[(band, slice(None)) if size[1] > size[0] else (slice(None), band)] = colour
    response = harness.post("/resize?width=60&height=60&mode=fill&format=png",
                            imagefactory.png(picture), "image/png", Accept="image/png")
    image = decoded(response.body)
    assert image.shape[:2] == (60, 60)
    assert {tuple(int(v) for v in image[row, col]) for row in (0, 30, 59)
            for col in (0, 30, 59)} == {(0, 255, 0)}


def test_unacceptable_accept_is_406(harness: Harness) -> None:
    response = harness.post("/resize?width=10&height=10", imagefactory.jpeg(), "image/jpeg",
                            Accept="text/html")
    body = json.loads(response.body)
    assert response.status_code == 406 and body["Code"] == "NotAcceptable"


def test_missing_height_is_400(harness: Harness) -> None:
    response = harness.post("/resize?width=10", imagefactory.jpeg(), "image/jpeg")
    body = json.loads(response.body)
    assert response.status_code == 400 and body["Code"] == "InvalidParameter"
    assert '"height"' in body["Message"]


def test_concurrent_requests_each_see_their_own_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """`chalice local` serves requests on threads while Chalice keeps one current_request per
    app: every thread must still read its own body and query string.

    The interleaving that a shared request gets wrong is forced, not hoped for: each of two
    requests, once Chalice has made it the app's current_request, waits until the other one
    has too. Both are then in flight, and the first one's has been overwritten before either
    view reads its request."""
    # chalice.test.Client swaps os.environ for a copy around each request and back; from
    # several threads at once the swaps interleave and can leave a copy in place, which
    # botocore sessions made earlier no longer read. Put the real one back afterwards.
    monkeypatch.setattr(os, "environ", os.environ)
    both_in_flight = threading.Barrier(2)
    waited = threading.local()

    def current(chalice_app: object) -> object:
        return chalice_app.__dict__.get("current_request")

    def make_current(chalice_app: object, request: object) -> None:
        chalice_app.__dict__["current_request"] = request  # where Chalice itself keeps it
        if request is not None and not getattr(waited, "done", False):
            waited.done = True
            both_in_flight.wait(timeout=10)  # BrokenBarrierError: never two in flight at once

    # a data descriptor on the class wins over the attribute Chalice.__call__ assigns
    monkeypatch.setattr(type(app_module.app), "current_request",
                        property(current, make_current), raising=False)
    sizes = [(40, 24), (96, 56)]  # each request's query string and body differ

    with Client(app_module.app, stage_name="local") as client:
        def one(size: tuple[int, int]) -> tuple[int, int]:
            width, height = size
            response = client.http.post(
                f"/resize?width={width}&height={height}&format=png",
                body=imagefactory.png(imagefactory.gradient(width * 2, height * 3)),
                headers={"Content-Type": "image/png", "Accept": "image/png"})
            assert response.status_code == 200, response.body
            shape = decoded(response.body).shape
            return shape[1], shape[0]

        with ThreadPoolExecutor(max_workers=2) as pool:
            assert list(pool.map(one, sizes)) == sizes


@pytest.fixture
def encoded_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (height, width) of every image /resize encodes."""
    calls: list[tuple[int, int]] = []
    encode = imaging.encode

    def counting(image: np.ndarray, encoding: sizing.Encoding) -> bytes:
        calls.append(image.shape[:2])
        return encode(image, encoding)

    monkeypatch.setattr(imaging, "encode", counting)
    return calls


def test_an_answer_that_cannot_fit_is_refused_before_the_image_is_encoded(
        harness: Harness, encoded_rows: list[tuple[int, int]]) -> None:
    """4096x4096 WebP quality 100 of a detailed 1.7 MB upload: about 12 MB, where 4.5 MB fit.
    Only a sample of 1/16 of the rows is ever encoded."""
    noise = np.random.default_rng(7).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    upload = imagefactory.jpeg(image=noise, quality=50)
    response = harness.post("/resize?width=4096&height=4096&format=webp&quality=100", upload,
                            "image/jpeg", Accept="image/webp")
    assert response.status_code == 413, response.body
    answer = response.json_body
    assert answer["Code"] == "ImageTooLarge"
    assert f"at most {resizer.MAX_OUTPUT_BYTES} bytes" in answer["Message"]
    assert "would be about" in answer["Message"]
    size = re.search(r"\((\d+)x(\d+) or less always fits", answer["Message"])
    assert size is not None
    width, height = int(size[1]), int(size[2])
    assert width == height and 1024 <= width < 4096  # the shape asked for, scaled to fit
    assert encoded_rows and all(rows <= 4096 // 16 for rows, _ in encoded_rows)


def test_the_suggested_size_fits(harness: Harness) -> None:
    noise = np.random.default_rng(7).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    upload = imagefactory.jpeg(image=noise, quality=50)
    refused = harness.post("/resize?width=4096&height=4096&format=jpeg&quality=95", upload,
                           "image/jpeg", Accept="image/jpeg")
    assert refused.status_code == 413, refused.body
    size = re.search(r"\((\d+)x(\d+) or less always fits", refused.json_body["Message"])
    assert size is not None
    response = harness.post(f"/resize?width={size[1]}&height={size[2]}&format=jpeg&quality=95",
                            upload, "image/jpeg", Accept="image/jpeg")
    assert response.status_code == 200, response.body


@pytest.mark.parametrize("query,rows,sampled", [
    ("width=4096&height=4096&format=jpeg&quality=90", 4096, True),
    ("width=4096&height=4096&format=webp&quality=100", 4096, True),
    ("width=1200&height=1000&format=png", 1000, False),  # its stored rows fit: no sample
])
def test_large_answers_that_fit_are_encoded_once_and_answered(
        harness: Harness, encoded_rows: list[tuple[int, int]], query: str, rows: int,
        sampled: bool) -> None:
    upload = imagefactory.jpeg(image=imagefactory.gradient(640, 480))  # smooth: small output
    response = harness.post(f"/resize?{query}", upload, "image/jpeg", Accept="image/*")
    assert response.status_code == 200, response.body
    assert decoded(response.body).shape[0] == rows
    whole = [height for height, _ in encoded_rows if height == rows]
    samples = [height for height, _ in encoded_rows if height <= rows // 4]
    assert (len(whole), len(samples)) == (1, 1 if sampled else 0)
