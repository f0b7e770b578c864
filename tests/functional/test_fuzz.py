"""Fuzzing the whole app: raw bodies x content types x query strings x Accept headers, through
Chalice's test client. Whatever arrives, the answer is a 2xx or a 4xx with sagegate's error
body: never a 5xx, never an unhandled exception (Chalice turns those into a 500).

A bounded run is part of the suite; ``make fuzz`` runs the same properties for much longer
(``SAGEGATE_FUZZ_EXAMPLES``).
"""
from __future__ import annotations

import base64
import json
import os
import urllib.parse
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.corpus import generate
from tests.functional.conftest import AnsweringApp

EXAMPLES = int(os.environ.get("SAGEGATE_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 200,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

SEEDS = [data for _, data, _ in generate.valid_images()
         if len(data) < 64 * 1024] + [body for _, body, _ in generate._damaged_jpegs()
                                      if len(body) < 64 * 1024]
CONTENT_TYPES = ["application/json", "image/jpeg", "image/jpg", "image/png", "image/webp",
                 "application/x-image", "application/octet-stream", "text/plain",
                 "application/json; charset=utf-8", "IMAGE/PNG", "image/", "", "*/*"]
NAMES = ["k", "topk", "variant", "custom_attributes", "width", "height", "mode", "format",
         "quality", "image", "data"]
ASCII = st.characters(min_codepoint=32, max_codepoint=126)


@st.composite
def mutated_image(draw: st.DrawFn) -> bytes:
    """A real image, then cut, overwritten, spliced or given an end-of-image marker."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, max(0, len(data) - 1)))
        action = draw(st.sampled_from(["cut", "overwrite", "insert", "eoi", "header"]))
        if action == "cut":
            del data[at:]
        elif action == "overwrite":
            data[at:at + 4] = draw(st.binary(min_size=1, max_size=4))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif action == "eoi":
            data[at:] = b"\xff\xd9"
        else:  # the size fields of every format live in the first 32 bytes
            data[min(at, 31):min(at, 31) + 2] = draw(st.binary(min_size=2, max_size=2))
    return bytes(data)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)


@st.composite
def json_body(draw: st.DrawFn) -> bytes:
    """A JSON object of sagegate's fields (and others), with valid or hostile values."""
    image = draw(st.one_of(mutated_image().map(lambda b: base64.b64encode(b).decode()),
                           st.text(max_size=64), JSON_VALUES))
    fields: dict[str, Any] = {draw(st.sampled_from(["image", "data"])): image}
    extra = draw(st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=8),
                                 JSON_VALUES | st.integers(1, 300), max_size=5))
    text = json.dumps({**fields, **extra}, allow_nan=True)
    if draw(st.booleans()):  # break it: cut, or nest it deep
        text = draw(st.sampled_from([text[: len(text) // 2], "[" * 5000 + text, text + "}"]))
    return text.encode()


BODIES = st.one_of(mutated_image(), json_body(), st.binary(max_size=512))
QUERIES = st.dictionaries(st.sampled_from(NAMES) | st.text(ASCII, max_size=6),
                          st.text(ASCII, max_size=12) | st.integers(-5, 9000).map(str),
                          max_size=5)
ACCEPTS = st.none() | st.sampled_from(["image/*", "image/png;q=0", "application/json",
                                       "text/html", "*/*;q=0"]) | st.text(ASCII, max_size=40)


def check(response: Any) -> None:
    assert response.status_code < 500, response.body[:300]
    if response.status_code >= 400:
        body = json.loads(response.body)
        assert body["Code"] and body["Message"], body
        assert "Traceback" not in body["Message"]


@FUZZ
@given(route=st.sampled_from(["/predict", "/resize"]), body=BODIES,
       content_type=st.sampled_from(CONTENT_TYPES) | st.none() | st.text(ASCII, max_size=30),
       query=QUERIES, accept=ACCEPTS)
def test_any_request_is_answered_2xx_or_4xx(answering_app: AnsweringApp, route: str, body: bytes,
                                            content_type: str | None, query: dict[str, str],
                                            accept: str | None) -> None:
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if accept is not None:
        headers["Accept"] = accept
    if route == "/resize":
        query = {"width": "32", "height": "24", **query}
    path = route + ("?" + urllib.parse.urlencode(query) if query else "")
    check(answering_app.client.http.post(path, body=body, headers=headers))


@FUZZ
@given(image=mutated_image(), mode=st.sampled_from(["fill", "fit", "stretch"]),
       width=st.integers(1, 4096), height=st.integers(1, 4096))
def test_any_image_at_any_size_is_answered_2xx_or_4xx(
        answering_app: AnsweringApp, image: bytes, mode: str, width: int, height: int) -> None:
    for route in ("/predict", f"/resize?width={width}&height={height}&mode={mode}"):
        check(answering_app.client.http.post(route, body=image,
                                             headers={"Content-Type": "image/jpeg"}))
