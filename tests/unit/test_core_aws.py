"""chalicelib.core.aws: ``s3://`` URIs and botocore error codes, without botocore."""
from __future__ import annotations

import pytest

from chalicelib.core.aws import S3Uri, error_code, valid_bucket_name


def test_an_s3_uri_parses_and_prints_back() -> None:
    uri = S3Uri.parse("s3://bucket/some/key.json")
    assert (uri.bucket, uri.key) == ("bucket", "some/key.json")
    assert str(uri) == "s3://bucket/some/key.json"
    assert S3Uri.parse("s3://bucket/prefix/").prefix == "prefix"
    assert S3Uri.parse("s3://bucket").key == ""


@pytest.mark.parametrize(("text", "reason"), [("https://bucket/key", "not an s3:// URI"),
                                               ("s3:///key", "no bucket"), ("", "not an")])
def test_a_bad_s3_uri_is_a_clear_value_error(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        S3Uri.parse(text)


def test_children_and_siblings_of_an_s3_uri() -> None:
    prefix = S3Uri.parse("s3://bucket/captures/")
    assert str(prefix.child("iris", "/2024/")) == "s3://bucket/captures/iris/2024"
    assert str(S3Uri("bucket").child("a")) == "s3://bucket/a"
    assert prefix.join("other/key") == S3Uri("bucket", "other/key")


def test_the_error_code_of_a_client_error_and_of_anything_else() -> None:
    class Answered(Exception):
        def __init__(self, response: object) -> None:
            super().__init__("answered")
            self.response = response

    assert error_code(Answered({"Error": {"Code": "NoSuchKey"}})) == "NoSuchKey"
    assert error_code(Answered({"Error": "nope"})) == ""
    assert error_code(Answered(None)) == ""
    assert error_code(ValueError()) == ""


@pytest.mark.parametrize(("name", "valid"), [("my-bucket.logs", True), ("abc", True),
                                             ("ab", False), ("My-Bucket", False),
                                             ("-bucket", False), ("bucket-", False),
                                             ("b" * 63, True), ("b" * 64, False)])
def test_the_bucket_name_rule(name: str, valid: bool) -> None:
    assert valid_bucket_name(name) is valid


def test_a_strict_parse_also_wants_a_valid_bucket_name_and_a_key_on_one_line() -> None:
    assert S3Uri.parse("s3://Bucket/key").bucket == "Bucket"  # lenient: as written
    assert S3Uri.parse("s3://bucket/key", strict=True) == S3Uri("bucket", "key")
    for text in ("s3://Bucket/key", "s3://ab", "s3://bucket/a\nb"):
        with pytest.raises(ValueError, match="not a valid bucket name"):
            S3Uri.parse(text, strict=True)


def test_a_prefixs_folder_and_location() -> None:
    prefix = S3Uri.parse("s3://bucket/team/captures/")
    assert prefix.folder("iris") == "team/captures/iris/"
    assert prefix.folder() == "team/captures/"
    assert S3Uri("bucket").folder() == ""
    assert prefix.location == "s3://bucket/team/captures"
    assert S3Uri("bucket").location == "s3://bucket"
