"""S3's POST policy, checked in front of moto (:mod:`sagegate.moto_server`): the size range,
the exact-match and ``starts-with`` conditions, the expiry; and the WSGI wrapper that refuses
a form upload as S3 does before moto stores it, and passes everything else through."""
from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import urllib3

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


@pytest.mark.parametrize("raw", ["not base64!", base64.b64encode(b"[]").decode(),
                                 base64.b64encode(b'{"conditions": []}').decode()])
def test_a_policy_that_cannot_be_read_is_refused(raw: str) -> None:
    assert refusal({"policy": raw}, 5).code == "AccessDenied"


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
               "wsgi.input": io.BytesIO(body), **extra}
    chunks = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], chunks


def form(given: dict[str, str], file: bytes) -> tuple[bytes, str]:
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


@pytest.mark.parametrize(("method", "path", "content_type"), [
    ("PUT", "/jobs/key", "image/jpeg"),
    ("POST", "/jobs/key", "multipart/form-data; boundary=x"),  # multipart upload parts
    ("POST", "/", "application/x-www-form-urlencoded"),  # SQS, SNS
])
def test_other_requests_pass_through(method: str, path: str, content_type: str) -> None:
    inner = Inner()

    status, _, _ = call(PostPolicyCheck(inner), method, path, b"payload", content_type)

    assert status.startswith("204") and inner.bodies == [b"payload"]
