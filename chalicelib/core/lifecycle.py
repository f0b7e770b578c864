"""The container's life on Lambda: the work done once at init, and SnapStart's runtime hooks.

On Lambda, ``app.py`` builds everything a request needs while it is imported (the init
phase), and, when init is off the requests' path (SnapStart, provisioned concurrency), a first
decode and encode that loads OpenCV's codecs. Without SnapStart that work is paid once per cold
start instead of by the first request; with SnapStart once per published version, in the
snapshot every new execution environment is restored from.

A snapshot is copied into many environments, so what must not be shared is undone by the
runtime hooks (``snapshot_restore_py``, part of Lambda's Python runtimes):

* before the snapshot: every open connection is closed (botocore's pools), so no two restored
  copies hold the same TCP connection or TLS session;
* after a restore: ``random`` is reseeded from the OS (retry jitter and capture sampling would
  otherwise draw the same sequence in every copy), the pools are closed again, and the restore
  is logged with how long the hooks took.

``uuid.uuid4`` (capture event ids, request ids) reads ``os.urandom`` and needs nothing. The
string-hash seed is fixed per snapshot; nothing sagegate keys by hash is exposed to clients.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from chalicelib.core import environment
from chalicelib.core.config_names import (
    AWS_EXECUTION_ENV,
    AWS_LAMBDA_FUNCTION_NAME,
    AWS_LAMBDA_INITIALIZATION_TYPE,
    LAMBDA_TASK_ROOT,
)

LOG = logging.getLogger("sagegate.lifecycle")

SNAP_START = "snap-start"  # AWS_LAMBDA_INITIALIZATION_TYPE's, snapshotted or restored


class Closable(Protocol):

    def close(self) -> None: ...


def on_lambda(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a Lambda execution environment (not chalice local/package)."""
    env = environment.variables() if environ is None else environ
    return bool(env.get(AWS_LAMBDA_FUNCTION_NAME)) and bool(
        env.get(AWS_EXECUTION_ENV, "").startswith("AWS_Lambda_")
        or env.get(LAMBDA_TASK_ROOT))


def init_type(environ: Mapping[str, str] | None = None) -> str:
    """How Lambda initialised this environment (``snap-start`` while taking a snapshot)."""
    env = environment.variables() if environ is None else environ
    return env.get(AWS_LAMBDA_INITIALIZATION_TYPE, "on-demand")


def snap_start(environ: Mapping[str, str] | None = None) -> bool:
    return init_type(environ) == SNAP_START


class Hooks:
    """SnapStart's two hooks over the objects that hold connections (``connections`` is
    called at hook time, so objects built after registration are included)."""

    def __init__(self, connections: Callable[[], list[Closable]],
                 reseed: Callable[[], None] = random.seed) -> None:
        self._connections = connections
        self._reseed = reseed
        self.restores = 0

    def before_snapshot(self) -> None:
        closed = self._close_all()
        LOG.info("snapshot: %d connection pool(s) closed", closed)

    def after_restore(self) -> None:
        started = time.perf_counter()
        self._reseed()
        closed = self._close_all()
        self.restores += 1
        LOG.info("restored from snapshot: reseeded, %d connection pool(s) closed, %.2f ms",
                 closed, (time.perf_counter() - started) * 1000.0)

    def _close_all(self) -> int:
        holders = self._connections()
        for holder in holders:
            holder.close()
        return len(holders)


def register(hooks: Hooks) -> bool:
    """Register ``hooks`` with Lambda's runtime; False where ``snapshot_restore_py`` (shipped
    by Lambda's Python runtimes) is absent."""
    try:
        from snapshot_restore_py import register_after_restore, register_before_snapshot
    except ImportError:
        return False
    register_before_snapshot(hooks.before_snapshot)
    register_after_restore(hooks.after_restore)
    return True


def timed(work: Callable[[], Any]) -> float:
    """How long ``work`` took, in milliseconds."""
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000.0
