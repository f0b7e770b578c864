"""A small Python client for sagegate that shrinks images before it uploads them.

A phone photo travels as about 2.8 MB only for the server to shrink it to 341x256. The client
does the shrinking instead, by the model's own rule (``GET /models/{name}``'s ``image``
block), with the server's own code: the image decoded as the server decodes it (a large JPEG
at the reduced scale :func:`chalicelib.images.imaging.reduction_for` allows, EXIF orientation
applied, so what is sent is upright), then :func:`chalicelib.images.imaging.resize` with its
:class:`~chalicelib.images.sizing.ResizePlan`: for ``shorter-side`` S, area averaging
(``cv2.INTER_AREA``) until the shorter side is exactly S, never enlarging; for
``fill``/``fit``/``stretch``, the model's input box. Encoded losslessly, that is exactly the
image the server would have made of the original, so the model is given the same tensor.

The original is sent unchanged when the server would itself forward it untouched (a complete
upright JPEG too small for a reduced-scale decode,
:func:`chalicelib.images.imaging.can_pass_through`),
when the client cannot read it (the server then answers with its own error code), when the
server would enlarge it, and when shrinking would not make it smaller.

    >>> from sagegate.client import Client
    >>> client = Client("http://127.0.0.1:8000")
    >>> client.predict("samples/cat.jpg", k=3)["predictions"][0]["label"]
    'tiger cat'

The encoding of the shrunk image is chosen by measurement (``.venv/bin/python -m bench --part
clients``; its table and method are in ``bench/README.md``): the default,
:data:`DEFAULT_ENCODING`, is lossless WebP, the smallest upload that keeps the server's promise
(same top-1, top-5 within 0.03 of sending the original; measured, exactly the same). JPEG is
not faithful even at quality 95 without chroma subsampling
(``cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444``). PNG is larger but costs less CPU: on a fast uplink
it is the quicker of the two end to end (``Client(encoding="png")``,
``sagegate predict --encoding png``).

HTTP: one ``urllib3.PoolManager`` per :class:`Client` (keep-alive connections, safe to share
between threads), ``x-api-key`` when a key is given, at most ``retries`` retries of a 503 or of
a connection that failed, by sagegate's one retry policy (:mod:`chalicelib.core.retries`: full
jitter, never sooner than the 503's ``Retry-After``, at most :data:`MAX_RETRY_AFTER_S` seconds,
and within the client's retry quota, so a failing server is not sent every request
``retries + 1`` times). Error answers raise :class:`ClientError`.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import urllib3

from chalicelib.core import media
from chalicelib.core.errors import SagegateError
from chalicelib.core.media import JPEG_SOI, PNG_SIGNATURE, ImageFormat, MediaType
from chalicelib.core.retries import Retrier, RetryPolicy, RetryQuota, parse_retry_after
from chalicelib.images import imaging, jpegscan, sizing
from chalicelib.images.probe import ImageInfo, probe

__all__ = ["DEFAULT_ENCODING", "DEFAULT_URL", "Client", "ClientError", "Encoding",
           "ShrinkRule", "Upload", "content_type_of", "encode", "shrink"]

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_RETRY_AFTER_S = 10.0
"""The longest a client waits before retrying a 503, whatever its ``Retry-After`` says."""
OCTET_STREAM = "application/octet-stream"
_CONNECTION_ERRORS = (urllib3.exceptions.NewConnectionError,
                      urllib3.exceptions.ConnectTimeoutError,
                      urllib3.exceptions.ProtocolError)
_sleep = time.sleep  # the tests replace it
_random = random.random  # the backoff's jitter; the tests replace it


class Encoding(enum.StrEnum):
    """How a shrunk image is encoded."""

    PNG = "png"
    """Lossless PNG, zlib level 9 with libpng's row filters."""
    WEBP = "webp"
    """Lossless WebP."""
    JPEG = "jpeg"
    """JPEG at quality 95 without chroma subsampling (4:4:4): not faithful (see above)."""


DEFAULT_ENCODING = Encoding.WEBP
_CONTENT_TYPES = {Encoding.PNG: "image/png", Encoding.WEBP: "image/webp",
                  Encoding.JPEG: "image/jpeg"}
_JPEG_444 = getattr(cv2, "IMWRITE_JPEG_SAMPLING_FACTOR_444", 0x111111)


class ClientError(Exception):
    """An error answer (``status`` > 0, sagegate's ``Code`` and ``Message``), or no answer
    at all (``status`` 0, code ``ConnectionError``)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class ShrinkRule:
    """What an image model's server does to an upload, as ``GET /models/{name}`` says it.

    Attributes:
        plan: the server's resize (with its own ``upscale``).
        passthrough: whether the server forwards small upright JPEGs untouched.
        max_pixels: the largest image the server decodes.
    """

    plan: sizing.ResizePlan
    passthrough: bool = True
    max_pixels: int = 40_000_000

    @classmethod
    def from_model(cls, document: Mapping[str, Any]) -> ShrinkRule | None:
        """The rule from a model's description, or from its ``image`` block; None for a model
        that does not take images."""
        image = document.get("image", document)
        if not isinstance(image, Mapping) or "resize" not in image:
            return None
        resize = image["resize"]
        plan = sizing.plan_resize(str(resize["mode"]), int(resize["width"]),
                                   int(resize["height"]), int(resize["shorter_side"]),
                                   bool(resize.get("upscale", False)))
        return cls(plan, bool(image.get("passthrough", True)),
                   int(image.get("max_pixels", 40_000_000)))


def content_type_of(data: bytes) -> str:
    """The media type an upload's first bytes show (``application/octet-stream`` if none)."""
    if data[:3] == JPEG_SOI:
        return str(MediaType.JPEG)
    if data[:8] == PNG_SIGNATURE:
        return str(MediaType.PNG)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return str(MediaType.WEBP)
    return OCTET_STREAM


def encode(image: np.ndarray, encoding: Encoding) -> tuple[bytes, str]:
    """Encode a BGR image for the upload; returns the bytes and their media type."""
    if encoding == Encoding.PNG:
        params = [cv2.IMWRITE_PNG_COMPRESSION, 9]
    elif encoding == Encoding.WEBP:
        params = [cv2.IMWRITE_WEBP_QUALITY, 101]  # over 100: lossless
    else:
        params = [cv2.IMWRITE_JPEG_QUALITY, 95, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, _JPEG_444]
    ok, buffer = cv2.imencode("." + str(encoding), image, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode the image as {encoding}")
    return bytes(buffer.tobytes()), _CONTENT_TYPES[encoding]


def _enlarges(plan: sizing.ResizePlan, width: int, height: int) -> bool:
    if plan.mode == media.ResizeMode.STRETCH:
        return plan.width > width or plan.height > height
    if plan.mode == media.ResizeMode.SHORTER_SIDE:
        return plan.shorter_side > min(width, height)
    if plan.mode == media.ResizeMode.FILL:
        return max(plan.width / width, plan.height / height) > 1
    return min(plan.width / width, plan.height / height) > 1


def _sends_original(data: bytes, info: ImageInfo, rule: ShrinkRule) -> bool:
    """Whether the original is what to send, before any pixel is decoded."""
    plan = rule.plan
    if info.pixels > rule.max_pixels:
        return True  # the server's 413 says it best
    if rule.passthrough and imaging.can_pass_through(data, info, plan):
        return True
    if plan.upscale and _enlarges(plan, info.width, info.height):
        return True  # the server enlarges the original itself
    return plan.mode in (media.ResizeMode.SHORTER_SIDE, media.ResizeMode.STRETCH) and \
        plan.scaled_size(info.width, info.height) == (info.width, info.height)


def _decoded(data: bytes, info: ImageInfo, plan: sizing.ResizePlan) -> np.ndarray | None:
    """The image decoded as the server decodes it (EXIF orientation applied; a large JPEG at
    the reduced scale :func:`chalicelib.images.imaging.reduction_for` allows), or None for a
    file the server must judge: a truncated or corrupt JPEG, or one OpenCV cannot decode."""
    reduction = imaging.reduction_for(info, plan.scaled_size(info.width, info.height))
    try:
        if info.format == ImageFormat.JPEG:
            jpegscan.check_complete(data)
        image = imaging.decode(data, info, reduction)
        if info.format == ImageFormat.JPEG:
            jpegscan.check_decoded(data, image, reduction)
    except SagegateError:
        return None
    return image


def shrink(data: bytes, rule: ShrinkRule | Mapping[str, Any],
           encoding: Encoding | str = DEFAULT_ENCODING) -> tuple[bytes, str]:
    """The bytes to upload for ``data`` under a model's ``rule``, and their media type.

    Args:
        data: the image file.
        rule: a :class:`ShrinkRule`, or the model's description (or its ``image`` block).
        encoding: how a shrunk image is encoded (:class:`Encoding`).

    Returns:
        The shrunk image, or the original unchanged (see the module's docstring for when).
    """
    if not isinstance(rule, ShrinkRule):
        parsed = ShrinkRule.from_model(rule)
        if parsed is None:
            return data, content_type_of(data)
        rule = parsed
    try:
        info = probe(data)
    except SagegateError:
        return data, OCTET_STREAM  # not an image the server takes: it says why
    original = data, str(info.format.media_type)
    if _sends_original(data, info, rule):
        return original
    plan = dataclasses.replace(rule.plan, upscale=False)
    image = _decoded(data, info, plan)
    if image is None:
        return original
    encoded = encode(imaging.resize(image, plan), Encoding(encoding))
    return encoded if len(encoded[0]) < len(data) else original


_shrink = shrink  # for Client.prepare, whose argument of the same name shadows it


@dataclasses.dataclass(frozen=True)
class Upload:
    """What :meth:`Client.prepare` makes of a file: the body to send and where it came from.

    Attributes:
        data: the request body.
        content_type: its media type.
        original_bytes: the size of the file itself.
    """

    data: bytes
    content_type: str
    original_bytes: int

    @property
    def shrunk(self) -> bool:
        """Whether the body is a shrunk image rather than the file."""
        return len(self.data) != self.original_bytes


def read_input(path_or_bytes: str | os.PathLike[str] | bytes | bytearray | memoryview) -> bytes:
    """The bytes of a file, or the bytes given."""
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        return bytes(path_or_bytes)
    return Path(path_or_bytes).read_bytes()


def retry_after_seconds(value: str | None) -> float | None:
    """A 503's ``Retry-After`` (seconds or an HTTP date) in seconds, never over
    :data:`MAX_RETRY_AFTER_S`; None when absent or unreadable."""
    seconds = parse_retry_after(value)
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def retry_policy(retries: int) -> RetryPolicy:
    """The client's retry policy: ``retries`` retries, 0.25 s doubling to
    :data:`MAX_RETRY_AFTER_S`, no time budget of its own (the server has one)."""
    return RetryPolicy(max_attempts=retries + 1, budget_seconds=math.inf, base_delay=0.25,
                       max_delay=MAX_RETRY_AFTER_S)


Source = str | os.PathLike[str] | bytes | bytearray | memoryview


class Client:
    """sagegate over HTTP: predictions (with client-side shrinking), resizes, the models.

    Args:
        url: the API's base URL.
        api_key: sent as ``x-api-key`` (deployed stages with API-key authentication).
        retries: how many times a request is retried after a 503 or a failed connection.
        timeout: seconds to connect, and to wait for each answer.
        pool: keep-alive connections kept for the host (at least the threads sharing the
            client, to keep every one of them).
        encoding: how shrunk images are encoded (:class:`Encoding`).
    """

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, retries: int = 3,
                 timeout: float = 30, pool: int = 8,
                 encoding: Encoding | str = DEFAULT_ENCODING) -> None:
        self.url = url.rstrip("/")
        self.retries = max(0, retries)
        self.quota = RetryQuota()
        """The retry quota every thread using this client shares."""
        self.encoding = Encoding(encoding)
        self._headers = {"x-api-key": api_key} if api_key else {}
        self._http = urllib3.PoolManager(maxsize=max(1, pool), retries=False,
                                         timeout=urllib3.Timeout(connect=timeout, read=timeout))
        self._rules: dict[str | None, ShrinkRule | None] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ requests

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> urllib3.BaseHTTPResponse:
        """One request with the client's retries; any answer but a 503 retried out is given
        back as it is (the caller reads errors with :meth:`check`).

        Raises:
            ClientError: no connection could be made (status 0, ``ConnectionError``).
        """
        retrier = Retrier(retry_policy(self.retries), self.quota, rng=_random)
        while True:
            try:
                response = self._http.request(method, self.url + path, body=body,
                                              headers={**self._headers, **(headers or {})})
            except _CONNECTION_ERRORS as error:
                delay = retrier.failed()
                if delay is None:
                    raise ClientError(0, "ConnectionError",
                                      f"{method} {self.url + path}: {error}") from error
                _sleep(delay)
                continue
            if response.status != 503:
                if response.status < 300:  # a success refunds the quota, as in botocore
                    retrier.succeeded()
                return response
            delay = retrier.failed(
                hint=retry_after_seconds(response.headers.get("Retry-After")))
            if delay is None:
                return response
            _sleep(delay)

    @staticmethod
    def check(response: urllib3.BaseHTTPResponse) -> urllib3.BaseHTTPResponse:
        """The response if it is a success.

        Raises:
            ClientError: an error answer, with sagegate's ``Code`` and ``Message`` (for other
                servers' answers: ``HTTP<status>`` and what they said).
        """
        if response.status < 400:
            return response
        code, message = f"HTTP{response.status}", response.data[:300].decode(errors="replace")
        try:
            body = json.loads(response.data)
        except ValueError:
            body = None
        if isinstance(body, dict):
            code = str(body.get("Code", code))
            message = str(body.get("Message", body.get("message", message)))
        raise ClientError(response.status, code, message)

    def _json(self, method: str, path: str, body: bytes | None = None,
              headers: Mapping[str, str] | None = None) -> Any:
        return json.loads(self.check(self.request(method, path, body, headers)).data)

    # ------------------------------------------------------------------ models

    def models(self) -> dict[str, Any]:
        """``GET /models``: ``{"default": name, "models": [...]}``."""
        answer: dict[str, Any] = self._json("GET", "/models")
        return answer

    def model(self, name: str) -> dict[str, Any]:
        """``GET /models/{name}``: one model, with its image rule when it takes images."""
        answer: dict[str, Any] = self._json("GET", "/models/" + urllib.parse.quote(name, ""))
        return answer

    def rule(self, model: str | None = None) -> ShrinkRule | None:
        """The shrink rule of ``model`` (None: the default model), asked once per client;
        None when the model takes no images or the server does not describe its models."""
        with self._lock:
            if model not in self._rules:
                self._rules[model] = self._fetch_rule(model)
            return self._rules[model]

    def _fetch_rule(self, model: str | None) -> ShrinkRule | None:
        try:
            name = model if model is not None else str(self.models()["default"])
            return ShrinkRule.from_model(self.model(name))
        except ClientError as error:
            if error.status in (404, 405):  # no such model (predict says so), or no /models
                return None
            raise

    # ------------------------------------------------------------------ images

    def prepare(self, path_or_bytes: Source, model: str | None = None,
                shrink: bool = True) -> Upload:
        """The upload for an image: shrunk by the model's rule, or the file itself."""
        data = read_input(path_or_bytes)
        rule = self.rule(model) if shrink else None
        if rule is None:
            return Upload(data, content_type_of(data), len(data))
        body, content_type = _shrink(data, rule, self.encoding)
        return Upload(body, content_type, len(data))

    def send(self, upload: Upload, k: int = 5, model: str | None = None,
             headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Post a prepared upload to the model (None: ``/predict``); the answer's JSON."""
        path = "/predict" if model is None else \
            f"/models/{urllib.parse.quote(model, '')}/predict"
        answer: dict[str, Any] = self._json(
            "POST", f"{path}?k={int(k)}", upload.data,
            {**(headers or {}), "Content-Type": upload.content_type})
        return answer

    def predict(self, path_or_bytes: Source, k: int = 5, model: str | None = None,
                shrink: bool = True) -> dict[str, Any]:
        """Classify an image: shrunk here by the model's rule (unless ``shrink`` is False),
        then posted; the answer's JSON (``predictions``, ``endpoint``, ``variant`` ...).

        Raises:
            ClientError: an error answer, or no connection.
            OSError: the file cannot be read.
        """
        return self.send(self.prepare(path_or_bytes, model, shrink), k, model)

    def resize(self, path_or_bytes: Source, width: int, height: int, mode: str = "stretch",
               format: str = "jpeg", quality: int | None = None) -> bytes:
        """``POST /resize``: the image at exactly ``width`` x ``height``, encoded as
        ``format``; the image's bytes.

        Raises:
            ClientError: an error answer, or no connection.
        """
        data = read_input(path_or_bytes)
        query = {"width": width, "height": height, "mode": mode, "format": format}
        if quality is not None:
            query["quality"] = quality
        response = self.request("POST", "/resize?" + urllib.parse.urlencode(query), data,
                                {"Content-Type": content_type_of(data),
                                 "Accept": f"image/{format}"})
        return bytes(self.check(response).data)

    def close(self) -> None:
        """Close the keep-alive connections."""
        self._http.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
