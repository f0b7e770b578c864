"""A baseline and a check, from rows to the documents Model Monitor writes.

The callers read the inputs (files, S3 objects) and write the outputs; this module only turns
rows into ``statistics.json``, ``constraints.json``, ``constraint_violations.json`` and the
report, so the command line and the scheduled function produce the same files.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.monitor import checks, constraints, report
from chalicelib.monitor.statistics import MAX_FEATURES, DatasetStatistics

STATISTICS, CONSTRAINTS, VIOLATIONS, REPORT = (
    "statistics.json", "constraints.json", "constraint_violations.json", "report.html")


@dataclasses.dataclass
class CheckResult:
    """A check's outputs: file name to content, and the evaluation behind them."""

    files: dict[str, str]
    evaluation: checks.Evaluation
    statistics: dict[str, Any]

    @property
    def violation_count(self) -> int:
        return len(self.evaluation.violations["violations"])


def dumps(document: Mapping[str, Any]) -> str:
    """Indented JSON; NaN and infinity are not JSON."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def baseline(rows: Iterable[Mapping[str, Any]],
             max_features: int = MAX_FEATURES) -> dict[str, str]:
    """``statistics.json`` and the ``constraints.json`` it suggests.

    Raises:
        FeatureLimitError: the rows have more than ``max_features`` distinct features.
    """
    return baseline_files(DatasetStatistics(max_features=max_features).add_all(rows))


def baseline_files(statistics: DatasetStatistics) -> dict[str, str]:
    """As :func:`baseline`, of statistics already gathered (one pass, or parts merged)."""
    document = statistics.to_json()
    return {STATISTICS: dumps(document), CONSTRAINTS: dumps(constraints.suggest(document))}


def check(rows: Iterable[Mapping[str, Any]], baseline_statistics: Mapping[str, Any],
          baseline_constraints: Mapping[str, Any], title: str,
          window: tuple[datetime.datetime, datetime.datetime] | None = None,
          with_report: bool = True, max_features: int = MAX_FEATURES) -> CheckResult:
    """The window's statistics, its violations and (``with_report``) the report.

    Args:
        rows: the window's rows (after preprocessing).
        baseline_constraints: as the user may have edited it.
        title: what the report says was checked.

    Raises:
        FeatureLimitError: the window has more than ``max_features`` distinct features.
    """
    return check_statistics(DatasetStatistics(max_features=max_features).add_all(rows),
                            baseline_statistics, baseline_constraints, title, window,
                            with_report)


def check_statistics(window_statistics: DatasetStatistics,
                     baseline_statistics: Mapping[str, Any],
                     baseline_constraints: Mapping[str, Any], title: str,
                     window: tuple[datetime.datetime, datetime.datetime] | None = None,
                     with_report: bool = True) -> CheckResult:
    """:func:`check` of a window's statistics already gathered (one pass, or parts merged)."""
    statistics = window_statistics.to_json()
    evaluation = checks.evaluate(baseline_statistics, baseline_constraints, statistics)
    files = {STATISTICS: dumps(statistics), VIOLATIONS: dumps(evaluation.violations)}
    if with_report:
        files[REPORT] = report.render(evaluation, title, window,
                                      statistics["dataset"]["item_count"])
    return CheckResult(files, evaluation, statistics)
