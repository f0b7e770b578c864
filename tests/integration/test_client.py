"""sagegate.client and ``sagegate predict`` against the real stack (chalice local, the
emulator's EfficientNet-Lite0): a folder of real photos with bad files among them, and the
fidelity of shrinking on the client."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from sagegate import cli
from sagegate.client import Client
from sagegate.client.fidelity import FIDELITY_BOUND, probability_vector, top5_deviation
from tests import imagefactory
from tests.integration.conftest import Stack, jpeg_of

pytestmark = pytest.mark.integration

CATS = {281, 282, 283, 284, 285, 287}
CUPS = {504, 967, 968}


@pytest.fixture
def folder(tmp_path: Path, photos: dict[str, bytes]) -> Path:
    """Real photos (one in a subfolder), a text file that is skipped, a text file named like
    a JPEG and a truncated JPEG."""
    (tmp_path / "big").mkdir()
    (tmp_path / "chelsea.jpg").write_bytes(photos["chelsea"])
    (tmp_path / "coffee.jpg").write_bytes(photos["coffee"])
    (tmp_path / "big" / "coffee-1080p.jpg").write_bytes(photos["coffee-1080p"])
    (tmp_path / "big" / "chelsea-12mp.jpeg").write_bytes(photos["chelsea-12mp"])
    (tmp_path / "notes.txt").write_text("not an image, not sent\n")
    (tmp_path / "fake.jpg").write_text("a text file named like a photo\n")
    (tmp_path / "broken.jpg").write_bytes(imagefactory.truncated(photos["coffee-1080p"]))
    return tmp_path


def run_json(stack: Stack, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = cli.main(["predict", *args, "--url", stack.api.url, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_folder_is_classified_and_bad_files_are_reported(
        stack: Stack, folder: Path, photos: dict[str, bytes],
        capsys: pytest.CaptureFixture[str]) -> None:
    code, entries = run_json(stack, str(folder), "--k", "3", capsys=capsys)
    assert code == 1
    by_name = {Path(entry["path"]).name: entry for entry in entries}
    assert sorted(by_name) == ["broken.jpg", "chelsea-12mp.jpeg", "chelsea.jpg",
                               "coffee-1080p.jpg", "coffee.jpg", "fake.jpg"]
    for name, classes in (("chelsea.jpg", CATS), ("chelsea-12mp.jpeg", CATS),
                          ("coffee.jpg", CUPS), ("coffee-1080p.jpg", CUPS)):
        entry = by_name[name]
        assert entry["ok"] is True, entry
        assert len(entry["predictions"]) == 3 and entry["predictions"][0]["index"] in classes
    for name in ("fake.jpg", "broken.jpg"):
        entry = by_name[name]
        assert entry["ok"] is False and entry["error"]["status"] == 400, entry
        assert entry["error"]["code"] == "InvalidImage" and entry["error"]["message"]
    assert "truncated" in by_name["broken.jpg"]["error"]["message"]
    # small photos went as they are; the large ones shrunk
    assert by_name["chelsea.jpg"]["bytes_sent"] == len(photos["chelsea"])
    for name, key in (("coffee-1080p.jpg", "coffee-1080p"), ("chelsea-12mp.jpeg",
                                                             "chelsea-12mp")):
        assert by_name[name]["bytes_original"] == len(photos[key])
        assert by_name[name]["bytes_sent"] < len(photos[key]) / 2


def test_only_good_files_exit_0_and_no_shrink_sends_originals(
        stack: Stack, folder: Path, photos: dict[str, bytes],
        capsys: pytest.CaptureFixture[str]) -> None:
    code, entries = run_json(stack, str(folder / "big"), "--no-shrink", "--concurrency", "2",
                             capsys=capsys)
    assert code == 0
    assert [e["bytes_sent"] for e in entries] == [len(photos["chelsea-12mp"]),
                                                  len(photos["coffee-1080p"])]


def test_the_table_and_csv_through_the_installed_command(stack: Stack, folder: Path) -> None:
    script = Path(sys.executable).parent / "sagegate"
    done = subprocess.run([str(script), "predict", str(folder), "--url", stack.api.url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "InvalidImage" in done.stdout and "tiger cat" in done.stdout.replace("\n", " ")
    assert "notes.txt" not in done.stdout
    done = subprocess.run([str(script), "predict", str(folder), "--url", stack.api.url,
                           "--format", "csv", "--k", "2"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("path,ok,bytes_original,bytes_sent,rank,index,label")
    assert len(lines) == 1 + 4 * 2 + 2


def test_resize_command_writes_the_image(stack: Stack, folder: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = folder / "small.png"
    code = cli.main(["resize", str(folder / "coffee.jpg"), "--width", "300", "--height", "100",
                     "--mode", "fill", "--format", "png", "-o", str(out), "--url",
                     stack.api.url])
    assert code == 0, capsys.readouterr().err
    image = cv2.imdecode(np.frombuffer(out.read_bytes(), np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (100, 300, 3)
    code = cli.main(["resize", str(folder / "fake.jpg"), "--width", "30", "--height", "10",
                     "--url", stack.api.url])
    assert code == 1 and "InvalidImage" in capsys.readouterr().err


def upscaled(photo: bytes, size: tuple[int, int]) -> bytes:
    """A fixture photo enlarged as the ``photos`` fixture enlarges them."""
    rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(photo, np.uint8), cv2.IMREAD_COLOR),
                       cv2.COLOR_BGR2RGB)
    return jpeg_of(cv2.resize(rgb, size, interpolation=cv2.INTER_CUBIC), 90)


SIZES = {"640x480": (640, 480), "1080p": (1920, 1080), "12mp": (4032, 3024)}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", ["chelsea", "coffee", "rocket"])
def test_shrinking_on_the_client_keeps_the_servers_answer(
        stack: Stack, photos: dict[str, bytes], name: str, size: str) -> None:
    original = upscaled(photos[name], SIZES[size])
    client = Client(stack.api.url)
    headers = {"X-Target-Variant": "Primary"}
    upload = client.prepare(original)
    as_is = client.send(client.prepare(original, shrink=False), 1000, headers=headers)
    shrunk = client.send(upload, 1000, headers=headers)
    direct, via = probability_vector(as_is), probability_vector(shrunk)
    deviation = top5_deviation(direct, via)
    print(f"client shrink {name} {size}: {len(original)} -> {len(upload.data)} bytes "
          f"({upload.content_type}), worst top-5 deviation {deviation:.4f}")
    assert int(np.argmax(via)) == int(np.argmax(direct))
    assert deviation <= FIDELITY_BOUND
    # lossless, decoded as the server decodes: the model is given the same tensor
    assert deviation <= 1e-6
    if size == "640x480":
        assert upload.data == original  # the server forwards it as it is
    else:
        assert len(upload.data) < len(original) and upload.content_type == "image/webp"
