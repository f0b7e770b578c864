"""The asynchronous backend: a job is handed to a SageMaker asynchronous endpoint
(``InvokeEndpointAsync`` with the upload as ``InputLocation`` and the job id as
``InferenceId``) and finished by the endpoint's SNS notification of success or failure."""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.calls import Answer
from chalicelib.core.errors import (
    EndpointError,
    EndpointTimeoutError,
    EndpointUnavailableError,
    ModelError,
    SagegateError,
)
from chalicelib.core.retries import classify
from chalicelib.inference.endpoint import AsyncInvocation, EndpointClient
from chalicelib.jobs.records import Job, JobState, is_job_id
from chalicelib.jobs.runner import PutResult, outcome_of
from chalicelib.jobs.store import JobStore, Outcome
from chalicelib.registry.specs import DEFAULT_INVOCATION_TIMEOUT_SECONDS

logger = logging.getLogger("sagegate.jobs")

ASYNC_VARIANT = "AllTraffic"
"""The production variant an asynchronous job's answer names: neither InvokeEndpointAsync nor
the notification names one, so it is the one SageMaker's tools give a one-variant endpoint, as
data capture does, and the job's answer agrees with the synchronous route's."""


def start(endpoint_client: EndpointClient, store: JobStore, job: Job, endpoint: str,
          content_type: str, timeout_seconds: int = DEFAULT_INVOCATION_TIMEOUT_SECONDS, *,
          runner_id: str, lease_until: float, deadline: float | None = None) -> Job:
    """Claim a queued job, its lease running to ``lease_until`` (the endpoint's last
    notification), and queue it on an asynchronous endpoint.

    Only the caller that claimed the job sends it, so the endpoint never gets it twice. The
    call is retried as a real-time job's is, until ``deadline``. When it still fails, the job
    fails rather than the call raising: a retry of the event would find the job claimed and
    do nothing.

    Raises:
        the job store's errors before the claim (the event is retried; nothing was sent).
    """
    claimed, moved = store.claim(job.job_id, runner_id, lease_until)
    if not moved:
        return claimed
    # the job's custom attributes go with it, as a real-time job's call carries them
    invocation = AsyncInvocation(endpoint, job.input_location, content_type, job.job_id,
                                 timeout_seconds, job.options.custom_attributes)
    try:
        endpoint_client.invoke_async(invocation, deadline)
    except Exception as error:  # the job is claimed: it must end, not hang
        logger.warning("job %s: InvokeEndpointAsync failed (%s)", job.job_id,
                       type(error).__name__)
        failed, _ = store.advance(job.job_id, JobState.FAILED, Outcome(
            error=_job_failure(error, endpoint).as_failure()))
        return failed
    return claimed


def _job_failure(error: Exception, endpoint: str) -> SagegateError:
    """A failed submission as the job's error: the endpoint client's own (as a real-time
    job's), reworded for a job when it was still unavailable once retries were spent."""
    if isinstance(error, EndpointUnavailableError):
        what = str(error.details.get("endpoint_error") or "unreachable")
        return EndpointUnavailableError(
            f"The asynchronous endpoint {endpoint[:256]!r} could not take the job "
            f"({what[:128]}), retries included; submit it again later.")
    if isinstance(error, SagegateError):
        return error
    return EndpointError(f"The asynchronous endpoint {endpoint[:256]!r} could not take the "
                         f"job ({type(error).__name__}).")


@dataclasses.dataclass(frozen=True)
class Completion:
    """One SageMaker asynchronous inference notification."""

    inference_id: str
    status: str
    """``Completed``, ``Failed`` or ``Expired``."""
    output_location: str | None
    failure_reason: str


def parse_completion(message: str | Mapping[str, Any]) -> Completion | None:
    """The notification an SNS message carries, or None (topics may carry other messages;
    they are not retried)."""
    try:
        document = json.loads(message) if isinstance(message, str) else message
    except ValueError:
        return None
    if not isinstance(document, Mapping) or document.get("eventSource") != "aws:sagemaker" \
            or document.get("eventName") != "InferenceResult":
        return None
    inference_id, status = document.get("inferenceId"), document.get("invocationStatus")
    response = document.get("responseParameters")
    response = response if isinstance(response, Mapping) else {}
    output = response.get("outputLocation")
    if not isinstance(inference_id, str) or status not in ("Completed", "Failed", "Expired"):
        return None
    reason = document.get("failureReason")
    return Completion(inference_id=inference_id, status=status,
                      output_location=output if isinstance(output, str) else None,
                      failure_reason=reason if isinstance(reason, str) else "")


def complete(store: JobStore, completion: Completion, read_output: Callable[[str], Answer],
             put_result: PutResult) -> Job | None:
    """Finish the job a notification is about; None when it is no job of this stage (or
    past its TTL). An expired inference fails as a timeout; a job already finished is
    answered as it stands (SNS delivers at least once)."""
    if not is_job_id(completion.inference_id):
        return None
    job = store.get(completion.inference_id)
    if job is None:
        return None
    if job.state.final:
        return job
    if completion.status == "Completed" and completion.output_location:
        outcome = outcome_of(job, read_output(completion.output_location), put_result)
        done, _ = store.advance(job.job_id, JobState.SUCCEEDED, outcome)
        return done
    if completion.status == "Expired":
        error = EndpointTimeoutError(
            completion.failure_reason or "The request expired in the asynchronous endpoint's "
            "queue before it was run.").as_failure()
    else:
        error = failure_of(completion).as_failure()
    failed, _ = store.advance(job.job_id, JobState.FAILED, Outcome(error=error))
    return failed


def failure_of(completion: Completion) -> SagegateError:
    """A failure notice as the job's error: its reason's code (``ServiceUnavailable: ...``)
    classified as every endpoint call's is: one a retry may cure is ``EndpointUnavailable``,
    as a real-time job's would be, anything else ``ModelError``; the reason is the message."""
    reason = completion.failure_reason
    code = reason.partition(":")[0].strip()
    if code and classify(code, None) is not None:
        return EndpointUnavailableError(reason)
    return ModelError(reason or "The asynchronous inference failed.")
