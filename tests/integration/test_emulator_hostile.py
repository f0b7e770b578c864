"""The emulator under hostile input, called directly (boto3 and raw HTTP), as anyone can.

Every input gets a modeled SageMaker error (boto3 raises its class), never a 500, a hang or
a dead process; afterwards the process still serves, its peak memory stays bounded and its
log holds no traceback. One emulator for the module, started here (its PID is ours).
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from PIL import Image

from emulator.process import EmulatorProcess, start_emulator
from sagegate.local.processes import peak_rss_mb
from tests import imagefactory
from tests.integration.test_emulator import ENDPOINT, MODEL, invoke, jpeg_of, make_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PATH = f"/endpoints/{ENDPOINT}/invocations"
PEAK_RSS_LIMIT_MB = 1000
"""The emulator's peak memory after everything below: about 135 MB with the model loaded,
about 640 MB after eight concurrent 36-megapixel decodes two at a time (about 1.5 GB when all
eight decode at once). Unbounded, a 65500x1 JPEG alone took 23.6 GB."""


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    config = {"allow_fault_header": True, "models": {"lite0": {"path": str(MODEL)}},
              "endpoints": {ENDPOINT: {"variants": [{"name": "AllTraffic", "model": "lite0"}]}}}
    path = tmp_path_factory.mktemp("hostile") / "config.json"
    path.write_text(json.dumps(config))
    with start_emulator(path, timeout=60) as process:
        yield process


@pytest.fixture(scope="module")
def client(emulator: EmulatorProcess) -> Any:
    return make_client(emulator.url)


def pil_bytes(kind: str, width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, kind)
    return out.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG of a few hundred bytes whose header declares width x height (one zero row)."""
    return imagefactory.png_bomb(width, height)


def png_zero_width() -> bytes:
    data = bytearray(imagefactory.png_bomb(16, 16))
    struct.pack_into(">I", data, 16, 0)  # IHDR width (CRC now wrong too)
    return bytes(data)


HOSTILE_IMAGES: dict[str, tuple[Callable[[], bytes], int, str]] = {
    # name: (body, original status, what the message says)
    "jpeg-65500x1": (lambda: imagefactory.jpeg(65500, 1), 400, "aspect ratio"),
    "jpeg-1x65500": (lambda: imagefactory.jpeg(1, 65500), 400, "aspect ratio"),
    "png-100000x1-177-bytes": (lambda: png_header_only(100_000, 1), 400, "aspect ratio"),
    "png-33x1": (lambda: imagefactory.png(imagefactory.gradient(33, 1)), 400, "aspect ratio"),
    "png-header-9000x9000": (lambda: png_header_only(9000, 9000), 400, "exceeds"),
    "png-bomb": (imagefactory.png_bomb, 400, "too many pixels"),
    "jpeg-bomb": (imagefactory.jpeg_bomb, 400, "too many pixels"),
    "png-zero-width": (png_zero_width, 400, ""),
    "png-truncated": (lambda: imagefactory.truncated(
        imagefactory.png(imagefactory.gradient(300, 200)), 0.5), 400, ""),
    "jpeg-header-only": (lambda: imagefactory.jpeg(640, 480)[:300], 400, ""),
    "jpeg-corrupt-tables": (imagefactory.corrupt_jpeg, 400, "could not be decoded"),
    "garbage": (lambda: b"\x00\x01garbage" * 100, 400, "not recognised"),
    "empty": (lambda: b"", 400, "empty payload"),
    "gif": (lambda: pil_bytes("GIF"), 400, "not supported"),
    "tiff": (lambda: pil_bytes("TIFF"), 400, "not supported"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_IMAGES))
def test_hostile_image_is_a_model_error(client: Any, name: str) -> None:
    make, status, says = HOSTILE_IMAGES[name]
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, make(), ContentType="image/png" if "png" in name else "image/jpeg")

    response = raised.value.response
    assert response["OriginalStatusCode"] == status
    assert says in response["OriginalMessage"]
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424


def test_the_aspect_bound_still_lets_a_32_to_1_panorama_through(client: Any) -> None:
    image = imagefactory.png(imagefactory.gradient(32 * 40, 40))

    probabilities = json.loads(invoke(client, image, ContentType="image/png")["Payload"])

    assert len(probabilities) == 1000


@pytest.mark.parametrize(
    ("content_type", "body", "accept", "status"),
    [
        ("text/csv", b"1,2,3", None, 415),
        ("application/jsonlines", b'{"not json', None, 415),
        ("application/json", b'{"instances": [[1, 2]]}', None, 415),
        ("image/jpeg", None, "text/html", 406),
    ],
    ids=["csv", "invalid-jsonlines", "json", "accept-html"],
)
def test_wrong_content_types_are_model_errors(
    client: Any, content_type: str, body: bytes | None, accept: str | None, status: int
) -> None:
    options = {"Accept": accept} if accept else {}
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, body or imagefactory.jpeg(64, 48), ContentType=content_type, **options)

    assert raised.value.response["OriginalStatusCode"] == status


def raw(emulator: EmulatorProcess, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends raw bytes on a fresh connection and reads one answer."""
    with socket.create_connection((emulator.host, emulator.port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


def request_bytes(headers: dict[str, str], body: bytes = b"", path: str = PATH) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: localhost"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


MB_CHUNK = b"100000\r\n" + b"\0" * 0x100000 + b"\r\n"
CHUNKED = {"Transfer-Encoding": "chunked"}


@pytest.mark.parametrize(
    ("data", "status"),
    [
        pytest.param(request_bytes({"Content-Length": str(10**12)}), 400, id="length-1-tb"),
        pytest.param(request_bytes({"Content-Length": "-5"}), 400, id="length-negative"),
        pytest.param(request_bytes(CHUNKED, b"7fffffff\r\n"), 400, id="one-chunk-of-2-gb"),
        pytest.param(request_bytes(CHUNKED, b"zz\r\n"), 400, id="chunk-size-garbage"),
        pytest.param(request_bytes(CHUNKED, MB_CHUNK * 7 + b"0\r\n\r\n"), 400,
                     id="chunked-7-mb"),
        pytest.param(request_bytes({"Content-Length": "1000"}, b"abc"), 400,
                     id="body-ends-early"),
        pytest.param(request_bytes({"Content-Length": "0"}, path="/endpoints/%00-x/invocations"),
                     400, id="bad-endpoint-name"),
        pytest.param(request_bytes({f"X-H{i}": "v" for i in range(150)}), 431,
                     id="150-headers"),
        pytest.param(request_bytes({"X-Big": "v" * 100_000}), 431, id="header-of-100-kb"),
        pytest.param(b"GARBAGE\r\n\r\n", 400, id="garbage-request-line"),
    ],
)
def test_hostile_http_gets_a_json_error_envelope(
    emulator: EmulatorProcess, data: bytes, status: int
) -> None:
    answer_status, headers, body = raw(emulator, data)

    assert answer_status == status
    assert headers["Content-Type"] == "application/json"
    assert headers["x-amzn-ErrorType"]
    assert json.loads(body)["message"]


def test_a_client_that_gives_up_costs_one_log_line_not_a_traceback(
    emulator: EmulatorProcess,
) -> None:
    body = imagefactory.jpeg(64, 48)
    headers = {"Content-Type": "image/jpeg", "Content-Length": str(len(body)),
               "X-Amzn-SageMaker-Custom-Attributes": "emulator-latency-ms=400",
               "X-Amzn-SageMaker-Inference-Id": "gave-up"}
    for _ in range(3):
        with socket.create_connection((emulator.host, emulator.port), timeout=5) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(request_bytes(headers, body))
        # closed with a reset before the answer: the emulator's write fails
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and emulator.stderr_tail().count("iid=gave-up") < 3:
        time.sleep(0.1)

    tail = emulator.stderr_tail()
    assert tail.count("iid=gave-up") == 3
    assert "client gone" in tail
    assert "Traceback" not in tail


def test_concurrent_large_images_keep_memory_bounded(client: Any) -> None:
    """Eight 36-megapixel images at once (allowed, each about 110 MB decoded): the emulator
    decodes two at a time, so its peak stays far from 8 x 110 MB on top of the model."""
    big = imagefactory.jpeg(6000, 6000, quality=50)

    def one(_: int) -> int:
        return len(json.loads(invoke(client, big)["Payload"]))

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(one, range(8))) == [1000] * 8


def test_after_everything_it_still_serves_and_memory_stayed_bounded(
    emulator: EmulatorProcess, client: Any
) -> None:
    """Runs last in this module (pytest keeps file order)."""
    chelsea = jpeg_of(np.ascontiguousarray(imagefactory.gradient(320, 240)[:, :, ::-1]))

    assert emulator.process.poll() is None
    assert len(json.loads(invoke(client, chelsea)["Payload"])) == 1000
    peak = peak_rss_mb(emulator.pid)
    print(f"emulator peak RSS {peak:.0f} MB")
    assert peak < PEAK_RSS_LIMIT_MB
    assert "Traceback" not in emulator.stderr_tail()
