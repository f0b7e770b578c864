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
    # "topk" stays as sent: /predict reads it as k, and /resize reports it by its own name
    assert parsed.options == {"topk": 2}


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


# --- every parser failure is the client's InvalidJSON ------------------------------------


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"image": ' + b"[" * 100_000 + b"1" + b"]" * 100_000 + b"}",
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b'{"image": "\xff\xfe"}', b"\x00" * 10, b"\xef\xbb\xbf", b"",
])
def test_any_parser_failure_is_invalid_json(body: bytes) -> None:
    with pytest.raises(InvalidJSONError):
        parse(body)


def test_without_a_content_type_the_message_says_json_was_assumed() -> None:
    from tests import imagefactory

    with pytest.raises(InvalidJSONError, match="No Content-Type header was sent") as caught:
        parse(imagefactory.jpeg(16, 16), None)
    assert "image/jpeg" in caught.value.message
    with pytest.raises(InvalidJSONError) as declared:
        parse(b"{", "application/json")
    assert "Content-Type" not in declared.value.message


def test_a_5000_digit_number_is_out_of_range_not_bad_json() -> None:
    parsed = parse(b'{"image": "aW1n", "k": ' + b"9" * 5000 + b"}")
    with pytest.raises(InvalidParameterError, match="from 1 to"):
        requests.parse_k(parsed.options["k"], 5)


def test_the_413_advice_fits_the_body() -> None:
    with pytest.raises(PayloadTooLargeError) as binary:
        requests.parse_body(b"x" * 2049, "image/jpeg", None, max_body_bytes=2048)
    assert "binary" not in binary.value.message and "smaller" in binary.value.message
    with pytest.raises(PayloadTooLargeError) as base64_json:
        requests.parse_body(b"x" * 2049, "application/json", None, max_body_bytes=2048)
    assert "send it as binary" in base64_json.value.message


@pytest.mark.parametrize("ctype", ["image/jpg", "IMAGE/JPG; foo=bar", "image/pjpeg"])
def test_jpg_is_read_as_jpeg(ctype: str) -> None:
    assert requests.media_type(ctype) == "image/jpeg"
    assert parse(b"raw", ctype).image == b"raw"


def test_binary_options_say_they_came_from_the_query() -> None:
    assert parse(b"raw", "image/png", {"k": "1"}).source == requests.QUERY
    assert parse(as_json(image="aW1n")).source == requests.FIELD


# --- every field's type, the same way on every route --------------------------------------

KINDS = {"k": requests.INT, "name": requests.TEXT}


@pytest.mark.parametrize("options", [{"k": []}, {"k": {}}, {"k": True}, {"k": None, "name": 1},
                                     {"name": []}, {"name": {"a": 1}}, {"name": False}])
def test_wrong_types_are_invalid_parameters(options: dict[str, object]) -> None:
    with pytest.raises(InvalidParameterError, match="must be a"):
        requests.check_fields(options, KINDS, requests.FIELD)


@pytest.mark.parametrize("options", [{}, {"k": 3}, {"k": "3"}, {"k": 2.5}, {"name": "x"},
                                     {"k": None}])
def test_right_types_pass_to_the_value_checks(options: dict[str, object]) -> None:
    requests.check_fields(options, KINDS, requests.FIELD)


def test_unknown_names_say_where_they_came_from() -> None:
    with pytest.raises(InvalidParameterError) as query:
        requests.check_fields({"image": "x"}, KINDS, requests.QUERY)
    assert query.value.message == "Unknown query parameter(s) 'image'; known: k, name."
    with pytest.raises(InvalidParameterError) as field:
        requests.check_fields({"K": 1}, KINDS, requests.FIELD)
    assert field.value.message == "Unknown field(s) 'K'; known: image, k, name."


def test_a_huge_unknown_name_is_not_echoed_whole() -> None:
    with pytest.raises(InvalidParameterError) as caught:
        requests.check_fields({"x" * 1_000_000: 1}, KINDS, requests.FIELD)
    assert len(caught.value.message) < 200


def test_parse_k_names_the_field_as_sent() -> None:
    with pytest.raises(InvalidParameterError, match='"topk"'):
        requests.parse_k("zero", 5, "topk")
