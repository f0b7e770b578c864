"""The scheduled data-quality monitor's runs (docs/MONITOR.md, "Deployed"), composed.

The monitor room (:mod:`chalicelib.monitor`) stands alone: it imports no other room and builds
no client. This module gives it what it checks (the registered models' endpoints and their
preprocessor files), an S3 client, the hour to check and the invocation's remaining time:

* :func:`run_monitor`: the single scheduled function's run (``MONITOR_ENGINE`` unset or
  ``lambda``), every endpoint in one invocation;
* :func:`plan_monitor`, :func:`map_monitor`, :func:`reduce_monitor`: the three functions a
  Step Functions run calls (``MONITOR_ENGINE=stepfunctions``;
  :mod:`chalicelib.monitor.fanout`).

``app.py``'s monitor functions import this module there and only there, so the request path's
cold start loads none of the monitor, numpy's statistics or datasketches
(``tests/unit/test_cold_imports.py``); each function imports the monitor when it runs.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chalicelib import awsclients
from chalicelib.core import aws, environment
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.specs import ModelSpec

if TYPE_CHECKING:
    from chalicelib.monitor.deployed_settings import MonitorSettings

Models = Callable[[], Iterable[ModelSpec]]


def run_monitor(event: Any, models: Models, schedule_name: str, *,
                s3: Any = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The scheduled monitor's work: the full hour before the event's scheduled ``time`` (a
    retried or late invocation checks the same hour), each registered endpoint.

    Args:
        event: Chalice's scheduled event; a missing or unreadable time checks the hour before
            now.
        models: the registered models (read once the monitor's own settings are known good).
        schedule_name: the ``MonitoringSchedule`` dimension (the function's own name).

    Raises:
        ConfigurationError: ``MONITOR_BASELINE`` is not set.
        MonitorConfigError: the monitor's settings are wrong.
    """
    from chalicelib.monitor import deployed, windows  # deferred: module docstring

    try:
        now = windows.parse_time(str(getattr(event, "time", "") or ""))
    except windows.WindowError:
        now = None  # no readable time: the hour before now
    settings = _settings(env)
    endpoints = _endpoints(models)
    context: Any = getattr(event, "context", None)  # Lambda's: the remaining time
    remaining = (lambda: float(context.get_remaining_time_in_millis()) / 1000) \
        if hasattr(context, "get_remaining_time_in_millis") else None
    runs = deployed.run(endpoints, settings, schedule_name, now=now, s3=s3 or _s3(),
                        remaining=remaining)
    return {"endpoints": {run.endpoint: run.status for run in runs},
            "violations": sum(run.violations for run in runs)}


def plan_monitor(event: Mapping[str, Any], models: Models, *, s3: Any = None,
                 env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fanned-out run's first step: its window and the prefixes to read, for every
    registered endpoint (``event``: the state machine's ``{"event", "execution"}``).

    Raises:
        ConfigurationError: ``MONITOR_BASELINE`` is not set.
        MonitorConfigError: the monitor's settings are wrong.
    """
    from chalicelib.monitor import fanout  # deferred: module docstring

    return fanout.plan(event, _settings(env), _endpoints(models), s3=s3 or _s3())


def map_monitor(event: Mapping[str, Any], models: Models, *, s3: Any = None,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Distributed Map child: its batch of capture objects read into a part
    (:func:`chalicelib.monitor.fanout.map_objects`), with the endpoint's preprocessor.

    Raises:
        ConfigurationError, MonitorConfigError: as :func:`plan_monitor`; whatever S3 raises
            (the state machine retries the child).
    """
    from chalicelib.monitor import fanout  # deferred: module docstring

    return fanout.map_objects(event, _settings(env), _endpoints(models), s3=s3 or _s3())


def reduce_monitor(event: Mapping[str, Any], schedule_name: str, *, s3: Any = None,
                   env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An endpoint's parts merged, checked and written (``schedule_name``: the state
    machine's, the ``MonitoringSchedule`` dimension).

    Raises:
        ConfigurationError, MonitorConfigError: as :func:`plan_monitor`; whatever S3 raises.
    """
    from chalicelib.monitor import fanout  # deferred: module docstring

    return fanout.reduce_endpoint(event, _settings(env), schedule_name, s3=s3 or _s3())


def _settings(env: Mapping[str, str] | None) -> MonitorSettings:
    from chalicelib.monitor.deployed_settings import MonitorSettings

    settings = MonitorSettings.from_env(environment.variables() if env is None else env)
    if settings is None:
        raise ConfigurationError("MONITOR_BASELINE is not set: nothing to monitor")
    return settings


def _endpoints(models: Models) -> dict[str, list[Path]]:
    from chalicelib.monitor import deployed

    return deployed.endpoint_preprocessors((model.endpoint, model.folder)
                                           for model in models())


def _s3() -> Any:
    return awsclients.build("s3", aws.MONITOR_S3)
