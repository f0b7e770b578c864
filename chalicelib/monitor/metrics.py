"""A checked window's metrics, as CloudWatch Embedded Metric Format lines.

One line per endpoint (more when it has over 100 metrics), printed to the scheduled function's
log, in Model Monitor's namespace (``aws/sagemaker/Endpoints/data-metrics``) with its
dimensions (``Endpoint``, ``MonitoringSchedule``) and names: ``feature_baseline_drift_<feature>``
(the distance) and ``feature_non_null_<feature>`` (completeness); sagegate adds
``constraint_violations`` (the window's count), ``feature_violations_<feature>`` and
``partial_window`` (1: the time ran out before every file was read).
"""
from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from typing import Any

from chalicelib.monitor import analysis
from chalicelib.monitor.checks import common_statistics

NAMESPACE = "aws/sagemaker/Endpoints/data-metrics"
DIMENSIONS = ("Endpoint", "MonitoringSchedule")
_EMF_MAX_METRICS = 100  # CloudWatch's limit per metric directive


def metrics(result: analysis.CheckResult, partial: bool = False) -> dict[str, float]:
    """The window's metrics by name (module docstring).

    Args:
        result: the window's check.
        partial: the window was checked on part of its files (the invocation's time ran
            out): ``partial_window`` is 1.
    """
    values: dict[str, float] = {"constraint_violations": float(result.violation_count),
                                "partial_window": float(partial)}
    for feature in result.evaluation.features:
        name = feature.name
        if feature.distance is not None and math.isfinite(feature.distance):
            values[f"feature_baseline_drift_{name}"] = float(feature.distance)
        common = common_statistics(feature.window)
        if common:  # a missing column has no completeness to publish
            present = float(common.get("num_present", 0))
            total = present + float(common.get("num_missing", 0))
            values[f"feature_non_null_{name}"] = present / total if total else 0.0
        values[f"feature_violations_{name}"] = float(len(feature.violations))
    return values


def emf_lines(result: analysis.CheckResult, endpoint: str, schedule_name: str,
              when: datetime.datetime, partial: bool = False) -> list[str]:
    """The metrics as CloudWatch Embedded Metric Format lines (at most 100 metrics each).

    Args:
        result: the window's check.
        endpoint: the ``Endpoint`` dimension.
        schedule_name: the ``MonitoringSchedule`` dimension.
        when: the metrics' time (the window's end).
        partial: as :func:`metrics`.
    """
    values = metrics(result, partial)
    names: Sequence[str] = list(values)
    lines = []
    for first in range(0, len(names), _EMF_MAX_METRICS):
        chunk = names[first:first + _EMF_MAX_METRICS]
        document: dict[str, Any] = {
            "_aws": {"Timestamp": int(when.timestamp() * 1000),
                     "CloudWatchMetrics": [{
                         "Namespace": NAMESPACE, "Dimensions": [list(DIMENSIONS)],
                         "Metrics": [{"Name": name, "Unit": "None"} for name in chunk]}]},
            "Endpoint": endpoint, "MonitoringSchedule": schedule_name,
            **{name: values[name] for name in chunk}}
        lines.append(json.dumps(document, allow_nan=False))
    return lines
