"""The scheduled data-quality monitor's run (docs/MONITOR.md, "Deployed"), composed.

The monitor room (:mod:`chalicelib.monitor`) stands alone: it imports no other room and builds
no client. This module gives it what it checks (the registered models' endpoints and their
preprocessor files), an S3 client, the hour to check and the invocation's remaining time.
``app.py``'s scheduled ``monitor`` function calls :func:`run_monitor`, importing this module
there and only there: the request path's cold start loads none of the monitor, numpy's
statistics or datasketches (``bench/imports.py``, ``tests/unit/test_cold_imports.py``).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.errors import ConfigurationError
from chalicelib.monitor import deployed, windows
from chalicelib.registry.specs import ModelSpec


def run_monitor(event: Any, models: Callable[[], Iterable[ModelSpec]], schedule_name: str, *,
                s3: Any = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The scheduled monitor's work: the full hour before the event's scheduled ``time`` (a
    retried or late invocation checks the same hour), each registered endpoint.

    Args:
        event: Chalice's scheduled event (its ``time``, and Lambda's ``context``: the time
            left); a missing or unreadable time checks the hour before now.
        models: the registered models (read once the monitor's own settings are known good).
        schedule_name: the ``MonitoringSchedule`` dimension (the function's own name).
        s3: an S3 client; built (the monitor's timeouts and retries) when None.
        env: where the monitor's settings are read (``MONITOR_*``); ``os.environ`` when None.

    Returns:
        Each endpoint's outcome and the run's count of violations.

    Raises:
        ConfigurationError: ``MONITOR_BASELINE`` is not set.
        MonitorConfigError: the monitor's settings are wrong.
    """
    try:
        now = windows.parse_time(str(getattr(event, "time", "") or ""))
    except windows.WindowError:
        now = None  # no readable time: the hour before now
    settings = deployed.MonitorSettings.from_env(os.environ if env is None else env)
    if settings is None:
        raise ConfigurationError("MONITOR_BASELINE is not set: nothing to monitor")
    endpoints = deployed.endpoint_preprocessors((model.endpoint, model.folder)
                                                for model in models())
    context: Any = getattr(event, "context", None)  # Lambda's: the remaining time
    remaining = (lambda: float(context.get_remaining_time_in_millis()) / 1000) \
        if hasattr(context, "get_remaining_time_in_millis") else None
    if s3 is None:
        s3 = awsclients.build("s3", aws.MONITOR_S3)
    runs = deployed.run(endpoints, settings, schedule_name, now=now, s3=s3, remaining=remaining)
    return {"endpoints": {run.endpoint: run.status for run in runs},
            "violations": sum(run.violations for run in runs)}
