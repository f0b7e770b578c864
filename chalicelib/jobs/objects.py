"""The S3 side of a job: reading its uploaded input (checked first) and keeping an answer too
large for the job record, with a presigned GET for the client to download it."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.calls import Answer
from chalicelib.core.aws import S3Uri
from chalicelib.core.errors import UploadTypeMismatchError
from chalicelib.core.media import bare
from chalicelib.jobs.uploads import (
    Pin,
    changed,
    check_pinned,
    check_uploaded,
    head_upload,
    is_changed,
    pin_of,
    upload_id_of,
    uploaded_by,
)

RESULTS = "results/"  # under the stage's JOBS_PREFIX
RESULT_URL_SECONDS = 15 * 60  # how long a presigned GET of an answer stays usable


def read_input(client: Any, bucket: str, prefix: str, key: str, max_bytes: int,
               accepts: Callable[[str], bool], pin: Pin | None = None) -> tuple[bytes, str]:
    """An uploaded object's bytes and bare content type, when ``accepts`` takes that type.
    With a ``pin``, exactly that object is read (its ETag a condition of the HEAD and of the
    read), never what was uploaded in its place.

    Raises:
        InvalidUploadError, UploadNotFoundError, UploadTypeMismatchError,
        UploadTooLargeError, UploadChangedError; botocore's errors.
    """
    content_type, size, _ = _checked(client, bucket, prefix, key, max_bytes, accepts, pin)
    return _read(client, bucket, key, size, max_bytes, pin), content_type


def check_input(client: Any, bucket: str, prefix: str, key: str, max_bytes: int,
                accepts: Callable[[str], bool],
                caller: str | None = None) -> tuple[str, Pin | None]:
    """Check an uploaded object a job will read (HEAD only); answers its bare content type
    and its pin. An upload presigned for a caller is, to anyone else, missing."""
    content_type, _, head = _checked(client, bucket, prefix, key, max_bytes, accepts)
    owner = uploaded_by(head)
    if owner is not None and owner != caller:
        check_uploaded(None, key, prefix, content_type, max_bytes)  # raises: "no such upload"
    return content_type, pin_of(head)


def _checked(client: Any, bucket: str, prefix: str, key: str, max_bytes: int,
             accepts: Callable[[str], bool],
             pin: Pin | None = None) -> tuple[str, int, Mapping[str, Any] | None]:
    upload_id_of(key, prefix)  # nothing outside this stage's uploads is even looked at
    head = head_upload(client, bucket, key, pin)
    content_type = bare(str((head or {}).get("ContentType") or ""), "")
    size = check_uploaded(head, key, prefix, content_type, max_bytes)
    if not accepts(content_type):
        raise UploadTypeMismatchError(f"The uploaded object is {content_type or 'untyped'!r}, "
                                      "which this model does not read.")
    return content_type, size, head


def _read(client: Any, bucket: str, key: str, size: int, max_bytes: int,
          pin: Pin | None = None) -> bytes:
    # with a pin, S3 refuses the read when another object replaced it since the HEAD
    try:
        answer = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{max(size, 1) - 1}",
                                   **(pin.conditions() if pin else {}))
    except Exception as error:
        if pin is not None and is_changed(error):
            raise changed(pin) from None
        raise
    check_pinned(pin, answer)
    body: bytes = answer["Body"].read(max_bytes + 1)
    return body


def result_key(prefix: str, job_id: str) -> str:
    return f"{prefix}{RESULTS}{job_id}"


def put_result(client: Any, bucket: str, prefix: str, job_id: str, answer: Answer) -> str:
    """Write a job's answer; answers its ``s3://`` URI."""
    key = result_key(prefix, job_id)
    client.put_object(Bucket=bucket, Key=key, Body=answer.body, ContentType=answer.content_type)
    return str(S3Uri(bucket, key))


def result_url(client: Any, location: str, expiry_seconds: int = RESULT_URL_SECONDS) -> str:
    """A presigned GET of an answer object."""
    uri = S3Uri.parse(location)
    url: str = client.generate_presigned_url("get_object",
                                             Params={"Bucket": uri.bucket, "Key": uri.key},
                                             ExpiresIn=expiry_seconds)
    return url
