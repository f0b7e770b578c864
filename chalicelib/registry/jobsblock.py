"""model.json's ``jobs`` block: how a model runs as a job (:class:`~.specs.JobsSpec`)::

    "jobs": {"backend": "realtime" | "async", "endpoint": "iris-async",
             "max_upload_bytes": 104857600, "invocation_timeout_seconds": 900}

Without the block a model runs jobs on its own real-time endpoint with a 100 MiB cap; a
``realtime`` block with ``endpoint`` runs them on that real-time endpoint instead (one sized
for big inputs, say). ``async`` needs ``endpoint`` (an asynchronous endpoint, or
``"$VARIABLE"``) and a pipeline whose pre- and postprocessing run apart from the endpoint call
(:attr:`~.kinds.KindRules.splits`). Each backend's needs are its rules
(:class:`~.kinds.BackendRules`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.kinds import BackendRules, JobsBackend, KindRules
from chalicelib.registry.specs import (
    DEFAULT_INVOCATION_TIMEOUT_SECONDS,
    DEFAULT_MAX_UPLOAD_BYTES,
    MAX_INVOCATION_TIMEOUT_SECONDS,
    MAX_UPLOAD_BYTES,
    JobsSpec,
)

JOBS_KEYS = frozenset({"backend", "endpoint", "max_upload_bytes", "invocation_timeout_seconds"})

Fail = Callable[[str, str], ConfigurationError]  # fail(key, requirement)
ResolveEndpoint = Callable[[str, Any], str]  # resolve(key, value), "$VARIABLE" read


def read_jobs(value: Any, kind: KindRules, backends: Mapping[str, BackendRules], fail: Fail,
              resolve_endpoint: ResolveEndpoint) -> JobsSpec:
    """The model's jobs from its ``jobs`` value (None when the key is absent); a bad one is
    ``fail``'s ConfigurationError."""
    if value is None:
        return JobsSpec()
    if not isinstance(value, dict):
        raise fail("jobs", f"must be an object of: {', '.join(sorted(JOBS_KEYS))}")
    unknown = sorted(set(value) - JOBS_KEYS)
    if unknown:
        raise fail(f"jobs.{unknown[0]}", f"is not a jobs key (known: "
                   f"{', '.join(sorted(JOBS_KEYS))})")
    backend = _backend(value.get("backend", JobsBackend.REALTIME), backends, fail)
    endpoint = value.get("endpoint")
    if endpoint is not None:
        endpoint = resolve_endpoint("jobs.endpoint", endpoint)
    if backend.needs_endpoint and endpoint is None:
        raise fail("jobs.endpoint", f"must name the {backend.name} endpoint when "
                   f"jobs.backend is {backend.name!r}")
    if backend.needs_split and not kind.splits:
        raise fail("jobs.backend", f"cannot be {backend.name!r} for a {kind.name} model: its "
                   "handler runs around the endpoint call, which an asynchronous endpoint "
                   "answers later, in another function (use 'realtime'; "
                   f"{backend.name!r} is for pipelines that split)")
    return JobsSpec(backend=backend.name, endpoint=endpoint,
                    max_upload_bytes=_whole(value, "max_upload_bytes", DEFAULT_MAX_UPLOAD_BYTES,
                                            MAX_UPLOAD_BYTES, fail),
                    invocation_timeout_seconds=_whole(
                        value, "invocation_timeout_seconds", DEFAULT_INVOCATION_TIMEOUT_SECONDS,
                        MAX_INVOCATION_TIMEOUT_SECONDS, fail))


def _backend(value: Any, backends: Mapping[str, BackendRules], fail: Fail) -> BackendRules:
    backend = backends.get(value) if isinstance(value, str) else None
    if backend is None:
        raise fail("jobs.backend", f"must be one of {', '.join(backends)}, not "
                   f"{value!r}")
    return backend


def _whole(block: dict[str, Any], key: str, default: int, maximum: int, fail: Fail) -> int:
    value = block.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise fail(f"jobs.{key}", f"must be a whole number from 1 to {maximum}, not {value!r}")
    return value
