"""A checked window's metrics, as CloudWatch Embedded Metric Format lines.

One line per endpoint (more past 100 metrics) in the scheduled function's log, in Model Monitor's
namespace (``aws/sagemaker/Endpoints/data-metrics``), dimensions (``Endpoint``,
``MonitoringSchedule``) and names: ``feature_baseline_drift_<feature>`` and
``feature_non_null_<feature>``; sagegate adds ``constraint_violations``,
``feature_violations_<feature>`` and ``partial_window`` (1: the time ran out before every file
was read).
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
    """The window's metrics by name (``partial``: checked on part of its files)."""
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
    """The metrics as EMF lines (at most 100 metrics each), timed at ``when`` (the window's end)."""
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
