"""The one place sagegate talks to SageMaker: ``InvokeEndpoint`` (and a job's
``InvokeEndpointAsync``) behind a small typed wrapper.

botocore's own retries are switched off; :class:`EndpointClient` retries only what is worth
retrying (throttling, a model still loading, a service hiccup, a dropped connection) by the
one retry policy (:mod:`chalicelib.core.retries`: full jitter, never past the request's time budget,
so the whole call fits inside API Gateway's 29 seconds, and within the client's retry quota,
so a throttled endpoint is not sent every request ``max_attempts`` times). Every
``ClientError`` becomes one of sagegate's errors here, at the edge; a 503's ``Retry-After``
says what is known (:meth:`chalicelib.core.retries.Retrier.retry_after`).
"""
from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.eventstream import ParserError
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from urllib3.exceptions import HTTPError as ConnectionFailure
from urllib3.exceptions import ReadTimeoutError as StreamReadTimeout

from chalicelib.calls import InvokeResult
from chalicelib.core.aws import error_code
from chalicelib.core.config_names import SAGEMAKER_NAME
from chalicelib.core.errors import (
    EndpointError,
    EndpointNotFoundError,
    EndpointTimeoutError,
    EndpointUnavailableError,
    InvalidEndpointResponseError,
    InvalidParameterError,
    InvalidVariantError,
    ModelError,
    PreprocessingTimeoutError,
    SagegateError,
)
from chalicelib.core.retries import (
    THROTTLING_CODES,
    Retrier,
    RetryPolicy,
    RetryQuota,
    classify,
    upstream_hint,
)

if TYPE_CHECKING:
    from mypy_boto3_sagemaker_runtime import SageMakerRuntimeClient

logger = logging.getLogger("sagegate.endpoint")  # a child of Powertools' JSON logger

UNAVAILABLE_CODES = frozenset({"ModelNotReadyException", "ServiceUnavailable"})
"""SageMaker's codes for an endpoint not ready; with every throttling code
(:data:`chalicelib.core.retries.THROTTLING_CODES`) answered 503 with a ``Retry-After``."""
# the connection failed, before or while the answer was read (a body cut short included)
_CONNECTION_ERRORS = (EndpointConnectionError, ConnectionClosedError, ConnectTimeoutError,
                      ResponseStreamingError, IncompleteReadError)
# ... of which these prove the request never arrived (no connection was made)
_NOT_SENT = (EndpointConnectionError, ConnectTimeoutError)
# what reading a response stream's events may raise: botocore reads the event stream straight
# from urllib3 (its timeouts and broken connections unwrapped) and parses its frames itself
# (ParserError: a bad CRC, a frame of an impossible length), an error event a ClientError
_STREAM_READ_ERRORS = (ClientError, BotoCoreError, ConnectionFailure, OSError, ParserError)
_MAX_ECHOED_MESSAGE = 512
DEFAULT_POLICY = RetryPolicy(attempt_timeout=22.0)
"""The policy of a client given none (the settings' defaults: 2 s connect, 20 s read)."""
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Invocation:
    """What one ``InvokeEndpoint`` call asks for."""

    endpoint_name: str
    body: bytes
    content_type: str
    accept: str
    target_variant: str | None = None
    custom_attributes: str | None = None
    inference_id: str | None = None
    target_model: str | None = None
    """SageMaker's TargetModel: the model of a multi-model endpoint to run."""
    inference_component: str | None = None
    """SageMaker's InferenceComponentName: the component of an endpoint to run."""

    def to_kwargs(self) -> dict[str, Any]:
        """The boto3 keyword arguments, leaving out the unset optional ones."""
        kwargs: dict[str, Any] = {
            "EndpointName": self.endpoint_name, "Body": self.body,
            "ContentType": self.content_type, "Accept": self.accept,
        }
        optional = {"TargetVariant": self.target_variant,
                    "TargetModel": self.target_model,
                    "InferenceComponentName": self.inference_component,
                    "CustomAttributes": self.custom_attributes,
                    "InferenceId": self.inference_id}
        kwargs.update({key: value for key, value in optional.items() if value})
        return kwargs


@dataclasses.dataclass(frozen=True)
class AsyncInvocation:
    """What one ``InvokeEndpointAsync`` call asks for: a job's input queued on an
    asynchronous endpoint, its id the job's."""

    endpoint_name: str
    input_location: str
    content_type: str
    inference_id: str
    invocation_timeout_seconds: int
    custom_attributes: str | None = None

    def to_kwargs(self) -> dict[str, Any]:
        """The boto3 keyword arguments, leaving out unset custom attributes."""
        kwargs: dict[str, Any] = {
            "EndpointName": self.endpoint_name, "InputLocation": self.input_location,
            "ContentType": self.content_type, "InferenceId": self.inference_id,
            "InvocationTimeoutSeconds": self.invocation_timeout_seconds}
        if self.custom_attributes:
            kwargs["CustomAttributes"] = self.custom_attributes
        return kwargs

    def as_invocation(self) -> Invocation:
        """The call as the error translation reads it (its endpoint, type and id)."""
        return Invocation(self.endpoint_name, b"", self.content_type, "",
                          custom_attributes=self.custom_attributes,
                          inference_id=self.inference_id)


@dataclasses.dataclass(frozen=True)
class _Failure:
    """A failed attempt a retry might cure: the error to raise when none is made, and what
    the answer said about waiting."""

    error: SagegateError
    throttled: bool = False
    hint: float | None = None
    """The endpoint's own wait (``x-amz-retry-after`` or ``Retry-After``), in seconds."""


class EndpointClient:
    """Calls a SageMaker runtime client (created with botocore's retries off) and translates
    its failures. The default ``quota`` is the client's own: a process has one client, so every
    request of the process shares it; ``sleep``, ``clock`` and ``rng`` are for tests.
    """

    def __init__(
        self,
        client: SageMakerRuntimeClient,
        policy: RetryPolicy | None = None,
        *,
        quota: RetryQuota | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self._policy = policy or DEFAULT_POLICY
        self.quota = quota or RetryQuota()
        self._sleep, self._clock, self._rng = sleep, clock, rng

    @property
    def client(self) -> SageMakerRuntimeClient:
        """A job's ``InvokeEndpointAsync`` goes through it too."""
        return self._client

    def close(self) -> None:
        """Drop the client's pooled connections (they reopen on the next call)."""
        self._client.close()

    def check_time_left(self, deadline: float | None) -> None:
        """Refuse to go on when a whole endpoint attempt no longer fits before ``deadline``
        (the clock's time; None: no deadline): the work before the call has had its share.

        Raises:
            PreprocessingTimeoutError: past :meth:`RetryPolicy.preprocessing_deadline`.
        """
        if deadline is None:
            return
        now = self._clock()
        if now <= self._policy.preprocessing_deadline(deadline):
            return
        logger.warning("preprocessing used up the time budget: %.2f s left, an attempt "
                       "needs %.2f s", deadline - now, self._policy.attempt_timeout)
        raise PreprocessingTimeoutError(
            "Preparing the request used up its time budget before the endpoint could be "
            f"called ({max(0.0, deadline - now):.1f} s were left; a call needs "
            f"{self._policy.attempt_timeout:.1f} s). The endpoint was not called: retry "
            "later, or send a smaller input.")

    def invoke(self, invocation: Invocation, deadline: float | None = None) -> InvokeResult:
        """Invoke the endpoint, retrying what is retryable while the budget allows.

        Every attempt, the first included, starts only if a whole attempt (connect and read
        timeouts) still fits before ``deadline`` (the clock's time; by default the policy's
        budget from now), so the call never outlives the request's budget: whatever came
        before it (preprocessing) had until :meth:`RetryPolicy.preprocessing_deadline`, and
        when it finished by then the first attempt always gets its whole time.

        Raises:
            EndpointError: (or a subclass) anything the endpoint did not answer 2xx to.
            PreprocessingTimeoutError: the budget ran out before a first attempt could start.
        """
        return self._retrying(invocation, lambda attempt: self._answer(invocation, attempt),
                              deadline)

    def invoke_async(self, invocation: AsyncInvocation, deadline: float | None = None) -> str:
        """Queue a job's input on an asynchronous endpoint (``InvokeEndpointAsync``) by the
        rules of :meth:`invoke`: what a retry may cure is retried by the same policy until
        ``deadline`` (an endpoint restarting costs a job a wait, whatever its backend), but
        only a failure that proves the job was not queued: a connection that could not be
        made, or a throttle (a refusal). A failure after the request may have arrived (a
        connection closed before the answer, a 5xx, a read timeout) is not retried: the
        endpoint may have queued the job, and a second call would queue its id again.

        Returns:
            The output location SageMaker will write ("" when it names none).

        Raises:
            EndpointError: (or a subclass) the endpoint did not take the job.
            PreprocessingTimeoutError: the budget ran out before a first attempt could start.
        """
        def send(attempt: int) -> str:
            answer = self._client.invoke_endpoint_async(**invocation.to_kwargs())
            return str(answer.get("OutputLocation") or "")

        return self._retrying(invocation.as_invocation(), send, deadline, idempotent=False)

    def _retrying(self, invocation: Invocation, send: Callable[[int], T | _Failure],
                  deadline: float | None, *, idempotent: bool = True) -> T:
        """``send(attempt)`` retried by the policy (see :meth:`invoke`)."""
        if deadline is None:
            deadline = self._clock() + self._policy.budget_seconds
        self.check_time_left(deadline)
        retrier = Retrier(self._policy, self.quota, deadline=deadline, clock=self._clock,
                          rng=self._rng)
        while True:
            outcome = self._attempt(invocation, send, retrier.attempts, idempotent)
            if not isinstance(outcome, _Failure):
                retrier.succeeded()
                return outcome
            delay = retrier.failed(throttled=outcome.throttled, hint=outcome.hint)
            if delay is None:
                error = _given_up(outcome, retrier)
                del outcome
                try:
                    raise error
                finally:  # this frame is in the error's traceback: no reference back to it
                    del error
            logger.warning("retrying endpoint call: %s (attempt %d)", outcome.error.CODE,
                           retrier.attempts - 1)
            self._sleep(delay)

    def _attempt(self, invocation: Invocation, send: Callable[[int], T | _Failure],
                 attempt: int, idempotent: bool = True) -> T | _Failure:
        """One call: its result, or (returned, not raised) an error a retry might cure. The
        one rule of what may be retried, for both operations: a call that is not idempotent
        (``InvokeEndpointAsync`` queues its id each time it arrives) is retried only after a
        failure that proves it never arrived (no connection made, or a throttle).

        Errors that end the request are raised without a local variable naming them: an
        exception held by a frame of its own traceback is a reference cycle, and every failed
        request during an outage would leave one (frames, tracebacks, botocore's response) for
        the cycle collector.
        """
        try:
            return send(attempt)
        except ClientError as error:
            if _retryable(error, idempotent):
                return _failure(error, invocation)
            raise translate_client_error(error, invocation) from None
        except ReadTimeoutError:
            raise EndpointTimeoutError(
                "The endpoint did not answer in time. Try again later.") from None
        except _NOT_SENT:
            return _Failure(_unreachable())
        except _CONNECTION_ERRORS:
            if idempotent:
                return _Failure(_unreachable())
            raise _unreachable() from None
        except BotoCoreError as error:  # any other failure of the SDK: never a 500
            logger.warning("endpoint call failed in botocore: %s", type(error).__name__)
            raise EndpointError(f"The endpoint call failed ({type(error).__name__}).",
                                details={"endpoint_error": type(error).__name__}) from None

    def invoke_stream(self, invocation: Invocation, deadline: float | None = None,
                      answered: Callable[[], None] | None = None) -> EndpointStream:
        """``InvokeEndpointWithResponseStream``, retried by the rules of :meth:`invoke` until
        its first event has arrived, never after (a part the caller may have read would be
        sent twice). ``answered`` is called once an attempt's call is answered (its headers),
        before its first event is awaited: the caller's work there overlaps the model's prefill
        instead of competing with the call's own (every attempt's: it must be idempotent).

        Raises:
            EndpointError: (or a subclass) the stream could not be opened, or its first event
                was an error.
            PreprocessingTimeoutError: the budget ran out before a first attempt could start.
        """
        return self._retrying(
            invocation, lambda attempt: self._open(invocation, attempt, answered), deadline)

    def _open(self, invocation: Invocation, attempt: int,
              answered: Callable[[], None] | None = None) -> EndpointStream | _Failure:
        """One stream opened and its first event read (a failure there is the attempt's: a
        connection broken before the first event is retried, see :func:`read_error`)."""
        kwargs = invocation.to_kwargs()
        kwargs.pop("TargetModel", None)  # no multi-model endpoint streams (the API has none)
        response = self._client.invoke_endpoint_with_response_stream(**kwargs)
        body = response["Body"]
        events = iter(body)
        try:
            if answered is not None:
                answered()
            first = next(events, None)
        except _STREAM_READ_ERRORS as error:
            _close(body)
            return _before_first_event(read_error(error, started=False))
        except BaseException:
            _close(body)
            raise
        return EndpointStream(
            content_type=response.get("ContentType", ""),
            variant=_checked_variant(response.get("InvokedProductionVariant")),
            custom_attributes=response.get("CustomAttributes"), attempts=attempt,
            body=body, events=events, first=first)

    def _answer(self, invocation: Invocation, attempt: int) -> InvokeResult:
        """One ``InvokeEndpoint``, its body read (a failure while reading is the attempt's)."""
        response = self._client.invoke_endpoint(**invocation.to_kwargs())
        body = response["Body"].read()
        return InvokeResult(
            body=body,
            content_type=response.get("ContentType", ""),
            variant=_checked_variant(response.get("InvokedProductionVariant")),
            custom_attributes=response.get("CustomAttributes"),
            attempts=attempt,
        )


@dataclasses.dataclass
class EndpointStream:
    """An endpoint's answer as it streams: :meth:`parts` yields each ``PayloadPart``'s bytes
    as it arrives; :meth:`close` closes the connection (a caller that went away)."""

    content_type: str
    variant: str | None
    custom_attributes: str | None
    attempts: int
    body: Any = dataclasses.field(repr=False)
    events: Iterator[Any] = dataclasses.field(repr=False)
    first: Any = dataclasses.field(repr=False)

    def parts(self) -> Iterator[bytes]:
        """The payload's parts, in order.

        Raises:
            ModelError: the container's stream failed (``ModelStreamError``).
            EndpointError: (or a subclass) the stream broke off, timed out or was not an
                event stream (see :func:`read_error`).
        """
        event, self.first = self.first, None
        try:
            while event is not None:
                payload = event.get("PayloadPart") if isinstance(event, dict) else None
                if payload is not None:
                    yield bytes(payload.get("Bytes") or b"")
                event = next(self.events, None)
        except _STREAM_READ_ERRORS as error:
            raise read_error(error, started=True) from None

    def close(self) -> None:
        """Close the stream's connection (its remaining parts are never read)."""
        _close(self.body)


def _close(body: Any) -> None:
    close = getattr(body, "close", None)
    if callable(close):
        close()


def stream_error(error: ClientError) -> SagegateError:
    """An error event of a stream (``ModelStreamError``, ``InternalStreamFailure``) as
    sagegate's error."""
    code = error_code(error) or "Unknown"
    message = str(error.response.get("Error", {}).get("Message", ""))[:_MAX_ECHOED_MESSAGE]
    logger.warning("endpoint stream error %s: %s", code, message)
    if code == "ModelStreamError":
        return ModelError("The model's stream failed (ModelStreamError).",
                          details={"original_message": message})
    return EndpointError(f"The endpoint's stream failed ({code}).",
                         details={"endpoint_error": code})


def read_error(error: Exception, *, started: bool) -> SagegateError:
    """A failure while reading a response stream's events as sagegate's error, before its
    first event (``started`` False) or after it.

    An error event is the container's (:func:`stream_error`); a read timeout is
    ``EndpointTimeoutError``; a frame botocore cannot parse (``ParserError``: a bad CRC, an
    impossible length) is ``InvalidEndpointResponseError``; a broken connection is, before
    the first event, the unreachable endpoint's ``EndpointUnavailableError`` (which
    :meth:`EndpointClient.invoke_stream` retries: nothing was read yet), after it
    ``EndpointError`` (the stream broke off: what was read cannot be read twice).
    """
    if isinstance(error, ClientError):  # botocore's EventStreamError: an error event
        return stream_error(error)
    if isinstance(error, (ReadTimeoutError, StreamReadTimeout, TimeoutError)):
        return EndpointTimeoutError("The endpoint stopped sending its answer in time."
                                    if started else
                                    "The endpoint did not answer in time. Try again later.")
    if isinstance(error, ParserError):
        logger.warning("endpoint stream unreadable: %s", type(error).__name__)
        return InvalidEndpointResponseError(
            f"The endpoint's stream is not a valid event stream ({type(error).__name__}).",
            details={"endpoint_error": type(error).__name__})
    logger.warning("endpoint stream broke: %s", type(error).__name__)
    if not started:
        return _unreachable()
    return EndpointError("The endpoint's stream broke off.",
                         details={"endpoint_error": type(error).__name__})


def _before_first_event(error: SagegateError) -> _Failure:
    """A failure before a stream's first event: an attempt to retry when the endpoint could
    not be reached, else raised (without a local naming it: see :meth:`EndpointClient._attempt`)."""
    if isinstance(error, EndpointUnavailableError):
        return _Failure(error)
    try:
        raise error from None
    finally:
        del error


def _retry_kind(error: ClientError) -> bool | None:
    """:func:`chalicelib.core.retries.classify` of an answer: True throttled, False transient,
    None not retryable."""
    return classify(error_code(error),
                    error.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _retryable(error: ClientError, idempotent: bool) -> bool:
    """Whether an answer is worth a retry: a throttle always (the request was refused), a
    transient failure only when the call may be made twice."""
    kind = _retry_kind(error)
    return kind is True or (kind is False and idempotent)


def _unreachable() -> EndpointUnavailableError:
    return EndpointUnavailableError("The endpoint could not be reached. Try again later.")


def _failure(error: ClientError, invocation: Invocation) -> _Failure:
    """A retryable ``ClientError`` as a failed attempt, with what its answer said."""
    headers = error.response.get("ResponseMetadata", {}).get("HTTPHeaders") or {}
    return _Failure(translate_client_error(error, invocation), _retry_kind(error) is True,
                    upstream_hint(headers))


def _given_up(failure: _Failure, retrier: Retrier) -> SagegateError:
    """The error of a failed attempt no retry follows; a 503 told when to come back."""
    error = failure.error
    if isinstance(error, EndpointUnavailableError):
        error.retry_after = retrier.retry_after(throttled=failure.throttled, hint=failure.hint)
    if retrier.quota_refused:
        logger.warning("retry quota used up (%d left): %s not retried", retrier.quota.available,
                       error.CODE)
    return error


def _checked_variant(name: str | None) -> str | None:
    """The variant the endpoint says it used, if it is a SageMaker variant name: it goes into
    capture paths, logs and the answer, so anything else (``../x``, a newline) is dropped."""
    if name is None or SAGEMAKER_NAME.fullmatch(name):
        return name
    logger.warning("the endpoint named an invalid production variant; ignored")
    return None


def translate_client_error(error: ClientError, invocation: Invocation) -> SagegateError:
    """Map a SageMaker runtime ``ClientError`` to sagegate's error tree.

    The endpoint's own message is echoed only for ModelError (the container's message is the
    point of it) and never with account details; everything else gets a fixed message.
    """
    code = error_code(error) or "Unknown"
    message = error.response.get("Error", {}).get("Message", "")
    logger.warning("endpoint error %s: %s", code, message)
    if code == "ModelError":
        return _model_error(error.response)
    if code in UNAVAILABLE_CODES or code in THROTTLING_CODES:
        return EndpointUnavailableError(
            f"The endpoint is busy or not ready ({code}). Retry after a short wait.",
            details={"endpoint_error": code})
    if code == "ValidationError":
        return _validation_error(message, invocation)
    return EndpointError(f"The endpoint call failed ({code}).", details={"endpoint_error": code})


def _model_error(response: Any) -> ModelError:
    original_status = response.get("OriginalStatusCode")
    original_message = str(response.get("OriginalMessage", ""))[:_MAX_ECHOED_MESSAGE]
    return ModelError(
        f"The model failed to process the request (status {original_status}).",
        details={"original_status_code": original_status, "original_message": original_message},
    )


def _validation_error(message: str, invocation: Invocation) -> SagegateError:
    lowered = message.lower()
    if invocation.target_variant and "variant" in lowered:
        return InvalidVariantError(
            f"The endpoint has no production variant {invocation.target_variant!r}.")
    if invocation.target_model and "target model" in lowered:
        # SageMaker: "Endpoint X is not a multi-model endpoint and does not support target
        # model header." The client asked for something this endpoint cannot do.
        return InvalidParameterError(
            f"The endpoint {invocation.endpoint_name!r} is not a multi-model endpoint: send no "
            '"target_model" (X-Target-Model).')
    if "inference component" in lowered:
        return _inference_component_error(invocation)
    if "not found" in lowered and "endpoint" in lowered:
        return EndpointNotFoundError(
            f"The SageMaker endpoint {invocation.endpoint_name!r} does not exist.")
    return EndpointError("The endpoint rejected the request (ValidationError).",
                         details={"endpoint_error": "ValidationError"})


def _inference_component_error(invocation: Invocation) -> InvalidParameterError:
    # SageMaker, without the name: "Inference Component Name header is required for endpoints
    # to which you plan to deploy inference components. ..."; with a name the endpoint does
    # not host, a ValidationError that names the component.
    if invocation.inference_component is None:
        return InvalidParameterError(
            f"The endpoint {invocation.endpoint_name!r} hosts inference components: name one "
            'with "inference_component" (X-Target-Inference-Component), or set '
            '"inference_component" in the model\'s model.json.')
    return InvalidParameterError(
        f"The endpoint {invocation.endpoint_name!r} has no inference component "
        f"{invocation.inference_component!r}.")
