"""The endpoint client as the settings configure it: the boto3 ``sagemaker-runtime`` client
(timeouts, botocore's retries off, a connection pool as big as the server's concurrency) and
the retry policies of a request, a job and a shadow call (:class:`EndpointClient` runs them).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from chalicelib import awsclients
from chalicelib.core import aws, lifecycle
from chalicelib.core.config import Settings
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient

if TYPE_CHECKING:
    from mypy_boto3_sagemaker_runtime import SageMakerRuntimeClient


def make_client(settings: Settings, read_timeout: float | None = None,
                connect_timeout: float | None = None) -> SageMakerRuntimeClient:
    """A sagemaker-runtime client with sagegate's timeouts and botocore's retries off
    (``read_timeout``, ``connect_timeout``: instead of ``ENDPOINT_READ_TIMEOUT`` and
    ``ENDPOINT_CONNECT_TIMEOUT``, as a job's and a shadow's clients have).

    boto3 honours ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``, which is how the emulator is used.
    """
    policy = dataclasses.replace(aws.ENDPOINT.with_timeouts(
        settings.endpoint_connect_timeout if connect_timeout is None else connect_timeout,
        settings.endpoint_read_timeout if read_timeout is None else read_timeout),
        max_pool_connections=pool_size(settings))
    client: SageMakerRuntimeClient = awsclients.build("sagemaker-runtime", policy)
    return client


# chalice local serves each connection on its own thread, with no upper bound; this many
# concurrent endpoint calls keep their connections (beyond it botocore discards the extras,
# logging "Connection pool is full"). Idle pooled sockets cost next to nothing.
LOCAL_POOL_CONNECTIONS = 100


def pool_size(settings: Settings, *, on_lambda: bool | None = None) -> int:
    """How many connections botocore keeps: ``ENDPOINT_MAX_CONNECTIONS``, else 1 on Lambda
    (one request a container at a time), else :data:`LOCAL_POOL_CONNECTIONS` (threaded)."""
    if settings.endpoint_max_connections:
        return settings.endpoint_max_connections
    if on_lambda is None:
        on_lambda = lifecycle.on_lambda()
    return 1 if on_lambda else LOCAL_POOL_CONNECTIONS


SHADOW_PREPARE_SHARE = 0.2
"""The share of a shadow's timeout kept for its preprocessing (at most
:data:`SHADOW_PREPARE_SECONDS`); the endpoint call has the rest."""
SHADOW_PREPARE_SECONDS = 1.0
SHADOW_CONNECT_SHARE = 0.1
"""The most of a shadow's timeout its connection may take (and never more than
``ENDPOINT_CONNECT_TIMEOUT``)."""


def shadow_timeouts(settings: Settings, seconds: float) -> tuple[float, float]:
    """A shadow call's connect and read timeouts, so that its preprocessing and one endpoint
    attempt fit in its ``timeout_seconds`` (``seconds``) however long the stage's own
    ``ENDPOINT_READ_TIMEOUT`` is."""
    prepare = min(SHADOW_PREPARE_SECONDS, seconds * SHADOW_PREPARE_SHARE)
    connect = min(settings.endpoint_connect_timeout, seconds * SHADOW_CONNECT_SHARE)
    return connect, seconds - prepare - connect


def shadow_policy(settings: Settings, seconds: float) -> RetryPolicy:
    """A shadow call's policy: one attempt (a shadow is not retried), within ``seconds``."""
    connect, read = shadow_timeouts(settings, seconds)
    return RetryPolicy(max_attempts=1, budget_seconds=seconds, attempt_timeout=connect + read)


def policy_from(settings: Settings, *, job: bool = False) -> RetryPolicy:
    """The retry policy the settings describe (``job``: a job's, with its budget and its
    endpoint read timeout, :attr:`Settings.job_read_timeout`)."""
    return RetryPolicy(
        max_attempts=settings.endpoint_max_attempts,
        budget_seconds=settings.job_budget_seconds if job else settings.request_budget_seconds,
        attempt_timeout=settings.endpoint_connect_timeout + (
            settings.job_read_timeout if job else settings.endpoint_read_timeout),
    )


def shadow_endpoint(settings: Settings, seconds: float,
                    client: SageMakerRuntimeClient | None = None) -> EndpointClient:
    """A shadow's endpoint client: its own boto3 client with :func:`shadow_timeouts` (or
    ``client``, an injected one), and :func:`shadow_policy`."""
    if client is None:
        connect, read = shadow_timeouts(settings, seconds)
        client = make_client(settings, read_timeout=read, connect_timeout=connect)
    return EndpointClient(client, shadow_policy(settings, seconds))
