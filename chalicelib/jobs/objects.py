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

RESULTS = "results/"
"""Where answers go under the stage's ``JOBS_PREFIX``."""
RESULT_URL_SECONDS = 15 * 60
"""How long a presigned GET of an answer stays usable."""


def read_input(client: Any, bucket: str, prefix: str, key: str, max_bytes: int,
               accepts: Callable[[str], bool], pin: Pin | None = None) -> tuple[bytes, str]:
    """An uploaded object's bytes and bare content type, whatever type it was uploaded as,
    when ``accepts`` takes that type (the model's route reads it).

    Args:
        pin: the object the job was made for (:func:`check_input`'s): exactly that one is
            read (its ETag a condition of the HEAD and of the read, its version named), never
            what was uploaded in its place. None (a job made before pins): what is there.

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
    and its pin (the object checked: the job reads that one or none).

    An upload presigned for a caller (:func:`~chalicelib.jobs.uploads.uploaded_by`) is that
    caller's: to anyone else it is missing, as another caller's job is.

    Raises:
        InvalidUploadError, UploadNotFoundError, UploadTypeMismatchError,
        UploadTooLargeError; botocore's errors.
    """
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
    """The object's first ``size`` bytes (never more than the cap): with a pin, of that object
    only (S3 refuses the read when another one replaced it since the HEAD).

    Raises:
        UploadChangedError: the pinned object is no longer there.
    """
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
    """The key of a job's answer object: ``<prefix>results/<job_id>``."""
    return f"{prefix}{RESULTS}{job_id}"


def put_result(client: Any, bucket: str, prefix: str, job_id: str, answer: Answer) -> str:
    """Write a job's answer; answers its ``s3://bucket/key``."""
    key = result_key(prefix, job_id)
    client.put_object(Bucket=bucket, Key=key, Body=answer.body, ContentType=answer.content_type)
    return str(S3Uri(bucket, key))


def result_url(client: Any, location: str, expiry_seconds: int = RESULT_URL_SECONDS) -> str:
    """A presigned GET of an answer object (``s3://bucket/key``)."""
    uri = S3Uri.parse(location)
    url: str = client.generate_presigned_url("get_object",
                                             Params={"Bucket": uri.bucket, "Key": uri.key},
                                             ExpiresIn=expiry_seconds)
    return url
