from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib import requests
from chalicelib.errors import (
    InvalidBase64Error,
    InvalidJSONError,
    InvalidParameterError,
    MissingImageError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)

LIMIT = 6 * 1024 * 1024


def parse(body: bytes, content_type: str | None = "application/json",
          query: dict[str, str] | None = None) -> requests.ImageRequest:
    return requests.parse_body(body, content_type, query, max_body_bytes=LIMIT)


def as_json(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_reads_image_and_k_from_json() -> None:
    parsed = parse(as_json(image=base64.b64encode(b"\xff\xd8abc").decode(), k=3))
    assert parsed.image == b"\xff\xd8abc"
    assert parsed.options == {"k": 3}


def test_accepts_2018_field_names() -> None:
    parsed = parse(as_json(data=base64.b64encode(b"img").decode(), topk=2))
    assert parsed.image == b"img"
    assert parsed.options == {"k": 2}


def test_rejects_both_image_and_data() -> None:
    with pytest.raises(InvalidParameterError):
        parse(as_json(image="aW1n", data="aW1n"))


def test_accepts_data_url() -> None:
    url = "data:image/jpeg;base64," + base64.b64encode(b"jpegbytes").decode()
    assert parse(as_json(image=url)).image == b"jpegbytes"


def test_tolerates_whitespace_and_newlines() -> None:
    encoded = base64.encodebytes(b"x" * 200).decode()  # MIME style: a newline every 76 chars
    assert "\n" in encoded
    assert parse(as_json(image="  " + encoded + "\n")).image == b"x" * 200


def test_accepts_url_safe_alphabet_without_padding() -> None:
    raw = bytes(range(250, 256)) * 3 + b"\xfb"
    encoded = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert "-" in encoded or "_" in encoded
    assert parse(as_json(image=encoded)).image == raw


@pytest.mark.parametrize("bad", ["not base64!", "abc*def", "====", "a", "ab=c"])
def test_rejects_invalid_base64(bad: str) -> None:
    with pytest.raises((InvalidBase64Error, MissingImageError)):
        parse(as_json(image=bad))


@pytest.mark.parametrize("body", [b"{", b"[1, 2]", b"\xff\xfe", b"null", b'"text"'])
def test_rejects_malformed_json(body: bytes) -> None:
    with pytest.raises(InvalidJSONError):
        parse(body)


def test_missing_image_is_reported() -> None:
    with pytest.raises(MissingImageError):
        parse(as_json(k=3))


def test_non_string_image_is_invalid() -> None:
    with pytest.raises(InvalidBase64Error):
        parse(as_json(image=[1, 2, 3]))


def test_empty_image_is_missing() -> None:
    with pytest.raises(MissingImageError):
        parse(as_json(image="   "))


@pytest.mark.parametrize("ctype", sorted(requests.BINARY_TYPES))
def test_binary_bodies_take_options_from_query(ctype: str) -> None:
    parsed = parse(b"\x89PNG...", ctype, {"k": "3"})
    assert parsed.image == b"\x89PNG..."
    assert parsed.options == {"k": "3"}


def test_content_type_parameters_are_ignored() -> None:
    assert parse(b"raw", "image/jpeg; charset=binary").image == b"raw"


def test_missing_content_type_means_json() -> None:
    assert parse(as_json(image="aW1n"), None).image == b"img"


def test_empty_binary_body_is_missing_image() -> None:
    with pytest.raises(MissingImageError):
        parse(b"", "image/jpeg")


def test_unsupported_content_type() -> None:
    with pytest.raises(UnsupportedMediaTypeError) as caught:
        parse(b"hello", "text/plain")
    assert "image/jpeg" in caught.value.message


def test_body_over_limit_is_413_with_advice() -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        requests.parse_body(b"x" * 2049, "image/jpeg", None, max_body_bytes=2048)
    assert "smaller" in caught.value.message


@pytest.mark.parametrize("value,expected", [(None, 5), (1, 1), (3, 3), ("7", 7), (10**6, 10**6)])
def test_parse_k_accepts_whole_numbers(value: object, expected: int) -> None:
    assert requests.parse_k(value, 5) == expected


@pytest.mark.parametrize("value", [0, -1, 2.5, 3.0, "abc", True, False, "", "2.5", "-3", [3]])
def test_parse_k_rejects_everything_else(value: object) -> None:
    with pytest.raises(InvalidParameterError):
        requests.parse_k(value, 5)


@pytest.mark.parametrize("value", ["bad variant", "-x", "a" * 64, 3])
def test_rejects_bad_variant_names(value: object) -> None:
    with pytest.raises(InvalidParameterError):
        requests.parse_variant(value)


def test_custom_attributes_limits() -> None:
    assert requests.parse_custom_attributes("trace=1") == "trace=1"
    with pytest.raises(InvalidParameterError):
        requests.parse_custom_attributes("x" * 1025)
    with pytest.raises(InvalidParameterError):
        requests.parse_custom_attributes("line\nbreak")


@given(st.binary(min_size=1, max_size=512), st.sampled_from(["std", "url", "mime", "dataurl"]))
def test_any_bytes_round_trip_through_every_encoding(raw: bytes, style: str) -> None:
    encoders = {
        "std": lambda b: base64.b64encode(b).decode(),
        "url": lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="),
        "mime": lambda b: base64.encodebytes(b).decode(),
        "dataurl": lambda b: "data:image/png;base64," + base64.b64encode(b).decode(),
    }
    assert parse(as_json(image=encoders[style](raw))).image == raw


@given(st.text(max_size=64))
def test_arbitrary_text_never_escapes_the_error_tree(text: str) -> None:
    with contextlib.suppress(InvalidBase64Error, MissingImageError):
        parse(as_json(image=text, k=1))


@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=12), st.booleans(),
                 st.none()))
def test_parse_k_only_returns_positive_ints(value: object) -> None:
    try:
        k = requests.parse_k(value, 5)
    except InvalidParameterError:
        return
    assert isinstance(k, int) and not isinstance(k, bool) and k >= 1
