"""AWS's vocabulary without botocore: the client policies, error codes and ``s3://`` URIs.

The one place that says, per use, how long a client waits and how often botocore retries
(:mod:`chalicelib.awsclients` builds the clients), reads a ``ClientError``'s code and parses an
``s3://`` URI. The product, the monitor and the tools all use these, so nothing here imports
botocore or any other room.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

S3_SCHEME = "s3://"

RetryMode = Literal["legacy", "standard", "adaptive"]

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")  # S3's bucket name rule


@dataclass(frozen=True)
class ClientPolicy:
    """How one use's boto3 client waits and retries (botocore's ``Config``).

    Args:
        total_max_attempts: the first included (1: botocore retries nothing; the caller's
            own policy does).
        s3v4: S3 only: Signature Version 4, virtual-hosted addressing (presigned URLs).
    """

    connect_timeout: float
    read_timeout: float
    retry_mode: RetryMode
    total_max_attempts: int
    tcp_keepalive: bool = False
    max_pool_connections: int | None = None
    s3v4: bool = False

    def with_timeouts(self, connect_timeout: float, read_timeout: float) -> ClientPolicy:
        return replace(self, connect_timeout=connect_timeout, read_timeout=read_timeout)


ENDPOINT = ClientPolicy(connect_timeout=2.0, read_timeout=20.0, retry_mode="legacy",
                        total_max_attempts=1, tcp_keepalive=True)
"""``InvokeEndpoint`` (and a job's ``InvokeEndpointAsync``): the settings' timeouts (these are
their defaults); botocore retries nothing (the endpoint client retries by its own policy)."""

JOBS_S3 = ClientPolicy(connect_timeout=2.0, read_timeout=60.0, retry_mode="standard",
                       total_max_attempts=3, s3v4=True)
"""The jobs' bucket: a bucket that does not answer fails a route in seconds (503
JobsUnavailable); reads keep botocore's 60 s (a 1 GB upload streams for a while)."""

JOBS_TABLE = ClientPolicy(connect_timeout=2.0, read_timeout=5.0, retry_mode="standard",
                          total_max_attempts=3)
"""The jobs' table: a table that does not answer fails the call in seconds (503
JobsUnavailable, see chalicelib.jobs.awsfaults), not after botocore's 60 s, ten times over."""

JOBS_REDRIVE = ClientPolicy(connect_timeout=2.0, read_timeout=10.0, retry_mode="standard",
                            total_max_attempts=4)
"""The re-drive's Lambda client: an asynchronous invocation answers at once."""

CACHE_TABLE = ClientPolicy(connect_timeout=1.0, read_timeout=2.0, retry_mode="legacy",
                           total_max_attempts=1, tcp_keepalive=True)
"""The cache's shared tier: a miss is cheaper than a wait; botocore retries nothing."""

TOKEN_BUDGETS = ClientPolicy(connect_timeout=1.0, read_timeout=2.0, retry_mode="legacy",
                             total_max_attempts=1, tcp_keepalive=True)
"""The token budgets' counters (UpdateItem, GetItem): a table that does not answer costs a
request 3 s at most before budgets fail open; botocore retries nothing (an ADD is not
idempotent: a retry after a lost answer would count twice)."""

CAPTURE = ClientPolicy(connect_timeout=1.0, read_timeout=3.0, retry_mode="legacy",
                       total_max_attempts=1)
"""The capture sinks (S3, Firehose): botocore retries nothing, the sinks do (CAPTURE_POLICY)."""

MONITOR_S3 = ClientPolicy(connect_timeout=60.0, read_timeout=60.0, retry_mode="legacy",
                          total_max_attempts=5)
"""The scheduled monitor's S3 reads and writes: botocore's defaults (a run has minutes)."""

CLI = ClientPolicy(connect_timeout=60.0, read_timeout=60.0, retry_mode="legacy",
                   total_max_attempts=5)
"""The command line's reads and the local stack's provisioning: botocore's defaults, stated:
a person waits at the terminal and Ctrl-C stops a wait."""

DEPLOY = ClientPolicy(connect_timeout=60.0, read_timeout=60.0, retry_mode="legacy",
                      total_max_attempts=5)
"""The deploy commands' calls: botocore's defaults; a layer's zip uploads for a while."""

EVENTS_SQS = ClientPolicy(connect_timeout=60.0, read_timeout=30.0, retry_mode="legacy",
                          total_max_attempts=2)
"""The local event pump's SQS client: its read timeout is the long poll's wait plus a margin;
one retry, as the pump polls again anyway."""


def valid_bucket_name(name: str) -> bool:
    return bool(_BUCKET_NAME.match(name))


def error_code(error: BaseException) -> str:
    """A botocore ``ClientError``'s code (``response["Error"]["Code"]``), "" for anything else."""
    response = getattr(error, "response", None)
    if not isinstance(response, Mapping):
        return ""
    info = response.get("Error")
    return str(info.get("Code") or "") if isinstance(info, Mapping) else ""


@dataclass(frozen=True)
class S3Uri:
    """``s3://bucket/key``: an object, or a prefix (a key that names a folder)."""

    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, text: str, *, strict: bool = False) -> S3Uri:
        """``s3://bucket/key`` (the key as written, slashes included).

        Args:
            strict: also require a valid bucket name and a key on one line (a setting's
                value, checked before anything is written there).

        Raises:
            ValueError: not an ``s3://`` URI with a bucket; each caller words it for its
                own setting.
        """
        if not text.startswith(S3_SCHEME):
            raise ValueError(f"not an {S3_SCHEME} URI: {text[:64]!r}")
        bucket, _, key = text[len(S3_SCHEME):].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {text[:64]!r}")
        if strict and (not valid_bucket_name(bucket) or "\n" in key):
            raise ValueError(f"not a valid bucket name in {text[:64]!r}")
        return cls(bucket, key)

    @property
    def prefix(self) -> str:
        """The key without its slashes at either end."""
        return self.key.strip("/")

    def child(self, *parts: str) -> S3Uri:
        names = [name for name in (self.prefix, *(part.strip("/") for part in parts)) if name]
        return S3Uri(self.bucket, "/".join(names))

    def folder(self, *parts: str) -> str:
        """The key of ``parts`` under this prefix with a trailing slash (a listing's prefix;
        "" at the bucket's root)."""
        key = self.child(*parts).key
        return f"{key}/" if key else ""

    def join(self, key: str) -> S3Uri:
        return S3Uri(self.bucket, key)

    @property
    def location(self) -> str:
        """``s3://bucket/prefix`` without a trailing slash (``s3://bucket`` at its root)."""
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.key}"
