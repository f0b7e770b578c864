"""The one retry policy: bounded attempts, full jitter, a time budget and a retry quota.

Every place sagegate retries (the endpoint client, the capture sinks and writer, sagegate's
HTTP client, the emulator's supervisor) configures a :class:`RetryPolicy`; the callers of an
upstream share a :class:`RetryQuota` and drive one :class:`Retrier` per operation. None has a
backoff of its own.

The quota is botocore's standard retry mode's (``botocore/retries/quota.py`` and
``standard.py``, botocore 1.44): a token bucket of 500 per client, shared by the threads that
use it (a process has one endpoint client and one capture sink); a retry after throttling
takes 5, any other retry 14; a call that succeeds at once puts 1 back, one that succeeds after
retries puts back what its last retry took. When the bucket cannot pay, the failure is given
up at once: a throttled upstream then sees one call per request, not ``max_attempts``, until
successes refill it.

This module imports nothing of sagegate's, and nothing that costs (no botocore).
"""
from __future__ import annotations

import dataclasses
import email.utils
import math
import random
import threading
import time
from collections.abc import Callable

QUOTA_CAPACITY = 500
THROTTLING_CODES = frozenset({
    # botocore's standard mode (botocore/retries/standard.py, botocore 1.44)
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException",
    "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
    "LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
    "EC2ThrottledException",
    # Firehose: "the service is unavailable. Back off and retry the operation"
    "ServiceUnavailableException",
})
"""The upstream is throttling: the cheaper retry (see the quota)."""
TRANSIENT_CODES = frozenset({
    # botocore's standard mode
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
    # SageMaker runtime's own retryable faults (sagemaker-runtime service-2.json)
    "InternalFailure", "InternalDependencyException", "ServiceUnavailable",
    "ModelNotReadyException",
})
THROTTLING_STATUSES = frozenset({429})
TRANSIENT_STATUSES = frozenset({500, 502, 503, 504})
THROTTLED_RETRY_COST = 5
RETRY_COST = 14
SUCCESS_REFUND = 1
MAX_RETRY_AFTER_S = 60  # the longest Retry-After sagegate advises, whatever upstream said


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How one kind of call is retried.

    Attributes:
        max_attempts: attempts in all, the first included.
        budget_seconds: from the first attempt's start, within which every attempt must fit.
        attempt_timeout: a retry starts only if its backoff and a whole attempt still fit.
        base_delay: the first backoff's ceiling; each next one doubles, up to ``max_delay``.
        quota_wait: the ``Retry-After`` advised when the quota cannot pay a retry: every
            caller in the process is then failing, and coming back sooner only adds load.
    """

    max_attempts: int = 3
    budget_seconds: float = 25.0
    attempt_timeout: float = 0.0
    base_delay: float = 0.1
    max_delay: float = 2.0
    quota_wait: float = 10.0

    def ceiling(self, attempt: int) -> float:
        """The longest backoff after failed attempt ``attempt`` (1-based)."""
        return float(min(self.max_delay, self.base_delay * 2 ** max(0, attempt - 1)))

    def delay(self, attempt: int, rng: Callable[[], float]) -> float:
        """Full jitter: uniform in ``[0, ceiling(attempt))``, so callers failing together
        do not retry together."""
        return rng() * self.ceiling(attempt)

    def may_retry(self, attempt: int, remaining: float, delay: float) -> bool:
        return (attempt < self.max_attempts
                and remaining >= delay + self.attempt_timeout)

    def preprocessing_deadline(self, deadline: float) -> float:
        """When what comes before the call must be done: the budget's end less one whole
        attempt, which the call is then always given."""
        return deadline - self.attempt_timeout


class RetryQuota:
    """botocore's retry token bucket, safe to share between threads."""

    def __init__(self, capacity: int = QUOTA_CAPACITY) -> None:
        self.capacity = capacity
        self._available = capacity
        self._lock = threading.Lock()

    @property
    def available(self) -> int:
        return self._available

    def can_pay(self, throttled: bool) -> bool:
        return self._available >= _cost(throttled)

    def acquire(self, throttled: bool) -> int:
        """Take a retry's cost: what was taken, or 0 when the bucket cannot pay it."""
        cost = _cost(throttled)
        with self._lock:
            if cost > self._available:
                return 0
            self._available -= cost
            return cost

    def release(self, amount: int) -> None:
        with self._lock:
            self._available = min(self.capacity, self._available + amount)


def _cost(throttled: bool) -> int:
    return THROTTLED_RETRY_COST if throttled else RETRY_COST


class Retrier:
    """One operation's attempts under a policy, a quota and a deadline.

    Call :meth:`failed` after each failed attempt: it gives the wait before the next one, or
    None to give up (attempts used, the budget cannot hold a backoff and an attempt, or the
    quota cannot pay). Call :meth:`succeeded` after a success, which refunds the quota.
    """

    def __init__(self, policy: RetryPolicy, quota: RetryQuota, *, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random) -> None:
        self.policy, self.quota = policy, quota
        self._clock, self._rng = clock, rng
        self.deadline = clock() + policy.budget_seconds if deadline is None else deadline
        self.attempts = 1
        self.quota_refused = False
        self._taken = 0

    def failed(self, *, throttled: bool = False, hint: float | None = None) -> float | None:
        """Seconds to wait before the next attempt, or None; ``hint`` (the upstream's own
        Retry-After) is a floor for the backoff."""
        if self.attempts >= self.policy.max_attempts:
            return None
        delay = self.policy.delay(self.attempts, self._rng)
        if hint is not None and math.isfinite(hint):
            delay = max(delay, hint)
        if not self.policy.may_retry(self.attempts, self.deadline - self._clock(), delay):
            return None
        taken = self.quota.acquire(throttled)
        if not taken:
            self.quota_refused = True
            return None
        self._taken = taken
        self.attempts += 1
        return delay

    def succeeded(self) -> None:
        """Refund the quota: 1 for a first-time success, else what the last retry took."""
        self.quota.release(self._taken or SUCCESS_REFUND)

    def retry_after(self, *, throttled: bool = False, hint: float | None = None) -> int:
        """The ``Retry-After`` to advise after giving up: the largest of the upstream's own
        wait, the next backoff and, when the quota cannot pay, ``quota_wait``."""
        seconds = self.policy.ceiling(self.attempts)
        if hint is not None and math.isfinite(hint):
            seconds = max(seconds, hint)
        if self.quota_refused or not self.quota.can_pay(throttled):
            seconds = max(seconds, self.policy.quota_wait)
        return int(min(MAX_RETRY_AFTER_S, max(1, math.ceil(seconds))))


def classify(code: str | None, status: int | None) -> bool | None:
    """Whether an AWS error answer is worth a retry, as botocore's standard mode decides:
    True when throttled, False when transient, None when not retryable."""
    if code in THROTTLING_CODES or status in THROTTLING_STATUSES:
        return True
    if code in TRANSIENT_CODES or status in TRANSIENT_STATUSES:
        return False
    return None


def parse_retry_after(value: str | None, *, now: Callable[[], float] = time.time
                      ) -> float | None:
    """An HTTP ``Retry-After`` in seconds (delay seconds or an HTTP date, ``now`` being the
    wall clock's epoch seconds); None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # isdigit alone admits "²" (float refuses it)
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now())


def upstream_hint(headers: dict[str, str], *, now: Callable[[], float] = time.time
                  ) -> float | None:
    """The wait an AWS answer asks for, in seconds: ``x-amz-retry-after`` (milliseconds, as
    botocore's standard mode reads it) or ``Retry-After``; None when it asks for none."""
    millis = headers.get("x-amz-retry-after", "").strip()
    if millis.isascii() and millis.isdigit():
        return int(millis) / 1000.0
    return parse_retry_after(headers.get("retry-after"), now=now)
