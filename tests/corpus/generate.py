"""The hostile corpus: every request sagegate must answer without a 500, a hang or a memory
blow-up, each with the answer it must give. Generated, deterministically, never committed.

    python -m tests.corpus.generate DIR    # writes DIR/<case>.bin and DIR/manifest.json

The tests call :func:`cases` directly (tests/functional/test_corpus.py through Chalice's test
client, tests/integration/test_corpus.py through ``chalice local`` and the emulator).
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import io
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from tests import imagefactory

OK = 200


@dataclasses.dataclass(frozen=True)
class Case:
    """One request and the answer it must get.

    Attributes:
        name: unique, stable id.
        route: ``/predict`` or ``/resize``.
        body: the raw body.
        content_type: the Content-Type header, or None to send none.
        query: the query string (without ``?``).
        headers: further headers.
        status: the status it must answer.
        code: the error ``Code`` it must answer (None for 200).
        says: a fragment the error message must contain.
    """

    name: str
    route: str
    body: bytes
    content_type: str | None
    status: int
    code: str | None = None
    query: str = ""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    says: str = ""

    @property
    def path(self) -> str:
        return self.route + ("?" + self.query if self.query else "")

    def request_headers(self) -> dict[str, str]:
        ctype = {} if self.content_type is None else {"Content-Type": self.content_type}
        return {**ctype, **self.headers}

    def manifest(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        fields["body"] = {"bytes": len(self.body),
                          "sha256": hashlib.sha256(self.body).hexdigest()}
        return fields


def _photo(width: int, height: int, seed: int = 1) -> np.ndarray:
    """A gradient with noise: compresses like a photo, not like a flat test card."""
    noise = np.random.default_rng(seed).integers(-24, 24, (height, width, 3))
    return np.clip(imagefactory.gradient(width, height).astype(int) + noise, 0, 255).astype(
        np.uint8)


def _pil(image: np.ndarray, fmt: str, mode: str = "RGB", **options: Any) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image[:, :, ::-1])).convert(mode).save(
        out, fmt, **options)
    return out.getvalue()


def _with_frame_size(jpeg: bytes, width: int, height: int) -> bytes:
    data = bytearray(jpeg)
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def _png_header_only(width: int, height: int) -> bytes:
    """A tiny valid PNG declaring ``width`` x ``height`` (one compressed row of zeros)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    idat = zlib.compress(b"\x00" * (width + 1), 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)
            + chunk(b"IEND", b""))


def _webp_bomb() -> bytes:
    """A VP8X WebP header declaring 16384x16384 over a tiny image."""
    small = bytearray(imagefactory.webp(16, 16))
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00" + (16383).to_bytes(3, "little") \
        + (16383).to_bytes(3, "little")
    body = vp8x + bytes(small[12:])
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def _grey(width: int, height: int) -> np.ndarray:
    return np.full((height, width, 3), 128, np.uint8)


def valid_images() -> Iterator[tuple[str, bytes, str]]:
    """(name, bytes, content type) of images sagegate must accept."""
    photo = _photo(640, 480)
    yield "jpeg-640x480", imagefactory.jpeg(image=photo), "image/jpeg"
    yield "jpeg-1920x1080", imagefactory.jpeg(image=_photo(1920, 1080, 2)), "image/jpeg"
    yield "jpeg-progressive", _pil(photo, "JPEG", progressive=True, quality=85), "image/jpeg"
    yield "jpeg-optimized", _pil(photo, "JPEG", optimize=True, quality=85), "image/jpeg"
    yield "jpeg-grey", _pil(photo, "JPEG", "L"), "image/jpeg"
    yield "jpeg-cmyk", _pil(photo, "JPEG", "CMYK"), "image/jpeg"
    _ok, restart = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_RST_INTERVAL, 4])
    yield "jpeg-restart-markers", restart.tobytes(), "image/jpeg"
    yield "jpeg-flat-grey-128", imagefactory.jpeg(image=_grey(320, 240)), "image/jpeg"
    yield "jpeg-1x1", imagefactory.jpeg(image=_grey(1, 1)), "image/jpeg"
    yield "jpeg-20x1", imagefactory.jpeg(image=_photo(20, 1)), "image/jpeg"
    yield "jpeg-1x20", imagefactory.jpeg(image=_photo(1, 20)), "image/jpeg"
    yield "jpeg-panorama-9to1", imagefactory.jpeg(image=_photo(3600, 400, 3)), "image/jpeg"
    yield "png-rgb", imagefactory.png(_photo(200, 150)), "image/png"
    yield "png-rgba", imagefactory.png_rgba(), "image/png"
    yield "png-grey", imagefactory.png_grey(), "image/png"
    yield "png-16-bit", imagefactory.png_16bit(), "image/png"
    yield "png-palette", _pil(_photo(64, 48), "PNG", "P"), "image/png"
    yield "png-1-bit", _pil(_photo(64, 48), "PNG", "1"), "image/png"
    yield "png-1x1", imagefactory.png(_grey(1, 1)), "image/png"
    yield "webp-lossy", imagefactory.webp(), "image/webp"
    yield "webp-lossless", imagefactory.webp(lossless=True), "image/webp"


def _image_cases() -> Iterator[Case]:
    for name, data, ctype in valid_images():
        yield Case(f"predict-{name}", "/predict", data, ctype, OK)
        yield Case(f"resize-fill-{name}", "/resize", data, ctype, OK,
                   query="width=64&height=48&mode=fill&format=png")
    yield Case("predict-jpg-misspelt-type", "/predict", imagefactory.jpeg(), "image/jpg", OK)
    yield Case("predict-jpeg-after-a-megabyte-of-fill-bytes", "/predict",  # legal, if odd
               b"\xff\xd8" + b"\xff" * (1 << 20) + imagefactory.jpeg()[2:], "image/jpeg", OK)
    yield Case("predict-as-octet-stream", "/predict", imagefactory.jpeg(),
               "application/octet-stream", OK)
    yield Case("predict-type-in-capitals-with-parameter", "/predict", imagefactory.jpeg(),
               "IMAGE/JPEG; charset=binary", OK)
    yield Case("resize-fill-20to1-crops-first", "/resize", imagefactory.png(_photo(2000, 100)),
               "image/png", OK, query="width=2048&height=2048&mode=fill")


def _damaged_jpegs() -> Iterator[tuple[str, bytes, str]]:
    photo = imagefactory.jpeg(image=_photo(640, 480))
    large = imagefactory.jpeg(image=_photo(1920, 1080, 2))
    progressive = _pil(_photo(640, 480), "JPEG", progressive=True, quality=85)
    _ok, restart = cv2.imencode(".jpg", _photo(640, 480), [cv2.IMWRITE_JPEG_RST_INTERVAL, 4])
    yield "cut", photo[: len(photo) * 6 // 10], "truncated"
    yield "half-plus-eoi", photo[: len(photo) // 2] + b"\xff\xd9", "truncated"
    yield "large-half-plus-eoi", large[: len(large) // 2] + b"\xff\xd9", "truncated"
    yield "ninety-percent-plus-eoi", photo[: len(photo) * 9 // 10] + b"\xff\xd9", "truncated"
    # cut before its last scans (a cut inside the last refinement scan is not detected: every
    # block is there, at a little less precision)
    yield "progressive-cut-plus-eoi", progressive[: len(progressive) * 3 // 10] + b"\xff\xd9", \
        "truncated"
    yield "restart-half-plus-eoi", restart.tobytes()[: len(restart) // 2] + b"\xff\xd9", \
        "truncated"
    yield "header-6000x6000-over-451x300", _with_frame_size(imagefactory.jpeg(451, 300), 6000,
                                                              6000), "truncated"
    middle = len(photo) // 2
    yield "marker-inside-data", photo[:middle] + b"\xff\x12" + photo[middle + 2:], "corrupt"
    yield "bad-huffman-table", imagefactory.corrupt_jpeg(), ""
    yield "soi-only", b"\xff\xd8\xff", ""
    yield "100000-comment-segments", b"\xff\xd8" + b"\xff\xfe\x00\x02" * 100_000 + photo[2:], \
        "markers"
    sos = photo.find(b"\xff\xda")
    yield "100000-restart-markers-in-header", photo[:sos] + b"\xff\xd0" * 100_000 + photo[sos:], \
        "markers"
    yield "no-scan", photo[: photo.find(b"\xff\xda")] + b"\xff\xd9", ""


def _bad_image_cases() -> Iterator[Case]:
    for name, data, says in _damaged_jpegs():
        yield Case(f"jpeg-{name}", "/predict", data, "image/jpeg", 400, "InvalidImage", says=says)
    png = imagefactory.png(_photo(200, 150))
    idat = png.find(b"IDAT")
    webp = imagefactory.webp()
    bad = [("png-cut", png[: len(png) // 2]),
           ("png-idat-zeroed", png[: idat + 40] + bytes(20) + png[idat + 60:]),
           ("png-idat-cut-with-iend", png[: idat + 100] + png[-12:]),
           ("webp-cut", webp[: len(webp) // 2]),
           ("gif", _pil(_photo(32, 32), "GIF")), ("bmp", _pil(_photo(32, 32), "BMP")),
           ("text", b"hello, world"), ("zeros", bytes(4096)),
           ("random", np.random.default_rng(5).integers(0, 256, 4096, np.uint8).tobytes())]
    for name, data in bad:
        yield Case(f"image-{name}", "/predict", data, "image/jpeg", 400, "InvalidImage")
    elongated = [("jpeg-65500x1", imagefactory.jpeg(image=_grey(65500, 1))),
                 ("png-100000x1", _png_header_only(100_000, 1)),
                 ("jpeg-21x1", imagefactory.jpeg(image=_photo(21, 1))),
                 ("png-1x30000", _png_header_only(1, 30_000))]
    for name, data in elongated:
        yield Case(f"aspect-{name}", "/predict", data, "image/jpeg", 400, "InvalidImage",
                   says="aspect ratio")
    fill_bombs = [("20000x1-at-224", _png_header_only(20_000, 1), "width=224&height=224"),
                  ("1000000x1-at-2048", _png_header_only(1_000_000, 1), "width=2048&height=2048")]
    for name, data, size in fill_bombs:
        yield Case(f"resize-fill-{name}", "/resize", data, "image/png", 400, "InvalidImage",
                   query=size + "&mode=fill", says="aspect ratio")
    bombs = [("jpeg-65000x65000", imagefactory.jpeg_bomb()),
             ("png-100000x100000", imagefactory.png_bomb()), ("webp-16384x16384", _webp_bomb())]
    for name, data in bombs:
        yield Case(f"bomb-{name}", "/predict", data, "image/jpeg", 413, "ImageTooLarge")
    yield Case("resize-output-over-limit", "/resize", imagefactory.jpeg(), "image/jpeg", 413,
               "ImageTooLarge", query="width=8192&height=8192")
    yield Case("empty-binary-body", "/predict", b"", "image/jpeg", 400, "MissingImage")


def _nested(depth: int, leaf: str = "1") -> bytes:
    return ("[" * depth + leaf + "]" * depth).encode()


def _json_cases() -> Iterator[Case]:
    image = base64.b64encode(imagefactory.jpeg()).decode()
    deep_object = ('{"a":' * 50_000 + "1" + "}" * 50_000).encode()
    invalid = [("brackets-100000", b"[" * 100_000 + b"]" * 100_000),
               ("image-nested-100000", b'{"image": ' + _nested(100_000) + b"}"),
               ("objects-50000", deep_object), ("invalid-utf8", b'{"image": "\xff\xfe"}'),
               ("not-json", b"{not json"), ("empty", b""), ("null", b"null"),
               ("array", b"[1, 2]"), ("string", b'"text"'), ("number", b"12"),
               ("nan-only", b"NaN"), ("trailing-garbage", b'{"image": "x"} x')]
    for name, body in invalid:
        yield Case(f"json-{name}", "/predict", body, "application/json", 400, "InvalidJSON")
    yield Case("json-without-content-type", "/predict", imagefactory.jpeg(), None, 400,
               "InvalidJSON", says="Content-Type")
    yield Case("json-ok", "/predict", json.dumps({"image": image, "k": 3}).encode(),
               "application/json", OK)
    yield Case("json-utf8-charset", "/predict", json.dumps({"image": image}).encode(),
               "application/json; charset=utf-8", OK)
    yield Case("json-data-url", "/predict", json.dumps(
        {"image": "data:image/jpeg;base64," + image}).encode(), "application/json", OK)
    yield Case("json-image-nested-50", "/predict", b'{"image": ' + _nested(50) + b"}",
               "application/json", 400, "InvalidBase64")
    big = "A" * (1 << 20)
    yield Case("json-megabyte-of-base64-zeros", "/predict",
               json.dumps({"image": big}).encode(), "application/json", 400, "InvalidImage")
    yield Case("json-megabyte-not-base64", "/predict",
               json.dumps({"image": "%" * (1 << 20)}).encode(), "application/json", 400,
               "InvalidBase64")
    yield Case("json-megabyte-key", "/predict", json.dumps({"image": image, big: 1}).encode(),
               "application/json", 400, "InvalidParameter")
    yield Case("json-megabyte-k", "/predict", json.dumps({"image": image, "k": big}).encode(),
               "application/json", 400, "InvalidParameter")
    many_keys = ",".join(f'"{index:x}": 0' for index in range(100_000))
    yield Case("json-100000-unknown-keys", "/predict",
               f'{{"image": "{image}", {many_keys}}}'.encode(), "application/json", 400,
               "InvalidParameter", says="Unknown field(s) '0', '1', '10'")
    yield Case("json-image-and-data", "/predict", json.dumps(
        {"image": image, "data": image}).encode(), "application/json", 400, "InvalidParameter")
    yield Case("json-5000-digit-k", "/predict",
               b'{"image": "' + image.encode() + b'", "k": ' + b"9" * 5000 + b"}",
               "application/json", 400, "InvalidParameter", says="1 to")
    yield Case("resize-topk-named-as-sent", "/resize", json.dumps(
        {"image": image, "width": 8, "height": 8, "topk": 3}).encode(), "application/json",
        400, "InvalidParameter", says="topk")


WRONG_VALUES: dict[str, Any] = {
    "array": [], "object": {}, "true": True, "false": False, "float": 2.5, "zero": 0,
    "negative": -1, "huge": 10**30, "text": "x", "nested": [[["x"]]],
}
FIELDS = {
    "/predict": {"k": {"text", "array", "object", "true", "false", "float", "zero", "negative",
                       "huge", "nested"},
                 "topk": {"text", "array", "object", "true", "float", "zero"},
                 "variant": {"array", "object", "true", "float", "zero", "negative", "huge",
                             "nested"},
                 "custom_attributes": {"array", "object", "true", "float", "zero", "nested"}},
    "/resize": {"width": {"text", "array", "object", "true", "float", "zero", "negative", "huge"},
                "height": {"text", "array", "object", "true", "float", "zero", "negative"},
                "quality": {"text", "array", "object", "true", "float", "zero", "huge"},
                "mode": {"array", "object", "true", "float", "zero", "text", "nested"},
                "format": {"array", "object", "true", "float", "zero", "text", "nested"}},
}


def _wrong_type_cases() -> Iterator[Case]:
    image = base64.b64encode(imagefactory.jpeg(64, 48)).decode()
    for route, fields in FIELDS.items():
        base = {"image": image} if route == "/predict" else {"image": image, "width": 8,
                                                               "height": 8}
        for field, wrong in sorted(fields.items()):
            for value_name in sorted(wrong):
                body = json.dumps({**base, field: WRONG_VALUES[value_name]}).encode()
                yield Case(f"type{route.replace('/', '-')}-{field}-{value_name}", route, body,
                           "application/json", 400, "InvalidParameter", says=field)
        for field in ("image", "data"):  # "data": the 2018 clients' name for "image"
            for value_name in ("array", "object", "true", "float", "zero", "nested"):
                fields = {key: value for key, value in base.items() if key != "image"}
                body = json.dumps({**fields, field: WRONG_VALUES[value_name]}).encode()
                yield Case(f"type{route.replace('/', '-')}-{field}-{value_name}", route, body,
                           "application/json", 400, "InvalidBase64")
        yield Case(f"type{route.replace('/', '-')}-image-null", route,
                   json.dumps({**base, "image": None}).encode(), "application/json", 400,
                   "MissingImage")


def _content_type_cases() -> Iterator[Case]:
    jpeg = imagefactory.jpeg()
    unsupported = ["text/plain", "application/xml", "multipart/form-data; boundary=x",
                   "application/x-www-form-urlencoded", "image/gif", "image/", ";;;", "*/*",
                   "x" * 5000]
    for index, ctype in enumerate(unsupported):
        for route in ("/predict", "/resize"):
            yield Case(f"content-type-{index}{route.replace('/', '-')}", route, jpeg, ctype,
                       415, "UnsupportedMediaType")
    yield Case("content-type-json-for-an-image", "/predict", jpeg, "application/json", 400,
               "InvalidJSON")


def _query_cases() -> Iterator[Case]:
    jpeg = imagefactory.jpeg()
    bad = [("image", "image=x", "query parameter"), ("unknown", "foo=1", "foo"),
           ("k-zero", "k=0", "1 to"), ("k-5000-digits", "k=" + "9" * 5000, "1 to"),
           ("k-text", "k=abc", "k"), ("variant", "variant=bad%20name", "variant"),
           ("k-and-topk", "k=1&topk=2", "not both"),
           ("k-repeated", "k=1&k=2", "'k' given twice")]
    for name, query, says in bad:
        yield Case(f"query-{name}", "/predict", jpeg, "image/jpeg", 400, "InvalidParameter",
                   query=query, says=says)
    yield Case("query-topk", "/predict", jpeg, "image/jpeg", OK, query="topk=2")
    yield Case("resize-query-format-bad", "/resize", jpeg, "image/jpeg", 400,
               "InvalidParameter", query="width=8&height=8&format=gif")
    yield Case("header-variant-bad", "/predict", jpeg, "image/jpeg", 400, "InvalidParameter",
               headers={"X-Target-Variant": "bad name"})
    yield Case("header-custom-attributes-long", "/predict", jpeg, "image/jpeg", 400,
               "InvalidParameter", headers={"X-Custom-Attributes": "x" * 2000})


def jpeg_with_exif_blocks(image: np.ndarray, orientations: tuple[int, ...]) -> bytes:
    """A JPEG of ``image`` (stored as given) with one APP1 EXIF segment per orientation, in
    order, right after SOI. OpenCV and Pillow apply the first block and ignore the others."""
    data = imagefactory.jpeg(image=image)
    segments = []
    for orientation in orientations:
        exif = Image.Exif()
        exif[0x0112] = orientation
        payload = exif.tobytes()  # b"Exif\0\0" + the TIFF structure
        segments.append(b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload)
    return data[:2] + b"".join(segments) + data[2:]


def _exif_cases() -> Iterator[Case]:
    """Two EXIF blocks that disagree: answered like any photo, the first block's rotation
    applied (tests/functional/test_passthrough.py checks what the endpoint is sent)."""
    photo = _photo(320, 240, 4)
    for name, orientations in [("rotated-first", (6, 1)), ("rotated-last", (1, 6))]:
        yield Case(f"predict-jpeg-two-exif-blocks-{name}", "/predict",
                   jpeg_with_exif_blocks(photo, orientations), "image/jpeg", OK)


def _resize_bound_cases() -> Iterator[Case]:
    """An answer that cannot fit a response, refused from a sample before the encode (4096x4096
    WebP quality 100 of a detailed upload: about 12 MB, where 4.5 MB fit)."""
    noise = np.random.default_rng(7).integers(0, 256, (2048, 2048, 3), dtype=np.uint8)
    yield Case("resize-webp-q100-4096-over-the-response-limit", "/resize",
               imagefactory.jpeg(image=noise, quality=50), "image/jpeg", 413, "ImageTooLarge",
               query="width=4096&height=4096&format=webp&quality=100", says="would be about")


def _json_query_cases() -> Iterator[Case]:
    """One rule for every body shape: a JSON body's query string is read (and refused when
    unknown) as a raw upload's is; an option set in both places is refused; a malformed
    inference component never reaches the endpoint."""
    image = base64.b64encode(imagefactory.jpeg(64, 48)).decode()
    jpeg, size = imagefactory.jpeg(), {"width": 8, "height": 8}
    predict = [("k-applies", {}, "k=1", OK, ""), ("unknown", {}, "foo=1", 400, "'foo'"),
               ("image", {}, "image=x", 400, "query parameter"),
               ("k-twice", {"k": 3}, "k=1", 400, "sent both"),
               ("topk-and-k", {"topk": 2}, "k=1", 400, "not both"),
               ("component-bad", {}, "inference_component=bad_name", 400,
                "inference_component"),
               ("component-long", {}, "inference_component=" + "x" * 64, 400,
                "inference_component")]
    for name, fields, query, status, says in predict:
        yield Case(f"json-query-{name}", "/predict",
                   json.dumps({"image": image, **fields}).encode(), "application/json", status,
                   None if status == OK else "InvalidParameter", query=query, says=says)
    resize = [("size", {}, "width=8&height=8", OK, ""), ("unknown", size, "foo=1", 400, "foo"),
              ("width-twice", size, "width=9", 400, "sent both")]
    for name, fields, query, status, says in resize:
        yield Case(f"resize-json-query-{name}", "/resize",
                   json.dumps({"image": image, **fields}).encode(), "application/json", status,
                   None if status == OK else "InvalidParameter", query=query, says=says)
    for value_name in ("array", "object", "true", "float", "zero", "nested"):
        body = json.dumps({"image": image, "inference_component": WRONG_VALUES[value_name]})
        yield Case(f"type-predict-inference_component-{value_name}", "/predict", body.encode(),
                   "application/json", 400, "InvalidParameter", says="inference_component")
    yield Case("header-inference-component-bad", "/predict", jpeg, "image/jpeg", 400,
               "InvalidParameter", headers={"X-Target-Inference-Component": "bad name"})


def _accept_cases() -> Iterator[Case]:
    jpeg = imagefactory.jpeg()
    size = "width=16&height=16"
    answers = [("jpeg-q0-json", "image/jpeg;q=0, application/json", OK, None),
               ("image-wildcard", "image/*", OK, None),
               ("html", "text/html", 406, "NotAcceptable"),
               ("everything-q0", "*/*;q=0", 406, "NotAcceptable"),
               ("garbage", ",,;q=x,/", OK, None), ("long", "image/png, " * 500, OK, None)]
    for name, accept, status, code in answers:
        yield Case(f"accept-{name}", "/resize", jpeg, "image/jpeg", status, code, query=size,
                   headers={"Accept": accept})


def cases() -> list[Case]:
    """Every case of the corpus, in a stable order, with unique names."""
    everything = [*_image_cases(), *_bad_image_cases(), *_json_cases(), *_wrong_type_cases(),
                  *_content_type_cases(), *_query_cases(), *_accept_cases(),
                  *_exif_cases(), *_resize_bound_cases(), *_json_query_cases()]
    names = [case.name for case in everything]
    assert len(names) == len(set(names)), "corpus case names must be unique"
    return everything


def write(directory: Path) -> list[Case]:
    """Write every case's body and a manifest of the expected answers into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    everything = cases()
    for case in everything:
        (directory / f"{case.name}.bin").write_bytes(case.body)
    manifest = [case.manifest() for case in everything]
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return everything


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    written = write(parser.parse_args().directory)
    print(f"{len(written)} cases")


if __name__ == "__main__":
    main()
