"""A real-time job's calls to its endpoint: retried for as long as the job may take, and never
sent again once the endpoint has answered.

A request has seconds (API Gateway's 29); a job has minutes. Its endpoint client keeps the
synchronous route's translation of failures and its retry rules, with the job's own numbers:
what a retry may cure is retried with a backoff growing to :data:`JOB_MAX_DELAY_SECONDS` until
the job's deadline, so an endpoint restarting for seconds (a deploy) costs a job a wait, not
its answer. A model's error and a refused request are never retried, nor an answer cut short
while its body was read (:class:`WholeAnswers`): invoking again would run the job twice.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    IncompleteReadError,
    ResponseStreamingError,
)
from botocore.response import StreamingBody

from chalicelib.core.config import Settings
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint_config import policy_from

JOB_MAX_ATTEMPTS = 1000
"""Attempts of one job's call: the job's deadline ends them first."""
JOB_BASE_DELAY_SECONDS = 0.5
JOB_MAX_DELAY_SECONDS = 15.0
"""The longest wait between two attempts: a job keeps trying for minutes, at a pace an
endpoint coming back is not flooded by."""
_CUT_SHORT = (ResponseStreamingError, IncompleteReadError, ConnectionClosedError)


def job_retry_policy(settings: Settings) -> RetryPolicy:
    """A real-time job's retry policy: the job's longer read timeout, attempts bounded by
    the job's deadline."""
    return dataclasses.replace(policy_from(settings, job=True), max_attempts=JOB_MAX_ATTEMPTS,
                               base_delay=JOB_BASE_DELAY_SECONDS,
                               max_delay=JOB_MAX_DELAY_SECONDS)


class AnswerCutShortError(BotoCoreError):
    """The endpoint answered, but its body did not arrive whole: the endpoint client gives
    it up at once (an ``EndpointError``), where a dropped connection would be retried."""

    fmt = "The endpoint's answer was cut short while it was read ({error})"


class WholeAnswers:
    """A sagemaker-runtime client whose ``InvokeEndpoint`` answers are read whole before they
    are handed on; every other attribute is the client's own."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def invoke_endpoint(self, **kwargs: Any) -> dict[str, Any]:
        """``InvokeEndpoint``, its body read here: AnswerCutShortError when cut short."""
        response: dict[str, Any] = self._client.invoke_endpoint(**kwargs)
        try:
            body = response["Body"].read()
        except _CUT_SHORT as error:
            raise AnswerCutShortError(error=type(error).__name__) from None
        return {**response, "Body": StreamingBody(io.BytesIO(body), len(body))}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
