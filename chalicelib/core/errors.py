"""One error tree for sagegate, each error carrying its HTTP status and a stable code.

Views render these as ``{"Code": ..., "Message": ..., "request_id": ...}``; nothing here
imports Chalice, so the same errors serve the CLI, the benchmarks and the tests.
"""
from __future__ import annotations


class SagegateError(Exception):
    """Base of every error sagegate reports to a client: ``STATUS_CODE`` is the HTTP status,
    ``CODE`` the body's stable ``Code``."""

    STATUS_CODE = 500
    CODE = "InternalError"

    def __init__(self, message: str, *, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})

    @property
    def headers(self) -> dict[str, str]:
        return {}

    def as_failure(self) -> dict[str, str]:
        return {"Code": self.CODE, "Message": self.message}


class HandlerError(SagegateError):
    """A user's handler file raised at request time: a generic message for the client, the
    traceback in the log only."""

    CODE = "HandlerError"


class ConfigurationError(SagegateError):
    """A setting is missing or invalid: raised when settings are built, never per request."""

    CODE = "ConfigurationError"


# --- 4xx: the client's request ------------------------------------------------------------


class BadRequestError(SagegateError):
    STATUS_CODE = 400
    CODE = "BadRequest"


class InvalidJSONError(BadRequestError):
    CODE = "InvalidJSON"


class MissingImageError(BadRequestError):
    CODE = "MissingImage"


class InvalidBase64Error(BadRequestError):
    CODE = "InvalidBase64"


class InvalidImageError(BadRequestError):
    CODE = "InvalidImage"


class InvalidParameterError(BadRequestError):
    CODE = "InvalidParameter"


class InvalidVariantError(BadRequestError):
    CODE = "InvalidVariant"


class SignatureMismatchError(BadRequestError):
    """The request's data does not fit the model's declared signature (dtype, shape, names)."""

    CODE = "SignatureMismatch"


class InvalidInputError(BadRequestError):
    """A user handler's input_handler / pre_inference refused the request (ValueError,
    TypeError): its message is the answer."""

    CODE = "InvalidInput"


class NotFoundError(SagegateError):
    """No such resource (a file of the web page)."""

    STATUS_CODE = 404
    CODE = "NotFound"


class ModelNotFoundError(SagegateError):

    STATUS_CODE = 404
    CODE = "ModelNotFound"


class JobNotFoundError(NotFoundError):
    """No such job, or not the caller's: both answer the same 404 so ids cannot be probed."""

    CODE = "JobNotFound"


class NotAcceptableError(SagegateError):
    STATUS_CODE = 406
    CODE = "NotAcceptable"


class PayloadTooLargeError(SagegateError):
    STATUS_CODE = 413
    CODE = "PayloadTooLarge"


class ImageTooLargeError(SagegateError):
    STATUS_CODE = 413
    CODE = "ImageTooLarge"


class UnsupportedMediaTypeError(SagegateError):
    STATUS_CODE = 415
    CODE = "UnsupportedMediaType"


# --- uploads and jobs (POST /uploads, POST /models/{name}/jobs) ------------------------------


class InvalidUploadError(BadRequestError):
    """An upload id or content type that is not one the server makes or accepts."""

    CODE = "InvalidUpload"


class UploadNotFoundError(SagegateError):
    """No uploaded object under that id (never posted, expired, or refused by S3)."""

    STATUS_CODE = 404
    CODE = "UploadNotFound"


class UploadTypeMismatchError(SagegateError):
    """The uploaded object's content type is not the one the upload was made for."""

    STATUS_CODE = 415
    CODE = "UploadTypeMismatch"


class UploadTooLargeError(PayloadTooLargeError):
    """The uploaded object is over the model's cap."""

    CODE = "UploadTooLarge"


class JobsDisabledError(SagegateError):
    """This stage serves no uploads or jobs (``JOBS_BUCKET`` is not set)."""

    STATUS_CODE = 501
    CODE = "JobsDisabled"


# --- 5xx: sagegate itself, busy -----------------------------------------------------------


class RetryLaterError(SagegateError):
    """Something behind sagegate is unreachable, throttling or not ready: a 503 whose
    ``Retry-After`` (whole seconds) says when to come back.

    ``retry_after`` is set by whoever gives up, from what it knows (the upstream's own wait,
    the backoff it would have waited next), not left at its default.
    """

    STATUS_CODE = 503  # each subclass names its own CODE

    def __init__(
        self,
        message: str,
        *,
        retry_after: int = 1,
        details: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class JobsUnavailableError(RetryLaterError):
    """The jobs' storage (the S3 bucket, the DynamoDB table) could not be reached, timed out,
    throttled or failed on its side: nothing was decided, the same request may be sent again
    (:mod:`chalicelib.jobs.awsfaults` is the one place AWS failures become this)."""

    CODE = "JobsUnavailable"


class PreprocessingTimeoutError(SagegateError):
    """Preparing the request (decode and resize, a handler's input_handler) used up the
    request's time budget before the endpoint could be called: nothing was sent to it.

    A 503 with ``Retry-After``, not a 504: no upstream was waited for; sagegate was too busy
    (concurrent large images on few cores) and retrying, which is safe as nothing happened,
    is what the client should do, or send a smaller input.
    """

    STATUS_CODE = 503
    CODE = "PreprocessingTimeout"
    RETRY_AFTER = 2

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.RETRY_AFTER)}


# --- 5xx: the endpoint behind us ----------------------------------------------------------


class EndpointError(SagegateError):
    """The SageMaker endpoint failed in a way the client cannot fix."""

    STATUS_CODE = 502
    CODE = "EndpointError"


class EndpointNotFoundError(EndpointError):
    CODE = "EndpointNotFound"


class ModelError(EndpointError):
    """The model container answered non-2xx; carries its original status and message."""

    CODE = "ModelError"


class InvalidEndpointResponseError(EndpointError):
    CODE = "InvalidEndpointResponse"


class EndpointUnavailableError(EndpointError, RetryLaterError):
    """Throttled, model not ready, or service unavailable: the client should retry."""

    STATUS_CODE = 503
    CODE = "EndpointUnavailable"


class EndpointTimeoutError(EndpointError):
    STATUS_CODE = 504
    CODE = "EndpointTimeout"
