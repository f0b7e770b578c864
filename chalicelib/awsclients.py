"""The one builder of chalicelib's boto3 clients, by a named policy of
:mod:`chalicelib.core.aws` (its timeouts and retries).

boto3 is imported when a client is built, not when this module is: a room that never uses a
service never pays for it. boto3 reads the ``AWS_ENDPOINT_URL_*`` variables itself (the local
stack's services, the emulator).
"""
from __future__ import annotations

from typing import Any

from chalicelib.core.aws import ClientPolicy


def build(service: str, policy: ClientPolicy) -> Any:
    """A boto3 client of ``service`` that waits and retries as ``policy`` says."""
    import boto3  # deferred: boto3 is slow to import, paid on first use, not at cold start
    from botocore.config import Config

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
    return boto3.client(service, config=Config(**options))
