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
from chalicelib.core.aws import error_code
from chalicelib.core.errors import (
    EndpointError,
    EndpointTimeoutError,
    EndpointUnavailableError,
    ModelError,
)
from chalicelib.core.retries import classify
from chalicelib.jobs.records import Job, JobState, is_job_id
from chalicelib.jobs.runner import PutResult, outcome_of
from chalicelib.jobs.store import JobStore, Outcome
from chalicelib.registry.specs import DEFAULT_INVOCATION_TIMEOUT_SECONDS

__all__ = ["ASYNC_VARIANT", "DEFAULT_INVOCATION_TIMEOUT_SECONDS", "Completion", "complete",
           "invoke_failure", "parse_completion", "start"]

logger = logging.getLogger("sagegate.jobs")

ASYNC_VARIANT = "AllTraffic"
"""The production variant an asynchronous job's answer names. Neither InvokeEndpointAsync's
answer nor SageMaker's notification names one (a real-time answer's
``x-Amzn-Invoked-Production-Variant`` has no counterpart): the answer names the variant
SageMaker's tools give an endpoint of one variant, as data capture does for an answer that
names none, so the job's answer and the synchronous route's agree."""


def start(client: Any, store: JobStore, job: Job, endpoint: str, content_type: str,
          timeout_seconds: int = DEFAULT_INVOCATION_TIMEOUT_SECONDS, *, runner_id: str,
          lease_until: float) -> Job:
    """Claim a queued job (only one caller moves it to running), its lease running to
    ``lease_until`` (the endpoint's last notification), and queue it on an asynchronous
    endpoint.

    Only the caller that claimed the job sends it: a retried or duplicate start answers the
    job as it stands, so the endpoint never gets it twice. Once claimed, a failed call
    (botocore has retried what is worth a retry) fails the job (:func:`invoke_failure`)
    rather than raising: a retry of the event would find the job claimed and do nothing.

    Raises:
        the job store's errors before the claim (the event is retried; nothing was sent).
    """
    claimed, moved = store.claim(job.job_id, runner_id, lease_until)
    if not moved:
        return claimed
    try:
        client.invoke_endpoint_async(EndpointName=endpoint, InputLocation=job.input_location,
                                     InferenceId=job.job_id, ContentType=content_type,
                                     InvocationTimeoutSeconds=timeout_seconds)
    except Exception as error:
        logger.warning("job %s: InvokeEndpointAsync failed (%s)", job.job_id,
                       type(error).__name__, exc_info=error)
        failure = invoke_failure(error, endpoint)
        failed, _ = store.advance(job.job_id, JobState.FAILED, Outcome(
            error=failure.as_failure()))
        return failed
    return claimed


def invoke_failure(error: Exception, endpoint: str) -> EndpointError:
    """A failed ``InvokeEndpointAsync`` as the job's error: SageMaker's refusal that a retry
    cannot cure (no such endpoint, a bad request) as ``EndpointError`` with its message;
    anything else (throttled or unreachable past botocore's retries, no answer at all) as
    ``EndpointUnavailable``."""
    response = getattr(error, "response", None)
    response = response if isinstance(response, dict) else {}
    code = error_code(error)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code and classify(code, status) is None \
            and isinstance(status, int) and 400 <= status < 500:
        message = str(response.get("Error", {}).get("Message", ""))[:512]
        return EndpointError(f"The asynchronous endpoint refused the job ({code}): {message}")
    what = code or type(error).__name__
    return EndpointUnavailableError(
        f"The asynchronous endpoint {endpoint[:256]!r} could not take the job ({what[:128]}), "
        "retries included; submit it again later.")


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
    failed one fails the job with SageMaker's reason, an expired one as a timeout. A job
    already finished is answered as it stands (SNS delivers at least once).
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
        error = ModelError(
            completion.failure_reason or "The asynchronous inference failed.").as_failure()
    failed, _ = store.advance(job.job_id, JobState.FAILED, Outcome(error=error))
    return failed
