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
"""The production variant an asynchronous job's answer names. Neither InvokeEndpointAsync's
answer nor SageMaker's notification names one (a real-time answer's
``x-Amzn-Invoked-Production-Variant`` has no counterpart): the answer names the variant
SageMaker's tools give an endpoint of one variant, as data capture does for an answer that
names none, so the job's answer and the synchronous route's agree."""


def start(endpoint_client: EndpointClient, store: JobStore, job: Job, endpoint: str,
          content_type: str, timeout_seconds: int = DEFAULT_INVOCATION_TIMEOUT_SECONDS, *,
          runner_id: str, lease_until: float, deadline: float | None = None) -> Job:
    """Claim a queued job (only one caller moves it to running), its lease running to
    ``lease_until`` (the endpoint's last notification), and queue it on an asynchronous
    endpoint.

    Only the caller that claimed the job sends it: a retried or duplicate start answers the
    job as it stands, so the endpoint never gets it twice. The call is retried as a real-time
    job's endpoint call is, by the same client, rules and policy
    (:meth:`~chalicelib.inference.endpoint.EndpointClient.invoke_async`), until ``deadline``
    (the run's). When it still fails, the job fails (:func:`_job_failure`) rather than the
    call raising: a retry of the event would find the job claimed and do nothing.

    Args:
        endpoint_client: the jobs' endpoint client (its policy retries until the deadline).

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
    """A failed submission as the job's error: the endpoint client's own (a refusal that a
    retry cannot cure keeps its code: the real-time job's would be the same), said of the job
    when it was still unavailable once retries were spent."""
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
    """The notification an SNS message carries, or None when it is not one (SNS topics may
    carry other messages; they are not retried)."""
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
    """Finish the job a notification is about; None when it is no job of this stage (an
    inference id that is not a job id, or a job past its TTL).

    A completed inference's output object becomes the job's answer (inline when small); a
    failed one fails the job with SageMaker's reason (:func:`failure_of`), an expired one as
    a timeout. A job already finished is answered as it stands (SNS delivers at least once).
    """
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
    """A failure notice as the job's error, its reason's code (``ServiceUnavailable: ...``)
    classified by the rule every endpoint call's error code is
    (:func:`~chalicelib.core.retries.classify`): one a retry may cure (throttling, the
    endpoint unavailable or failing on its side) is ``EndpointUnavailable``, as a real-time
    job's call given up on it is; anything else (the model's error, SageMaker's
    ``ClientError: ...``) is ``ModelError``. SageMaker's reason is the message either way."""
    reason = completion.failure_reason
    code = reason.partition(":")[0].strip()
    if code and classify(code, None) is not None:
        return EndpointUnavailableError(reason)
    return ModelError(reason or "The asynchronous inference failed.")
