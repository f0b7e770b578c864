"""The asynchronous backend: a job is handed to a SageMaker asynchronous endpoint
(``InvokeEndpointAsync`` with the upload as ``InputLocation`` and the job id as
``InferenceId``) and finished by the endpoint's SNS notification of success or failure."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.calls import Answer
from chalicelib.core.errors import EndpointTimeoutError, ModelError
from chalicelib.jobs.records import Job, JobState, is_job_id
from chalicelib.jobs.runner import PutResult, outcome_of
from chalicelib.jobs.store import JobStore, Outcome
from chalicelib.registry.specs import DEFAULT_INVOCATION_TIMEOUT_SECONDS

__all__ = ["DEFAULT_INVOCATION_TIMEOUT_SECONDS", "Completion", "complete", "parse_completion",
           "start"]



def start(client: Any, store: JobStore, job: Job, endpoint: str, content_type: str,
          timeout_seconds: int = DEFAULT_INVOCATION_TIMEOUT_SECONDS) -> Job:
    """Queue a job on an asynchronous endpoint and move it to running.

    A job already running or finished is not sent again (a retried start).

    Raises:
        botocore's errors (the event is retried; the inference id keeps it one job).
    """
    current = store.get(job.job_id) or job
    if current.state is not JobState.QUEUED:
        return current
    client.invoke_endpoint_async(EndpointName=endpoint, InputLocation=job.input_location,
                                 InferenceId=job.job_id, ContentType=content_type,
                                 InvocationTimeoutSeconds=timeout_seconds)
    running, _ = store.advance(job.job_id, JobState.RUNNING)
    return running


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
        error = {"Code": EndpointTimeoutError.CODE,
                 "Message": completion.failure_reason or "The request expired in the "
                 "asynchronous endpoint's queue before it was run."}
    else:
        error = {"Code": ModelError.CODE,
                 "Message": completion.failure_reason or "The asynchronous inference failed."}
    failed, _ = store.advance(job.job_id, JobState.FAILED, Outcome(error=error))
    return failed
