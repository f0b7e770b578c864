"""S3's POST policy, checked in front of moto (:mod:`sagegate.local.moto_server`,
:mod:`sagegate.local.s3_forms`): the size range, the exact-match and ``starts-with`` conditions, the
expiry, a form without a policy, fields no condition names; the form read as S3 reads it
(names without case, no field twice, the first file the content, nothing after it a field);
the WSGI front that answers S3's own errors before moto stores or mishandles anything
(path-style or virtual-hosted, ``?delete``, object POSTs, signed calls of other services), and
the gate that keeps everyone out until the parent has provisioned moto."""
from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import urllib3

from chalicelib.jobs.uploads import presign_upload
from sagegate.local.moto_server import (
    INSTANCE_HEADER,
    OPEN_PATH,
    PROVISION_HEADER,
    OneAtATime,
    PostPolicyCheck,
    ProvisionGate,
    build_app,
)
from sagegate.local.s3_forms import S3Error as PolicyError
from sagegate.local.s3_forms import check_policy

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
    """moto, as far as the wrapper can tell: records what reached it, and each form read as
    moto reads it (werkzeug's parser: its fields, each file's name and bytes)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.forms: list[tuple[dict[str, list[str]], list[tuple[str, bytes]]]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        from werkzeug.formparser import parse_form_data

        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        self.bodies.append(body)
        if str(environ.get("CONTENT_TYPE", "")).startswith("multipart/form-data"):
            _, fields, files = parse_form_data({**environ, "wsgi.input": io.BytesIO(body),
                                                "CONTENT_LENGTH": str(len(body))})
            self.forms.append(({name: fields.getlist(name) for name in fields},
                               [(name, part.read()) for name, part in files.items(multi=True)]))
        start_response("204 No Content", [])
        return [b""]


def as_moto_reads(given: Mapping[str, str], file: bytes) -> tuple[dict[str, list[str]],
                                                                  list[tuple[str, bytes]]]:
    """The form moto gets for ``given`` fields and a file: each field once, its name in lower
    case (moto reads ``key`` by that name), and the one file."""
    return {name.lower(): [value] for name, value in given.items()}, [("file", file)]


def call(app: Callable[..., Iterable[bytes]], method: str, path: str, body: bytes = b"",
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

    status, headers, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body,
                                   content_type)

    assert status.startswith("400") and b"<Code>EntityTooLarge</Code>" in answer
    assert "Access-Control-Allow-Origin" not in headers
    assert inner.bodies == []


def test_a_refusal_to_a_page_carries_cors_as_motos_own_answers_do() -> None:
    body, content_type = form(live_fields(), b"x" * 11)

    status, headers, _ = call(PostPolicyCheck(Inner()), "POST", "/jobs", body, content_type,
                              HTTP_ORIGIN="http://127.0.0.1:8000")

    assert status.startswith("400") and headers["Access-Control-Allow-Origin"] == "*"


def test_a_form_upload_within_its_policy_reaches_moto_whole() -> None:
    inner = Inner()
    sent = live_fields()
    body, content_type = form(sent, b"x" * 10)

    status, _, _ = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type)

    assert status.startswith("204")
    assert inner.forms == [as_moto_reads(sent, b"x" * 10)]


DELETE_XML = (b'<?xml version="1.0" encoding="UTF-8"?><Delete xmlns='
              b'"http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>jobs/uploads/a</Key>'
              b"</Object><Quiet>true</Quiet></Delete>")
S3_SIGNED = "AWS4-HMAC-SHA256 Credential=AKID/20261125/us-east-1/s3/aws4_request, Signature=x"


class Backends:
    """moto's backend factory, as far as the front can tell: one :class:`Inner` per service
    moto's own dispatcher picks."""

    def __init__(self) -> None:
        self.made: dict[str, Inner] = {}

    def __call__(self, service: str) -> Inner:
        return self.made.setdefault(service, Inner())

    def reached(self) -> dict[str, list[bytes]]:
        return {service: inner.bodies for service, inner in self.made.items() if inner.bodies}


@pytest.mark.parametrize(("method", "path", "content_type", "extra", "service"), [
    ("POST", "/", "application/x-www-form-urlencoded",  # SQS, SNS
     {"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=a/b/us-east-1/sqs/aws4_request"},
     "sqs"),
    ("POST", "/", "application/x-amz-json-1.0",  # DynamoDB
     {"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=a/b/us-east-1/dynamodb/aws4_request",
      "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.PutItem"}, "dynamodb"),
    ("POST", "/restapis", "application/x-www-form-urlencoded",  # a signed call elsewhere
     {"HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=a/b/us-east-1/apigateway/aws4_request"},
     "apigateway"),
    ("PUT", "/jobs/key", "image/jpeg", {"HTTP_AUTHORIZATION": S3_SIGNED}, "s3"),
    ("POST", "/jobs/key", "multipart/form-data; boundary=x",
     {"QUERY_STRING": "uploads", "HTTP_AUTHORIZATION": S3_SIGNED}, "s3"),
    ("POST", "/jobs/key", "application/xml",
     {"QUERY_STRING": "uploadId=abc", "HTTP_AUTHORIZATION": S3_SIGNED}, "s3"),
])
def test_other_requests_pass_through(method: str, path: str, content_type: str,
                                     extra: dict[str, str], service: str) -> None:
    backends = Backends()

    status, headers, _ = call(build_app("i-1", create_backend=backends), method, path,
                              b"payload", content_type, **extra)

    assert status.startswith("204") and backends.reached() == {service: [b"payload"]}
    assert headers[INSTANCE_HEADER] == "i-1"


# Authorization headers that once made the front take a form for another service's request,
# while moto's dispatcher sent it to S3: the scope's service in upper case, a second word that
# is not the Credential, a scope moto cannot split (its default service is S3), and none.
BYPASSES = {
    "scope in upper case": "AWS4-HMAC-SHA256 Credential=AKID/20261125/us-east-1/S3/"
                           "aws4_request, SignedHeaders=host, Signature=x",
    "second word not the Credential": "AWS4-HMAC-SHA256 Scope=AKID/20261125/us-east-1/s3/"
                                      "aws4_request, Credential=AKID/20261125/us-east-1/sqs/"
                                      "aws4_request, Signature=x",
    "a scope moto cannot read": "AWS4-HMAC-SHA256 Credential=AKID/20261125/us-east-1/sqs/"
                                "aws4_request/more, Signature=x",
    "SigV2": "AWS AKID:signature",
    "unsigned": "",
}


@pytest.mark.parametrize("authorization", BYPASSES.values(), ids=BYPASSES.keys())
def test_a_form_moto_would_store_is_checked_whatever_the_authorization(
        authorization: str) -> None:
    backends = Backends()
    over, content_type = form(live_fields(), b"x" * 11)
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}

    status, _, answer = call(build_app(create_backend=backends), "POST", "/jobs", over,
                             content_type, **headers)

    assert status.startswith("400") and b"<Code>EntityTooLarge</Code>" in answer
    assert backends.reached() == {}
    within, content_type = form(live_fields(), b"x" * 10)
    status, _, _ = call(build_app(create_backend=backends), "POST", "/jobs", within,
                        content_type, **headers)
    assert status.startswith("204") and list(backends.reached()) == ["s3"]


@pytest.mark.parametrize("content_type", [
    "", "application/xml",
    # what `curl -d @delete.xml` sends: read as a form, it would be a 412
    "application/x-www-form-urlencoded"])
def test_delete_objects_is_not_read_as_a_form(content_type: str) -> None:
    inner = Inner()

    status, _, _ = call(PostPolicyCheck(inner), "POST", "/jobs", DELETE_XML, content_type,
                        QUERY_STRING="delete", HTTP_AUTHORIZATION=S3_SIGNED)

    assert status.startswith("204") and inner.bodies == [DELETE_XML]


@pytest.mark.parametrize("body", [
    None,  # a form upload's body
    b"<Delete></Delete>", b"<Delete><Object><Key>a</Key>", b"not xml at all"])
def test_delete_objects_without_its_document_is_malformed_xml(body: bytes | None) -> None:
    inner = Inner()
    content_type = "application/xml"
    if body is None:
        body, content_type = form(live_fields(), b"x")

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type,
                             QUERY_STRING="delete")

    assert status.startswith("400") and b"<Code>MalformedXML</Code>" in answer
    assert inner.bodies == []


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
    assert status.startswith("204") and len(inner.forms) == 1
    assert inner.forms[0][1] == [("file", b"x" * 10)]


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


# ---------------------------------------------------------------- the form, read as S3 reads it

def raw_form(*parts: tuple[str, bytes, str | None], boundary: str = "b0undary") -> tuple[
        bytes, str]:
    """A multipart body of ``(name, data, filename)`` parts in this order, as sent."""
    chunks = []
    for name, data, filename in parts:
        disposition = f'form-data; name="{name}"' + (
            f'; filename="{filename}"' if filename is not None else "")
        chunks.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
                      + data + b"\r\n")
    return b"".join(chunks) + f"--{boundary}--\r\n".encode(), \
        f"multipart/form-data; boundary={boundary}"


def fields_of(given: Mapping[str, str]) -> list[tuple[str, bytes, str | None]]:
    return [(name, value.encode(), None) for name, value in given.items()]


def post(inner: Inner, body: bytes, content_type: str, **extra: str) -> tuple[str, bytes]:
    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type,
                             **extra)
    return status, answer


def test_a_key_given_twice_in_two_cases_is_refused_not_stored_under_either() -> None:
    """``key=<another's key>`` with ``KEY=<the policy's key>`` passed the check (names
    lower-cased, the last winning) and moto stored the other key (it reads ``key``)."""
    inner = Inner()
    given = live_fields()
    given["KEY"] = given.pop("key")
    body, content_type = raw_form(("key", b"jobs/uploads/" + b"f" * 32, None),
                                  *fields_of(given), ("file", b"x", "f.jpg"))

    status, answer = post(inner, body, content_type)

    assert status.startswith("400") and b"<Code>InvalidArgument</Code>" in answer
    assert b"<ArgumentName>KEY</ArgumentName>" in answer and inner.bodies == []


def test_only_the_first_file_is_the_content_and_a_second_one_is_refused() -> None:
    """A second file part over the cap was stored (moto keeps the last file part) while the
    check read the first."""
    inner = Inner()
    body, content_type = raw_form(*fields_of(live_fields()), ("file", b"x" * 10, "a.jpg"),
                                  ("file", b"x" * 11, "b.jpg"))

    status, answer = post(inner, body, content_type)

    assert status.startswith("400") and b"<Code>InvalidArgument</Code>" in answer
    assert b"<ArgumentName>file</ArgumentName><ArgumentValue>2</ArgumentValue>" in answer
    assert inner.bodies == []


def test_fields_after_the_file_are_not_read_nor_handed_to_moto() -> None:
    inner = Inner()
    given = live_fields()
    body, content_type = raw_form(*fields_of(given), ("file", b"x" * 10, "a.jpg"),
                                  ("acl", b"public-read", None),
                                  ("key", b"jobs/uploads/" + b"f" * 32, None))

    status, _ = post(inner, body, content_type)

    assert status.startswith("204")
    assert inner.forms == [as_moto_reads(given, b"x" * 10)]


def test_field_names_are_one_field_whatever_their_case_and_moto_gets_them_lowered() -> None:
    inner = Inner()
    given = live_fields()
    given["KEY"] = given.pop("key")
    given["CONTENT-TYPE"] = given.pop("Content-Type")
    body, content_type = raw_form(*fields_of(given), ("File", b"x" * 3, "a.jpg"))

    status, _ = post(inner, body, content_type)

    assert status.startswith("204")
    assert inner.forms == [as_moto_reads(given, b"xxx")]
    assert inner.forms[0][0]["key"] == [KEY]


@pytest.mark.parametrize(("parts", "code", "says"), [
    ([], "InvalidArgument", b"<ArgumentValue>0</ArgumentValue>"),  # no file
    ([("file", b"x", "a.jpg")], "InvalidArgument", b"a field named 'key'"),  # the key after it
])
def test_a_form_without_its_key_or_its_file_is_invalid(
        parts: list[tuple[str, bytes, str | None]], code: str, says: bytes) -> None:
    inner = Inner()
    given = live_fields()
    key = given.pop("key")
    body, content_type = raw_form(*fields_of(given), *parts, ("key", key.encode(), None))

    status, answer = post(inner, body, content_type)

    assert status.startswith("400") and f"<Code>{code}</Code>".encode() in answer
    assert says in answer and inner.bodies == []


@pytest.mark.parametrize("body", [
    b"no delimiter at all",
    b'--b0undary\r\nContent-Disposition: form-data; name="key"\r\n\r\nunterminated',
    b"--b0undary\r\nContent-Type: text/plain\r\n\r\nno name\r\n--b0undary--\r\n",
    b"--b0undary\r\nno colon here\r\n\r\nx\r\n--b0undary--\r\n"])
def test_a_body_that_is_not_multipart_is_a_malformed_post(body: bytes) -> None:
    inner = Inner()

    status, answer = post(inner, body, "multipart/form-data; boundary=b0undary")

    assert status.startswith("400") and b"<Code>MalformedPOSTRequest</Code>" in answer
    assert inner.bodies == []


def test_too_much_before_the_file_is_refused_as_s3_refuses_it() -> None:
    inner = Inner()
    body, content_type = raw_form(*fields_of({**live_fields(), "x-ignore-pad": "p" * 20_500}),
                                  ("file", b"x", "a.jpg"))

    status, answer = post(inner, body, content_type)

    assert status.startswith("400") and b"MaxPostPreDataLengthExceeded" in answer
    assert inner.bodies == []


def test_an_urlencoded_bucket_post_signed_for_s3_is_a_failed_precondition() -> None:
    """moto answered it with a 500."""
    inner = Inner()

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", b"key=a&file=hello",
                             "application/x-www-form-urlencoded", HTTP_AUTHORIZATION=S3_SIGNED)

    assert status.startswith("412") and b"<Code>PreconditionFailed</Code>" in answer
    assert inner.bodies == []


@pytest.mark.parametrize("query", ["", "acl", "tagging"])
def test_a_post_on_an_object_is_not_allowed_without_its_subresource(query: str) -> None:
    """A virtual-hosted Host on a path-style URL makes the bucket's name a key: moto answered
    the form with a 500."""
    inner = Inner()
    body, content_type = form(live_fields(), b"x")

    status, _, answer = call(PostPolicyCheck(inner), "POST", "/jobs", body, content_type,
                             HTTP_HOST="jobs.localhost:8070", QUERY_STRING=query)

    assert status.startswith("405") and b"<Code>MethodNotAllowed</Code>" in answer
    assert b"<ResourceType>OBJECT</ResourceType>" in answer and inner.bodies == []


def test_the_owner_pinned_by_a_presigned_post_is_checked_by_the_front() -> None:
    """An upload presigned for one caller carries that caller (a field and an exact-match
    condition): the front refuses the form without it or with another caller."""
    import boto3

    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:8070",
                      aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    upload = presign_upload(s3, "jobs", "jobs/", "image/jpeg", 10, owner="apikey:alice")
    owner_field = "x-amz-meta-sagegate-owner"
    assert upload.fields[owner_field] == "apikey:alice"
    without = {name: value for name, value in upload.fields.items() if name != owner_field}
    inner = Inner()
    for sent, expected in [({**upload.fields, owner_field: "apikey:bob"}, "403"),
                           (without, "403"), (upload.fields, "204")]:
        body, content_type = form(sent, b"x")
        status, answer = post(inner, body, content_type)
        assert status.startswith(expected), answer
        if expected == "403":
            assert owner_field.encode() in answer
    assert inner.forms[0][0][owner_field] == ["apikey:alice"]


# ---------------------------------------------------------------- the gate

def test_the_gate_keeps_everyone_out_until_the_key_opens_it() -> None:
    inner = Inner()
    gate = ProvisionGate(inner, "k3y", instance="i-1")
    key_header = "HTTP_" + PROVISION_HEADER.upper().replace("-", "_")

    status, headers, answer = call(gate, "PUT", "/jobs/jobs/tickets/a", b"{}", "")
    assert status.startswith("503") and b"<Code>ServiceUnavailable</Code>" in answer
    assert headers[INSTANCE_HEADER] == "i-1"  # the parent knows its child meanwhile
    assert call(gate, "POST", OPEN_PATH, b"", "", **{key_header: "wrong"})[0].startswith("503")
    assert inner.bodies == [] and not gate.open

    assert call(gate, "PUT", "/jobs", b"mine", "", **{key_header: "k3y"})[0].startswith("204")
    assert call(gate, "POST", OPEN_PATH, b"", "", **{key_header: "k3y"})[0].startswith("204")
    assert gate.open
    assert call(gate, "PUT", "/jobs/jobs/tickets/a", b"{}", "")[0].startswith("204")
    assert inner.bodies == [b"mine", b"{}"]


def test_without_a_key_the_gate_is_open() -> None:
    inner = Inner()

    status, _, _ = call(ProvisionGate(inner), "PUT", "/jobs/a", b"x", "")

    assert status.startswith("204") and ProvisionGate(inner).open


def test_one_at_a_time_closes_the_apps_answer_once_read() -> None:
    """WSGI: the server closes the iterable it gets; OneAtATime hands it a list, so it closes
    the app's own."""
    closed: list[bool] = []

    class Answer:
        def __iter__(self) -> Any:
            return iter([b"a", b"b"])

        def close(self) -> None:
            closed.append(True)

    def app(environ: Mapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [])
        return Answer()

    assert OneAtATime(app)({}, lambda *args: None) == [b"a", b"b"]
    assert closed == [True]
