"""Read a ``POST /uploads`` request: ``{"model": NAME, "content_type": TYPE}``, exactly.

The shape only: whether the model exists, takes jobs and accepts the type is the jobs
service's to say (:meth:`chalicelib.jobs.service.JobsService.presign`).
"""
from __future__ import annotations

from typing import NamedTuple

from chalicelib.core.errors import InvalidUploadError
from chalicelib.core.jsonbody import load_json

_SHAPE = 'Send {"model": NAME, "content_type": TYPE}.'


class UploadRequest(NamedTuple):
    """An upload asked for, both fields as sent (the jobs service checks them)."""

    model: str
    content_type: object


def read_upload_request(body: bytes) -> UploadRequest:
    """The upload a ``POST /uploads`` body asks for.

    Raises:
        InvalidJSONError: the body is not JSON.
        InvalidUploadError: it is not an object of exactly ``model`` (text) and ``content_type``.
    """
    asked = load_json(body)
    if not isinstance(asked, dict) or set(asked) != {"model", "content_type"} \
            or not isinstance(asked["model"], str):
        raise InvalidUploadError(_SHAPE)
    return UploadRequest(asked["model"], asked["content_type"])
