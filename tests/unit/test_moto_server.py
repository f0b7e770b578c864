"""S3's POST policy, checked in front of moto (:mod:`sagegate.moto_server`): the size range,
the exact-match and ``starts-with`` conditions, the expiry, a form without a policy, fields no
condition names; and the WSGI wrapper that refuses a form upload (path-style or
virtual-hosted) as S3 does before moto stores it, and passes everything else through."""
from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import urllib3

from chalicelib.jobs.uploads import presign_upload
from sagegate.moto_server import INSTANCE_HEADER, PolicyError, PostPolicyCheck, check_policy

NOW = datetime(2026, 11, 25, 17, 0, tzinfo=UTC)
KEY = "jobs/uploads/0123456789abcdef0123456789abcdef"


def policy(*conditions: object, expires: datetime = NOW + timedelta(minutes=15)) -> str:
    document = {"expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "conditions": [{"bucket": "jobs"}, {"key": KEY}, *conditions]}
    return base64.b64encode(json.dumps(document).encode()).decode()


def fields(*conditions: object, expires: datetime = NOW + timedelta(minutes=15)
           ) -> dict[str, str]:
    return {"key": KEY, "Content-Type": "image/jpeg", "x-amz-signature": "sig",
            "policy": policy({"Content-Type": "image/jpeg"},
                             ["content-length-range", 1, 10], *conditions, expires=expires)}


def live_fields() -> dict[str, str]:
    """Fields whose policy expires in 15 minutes from the real clock (the wrapper's)."""
    return fields(expires=datetime.now(UTC) + timedelta(minutes=15))


def refusal(given: dict[str, str], size: int, bucket: str = "jobs") -> PolicyError:
    with pytest.raises(PolicyError) as caught:
        check_policy(given, bucket, size, NOW)
    return caught.value


def test_an_upload_within_its_policy_passes() -> None:
    check_policy(fields(), "jobs", 10, NOW)
    check_policy(fields(), "jobs", 1, NOW)


def test_a_file_over_the_range_is_entity_too_large() -> None:
    error = refusal(fields(), 11)

    assert (error.status, error.code) == (400, "EntityTooLarge")
    assert b"<MaxSizeAllowed>10</MaxSizeAllowed>" in error.xml()
    assert b"<ProposedSize>11</ProposedSize>" in error.xml()


def test_an_empty_file_is_entity_too_small() -> None:
    assert refusal(fields(), 0).code == "EntityTooSmall"


@pytest.mark.parametrize(("given", "bucket", "condition"), [
    ({"Content-Type": "image/png"}, "jobs", '"$Content-Type", "image/jpeg"'),
    ({"key": "jobs/uploads/other"}, "jobs", '"$key"'),
    ({}, "other-bucket", '"$bucket"'),
])
def test_a_field_that_fails_its_condition_is_access_denied(given: dict[str, str], bucket: str,
                                                           condition: str) -> None:
    error = refusal({**fields(), **given}, 5, bucket)

    assert (error.status, error.code) == (403, "AccessDenied")
    assert error.message.startswith("Invalid according to Policy: Policy Condition failed: ")
    assert condition in error.message


def test_field_names_are_compared_without_case() -> None:
    given = fields()
    given["content-type"] = given.pop("Content-Type")

    check_policy(given, "jobs", 5, NOW)


def test_starts_with_and_eq_conditions() -> None:
    given = fields(["starts-with", "$key", "jobs/uploads/"], ["eq", "$x-amz-signature", "sig"])
    check_policy(given, "jobs", 5, NOW)

    assert refusal(fields(["starts-with", "$key", "other/"]), 5).code == "AccessDenied"


def test_an_expired_policy_is_refused() -> None:
    given = {**fields(), "policy": policy(expires=NOW - timedelta(seconds=1))}

    assert refusal(given, 5).message == "Invalid according to Policy: Policy expired."


def encoded(document: object) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


@pytest.mark.parametrize("raw", [
    "not base64!", encoded([]), encoded({"conditions": []}),
    encoded({"expiration": "2030-01-01T00:00:00", "conditions": []}),  # no time zone
    encoded({"expiration": "2030-01-01T00:00:00Z", "conditions": [
        ["content-length-range", "one", 10]]})])
def test_a_policy_that_cannot_be_read_is_refused(raw: str) -> None:
    error = refusal({"policy": raw}, 5)

    assert (error.status, error.code) == (403, "AccessDenied")


def test_a_form_without_a_policy_is_anonymous_and_refused() -> None:
    given = fields()
    del given["policy"]

    error = refusal(given, 5)

    assert (error.status, error.code, error.message) == (403, "AccessDenied", "Access Denied")


@pytest.mark.parametrize("extra", ["x-amz-meta-owner", "acl", "success_action_status",
                                   "X-Amz-Credential", "Cache-Control"])
def test_a_field_no_condition_names_is_refused(extra: str) -> None:
    error = refusal({**fields(), extra: "anything"}, 5)

    assert (error.status, error.code) == (403, "AccessDenied")
    assert error.message == f"Invalid according to Policy: Extra input fields: {extra}"


def test_every_extra_field_is_named_in_the_forms_order() -> None:
    error = refusal({**fields(), "acl": "public-read", "tagging": "<Tagging/>"}, 5)

    assert error.message.endswith("Extra input fields: acl, tagging")


def test_the_fields_s3_exempts_need_no_condition() -> None:
    check_policy({**fields(), "AWSAccessKeyId": "AKID", "Signature": "c2ln", "file": "",
                  "x-ignore-filename": "photo.jpg", "X-Ignore-Other": "1"}, "jobs", 5, NOW)


def test_a_condition_of_any_kind_covers_its_field_whatever_its_case() -> None:
    given = {**fields(["starts-with", "$X-Amz-Meta-Tag", ""], ["eq", "$acl", "private"]),
             "x-amz-meta-tag": "t", "ACL": "private", "bucket": "jobs"}

    check_policy(given, "jobs", 5, NOW)


# ---------------------------------------------------------------- the WSGI wrapper

class Inner:
    """moto, as far as the wrapper can tell: records what reached it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.bodies.append(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
        start_response("204 No Content", [])
        return [b""]


def call(app: PostPolicyCheck, method: str, path: str, body: bytes = b"",
         content_type: str = "", **extra: str) -> tuple[str, dict[str, str], bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *rest: Any) -> None:
        answer.update(status=status, headers=dict(headers))

    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "",
               "CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body)),
               "HTTP_HOST": "127.0.0.1:8070", "wsgi.input": io.BytesIO(body), **extra}
    chunks = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], chunks


def form(given: Mapping[str, str], file: bytes) -> tuple[bytes, str]:
    return urllib3.encode_multipart_formdata({**given, "file": ("f.jpg", file, "image/jpeg")})


def test_a_form_upload_over_the_cap_never_reaches_moto() -> None:
    inner = Inner()
    body, content_type = form(live_fields(), b"x" * 11)

    status, headers, answer = call(PostPolicyCheck(inner, "i-1"), "POST", "/jobs", body,
                                   content_type)

    assert status.startswith("400") and b"<Code>EntityTooLarge</Code>" in answer
    assert headers[INSTANCE_HEADER] == "i-1"
    assert "Access-Control-Allow-Origin" not in headers
    assert inner.bodies == []


def test_a_refusal_to_a_page_carries_cors_as_motos_own_answers_do() -> None:
    body, content_type = form(live_fields(), b"x" * 11)

    status, headers, _ = call(PostPolicyCheck(Inner()), "POST", "/jobs", body, content_type,
                              HTTP_ORIGIN="http://127.0.0.1:8000")

    assert status.startswith("400") and headers["Access-Control-Allow-Origin"] == "*"


def test_a_form_upload_within_its_policy_reaches_moto_whole() -> None:
    inner = Inner()
    body, content_type = form(live_fields(), b"x" * 10)

    status, headers, _ = call(PostPolicyCheck(inner, "i-1"), "POST", "/jobs", body, content_type)

    assert status.startswith("204") and headers[INSTANCE_HEADER] == "i-1"
    assert inner.bodies == [body]


@pytest.mark.parametrize(("method", "path", "content_type", "extra"), [
    ("PUT", "/jobs/key", "image/jpeg", {}),
    ("POST", "/jobs/key", "multipart/form-data; boundary=x", {}),  # multipart upload parts
    ("POST", "/", "application/x-www-form-urlencoded", {}),  # SQS, SNS
    ("POST", "/", "application/x-www-form-urlencoded", {"HTTP_HOST": "localhost:8070"}),
    ("POST", "/jobs", "application/xml", {"QUERY_STRING": "delete"}),  # DeleteObjects
    ("POST", "/restapis", "application/x-www-form-urlencoded",  # a signed call elsewhere
     {"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=a/b/us-east-1/apigateway/aws4"}),
])
def test_other_requests_pass_through(method: str, path: str, content_type: str,
                                     extra: dict[str, str]) -> None:
    inner = Inner()

    status, _, _ = call(PostPolicyCheck(inner), method, path, b"payload", content_type,
                        **extra)

    assert status.startswith("204") and inner.bodies == [b"payload"]


def test_a_form_upload_without_a_policy_never_reaches_moto() -> None:
    inner = Inner()
    body, content_type = form({"key": KEY, "Content-Type": "image/jpeg"}, b"x" * 10_000)

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type)

    assert status.startswith("403") and b"<Code>AccessDenied</Code>" in answer
    assert b"<Message>Access Denied</Message>" in answer and inner.bodies == []


def test_a_form_upload_with_a_field_the_policy_does_not_name_never_reaches_moto() -> None:
    inner = Inner()
    body, content_type = form({**live_fields(), "x-amz-meta-owner": "me"}, b"x" * 10)

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type)

    assert status.startswith("403") and b"Extra input fields: x-amz-meta-owner" in answer
    assert inner.bodies == []


@pytest.mark.parametrize("host", ["jobs.localhost:8070", "jobs.s3.localhost:8070",
                                  "jobs.s3.amazonaws.com", "jobs.s3.eu-west-1.amazonaws.com"])
def test_a_virtual_hosted_form_upload_is_checked_against_its_hosts_bucket(host: str) -> None:
    inner = Inner()
    over, content_type = form(live_fields(), b"x" * 11)
    status, _, answer = call(PostPolicyCheck(inner), "POST", "/", over, content_type,
                             HTTP_HOST=host)
    assert status.startswith("400") and b"<Code>EntityTooLarge</Code>" in answer

    unsigned, content_type = form({"key": KEY}, b"x")
    status, _, answer = call(PostPolicyCheck(inner), "POST", "/", unsigned, content_type,
                             HTTP_HOST=host)
    assert status.startswith("403") and b"Access Denied" in answer

    other = host.replace("jobs.", "other.", 1)
    within, content_type = form(live_fields(), b"x" * 10)
    status, _, answer = call(PostPolicyCheck(inner), "POST", "/", within, content_type,
                             HTTP_HOST=other)
    assert status.startswith("403") and b"$bucket" in answer
    assert inner.bodies == []

    status, _, _ = call(PostPolicyCheck(inner), "POST", "/", within, content_type,
                        HTTP_HOST=host)
    assert status.startswith("204") and inner.bodies == [within]


def test_a_path_style_upload_to_s3s_own_host_names_its_bucket_in_the_path() -> None:
    body, content_type = form(live_fields(), b"x" * 11)

    status, _, _ = call(PostPolicyCheck(Inner()), "POST", "/jobs", body, content_type,
                        HTTP_HOST="s3.amazonaws.com")

    assert status.startswith("400")


@pytest.mark.parametrize("query", ["x=delete", "deleted", "delete-me=1"])
def test_only_the_delete_subresource_skips_the_check(query: str) -> None:
    inner = Inner()
    body, content_type = form({"key": KEY}, b"x")

    status, _, _ = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type,
                        QUERY_STRING=query)

    assert status.startswith("403") and inner.bodies == []


def test_a_bucket_post_that_is_not_multipart_is_a_failed_precondition() -> None:
    inner = Inner()

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", b"key=a&file=hello",
                             "application/x-www-form-urlencoded")

    assert status.startswith("412") and b"<Code>PreconditionFailed</Code>" in answer
    assert b"enclosure-type multipart/form-data" in answer and inner.bodies == []


def test_a_form_upload_without_a_length_is_refused() -> None:
    inner = Inner()
    body, content_type = form(live_fields(), b"x" * 10)

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type,
                             CONTENT_LENGTH="")

    assert status.startswith("411") and b"MissingContentLength" in answer
    assert inner.bodies == []


@pytest.mark.parametrize(("version", "token", "signed_fields"), [
    ("s3v4", None, {"x-amz-credential", "x-amz-algorithm", "x-amz-date", "x-amz-signature"}),
    ("s3v4", "session", {"x-amz-credential", "x-amz-security-token"}),
    ("s3", "session", {"AWSAccessKeyId", "signature", "x-amz-security-token"})])
def test_boto3s_presigned_post_names_every_field_it_gives(version: str, token: str | None,
                                                          signed_fields: set[str]) -> None:
    """The fields sagegate's presign hands out (SigV4's credential, algorithm and date, a
    session's token; SigV2's exempt key and signature) pass, through a virtual-hosted URL."""
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url="http://localhost:8070",
                      aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                      aws_session_token=token, config=Config(
                          signature_version=version, s3={"addressing_style": "virtual"}))
    upload = presign_upload(s3, "jobs", "jobs/", "image/jpeg", 10)
    assert signed_fields <= set(upload.fields)
    assert upload.url == "http://jobs.localhost:8070/"
    inner = Inner()
    for fields_sent, file, expected in [(upload.fields, b"x" * 10, "204"),
                                        (upload.fields, b"x" * 11, "400"),
                                        ({**upload.fields, "acl": "public-read"}, b"x", "403")]:
        body, content_type = form(fields_sent, file)
        status, _, _ = call(PostPolicyCheck(inner), "POST", "/", body, content_type,
                            HTTP_HOST="jobs.localhost:8070")
        assert status.startswith(expected)
    assert len(inner.bodies) == 1
