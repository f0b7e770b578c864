"""How long a job runner lives: when its work must stop, and the lease its claim stores on the
job.

The runner's timeout is set per stage (``lambda_functions.job_runner.lambda_timeout``); the
functions that judge a runner (``GET /jobs/{id}``, another delivery) learn it from
``JOB_RUNNER_TIMEOUT_SECONDS``, by default Lambda's longest. The runner itself knows better:
its invocation's remaining time. From both, here and nowhere else:

- its work ends :data:`FINISH_MARGIN_SECONDS` before its function would be stopped, and
  before the configured timeout should the function be allowed longer;
- its claim's lease runs to the end of its remaining time plus :data:`RUNNER_MARGIN_SECONDS`:
  past it another delivery may claim the job; :data:`LAMBDA_RETRY_WAIT_SECONDS` past it,
  Lambda's last retry would have claimed it too, so the job is lost (``JobLost``). The lease
  is stored on the job record, as Powertools' idempotency stores ``in_progress_expiry``, so
  the judges read it there instead of assuming a timeout.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from chalicelib.core.config_names import JOB_RUNNER_TIMEOUT_SECONDS
from chalicelib.core.errors import ConfigurationError

logger = logging.getLogger("sagegate.jobs")

LAMBDA_MAX_TIMEOUT_SECONDS = 900
"""Lambda's longest timeout: the default, which no runner can outlive."""
RUNNER_MARGIN_SECONDS = 60
"""Past its timeout, a runner's function is surely stopped (clock skew between the functions
that compare times, the last write landing)."""
LAMBDA_RETRY_WAIT_SECONDS = 180
"""The longest Lambda waits before retrying a failed asynchronous event (2 minutes, rounded
up): the next attempt claims the job again within it, so a job whose lease is over by more
than this is lost."""
FINISH_MARGIN_SECONDS = 60
"""What a runner keeps of its function's time after its work: capturing the inference,
writing the answer and the job's final state."""

RemainingMillis = Callable[[], float]
"""Lambda's ``context.get_remaining_time_in_millis``."""


@dataclasses.dataclass(frozen=True)
class RunnerLifetime:
    """The job runner function's timeout and what follows from it."""

    timeout_seconds: int = LAMBDA_MAX_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if isinstance(self.timeout_seconds, bool) or not isinstance(self.timeout_seconds, int) \
                or not 1 <= self.timeout_seconds <= LAMBDA_MAX_TIMEOUT_SECONDS:
            raise ConfigurationError(
                f"{JOB_RUNNER_TIMEOUT_SECONDS} must be the job runner function's timeout, whole "
                f"seconds from 1 to {LAMBDA_MAX_TIMEOUT_SECONDS}, not {self.timeout_seconds!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunnerLifetime:
        """The lifetime ``JOB_RUNNER_TIMEOUT_SECONDS`` gives (Lambda's longest when unset).

        Raises:
            ConfigurationError: not a whole number of seconds from 1 to 900.
        """
        raw = environ.get(JOB_RUNNER_TIMEOUT_SECONDS, "").strip()
        if not raw:
            return cls()
        if not raw.isascii() or not raw.isdigit():
            raise ConfigurationError(f"{JOB_RUNNER_TIMEOUT_SECONDS} must be whole seconds "
                                     f"from 1 to {LAMBDA_MAX_TIMEOUT_SECONDS}, not {raw[:32]!r}")
        return cls(int(raw))

    def lease_seconds(self, remaining_ms: RemainingMillis | None) -> float:
        """How long from now a runner that claims a job may still move it (``remaining_ms``
        None: not on Lambda, the configured timeout)."""
        limit = float(self.timeout_seconds)
        if remaining_ms is not None:
            limit = min(limit, remaining_ms() / 1000.0)
        return limit + RUNNER_MARGIN_SECONDS

    def work_seconds(self, remaining_ms: RemainingMillis | None, budget: float) -> float:
        """How long the job's work may take from now: ``budget`` (``JOB_BUDGET_SECONDS``), but
        no longer than the remaining time or the configured timeout, less
        :data:`FINISH_MARGIN_SECONDS` (the answer must be kept before the function stops)."""
        limit = float(self.timeout_seconds)
        if remaining_ms is not None:
            remaining = remaining_ms() / 1000.0
            if remaining > limit + 1:  # the function may run longer than the others assume
                logger.warning("the job runner has %.0f s but %s says %d s: its work stops "
                               "within the configured timeout", remaining,
                               JOB_RUNNER_TIMEOUT_SECONDS, self.timeout_seconds)
            limit = min(limit, remaining)
        return max(0.0, min(budget, limit - FINISH_MARGIN_SECONDS))
