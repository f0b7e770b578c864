"""sagegate.client: what it sends (shrink rules, encodings) and how it talks HTTP (retries,
Retry-After, API key, errors, keep-alive), against a tiny local http.server."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from chalicelib.core.retries import RETRY_COST, RetryQuota
from chalicelib.images import imaging, sizing
from chalicelib.images.probe import probe
from emulator.process import free_port
from sagegate.client import Client, http, inputs, shrinking
from sagegate.client import cli as predict_cli
from sagegate.client import http as http_client
from sagegate.client.http import ClientError
from sagegate.client.shrinking import Encoding, ShrinkRule, shrink
from tests import httpfake, imagefactory


def image_block(mode: str = "shorter-side", upscale: bool = False, passthrough: bool = True,
                max_pixels: int = 40_000_000) -> dict[str, Any]:
    """What GET /models/{name} says of an image model."""
    return {"name": "m", "pipeline": "image-classification",
            "image": {"resize": {"mode": mode, "shorter_side": 256, "width": 224,
                                 "height": 224, "upscale": upscale},
                      "passthrough": passthrough, "max_pixels": max_pixels}}


RULE = image_block()


def decoded(data: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


def photo_jpeg(width: int, height: int, quality: int = 90) -> bytes:
    return imagefactory.jpeg(image=imagefactory.photo("chelsea", width, height),
                             quality=quality)


# ---------------------------------------------------------------- shrink rules

def test_a_jpeg_the_server_forwards_is_sent_as_it_is() -> None:
    data = photo_jpeg(640, 480)
    assert shrink(data, RULE) == (data, "image/jpeg")


def test_without_server_passthrough_the_same_jpeg_is_shrunk() -> None:
    data = photo_jpeg(640, 480, quality=98)
    body, content_type = shrink(data, image_block(passthrough=False), Encoding.JPEG)
    assert content_type == "image/jpeg" and decoded(body).shape == (256, 341, 3)


@pytest.mark.parametrize(("size", "expected"), [((1920, 1080), (256, 455)),
                                                ((4032, 3024), (256, 341)),
                                                ((1080, 1920), (455, 256)),
                                                ((1364, 1023), (256, 341))])
def test_the_shorter_side_becomes_exactly_256(size: tuple[int, int],
                                              expected: tuple[int, int]) -> None:
    data = photo_jpeg(*size)
    body, content_type = shrink(data, RULE)
    assert content_type == "image/webp"
    assert decoded(body).shape[:2] == expected
    assert len(body) < len(data)


def test_the_shrunk_image_is_exactly_what_the_server_would_make() -> None:
    """Lossless: the pixels the server's own preprocessing makes of the original (reduced-scale
    decode included), so the model sees the same tensor either way."""
    data = photo_jpeg(4032, 3024)
    plan = sizing.plan_resize("shorter-side", 224, 224, 256)
    server = imaging.decode_and_resize(data, probe(data), plan, sizing.Limits())
    for encoding in (Encoding.WEBP, Encoding.PNG):
        body, _ = shrink(data, RULE, encoding)
        assert np.array_equal(decoded(body), server), encoding


def test_encodings_have_their_content_types() -> None:
    data = photo_jpeg(1920, 1080)
    kinds = {encoding: shrink(data, RULE, encoding) for encoding in Encoding}
    assert {e: kind for e, (_, kind) in kinds.items()} == {
        Encoding.WEBP: "image/webp", Encoding.PNG: "image/png", Encoding.JPEG: "image/jpeg"}
    assert kinds[Encoding.WEBP][0][:4] == b"RIFF" and kinds[Encoding.PNG][0][:4] == b"\x89PNG"
    # the default is the smaller lossless one
    assert shrinking.DEFAULT_ENCODING == Encoding.WEBP
    assert len(kinds[Encoding.WEBP][0]) < len(kinds[Encoding.PNG][0])


def test_a_small_image_is_never_enlarged() -> None:
    data = imagefactory.png(imagefactory.photo("coffee", 300, 200))
    assert shrink(data, RULE) == (data, "image/png")
    # nor when the server enlarges: it gets the original to enlarge itself
    data = photo_jpeg(200, 150)
    assert shrink(data, image_block("fill", upscale=True)) == (data, "image/jpeg")


def test_when_shrinking_would_not_make_it_smaller_the_original_goes() -> None:
    # 8x8 blocks of noise at quality 5: a small JPEG, and a shrunk image that stays noisy
    blocks = np.random.default_rng(1).integers(0, 256, (135, 240, 3), dtype=np.uint8)
    noise = cv2.resize(blocks, (1920, 1080), interpolation=cv2.INTER_NEAREST)
    data = imagefactory.jpeg(image=noise, quality=5)
    body, content_type = shrink(data, RULE)
    assert (body, content_type) == (data, "image/jpeg")


def test_an_exif_rotated_photo_is_sent_upright() -> None:
    upright = imagefactory.photo("rocket", 1080, 1920)
    data = imagefactory.jpeg_rotated_by_exif(upright, 6)
    body, _ = shrink(data, RULE)
    sent = decoded(body)
    assert sent.shape == (455, 256, 3)
    expected = cv2.resize(upright, (256, 455), interpolation=cv2.INTER_AREA)
    assert float(np.abs(sent.astype(int) - expected).mean()) < 3.0
    assert body[:4] == b"RIFF"  # no EXIF left to rotate it again


@pytest.mark.parametrize("mode", ["stretch", "fit", "fill"])
def test_box_modes_shrink_to_the_model_input(mode: str) -> None:
    data = photo_jpeg(1920, 1080)
    body, _ = shrink(data, image_block(mode))
    image = decoded(body)
    plan = sizing.plan_resize(mode, 224, 224)
    assert image.shape == imaging.resize(decoded(data), plan).shape == (224, 224, 3)


@pytest.mark.parametrize("data", [b"hello, not an image", imagefactory.truncated(
    imagefactory.jpeg(image=imagefactory.photo("coffee", 1920, 1080))),
    imagefactory.corrupt_jpeg()])
def test_what_the_client_cannot_read_goes_as_it_is_for_the_server_to_judge(
        data: bytes) -> None:
    body, _ = shrink(data, RULE)
    assert body == data


def test_an_image_over_the_servers_pixel_limit_goes_as_it_is() -> None:
    data = photo_jpeg(1920, 1080)
    assert shrink(data, image_block(max_pixels=1_000_000))[0] == data


def test_a_model_without_images_has_no_rule() -> None:
    assert ShrinkRule.from_model({"name": "iris", "pipeline": "tensor"}) is None
    assert shrink(b"x,y", {"name": "iris"}) == (b"x,y", "application/octet-stream")
    rule = ShrinkRule.from_model(RULE)
    assert rule is not None and rule.plan.shorter_side == 256 and rule.passthrough


def test_retry_after_is_bounded() -> None:
    assert http.retry_after_seconds("2") == 2.0
    assert http.retry_after_seconds("3600") == http.MAX_RETRY_AFTER_S
    assert http.retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert http.retry_after_seconds(None) is None  # the policy's backoff, then
    assert http.retry_after_seconds("soon") is None


# ---------------------------------------------------------------- HTTP

class Script:
    """What the tiny server answers, in turn, and what it was asked."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        self.default: tuple[int, dict[str, str], bytes] = (200, {}, b"{}")
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def answer(self, request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.requests.append(request)
            if request["path"].split("?")[0] in self.routes:
                return self.routes[request["path"].split("?")[0]]
            return self.answers.pop(0) if self.answers else self.default


def json_answer(status: int, body: Any, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(body).encode()


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    with httpfake.serve(script.answer) as url:
        yield url, script


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(http_client, "_sleep", slept.append)
    monkeypatch.setattr(http_client, "_random", lambda: 1.0)  # full jitter at its top
    return slept


PREDICTION = {"predictions": [{"index": 282, "label": "tiger cat", "probability": 0.38}]}


def test_a_503_is_retried_after_its_retry_after(server: tuple[str, Script],
                                                 sleeps: list[float]) -> None:
    url, script = server
    script.answers = [json_answer(503, {"Code": "EndpointUnavailable", "Message": "busy"},
                                  **{"Retry-After": "2"}), json_answer(200, PREDICTION)]
    answer = Client(url).predict(b"any bytes", k=1, shrink=False)
    assert answer == PREDICTION
    assert len(script.requests) == 2 and sleeps == [2.0]
    assert [r["path"] for r in script.requests] == ["/predict?k=1"] * 2


def test_retries_are_bounded_then_the_503_is_the_error(server: tuple[str, Script],
                                                       sleeps: list[float]) -> None:
    url, script = server
    script.default = json_answer(503, {"Code": "EndpointUnavailable", "Message": "busy"},
                                 **{"Retry-After": "3600"})
    with pytest.raises(ClientError) as raised:
        Client(url, retries=2).predict(b"x", shrink=False)
    assert (raised.value.status, raised.value.code, raised.value.message) == (
        503, "EndpointUnavailable", "busy")
    assert len(script.requests) == 3
    assert sleeps == [http.MAX_RETRY_AFTER_S] * 2


def test_a_connection_that_fails_is_retried_then_reported(sleeps: list[float]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ClientError) as raised:
        Client(url, retries=2, timeout=2).models()
    assert (raised.value.status, raised.value.code) == (0, "ConnectionError")
    assert sleeps == [0.25, 0.5]


def test_the_backoff_is_jittered(monkeypatch: pytest.MonkeyPatch, sleeps: list[float]) -> None:
    """Clients failing together do not come back together: each wait is drawn below the
    ceiling (0.25 s, 0.5 s ...)."""
    monkeypatch.setattr(http_client, "_random", iter([0.2, 0.6]).__next__)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ClientError):
        Client(url, retries=2, timeout=2).models()
    assert sleeps == [pytest.approx(0.05), pytest.approx(0.3)]


def test_a_failing_server_sees_at_most_the_quotas_retries(server: tuple[str, Script],
                                                         sleeps: list[float]) -> None:
    """The client's quota (botocore's: 14 a retry, 1 back a success) is shared by its
    requests: once spent, a 503 is returned at once instead of being sent again."""
    url, script = server
    script.default = json_answer(503, {"Code": "EndpointUnavailable", "Message": "busy"})
    client = Client(url, retries=3)
    client.quota = RetryQuota(capacity=2 * RETRY_COST)
    for _ in range(4):
        with pytest.raises(ClientError):
            client.models()
    assert len(script.requests) == 4 + 2 and len(sleeps) == 2
    script.default = json_answer(200, {"models": []})
    client.models()
    assert client.quota.available == 1  # a success puts one back


def test_the_api_key_goes_as_x_api_key(server: tuple[str, Script]) -> None:
    url, script = server
    script.default = json_answer(200, {"default": "m", "models": []})
    Client(url, "secret-key").models()
    Client(url).models()
    assert script.requests[0]["headers"].get("x-api-key") == "secret-key"
    assert "x-api-key" not in {name.lower() for name in script.requests[1]["headers"]}


def test_error_answers_raise_client_error(server: tuple[str, Script]) -> None:
    url, script = server
    script.answers = [json_answer(400, {"Code": "InvalidImage", "Message": "not an image",
                                        "request_id": "r"}),
                      (502, {"Content-Type": "text/html"}, b"<h1>Bad gateway</h1>"),
                      json_answer(403, {"message": "Forbidden"})]
    client = Client(url, retries=0)
    errors = []
    for _ in range(3):
        with pytest.raises(ClientError) as raised:
            client.predict(b"x", shrink=False)
        errors.append((raised.value.status, raised.value.code, raised.value.message))
    assert errors == [(400, "InvalidImage", "not an image"),
                      (502, "HTTP502", "<h1>Bad gateway</h1>"), (403, "HTTP403", "Forbidden")]


def test_one_keep_alive_connection_serves_many_requests(server: tuple[str, Script]) -> None:
    url, script = server
    script.default = json_answer(200, PREDICTION)
    client = Client(url)
    for _ in range(5):
        client.predict(b"x", shrink=False)
    assert len({r["peer"] for r in script.requests}) == 1


def test_predict_shrinks_by_the_default_models_rule_asked_once(
        server: tuple[str, Script]) -> None:
    url, script = server
    script.routes = {"/models": json_answer(200, {"default": "m", "models": []}),
                     "/models/m": json_answer(200, RULE)}
    script.default = json_answer(200, PREDICTION)
    client = Client(url)
    big = photo_jpeg(1920, 1080)
    assert client.predict(big) == PREDICTION
    assert client.predict(big, k=3) == PREDICTION
    posts = [r for r in script.requests if r["method"] == "POST"]
    assert [r["path"] for r in script.requests if r["method"] == "GET"] == ["/models",
                                                                            "/models/m"]
    assert posts[0]["headers"]["Content-Type"] == "image/webp"
    assert posts[0]["body"] == shrink(big, RULE)[0] and posts[1]["path"] == "/predict?k=3"


def test_a_named_model_has_its_own_route_and_rule(server: tuple[str, Script]) -> None:
    url, script = server
    script.routes = {"/models/iris": json_answer(200, {"name": "iris", "pipeline": "tensor"})}
    script.default = json_answer(200, {"predictions": [[0.9]]})
    Client(url).predict(b"5.1,3.5,1.4,0.2", k=1, model="iris")
    assert [(r["method"], r["path"]) for r in script.requests] == [
        ("GET", "/models/iris"), ("POST", "/models/iris/predict?k=1")]
    assert script.requests[1]["body"] == b"5.1,3.5,1.4,0.2"


def test_resize_asks_for_the_image_itself(server: tuple[str, Script]) -> None:
    url, script = server
    script.default = (200, {"Content-Type": "image/png"}, b"\x89PNG...")
    out = Client(url).resize(photo_jpeg(640, 480), 300, 100, "fill", "png")
    assert out == b"\x89PNG..."
    request = script.requests[0]
    assert request["path"] == "/resize?width=300&height=100&mode=fill&format=png"
    assert request["headers"]["Accept"] == "image/png"
    assert request["headers"]["Content-Type"] == "image/jpeg"


# ---------------------------------------------------------------- CLI pieces

def test_directories_give_their_image_files_by_extension_or_magic(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.jpg").write_bytes(b"not really")
    (tmp_path / "sub" / "b.PNG").write_bytes(b"x")
    (tmp_path / "sub" / "IMG_0001").write_bytes(photo_jpeg(64, 48))
    (tmp_path / "notes.txt").write_text("hello")
    found = inputs.collect([str(tmp_path)])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "a.jpg", "sub/IMG_0001", "sub/b.PNG"]
    # a file named is always taken
    assert inputs.collect([str(tmp_path / "notes.txt")]) == [tmp_path / "notes.txt"]


@pytest.mark.parametrize("argv", [["predict", "no/such/path"], ["predict"],
                                  ["predict", "samples", "--k", "0"],
                                  ["resize", "x.jpg", "--width", "10"]])
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from sagegate import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == 2
    assert f"usage: sagegate {argv[0]}" in capsys.readouterr().err


def test_an_empty_directory_is_a_usage_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        predict_cli.main([str(tmp_path)], prog="sagegate predict")
    assert stopped.value.code == 2
    assert "no image files found" in capsys.readouterr().err
