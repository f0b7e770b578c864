"""How long a job runner lives, derived once from its function's timeout: when its work must
stop, when another runner may take its job over, when the job is lost.

The job runner is a Lambda function whose timeout is set per stage (``.chalice/config.json``,
``lambda_functions.job_runner.lambda_timeout``); the functions that judge a runner (the API's
``GET /jobs/{id}``, another delivery of the runner) run elsewhere and learn it from
``JOB_RUNNER_TIMEOUT_SECONDS``, by default Lambda's longest, so no runner outlives it. Three
times follow from it, here and nowhere else:

- a runner's work ends :data:`FINISH_MARGIN_SECONDS` before its function would be stopped
  (what is left is for keeping the answer), and before the configured timeout too, should
  the function be allowed longer (:meth:`RunnerLifetime.work_seconds`);
- :attr:`RunnerLifetime.seconds` after a runner's last move it is surely gone (its function
  was stopped at its timeout): another delivery of the job's event may claim it;
- :attr:`RunnerLifetime.lost_after_seconds` after it, Lambda's last retry of the event would
  have claimed it too: nothing will move the job any more (``JobLost``).
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from chalicelib.core.errors import ConfigurationError

logger = logging.getLogger("sagegate.jobs")

RUNNER_TIMEOUT_ENV = "JOB_RUNNER_TIMEOUT_SECONDS"
"""The job runner function's timeout, as configured for the stage."""
LAMBDA_MAX_TIMEOUT_SECONDS = 900
"""Lambda's longest timeout: the default, which no runner can outlive."""
RUNNER_MARGIN_SECONDS = 60
"""Past its timeout, a runner's function is surely stopped (clock skew between the functions
that compare times, the last write landing)."""
LAMBDA_RETRY_WAIT_SECONDS = 180
"""The longest Lambda waits before retrying a failed asynchronous event (2 minutes, rounded
up): the next attempt claims the job again within it."""
FINISH_MARGIN_SECONDS = 60
"""What a runner keeps of its function's time after its work: capturing the inference,
writing the answer and the job's final state."""

RemainingMillis = Callable[[], float]
"""Lambda's ``context.get_remaining_time_in_millis``."""


@dataclasses.dataclass(frozen=True)
class RunnerLifetime:
    """The job runner function's timeout and what follows from it (see the module).

    Attributes:
        timeout_seconds: the function's timeout.
    """

    timeout_seconds: int = LAMBDA_MAX_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if isinstance(self.timeout_seconds, bool) or not isinstance(self.timeout_seconds, int) \
                or not 1 <= self.timeout_seconds <= LAMBDA_MAX_TIMEOUT_SECONDS:
            raise ConfigurationError(
                f"{RUNNER_TIMEOUT_ENV} must be the job runner function's timeout, whole "
                f"seconds from 1 to {LAMBDA_MAX_TIMEOUT_SECONDS}, not {self.timeout_seconds!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RunnerLifetime:
        """The lifetime ``JOB_RUNNER_TIMEOUT_SECONDS`` gives (Lambda's longest when unset).

        Raises:
            ConfigurationError: not a whole number of seconds from 1 to 900.
        """
        raw = environ.get(RUNNER_TIMEOUT_ENV, "").strip()
        if not raw:
            return cls()
        if not raw.isascii() or not raw.isdigit():
            raise ConfigurationError(f"{RUNNER_TIMEOUT_ENV} must be whole seconds from 1 to "
                                     f"{LAMBDA_MAX_TIMEOUT_SECONDS}, not {raw[:32]!r}")
        return cls(int(raw))

    @property
    def seconds(self) -> float:
        """How long after its last move a running job's runner may still be at work: past
        this, another runner may claim the job."""
        return float(self.timeout_seconds + RUNNER_MARGIN_SECONDS)

    @property
    def lost_after_seconds(self) -> float:
        """How long after its last move a real-time job may still be running: its runner's
        life and Lambda's wait before the retry that would have claimed it again."""
        return self.seconds + LAMBDA_RETRY_WAIT_SECONDS

    def work_seconds(self, remaining_ms: RemainingMillis | None, budget: float) -> float:
        """How long the job's work may take from now: ``budget`` (``JOB_BUDGET_SECONDS``), but
        no longer than the function's remaining time, nor than the configured timeout, less
        :data:`FINISH_MARGIN_SECONDS` (the answer must be kept before the function stops).

        Args:
            remaining_ms: the invocation's remaining time (None: not on Lambda).
            budget: the stage's job budget.
        """
        limit = float(self.timeout_seconds)
        if remaining_ms is not None:
            remaining = remaining_ms() / 1000.0
            if remaining > limit + 1:  # the function may run longer than the others assume
                logger.warning("the job runner has %.0f s but %s says %d s: its work stops "
                               "within the configured timeout", remaining, RUNNER_TIMEOUT_ENV,
                               self.timeout_seconds)
            limit = min(limit, remaining)
        return max(0.0, min(budget, limit - FINISH_MARGIN_SECONDS))
