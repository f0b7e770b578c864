"""The one builder of boto3 clients, by a named policy of :mod:`chalicelib.core.aws` (its
timeouts and retries): chalicelib's, and the tools' (``sagegate``'s deploy, local stack,
capture reader and monitor) too.

boto3 is imported when a client is built, not when this module is: a room that never uses a
service never pays for it. boto3 reads the ``AWS_ENDPOINT_URL_*`` variables itself (the local
stack's services, the emulator).
"""
from __future__ import annotations

from typing import Any

from chalicelib.core.aws import ClientPolicy


def build(service: str, policy: ClientPolicy, *, endpoint_url: str | None = None,
          region: str | None = None) -> Any:
    """A boto3 client of ``service`` that waits and retries as ``policy`` says
    (``endpoint_url`` and ``region`` None: boto3's own lookup)."""
    import boto3  # deferred: boto3 is slow to import, paid on first use, not at cold start

    return boto3.client(service, config=config(policy), **_where(endpoint_url, region))


def config(policy: ClientPolicy) -> Any:
    """botocore's ``Config`` of ``policy``."""
    from botocore.config import Config  # deferred, as boto3 is

    options: dict[str, Any] = {
        "connect_timeout": policy.connect_timeout,
        "read_timeout": policy.read_timeout,
        "retries": {"mode": policy.retry_mode, "total_max_attempts": policy.total_max_attempts},
        "tcp_keepalive": policy.tcp_keepalive,
    }
    if policy.max_pool_connections is not None:
        options["max_pool_connections"] = policy.max_pool_connections
    if policy.s3v4:
        # presigned POSTs and GETs must be Signature Version 4 (botocore presigns S3 with
        # version 2 by default, which buckets made since mid-2020 refuse) and name the
        # bucket's region (the global host redirects a new bucket of another region); an IP
        # endpoint stays path-style
        options["signature_version"] = "s3v4"
        options["s3"] = {"addressing_style": "virtual"}
    return Config(**options)


def _where(endpoint_url: str | None, region: str | None) -> dict[str, str]:
    chosen = {"endpoint_url": endpoint_url, "region_name": region}
    return {name: value for name, value in chosen.items() if value is not None}


class Clients:
    """Clients of one region (and, given, credentials), each built with one policy: what the
    deploy commands and the local stack hold, as a boto3 session would. ``region`` None is
    boto3's lookup, which may find none (``region_name`` is then None)."""

    def __init__(self, policy: ClientPolicy, region: str | None = None,
                 credentials: tuple[str, str] | None = None,
                 endpoint_url: str | None = None) -> None:
        import boto3  # deferred, as in build

        keys = {} if credentials is None else {"aws_access_key_id": credentials[0],
                                               "aws_secret_access_key": credentials[1]}
        self._session = boto3.session.Session(region_name=region, **keys)
        self._policy = policy
        self._endpoint_url = endpoint_url

    @property
    def region_name(self) -> str | None:
        region: str | None = self._session.region_name
        return region

    def client(self, service: str) -> Any:
        return self._session.client(service, config=config(self._policy),
                                    **_where(self._endpoint_url, None))
