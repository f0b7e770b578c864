"""Small, complete, upright JPEGs go to the endpoint untouched; everything else is resized."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cv2
import numpy as np
import pytest

from tests import imagefactory
from tests.corpus import generate
from tests.functional.conftest import Harness, endpoint_response, make_settings, probabilities

CAT = probabilities({285: 0.83})


@pytest.fixture
def sent(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Passthrough on (the default); yields what the endpoint received."""
    harness.use(make_settings(passthrough=True))
    seen: dict[str, Any] = {}
    harness.stubber.client.meta.events.register_first(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **_: seen.update(params))
    yield seen


def test_a_small_jpeg_is_sent_as_uploaded(harness: Harness, sent: dict[str, Any]) -> None:
    image = imagefactory.jpeg(640, 480)
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    response = harness.post("/predict", image, "image/jpeg")
    assert response.status_code == 200
    assert sent["Body"] == image and sent["ContentType"] == "application/x-image"


@pytest.mark.parametrize("image", [
    imagefactory.jpeg(1920, 1080),  # a reduced-scale decode makes resizing cheaper
    imagefactory.png(imagefactory.gradient(320, 240)),  # only JPEG passes through
    imagefactory.jpeg_with_orientation(imagefactory.gradient(320, 240), 6),  # EXIF-rotated
    imagefactory.jpeg(320, 240) + b"trailing",  # no EOI at the end
], ids=["1080p", "png", "exif-rotated", "no-eoi"])
def test_other_images_are_resized_and_re_encoded(
        harness: Harness, sent: dict[str, Any], image: bytes) -> None:
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    response = harness.post("/predict", image, "image/jpeg")
    assert response.status_code == 200, response.body
    assert sent["Body"] != image and sent["Body"].startswith(b"\x89PNG")


@pytest.mark.parametrize("orientations,portrait", [((6, 1), True), ((1, 6), False)],
                         ids=["rotated-first", "rotated-last"])
def test_a_jpeg_with_two_exif_blocks_is_sent_as_the_decoders_show_it(
        harness: Harness, sent: dict[str, Any], orientations: tuple[int, int],
        portrait: bool) -> None:
    """OpenCV and Pillow apply the first EXIF block: a photo rotated by it is never forwarded
    untouched, and one only a later block rotates is re-encoded too (a decoder reading that
    block would turn it), each sent as the first block shows it, with no EXIF left."""
    image = generate.jpeg_with_exif_blocks(imagefactory.gradient(320, 240), orientations)
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    response = harness.post("/predict", image, "image/jpeg")
    assert response.status_code == 200, response.body
    assert sent["Body"].startswith(b"\x89PNG")
    decoded = cv2.imdecode(np.frombuffer(sent["Body"], np.uint8), cv2.IMREAD_COLOR)
    height, width = decoded.shape[:2]
    assert (height > width) is portrait


def test_the_model_refusing_a_forwarded_upload_is_the_clients_400(
        harness: Harness, sent: dict[str, Any]) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", service_error_code="ModelError", http_status_code=424,
        service_message="Received client error (400)",
        modeled_fields={"OriginalStatusCode": 400, "OriginalMessage": "cannot decode"})
    # a JPEG sagegate finds whole but this model cannot read (sagegate itself now refuses the
    # corrupt ones before forwarding them: tests/functional/test_corpus.py)
    response = harness.post("/predict", imagefactory.jpeg(), "image/jpeg")
    assert response.status_code == 400, response.body
    assert response.json_body["Code"] == "InvalidImage"


def test_a_model_failure_on_a_forwarded_upload_stays_a_502(
        harness: Harness, sent: dict[str, Any]) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", service_error_code="ModelError", http_status_code=424,
        service_message="Received server error (500)",
        modeled_fields={"OriginalStatusCode": 500, "OriginalMessage": "out of memory"})
    response = harness.post("/predict", imagefactory.jpeg(), "image/jpeg")
    assert response.status_code == 502 and response.json_body["Code"] == "ModelError"


def test_passthrough_off_resizes_everything(harness: Harness) -> None:
    seen: dict[str, Any] = {}
    harness.stubber.client.meta.events.register_first(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **_: seen.update(params))
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    image = imagefactory.jpeg(640, 480)
    assert harness.post("/predict", image, "image/jpeg").status_code == 200
    assert seen["Body"].startswith(b"\x89PNG")
