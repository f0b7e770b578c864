"""Read a ``POST /models/{name}/jobs`` request: an upload's id or an inline body, and the
job's options, validated once and kept typed (:class:`~chalicelib.calls.CallOptions`)."""
from __future__ import annotations

import dataclasses

from chalicelib.calls import CallOptions
from chalicelib.core.errors import InvalidJSONError, InvalidUploadError, PayloadTooLargeError
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import MediaType, bare
from chalicelib.reading.options import HttpRequest, read_model_options


@dataclasses.dataclass(frozen=True)
class JobRequest:
    """A ``POST /models/{name}/jobs`` request, read: ``inline`` when the body is the job's input
    itself, else ``upload_id`` as sent (the jobs service checks it); ``options`` are kept with
    the job as read here."""

    inline: bool
    upload_id: object
    options: CallOptions


def read_job(request: HttpRequest, *, max_body_bytes: int) -> JobRequest:
    """Read a job request: JSON ``{"upload_id": ID}``, or any other body as the job's inline
    input; the query string's options are checked now, as the model route checks them.

    Raises:
        InvalidUploadError: a JSON object with ``upload_id`` and other fields.
        PayloadTooLargeError: an inline body over ``max_body_bytes``.
        InvalidParameterError: an unknown query parameter or a bad value.
    """
    options = read_model_options(HttpRequest(body=b"", query=request.query), max_body_bytes=1)
    document = None
    if bare(request.content_type) == MediaType.JSON and len(request.body) <= max_body_bytes:
        try:
            document = load_json(request.body)
        except InvalidJSONError:
            document = None  # not JSON after all: an inline body the model's reader judges
    if isinstance(document, dict) and "upload_id" in document:
        if set(document) != {"upload_id"}:
            raise InvalidUploadError('A job on an upload is {"upload_id": ID}; send options '
                                     "such as k in the query string.")
        return JobRequest(False, document["upload_id"], options)
    if not request.body:
        raise InvalidUploadError('Send {"upload_id": ID} (from POST /uploads), or the '
                                 "model's input itself.")
    if len(request.body) > max_body_bytes:
        raise PayloadTooLargeError(
            f"Request body is {len(request.body)} bytes; the limit inline is {max_body_bytes}: "
            "send a larger input through POST /uploads and {\"upload_id\": ...}.")
    return JobRequest(True, None, options)
