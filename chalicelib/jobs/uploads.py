"""Presigned uploads: one object per upload, under the stage's prefix, posted by the client
straight to S3, and the checks a job makes of the object before it runs."""
from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.core.aws import error_code
from chalicelib.core.errors import (
    InvalidUploadError,
    SagegateError,
    UploadNotFoundError,
    UploadTooLargeError,
    UploadTypeMismatchError,
)
from chalicelib.jobs.records import JOB_ID
from chalicelib.registry.specs import MAX_UPLOAD_BYTES

DEFAULT_EXPIRY_SECONDS = 15 * 60  # when UPLOAD_EXPIRY_SECONDS is not set
UPLOADS = "uploads/"  # under the stage's JOBS_PREFIX
OWNER_METADATA = "sagegate-owner"
"""The user metadata naming an upload's caller (S3 answers it in HeadObject's ``Metadata``);
the presigned POST sets it through :data:`OWNER_FIELD`."""
OWNER_FIELD = f"x-amz-meta-{OWNER_METADATA}"

# type "/" subtype, RFC 6838's restricted-name characters; no parameters
_MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
                         r"/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}\Z")


class UploadChangedError(SagegateError):
    """The upload was replaced after its job was made (the same presigned fields posted
    again): the job runs nothing rather than bytes it was not made for. A job's failure only,
    never a route's answer."""

    STATUS_CODE = 409
    CODE = "UploadChanged"


@dataclasses.dataclass(frozen=True)
class Pin:
    """The one object a job was made for (ETag; version when the bucket keeps versions): the
    job reads that object or nothing."""

    etag: str
    version_id: str | None = None

    def conditions(self) -> dict[str, str]:
        """HeadObject's and GetObject's arguments that select this object and no other."""
        return {"IfMatch": self.etag, **({"VersionId": self.version_id}
                                         if self.version_id else {})}


def pin_of(answer: Mapping[str, Any] | None) -> Pin | None:
    """The pin of a HeadObject or PutObject answer (None without an ETag). S3's ``null``
    version (versioning off or suspended) is no version: the next upload replaces it in place,
    so only the ETag tells them apart."""
    etag = (answer or {}).get("ETag")
    if not isinstance(etag, str) or not etag:
        return None
    version = (answer or {}).get("VersionId")
    return Pin(etag, version if isinstance(version, str) and version not in ("", "null")
               else None)


def changed(pin: Pin, found: str | None = None) -> UploadChangedError:
    now = f", it is {found[:64]} now" if found else ""
    return UploadChangedError(
        f"The upload was replaced after this job was made (its ETag was {pin.etag[:64]}{now}): "
        "the job ran nothing. Make a new job for the new upload.")


@dataclasses.dataclass(frozen=True)
class Upload:
    """The body of ``POST /uploads``: the client posts ``fields`` and then the file to ``url``."""

    upload_id: str
    key: str
    url: str
    fields: Mapping[str, str]
    expires_at: float

    def view(self) -> dict[str, Any]:
        return {"upload_id": self.upload_id, "url": self.url, "fields": dict(self.fields),
                "expires_at": self.expires_at}


def upload_key(prefix: str, upload_id: str) -> str:
    """The object key of an upload (InvalidUploadError for an id the server does not make)."""
    if not JOB_ID.match(upload_id):
        raise InvalidUploadError("upload_id must be the id POST /uploads answered "
                                 "(32 lowercase hex digits).")
    return f"{prefix}{UPLOADS}{upload_id}"


def upload_id_of(key: str, prefix: str) -> str:
    """The upload id of one of this stage's upload keys (InvalidUploadError otherwise)."""
    upload_id = key[len(prefix) + len(UPLOADS):]
    if not key.startswith(prefix + UPLOADS) or not JOB_ID.match(upload_id):
        raise InvalidUploadError("The input is not an upload of this stage.")
    return upload_id


def check_content_type(content_type: object) -> str:
    """A content type an upload may pin: ``type/subtype``, no parameters (else
    InvalidUploadError)."""
    if not isinstance(content_type, str) or not _MEDIA_TYPE.match(content_type):
        raise InvalidUploadError("content_type must be a media type such as 'image/jpeg' "
                                 "(type/subtype, no parameters).")
    return content_type.lower()


def presign_upload(client: Any, bucket: str, prefix: str, content_type: str, max_bytes: int,
                   expiry_seconds: int = DEFAULT_EXPIRY_SECONDS,
                   clock: Callable[[], float] = time.time, owner: str | None = None) -> Upload:
    """A presigned POST for one new upload object, usable for ``expiry_seconds``.

    The key is the server's (no ``${filename}``), so the policy's ``key`` condition is an
    exact match, as is ``Content-Type``'s; the size is a ``content-length-range`` condition,
    checked by S3 itself. With an ``owner``, the object carries it as metadata (an exact-match
    condition too): only that caller's jobs may read the upload.

    Raises:
        InvalidUploadError: a bad content type; ValueError: a cap outside 1 B to 1 GiB.
    """
    content_type = check_content_type(content_type)
    if not 1 <= max_bytes <= MAX_UPLOAD_BYTES:
        raise ValueError(f"max_bytes must be from 1 to {MAX_UPLOAD_BYTES}")
    upload_id = uuid.uuid4().hex
    key = upload_key(prefix, upload_id)
    expires_at = clock() + expiry_seconds
    fields = {"Content-Type": content_type, **({OWNER_FIELD: owner} if owner else {})}
    post = client.generate_presigned_post(
        Bucket=bucket, Key=key, Fields=fields,
        Conditions=[*({name: value} for name, value in fields.items()),
                    ["content-length-range", 1, max_bytes]],
        ExpiresIn=expiry_seconds)
    return Upload(upload_id=upload_id, key=key, url=post["url"], fields=post["fields"],
                  expires_at=expires_at)


def check_uploaded(head: Mapping[str, Any] | None, key: str, prefix: str, content_type: str,
                   max_bytes: int) -> int:
    """Check an uploaded object (``head``: its HeadObject answer, None when missing) before
    a job reads it; answers its size in bytes.

    Raises:
        InvalidUploadError (not this stage's upload), UploadNotFoundError,
        UploadTypeMismatchError, UploadTooLargeError.
    """
    upload_id = upload_id_of(key, prefix)
    if head is None:
        raise UploadNotFoundError(f"No uploaded object for upload {upload_id!r}: post the "
                                  f"file to the URL POST /uploads answered, before it expires "
                                  f"(S3 refuses a file over this model's cap, {max_bytes} "
                                  f"bytes).")
    size = head.get("ContentLength")
    if not isinstance(size, int) or size > max_bytes:
        raise UploadTooLargeError(f"The uploaded object is {size} bytes; this model takes "
                                  f"at most {max_bytes}.")
    actual = str(head.get("ContentType") or "").split(";")[0].strip().lower()
    if actual != content_type.lower():
        raise UploadTypeMismatchError(f"The uploaded object is {actual or 'untyped'!r}, "
                                      f"not {content_type!r}.")
    return size


def uploaded_by(head: Mapping[str, Any] | None) -> str | None:
    """The caller an uploaded object was presigned for (None: anyone's)."""
    metadata = (head or {}).get("Metadata") or {}
    owner = metadata.get(OWNER_METADATA) if isinstance(metadata, Mapping) else None
    return owner if isinstance(owner, str) and owner else None


def head_upload(client: Any, bucket: str, key: str,
                pin: Pin | None = None) -> Mapping[str, Any] | None:
    """S3's HeadObject answer for an upload, or None when there is no such object.

    Raises:
        UploadChangedError: ``pin`` no longer names the object at ``key``.
        botocore's errors other than not-found.
    """
    try:
        answer: Mapping[str, Any] = client.head_object(
            Bucket=bucket, Key=key, **(pin.conditions() if pin else {}))
    except Exception as error:
        if is_missing(error):
            return None
        if pin is not None and is_changed(error):
            raise changed(pin) from None
        raise
    check_pinned(pin, answer)
    return answer


def check_pinned(pin: Pin | None, answer: Mapping[str, Any]) -> None:
    """Refuse (UploadChangedError) an answer of another object than the pinned one: a
    store that ignored If-Match gets the same verdict as S3's 412."""
    found = answer.get("ETag")
    if pin is not None and isinstance(found, str) and found != pin.etag:
        raise changed(pin, found)


def is_missing(error: Exception) -> bool:
    return error_code(error) in ("404", "NoSuchKey", "NotFound", "NoSuchVersion")


def is_changed(error: Exception) -> bool:
    return error_code(error) in ("412", "PreconditionFailed")
