"""A request's path through the code: read once, probed once, encoded by one encoder.

The request is read into validated options by chalicelib.reading alone, and the pipeline gets
them; the image header is probed, and every limit checked, once per request on every path
(passthrough, reduced decode, PNG and WebP uploads, /resize).
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import app as app_module
from chalicelib.images import imaging
from chalicelib.reading import bodies, options, resize
from tests import imagefactory
from tests.functional.conftest import Harness, endpoint_response, make_settings, probabilities

CAT = probabilities({282: 0.6})


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts the calls of the functions that read a request or inspect an image."""
    counted: Counter[str] = Counter()

    def counting(module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    counting(imaging, "probe")
    counting(imaging, "check_geometry")
    counting(imaging, "decode")
    counting(imaging, "encode_png")
    counting(bodies, "load_json")
    counting(options, "read_upload")  # the image kind's reader's
    counting(resize, "read_upload")  # /resize's reader's
    yield counted


UPLOADS = {
    "passthrough-jpeg": (lambda: imagefactory.jpeg(640, 480), "image/jpeg"),
    "reduced-jpeg": (lambda: imagefactory.jpeg(2000, 1500), "image/jpeg"),
    "png": (lambda: imagefactory.png(imagefactory.gradient(800, 600)), "image/png"),
    "webp": (lambda: imagefactory.webp(800, 600), "image/webp"),
}


@pytest.mark.parametrize("kind", sorted(UPLOADS))
@pytest.mark.parametrize("as_json", [False, True])
def test_predict_reads_the_request_and_probes_the_image_once(
        harness: Harness, calls: Counter[str], kind: str, as_json: bool) -> None:
    harness.use(make_settings(passthrough=True))
    make, content_type = UPLOADS[kind]
    upload = make()
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT))
    if as_json:
        body: bytes = json.dumps({"image": base64.b64encode(upload).decode(), "k": 2}).encode()
        response = harness.post("/predict", body, "application/json",
                                **{"X-Target-Variant": "AllTraffic"})
    else:
        response = harness.post("/predict?k=2", upload, content_type)
    assert response.status_code == 200, response.body
    assert calls["read_upload"] == 1
    assert calls["load_json"] == (1 if as_json else 0)
    assert calls["probe"] == 1
    assert calls["check_geometry"] == 1
    passthrough = kind == "passthrough-jpeg"
    # passthrough checks the data with one 1/8-scale decode; the others decode once
    assert calls["decode"] == 1
    assert calls["encode_png"] == (0 if passthrough else 1)


def test_resize_reads_the_request_and_probes_the_image_once(
        harness: Harness, calls: Counter[str]) -> None:
    response = harness.post("/resize?width=64&height=48&format=png",
                            imagefactory.jpeg(640, 480), "image/jpeg")
    assert response.status_code == 200, response.body
    assert (calls["read_upload"], calls["probe"], calls["check_geometry"], calls["decode"],
            calls["encode_png"]) == (1, 1, 1, 1, 1)


def test_the_pipeline_gets_the_options_the_reader_validated(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers, body fields and defaults all arrive through options.read_predict."""
    seen: list[Any] = []
    predictor = app_module.services.route().target.pipeline
    real = predictor.predict

    def spy(image: bytes, asked: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(asked)
        return real(image, asked, *args, **kwargs)
    monkeypatch.setattr(predictor, "predict", spy)
    harness.stubber.add_response("invoke_endpoint", endpoint_response(CAT, variant="B"))
    body = json.dumps({"data": base64.b64encode(imagefactory.jpeg()).decode(), "topk": 3})
    response = harness.post("/predict", body, **{"X-Target-Variant": "B",
                                                 "X-Custom-Attributes": "trace=1"})
    assert response.status_code == 200, response.body
    assert seen == [options.CallOptions(k=3, variant="B", custom_attributes="trace=1")]
