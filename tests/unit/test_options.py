"""Reading a request: the body's shape (http.bodies) and its options (http.options)."""
from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.core import media
from chalicelib.core.errors import (
    InvalidBase64Error,
    InvalidJSONError,
    InvalidParameterError,
    MissingImageError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)
from chalicelib.reading import bodies, options, resize
from chalicelib.reading.bodies import Source

LIMIT = 6 * 1024 * 1024


def parse(body: bytes, content_type: str | None = "application/json",
          query: dict[str, str] | None = None) -> bodies.Upload:
    return bodies.read_upload(body, content_type, query, max_body_bytes=LIMIT)


def parse_k(value: object, default: int, name: str = "k") -> int:
    """k as /predict reads it from a JSON body (``None``: not sent)."""
    fields = {} if value is None else {name: value}
    body = json.dumps({"image": "aW1n", **fields}).encode()
    return options.read_predict(options.HttpRequest(body), max_body_bytes=LIMIT,
                                default_k=default).options.k


def as_json(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_reads_image_and_k_from_json() -> None:
    parsed = parse(as_json(image=base64.b64encode(b"\xff\xd8abc").decode(), k=3))
    assert parsed.data == b"\xff\xd8abc"
    assert parsed.fields == {"k": 3}


def test_accepts_2018_field_names() -> None:
    parsed = parse(as_json(data=base64.b64encode(b"img").decode(), topk=2))
    assert parsed.data == b"img"
    # "topk" stays as sent: /predict reads it as k, and /resize reports it by its own name
    assert parsed.fields == {"topk": 2}


def test_rejects_both_image_and_data() -> None:
    with pytest.raises(InvalidParameterError):
        parse(as_json(image="aW1n", data="aW1n"))


def test_accepts_data_url() -> None:
    url = "data:image/jpeg;base64," + base64.b64encode(b"jpegbytes").decode()
    assert parse(as_json(image=url)).data == b"jpegbytes"


def test_tolerates_whitespace_and_newlines() -> None:
    encoded = base64.encodebytes(b"x" * 200).decode()  # MIME style: a newline every 76 chars
    assert "\n" in encoded
    assert parse(as_json(image="  " + encoded + "\n")).data == b"x" * 200


def test_accepts_url_safe_alphabet_without_padding() -> None:
    raw = bytes(range(250, 256)) * 3 + b"\xfb"
    encoded = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert "-" in encoded or "_" in encoded
    assert parse(as_json(image=encoded)).data == raw


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


@pytest.mark.parametrize("ctype", sorted(media.UPLOAD_TYPES))
def test_binary_bodies_take_options_from_query(ctype: str) -> None:
    parsed = parse(b"\x89PNG...", ctype, {"k": "3"})
    assert parsed.data == b"\x89PNG..."
    assert parsed.fields == {"k": "3"}


def test_content_type_parameters_are_ignored() -> None:
    assert parse(b"raw", "image/jpeg; charset=binary").data == b"raw"


def test_missing_content_type_means_json() -> None:
    assert parse(as_json(image="aW1n"), None).data == b"img"


def test_empty_binary_body_is_missing_image() -> None:
    with pytest.raises(MissingImageError):
        parse(b"", "image/jpeg")


def test_unsupported_content_type() -> None:
    with pytest.raises(UnsupportedMediaTypeError) as caught:
        parse(b"hello", "text/plain")
    assert "image/jpeg" in caught.value.message


def test_body_over_limit_is_413_with_advice() -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        bodies.read_upload(b"x" * 2049, "image/jpeg", None, max_body_bytes=2048)
    assert "smaller" in caught.value.message


@pytest.mark.parametrize("value,expected", [(None, 5), (1, 1), (3, 3), ("7", 7), (10**6, 10**6)])
def test_parse_k_accepts_whole_numbers(value: object, expected: int) -> None:
    assert parse_k(value, 5) == expected


@pytest.mark.parametrize("value", [0, -1, 2.5, 3.0, "abc", True, False, "", "2.5", "-3", [3]])
def test_parse_k_rejects_everything_else(value: object) -> None:
    with pytest.raises(InvalidParameterError):
        parse_k(value, 5)


@pytest.mark.parametrize("value", ["bad variant", "-x", "a" * 64, 3])
def test_rejects_bad_variant_names(value: object) -> None:
    with pytest.raises(InvalidParameterError):
        options.parse_variant(value)


def test_custom_attributes_limits() -> None:
    assert options.parse_custom_attributes("trace=1") == "trace=1"
    with pytest.raises(InvalidParameterError):
        options.parse_custom_attributes("x" * 1025)
    with pytest.raises(InvalidParameterError):
        options.parse_custom_attributes("line\nbreak")


@given(st.binary(min_size=1, max_size=512), st.sampled_from(["std", "url", "mime", "dataurl"]))
def test_any_bytes_round_trip_through_every_encoding(raw: bytes, style: str) -> None:
    encoders = {
        "std": lambda b: base64.b64encode(b).decode(),
        "url": lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="),
        "mime": lambda b: base64.encodebytes(b).decode(),
        "dataurl": lambda b: "data:image/png;base64," + base64.b64encode(b).decode(),
    }
    assert parse(as_json(image=encoders[style](raw))).data == raw


@given(st.text(max_size=64))
def test_arbitrary_text_never_escapes_the_error_tree(text: str) -> None:
    with contextlib.suppress(InvalidBase64Error, MissingImageError):
        parse(as_json(image=text, k=1))


@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=12), st.booleans(),
                 st.none()))
def test_parse_k_only_returns_positive_ints(value: object) -> None:
    try:
        k = parse_k(value, 5)
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
        parse_k(parsed.fields["k"], 5)


def test_the_413_advice_fits_the_body() -> None:
    with pytest.raises(PayloadTooLargeError) as binary:
        bodies.read_upload(b"x" * 2049, "image/jpeg", None, max_body_bytes=2048)
    assert "binary" not in binary.value.message and "smaller" in binary.value.message
    with pytest.raises(PayloadTooLargeError) as base64_json:
        bodies.read_upload(b"x" * 2049, "application/json", None, max_body_bytes=2048)
    assert "send it as binary" in base64_json.value.message


@pytest.mark.parametrize("ctype", ["image/jpg", "IMAGE/JPG; foo=bar", "image/pjpeg"])
def test_jpg_is_read_as_jpeg(ctype: str) -> None:
    assert media.bare(ctype) == "image/jpeg"
    assert parse(b"raw", ctype).data == b"raw"


def test_binary_options_say_they_came_from_the_query() -> None:
    assert parse(b"raw", "image/png", {"k": "1"}).source == Source.QUERY
    assert parse(as_json(image="aW1n")).source == Source.FIELD


# --- every field's type, the same way on every route --------------------------------------

KINDS = {"k": options.Kind.INT, "name": options.Kind.TEXT}


@pytest.mark.parametrize("fields", [{"k": []}, {"k": {}}, {"k": True}, {"k": None, "name": 1},
                                     {"name": []}, {"name": {"a": 1}}, {"name": False}])
def test_wrong_types_are_invalid_parameters(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidParameterError, match="must be a"):
        options.check_fields(fields, KINDS, Source.FIELD)


@pytest.mark.parametrize("fields", [{}, {"k": 3}, {"k": "3"}, {"k": 2.5}, {"name": "x"},
                                     {"k": None}])
def test_right_types_pass_to_the_value_checks(fields: dict[str, object]) -> None:
    options.check_fields(fields, KINDS, Source.FIELD)


def test_unknown_names_say_where_they_came_from() -> None:
    with pytest.raises(InvalidParameterError) as query:
        options.check_fields({"image": "x"}, KINDS, Source.QUERY)
    assert query.value.message == "Unknown query parameter(s) 'image'; known: k, name."
    with pytest.raises(InvalidParameterError) as field:
        options.check_fields({"K": 1}, KINDS, Source.FIELD)
    assert field.value.message == "Unknown field(s) 'K'; known: image, k, name."


def test_a_huge_unknown_name_is_not_echoed_whole() -> None:
    with pytest.raises(InvalidParameterError) as caught:
        options.check_fields({"x" * 1_000_000: 1}, KINDS, Source.FIELD)
    assert len(caught.value.message) < 200


def test_parse_k_names_the_field_as_sent() -> None:
    with pytest.raises(InvalidParameterError, match='"topk"'):
        parse_k("zero", 5, "topk")


# --- the readers: one call per route gives the validated options -------------------------

B64 = base64.b64encode(b"\xff\xd8\xffimg").decode()


def read_predict(body: dict[str, object], **headers: str) -> options.PredictRequest:
    return options.read_predict(
        options.HttpRequest(json.dumps(body).encode(), "application/json",
                            {name.lower(): value for name, value in headers.items()}),
        max_body_bytes=LIMIT, default_k=5)


def test_headers_give_the_options_the_body_does_not() -> None:
    read = read_predict({"image": B64}, **{"X-Target-Variant": "B", "X-Custom-Attributes": "a"})
    assert read.image == b"\xff\xd8\xffimg"
    assert read.options == options.CallOptions(k=5, variant="B", custom_attributes="a")


def test_the_body_wins_over_a_header() -> None:
    read = read_predict({"image": B64, "variant": "A"}, **{"X-Target-Variant": "B"})
    assert read.options.variant == "A"


def test_a_header_is_validated_like_a_field() -> None:
    with pytest.raises(InvalidParameterError, match="variant"):
        read_predict({"image": B64}, **{"X-Target-Variant": "not a name"})


def test_k_and_topk_together_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match='"k" or "topk"'):
        read_predict({"image": B64, "k": 1, "topk": 2})


@pytest.mark.parametrize("accept,fmt,binary", [
    (None, "jpeg", False), ("image/png", "png", True), ("image/webp, */*", "webp", True),
    ("application/json;q=0.1, image/png", "png", False), ("*/*", "jpeg", False),
])
def test_resize_negotiates_the_answer(accept: str | None, fmt: str, binary: bool) -> None:
    headers = {"accept": accept} if accept else {}
    read = resize.read_resize(options.HttpRequest(b"\xff\xd8\xffimg", "image/jpeg", headers,
                                                   {"width": "10", "height": "20"}),
                               max_body_bytes=LIMIT, max_output_pixels=10_000)
    assert (read.options.width, read.options.height) == (10, 20)
    assert (read.options.format, read.options.binary) == (fmt, binary)


def test_resize_refuses_the_models_own_mode() -> None:
    with pytest.raises(InvalidParameterError, match="stretch, fit, fill"):
        resize.read_resize(options.HttpRequest(b"\xff\xd8\xffimg", "image/jpeg", {},
                                                {"width": "8", "height": "8",
                                                 "mode": "shorter-side"}),
                            max_body_bytes=LIMIT, max_output_pixels=10_000)


# --- one rule for every body shape: the query string applies to JSON bodies too ----------

def read_json_predict(body: dict[str, object], query: dict[str, str],
                      **headers: str) -> options.PredictRequest:
    return options.read_predict(
        options.HttpRequest(json.dumps(body).encode(), "application/json",
                            {name.lower(): value for name, value in headers.items()}, query),
        max_body_bytes=LIMIT, default_k=5)


def test_query_options_apply_to_a_json_body() -> None:
    read = read_json_predict({"image": B64}, {"k": "1", "variant": "Blue"})
    assert (read.options.k, read.options.variant) == (1, "Blue")


def test_the_query_wins_over_a_header_for_a_json_body_too() -> None:
    read = read_json_predict({"image": B64}, {"variant": "Blue"}, **{"X-Target-Variant": "B"})
    assert read.options.variant == "Blue"


@pytest.mark.parametrize("query", [{"kk": "1"}, {"image": "aW1n"}, {"data": "x"}])
def test_an_unknown_query_parameter_is_refused_with_a_json_body(query: dict[str, str]) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        read_json_predict({"image": B64}, query)
    assert caught.value.message.startswith(f"Unknown query parameter(s) {next(iter(query))!r}")


def test_an_option_in_the_body_and_the_query_is_refused_naming_both() -> None:
    with pytest.raises(InvalidParameterError) as caught:
        read_json_predict({"image": B64, "k": 1, "variant": "A"}, {"k": "1", "variant": "A"})
    assert caught.value.message == ("'k', 'variant' sent both as a field of the JSON body and "
                                    "as a query parameter; send each option once.")


def test_topk_in_the_body_and_k_in_the_query_are_one_option_sent_twice() -> None:
    with pytest.raises(InvalidParameterError, match='"k" or "topk"'):
        read_json_predict({"image": B64, "topk": 2}, {"k": "1"})


def test_a_query_value_of_a_json_body_is_validated_like_a_field() -> None:
    with pytest.raises(InvalidParameterError, match='"k" must be a whole number'):
        read_json_predict({"image": B64}, {"k": "0"})


def read_json_resize(body: dict[str, object], query: dict[str, str]) -> options.ResizeRequest:
    return resize.read_resize(options.HttpRequest(json.dumps(body).encode(), "application/json",
                                                   {}, query),
                               max_body_bytes=LIMIT, max_output_pixels=10_000)


def test_resize_reads_a_json_bodys_options_from_the_query() -> None:
    read = read_json_resize({"image": B64, "height": 20}, {"width": "10", "format": "png"})
    assert (read.options.width, read.options.height, read.options.format) == (10, 20, "png")


@pytest.mark.parametrize(("body", "query", "says"), [
    ({"image": B64, "width": 8, "height": 8}, {"k": "1"}, "Unknown query parameter(s) 'k'"),
    ({"image": B64, "width": 8, "height": 8}, {"width": "9"}, "'width' sent both"),
])
def test_resize_applies_the_same_rule(body: dict[str, object], query: dict[str, str],
                                      says: str) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        read_json_resize(body, query)
    assert caught.value.message.startswith(says)


# --- inference components -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a", "iris-ic", "A1-b2", "x" * 63])
def test_inference_component_names_sagemaker_accepts(name: str) -> None:
    assert options.parse_inference_component(name) == name


@pytest.mark.parametrize("value", ["-a", "a-", "a_b", "a b", "x" * 64, 3, ["a"], "é"])
def test_inference_component_names_sagemaker_refuses(value: object) -> None:
    with pytest.raises(InvalidParameterError, match='"inference_component"'):
        options.parse_inference_component(value)


@pytest.mark.parametrize(("where", "value"), [
    ("query", "from-query"), ("body", "from-body"), ("header", "from-header")])
def test_inference_component_comes_from_the_body_the_query_or_its_header(where: str,
                                                                        value: str) -> None:
    body: dict[str, object] = {"image": B64}
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    if where == "body":
        body["inference_component"] = value
    elif where == "query":
        query["inference_component"] = value
    else:
        headers["X-Target-Inference-Component"] = value
    assert read_json_predict(body, query, **headers).options.inference_component == value


def test_a_models_own_targets_fill_in_what_the_request_does_not_give(tmp_path: Path) -> None:
    from chalicelib.registry.kinds import Pipeline
    from chalicelib.registry.specs import ModelSpec, Signature

    model = ModelSpec(name="m", folder=tmp_path, endpoint="e",
                      pipeline=Pipeline.IMAGE_CLASSIFICATION, content_type="image/jpeg",
                      accept="application/json", signature=Signature(), variant="Blue",
                      target_model="m.tar.gz", inference_component="m-ic")
    request = options.HttpRequest(json.dumps({"image": B64}).encode(), "application/json")
    read = options.read_predict(request, max_body_bytes=LIMIT, default_k=5, model=model)
    assert (read.options.variant, read.options.target_model,
            read.options.inference_component) == ("Blue", "m.tar.gz", "m-ic")
    asked = options.HttpRequest(request.body, "application/json",
                                {"x-target-inference-component": "other-ic"},
                                {"variant": "Green"})
    read = options.read_predict(asked, max_body_bytes=LIMIT, default_k=5, model=model)
    assert (read.options.variant, read.options.inference_component) == ("Green", "other-ic")


def test_a_model_route_reads_the_inference_component() -> None:
    read = options.read_model_options(
        options.HttpRequest(b"{}", "application/json", {},
                            {"inference_component": "iris-ic"}), max_body_bytes=LIMIT)
    assert read.inference_component == "iris-ic"
    header = options.read_model_options(
        options.HttpRequest(b"{}", "application/json",
                            {"x-target-inference-component": "iris-ic-2"}), max_body_bytes=LIMIT)
    assert header.inference_component == "iris-ic-2"
