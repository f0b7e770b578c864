"""A job's S3 objects on moto's in-process S3: the upload is checked before it is read, and
an answer too large for the record is written and downloaded through a presigned GET."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
import requests
from moto import mock_aws

from chalicelib.calls import Answer
from chalicelib.core.errors import (
    InvalidUploadError,
    UploadNotFoundError,
    UploadTooLargeError,
    UploadTypeMismatchError,
)
from chalicelib.jobs.objects import check_input, put_result, read_input, result_url
from chalicelib.jobs.uploads import Pin, UploadChangedError, pin_of, presign_upload, upload_key

BUCKET, PREFIX = "sagegate-test-jobs", "dev/jobs/"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def test_an_upload_posted_through_the_presigned_form_is_read_back(s3: Any) -> None:
    upload = presign_upload(s3, BUCKET, PREFIX, "image/jpeg", 1024)
    data = b"\xff\xd8" + b"x" * 500
    posted = requests.post(upload.url, data=dict(upload.fields),
                           files={"file": ("photo.jpg", data)}, timeout=10)
    assert posted.status_code in (200, 204), posted.text
    assert read_input(s3, BUCKET, PREFIX, upload.key, 1024, _reads("image/jpeg")) == (
        data, "image/jpeg")


def test_a_missing_wrong_or_foreign_upload_is_refused(s3: Any) -> None:
    key = upload_key(PREFIX, "c" * 32)
    with pytest.raises(UploadNotFoundError):
        read_input(s3, BUCKET, PREFIX, key, 1024, _reads("image/jpeg"))
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"a,b\n", ContentType="text/csv")
    with pytest.raises(UploadTypeMismatchError):
        read_input(s3, BUCKET, PREFIX, key, 1024, _reads("image/jpeg"))
    with pytest.raises(UploadTooLargeError):
        read_input(s3, BUCKET, PREFIX, key, 3, _reads("text/csv"))
    foreign = "prod/jobs/uploads/" + "c" * 32
    s3.put_object(Bucket=BUCKET, Key=foreign, Body=b"a,b\n", ContentType="text/csv")
    with pytest.raises(InvalidUploadError):
        read_input(s3, BUCKET, PREFIX, foreign, 1024, _reads("text/csv"))


def _reads(*types: str) -> Callable[[str], bool]:
    """A model's reader taking these types (what the job passes: its kind's)."""
    return lambda kind: kind in types


def test_a_large_answer_is_written_and_downloaded_by_a_presigned_get(s3: Any) -> None:
    answer = Answer(b"\x93NUMPY" + bytes(range(256)) * 4, "application/x-npy")
    location = put_result(s3, BUCKET, PREFIX, "d" * 32, answer)
    assert location == f"s3://{BUCKET}/{PREFIX}results/{'d' * 32}"
    downloaded = requests.get(result_url(s3, location), timeout=10)
    assert downloaded.status_code == 200 and downloaded.content == answer.body
    assert downloaded.headers["Content-Type"] == "application/x-npy"


# --- the pinned input: exactly the object the job was made for ------------------------------

def _upload(s3: Any, body: bytes, content_type: str = "text/csv") -> str:
    key = upload_key(PREFIX, "e" * 32)
    s3.put_object(Bucket=BUCKET, Key=key, Body=body, ContentType=content_type)
    return key


def _check(s3: Any, key: str) -> Pin | None:
    content_type, pin = check_input(s3, BUCKET, PREFIX, key, 1024, lambda kind: True)
    assert content_type == "text/csv"
    return pin


def test_the_checked_object_is_pinned_and_read_back(s3: Any) -> None:
    key = _upload(s3, b"1,2,3,4\n")
    pin = _check(s3, key)
    assert pin is not None and pin.etag.startswith('"') and pin.version_id is None
    assert read_input(s3, BUCKET, PREFIX, key, 1024, lambda kind: True, pin) == (
        b"1,2,3,4\n", "text/csv")


def test_an_upload_replaced_after_the_check_is_not_read(s3: Any) -> None:
    key = _upload(s3, b"1,2,3,4\n")
    pin = _check(s3, key)
    _upload(s3, b"9,9,9,9\n")  # the same presigned fields, posted again
    with pytest.raises(UploadChangedError, match="replaced after this job was made") as caught:
        read_input(s3, BUCKET, PREFIX, key, 1024, lambda kind: True, pin)
    assert (caught.value.CODE, caught.value.STATUS_CODE) == ("UploadChanged", 409)
    assert read_input(s3, BUCKET, PREFIX, key, 1024, lambda kind: True) == (
        b"9,9,9,9\n", "text/csv")  # unpinned (a job made before pins): what is there


def test_a_replacement_between_the_head_and_the_read_is_not_read(s3: Any) -> None:
    key = _upload(s3, b"1,2,3,4\n")
    pin = _check(s3, key)
    head_object = s3.head_object

    def head_then_replace(**kwargs: Any) -> Any:
        answer = head_object(**kwargs)  # the HEAD still sees the pinned object...
        _upload(s3, b"9,9,9,9\n")  # ... and a client posts again before the GET
        return answer

    s3.head_object = head_then_replace
    with pytest.raises(UploadChangedError):
        read_input(s3, BUCKET, PREFIX, key, 1024, lambda kind: True, pin)


def test_with_versions_the_pinned_version_is_read_whatever_replaced_it(s3: Any) -> None:
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    key = _upload(s3, b"1,2,3,4\n")
    pin = _check(s3, key)
    assert pin is not None and pin.version_id
    _upload(s3, b"9,9,9,9,9,9\n")
    assert read_input(s3, BUCKET, PREFIX, key, 1024, lambda kind: True, pin) == (
        b"1,2,3,4\n", "text/csv")


def test_s3s_null_version_is_no_version() -> None:
    assert pin_of({"ETag": '"e"', "VersionId": "null"}) == Pin('"e"')
    assert pin_of({"ETag": '"e"', "VersionId": "v1"}) == Pin('"e"', "v1")
    assert pin_of({"VersionId": "v1"}) is None and pin_of(None) is None
