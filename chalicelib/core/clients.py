"""An AWS client built on first use, once, shared by the threads of a container.

The rooms that talk to AWS (the cache's DynamoDB tier, the jobs' table) take a ready client in
tests and build their own otherwise; building is deferred so that importing a room never loads
boto3, and a container that never uses the service never pays for it.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class LazyClient:
    """``client`` when one is given (a test's Stubber), else what ``build`` returns on first
    use (boto3 is imported there, not at import time)."""

    def __init__(self, build: Callable[[], Any], client: Any = None) -> None:
        self._build = build
        self._client = client
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build()
            return self._client

    def close(self) -> None:
        """Drop a built client's pooled connections (they reopen on the next call)."""
        if self._client is not None:
            self._client.close()


class DynamoTable:
    """One DynamoDB table behind a :class:`LazyClient`: what the cache's shared tier and the
    jobs' store have in common (``clock``: epoch seconds, for TTLs)."""

    def __init__(self, table: str, build: Callable[[], Any], client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.table = table
        self._client = LazyClient(build, client)
        self._clock = clock

    @property
    def client(self) -> Any:
        return self._client.get()

    def close(self) -> None:
        self._client.close()
