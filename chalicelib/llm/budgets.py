"""Token budgets per API key: tokens a minute and a day, across models (the stage's
``TOKEN_BUDGET_*`` settings, a key's own in ``TOKEN_BUDGET_KEYS``) and on one model (its
model.json's ``llm.budgets``), counted in time windows of a DynamoDB table
(``TOKEN_BUDGET_TABLE``: one item per key, model (``*``: every model), window and window
start; an atomic counter ``used``, expiring after its window by the TTL ``expires_at``).

A request reserves before any token is delivered (a whole answer before its call, a stream
while its endpoint's prefill runs: :meth:`TokenBudgets.reserving`), in each window that
applies, its ``max_tokens`` plus its prompt's size in bytes (:func:`reservation`), with a
conditional ``ADD`` that fails when the window would pass its limit: a window that refuses
gives back what the others took, and the request is refused (429). After the answer the
reservation is settled with what the endpoint spent (an unconditional ``ADD`` of the
difference), so requests at once can overspend a window by at most one reservation. The table's
failures never fail a request: budgets fail open (logged, counted in ``BudgetErrors``), the
window that failed not applied.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.clients import DynamoTable
from chalicelib.core.config import Settings, budget_overrides
from chalicelib.llm.errors import OpenAIError
from chalicelib.llm.requests import CompletionRequest, Operation
from chalicelib.registry.specs import ModelSpec

logger = logging.getLogger("sagegate.budgets")  # a child of Powertools' JSON logger

ANONYMOUS = "anonymous"
"""The one budget of callers without an API key (a stage without keys: every caller)."""
EVERY_MODEL = "*"
SPANS = {"minute": 60, "day": 86_400}
"""Each window's length in seconds (a day's starts at midnight UTC)."""
NAMES = {"minute": "tokens per min (TPM)", "day": "tokens per day (TPD)"}
EXPIRY_MARGIN = 3600
"""Seconds an item outlives its window (a stream's settlement may come after it ended)."""
TOKENS = "tokens"  # the 429's error type, as OpenAI's
RATE_LIMITED = "rate_limit_exceeded"
LIMIT_HEADER = "x-ratelimit-limit-tokens"
REMAINING_HEADER = "x-ratelimit-remaining-tokens"
RESET_HEADER = "x-ratelimit-reset-tokens"
HEADERS = (LIMIT_HEADER, REMAINING_HEADER, RESET_HEADER)
MAX_WINDOWS = 4
"""A request's windows at most: a minute and a day across models, and on its model."""
MAX_CROWDED = 1024
"""Keys :meth:`TokenBudgets.crowded` remembers before it forgets those whose window ended."""
_T = TypeVar("_T")


class CounterError(Exception):
    """The counters' store failed (its code or type; never a request's fault)."""


class Counters(Protocol):
    """Atomic counters by item key (:class:`TableCounters`; :class:`MemoryCounters` in tests)."""

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        """Add ``amount`` unless the count would pass ``limit``: whether it was added, and
        the count after it (or as it stands, refused).

        Raises:
            CounterError: the store failed.
        """

    def add(self, item: str, amount: int, expires_at: int) -> int:
        """Add ``amount`` (negative: give back), whatever the count; the count after it."""

    def read(self, item: str) -> int:
        """The count (0 for none)."""


class MemoryCounters:
    """:class:`Counters` in this process's memory: one process's tests, never a stage's."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        with self._lock:
            used = self.counts.get(item)
            if used is not None and used > limit - amount:
                return False, used
            self.counts[item] = (used or 0) + amount
            return True, self.counts[item]

    def add(self, item: str, amount: int, expires_at: int) -> int:
        with self._lock:
            self.counts[item] = self.counts.get(item, 0) + amount
            return self.counts[item]

    def read(self, item: str) -> int:
        with self._lock:
            return self.counts.get(item, 0)


class TableCounters(DynamoTable):
    """:class:`Counters` in a DynamoDB table: key ``key`` (S), count ``used`` (N), TTL
    ``expires_at`` (N); UpdateItem and GetItem only. A None ``client`` is built on first use
    (1 s to connect, 2 s to read, no retry; boto3 honours ``AWS_ENDPOINT_URL_DYNAMODB``)."""

    def __init__(self, table: str, client: Any = None) -> None:
        super().__init__(table, _client, client)

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        try:
            answer = self.client.update_item(
                TableName=self.table, Key=_key(item),
                UpdateExpression="ADD used :amount SET expires_at = :expires",
                ConditionExpression="attribute_not_exists(used) OR used <= :room",
                ExpressionAttributeValues={":amount": _number(amount),
                                           ":room": _number(limit - amount),
                                           ":expires": _number(expires_at)},
                ReturnValues="UPDATED_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except Exception as error:
            if aws.error_code(error) == "ConditionalCheckFailedException":
                return False, _used(getattr(error, "response", {}).get("Item"))
            raise CounterError(aws.error_code(error) or type(error).__name__) from error
        return True, _used(answer.get("Attributes"))

    def add(self, item: str, amount: int, expires_at: int) -> int:
        try:
            answer = self.client.update_item(
                TableName=self.table, Key=_key(item),
                UpdateExpression="ADD used :amount SET expires_at = :expires",
                ExpressionAttributeValues={":amount": _number(amount),
                                           ":expires": _number(expires_at)},
                ReturnValues="UPDATED_NEW")
        except Exception as error:
            raise CounterError(aws.error_code(error) or type(error).__name__) from error
        return _used(answer.get("Attributes"))

    def read(self, item: str) -> int:
        try:
            answer = self.client.get_item(TableName=self.table, Key=_key(item),
                                          ConsistentRead=True)
        except Exception as error:
            raise CounterError(aws.error_code(error) or type(error).__name__) from error
        return _used(answer.get("Item"))


def _client() -> Any:
    return awsclients.build("dynamodb", aws.TOKEN_BUDGETS)


def _key(item: str) -> dict[str, Any]:
    return {"key": {"S": item}}


def _number(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _used(attributes: Any) -> int:
    """An item's ``used`` (0 for none, or one that is not a whole number)."""
    found = attributes.get("used") if isinstance(attributes, Mapping) else None
    try:
        return int(found["N"]) if isinstance(found, Mapping) else 0
    except (KeyError, TypeError, ValueError):
        return 0


@dataclasses.dataclass(frozen=True)
class Window:
    """One limit: ``limit`` tokens a ``span`` (``minute`` or ``day``) on ``model``."""

    model: str
    span: str
    limit: int

    @property
    def seconds(self) -> int:
        return SPANS[self.span]

    def start(self, now: float) -> int:
        """The epoch second the window holding ``now`` began."""
        return int(now // self.seconds) * self.seconds

    def ends(self, now: float) -> int:
        """The epoch second the window holding ``now`` ends."""
        return self.start(now) + self.seconds

    def item(self, who: str, now: float) -> str:
        """The counter's key: the API key's id, the model, the window and its start."""
        return f"{who}#{self.model}#{self.span}#{self.start(now)}"


@dataclasses.dataclass(frozen=True)
class Standing:
    """A window's count as an operation left it."""

    window: Window
    item: str
    used: int
    ends_at: int

    @property
    def remaining(self) -> int:
        return max(0, self.window.limit - self.used)

    def expires_at(self) -> int:
        """The item's TTL."""
        return self.ends_at + EXPIRY_MARGIN

    def headers(self, now: float) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*-tokens`` headers of this window."""
        return {LIMIT_HEADER: str(self.window.limit), REMAINING_HEADER: str(self.remaining),
                RESET_HEADER: duration(self.ends_at - now)}

    def document(self, now: float) -> dict[str, Any]:
        """``GET /v1/usage``'s entry."""
        return {"object": "token_budget", "model": self.window.model,
                "window": self.window.span, "limit_tokens": self.window.limit,
                "used_tokens": max(0, self.used), "remaining_tokens": self.remaining,
                "resets_at": self.ends_at, "reset": duration(self.ends_at - now)}


def standing(window: Window, who: str, now: float, used: int) -> Standing:
    return Standing(window, window.item(who, now), used, window.ends(now))


def tightest(standings: Sequence[Standing]) -> Standing | None:
    """The window with the fewest tokens left (the first to end among equals)."""
    return min(standings, key=lambda found: (found.remaining, found.ends_at), default=None)


def longest(refusals: Sequence[Standing], amount: int) -> Standing:
    """The refusal a client is told of: a window the request is larger than (retrying never
    helps), else the one that refuses longest (the last to end)."""
    return max(refusals, key=lambda found: (amount > found.window.limit, found.ends_at))


def duration(seconds: float) -> str:
    """A time as OpenAI's headers write it (Go's durations): ``20ms``, ``1s``, ``6m0s``,
    ``1h2m3.5s``; a past time is ``0s``."""
    millis = max(0, round(seconds * 1000))
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def reservation(request: CompletionRequest) -> int:
    """What a request reserves: its ``max_tokens`` (the model's default when it names none)
    and its prompt's size in bytes, UTF-8 (a chat's with its framing), and a chat's the
    template's own tokens (model.json's ``llm.budgets.template_tokens``): a byte-level BPE
    makes at most one token a byte, so this is at or above what the endpoint counts where
    ``template_tokens`` is (a settlement above it is counted: :attr:`Reservation.overrun`)."""
    template = request.llm.template_tokens if request.operation == Operation.CHAT else 0
    return request.sampling.max_tokens + request.prompt_bytes + template


@dataclasses.dataclass(frozen=True)
class Limits:
    """A key's budget across models (0: no such window)."""

    tokens_per_minute: int = 0
    tokens_per_day: int = 0

    def windows(self, model: str) -> list[Window]:
        return [Window(model, span, limit) for span, limit in
                (("minute", self.tokens_per_minute), ("day", self.tokens_per_day)) if limit]


class TokenBudgets:
    """The stage's budgets (``limits``, a key's own in ``keys``) and each model's, on
    ``counters`` (``clock``: epoch seconds)."""

    def __init__(self, counters: Counters, limits: Limits,
                 keys: Mapping[str, Limits] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.counters = counters
        self._limits, self._keys = limits, dict(keys or {})
        self._clock = clock
        self._pool: ThreadPoolExecutor | None = None  # built on a request's first use
        self._lock = threading.Lock()
        self._crowded: dict[str, int] = {}  # who: the epoch second its mark ends

    @classmethod
    def from_settings(cls, settings: Settings, client: Any = None) -> TokenBudgets | None:
        """The stage's budgets (None: no ``TOKEN_BUDGET_TABLE``, budgets off)."""
        if not settings.token_budget_table:
            return None
        stage = Limits(settings.token_budget_per_minute, settings.token_budget_per_day)
        keys = {key_id: dataclasses.replace(stage, **limits) for key_id, limits
                in budget_overrides(settings.token_budget_keys).items()}
        return cls(TableCounters(settings.token_budget_table, client), stage, keys)

    def windows(self, who: str, model: ModelSpec | None) -> list[Window]:
        """The windows a request of ``who`` on ``model`` counts in (None: the stage's only)."""
        windows = self._keys.get(who, self._limits).windows(EVERY_MODEL)
        if model is not None and model.llm is not None:
            llm = model.llm
            windows += Limits(llm.tokens_per_minute, llm.tokens_per_day).windows(model.name)
        return windows

    def reserve(self, key_id: str | None, model: ModelSpec, amount: int) -> Reservation:
        """Reserve ``amount`` in each window of the key (None: :data:`ANONYMOUS`) and model.

        Raises:
            BudgetExceeded: a window has no room for it (what the others took is given back).
        """
        return self._reserving(key_id, model, amount, early=False)()

    def crowded(self, key_id: str | None) -> bool:
        """Whether the key's budget was short in this process lately: a reservation of it was
        refused, or left a window less room than it took, and that window has not ended since
        (a later one that left room clears it). A stream of such a key reserves before its
        call, as a whole answer does: one likely refused must not cost the endpoint a prefill
        (a key over its budget would otherwise still take the endpoint's capacity)."""
        with self._lock:
            return self._crowded.get(key_id or ANONYMOUS, 0) > self._clock()

    def _note(self, who: str, short: Sequence[Standing]) -> None:
        """Mark ``who`` crowded until the last of the ``short`` windows ends (none: clear)."""
        with self._lock:
            if not short:
                self._crowded.pop(who, None)
                return
            if len(self._crowded) >= MAX_CROWDED:
                now = self._clock()
                self._crowded = {key: ends for key, ends in self._crowded.items() if ends > now}
            self._crowded[who] = max(found.ends_at for found in short)

    def reserving(self, key_id: str | None, model: ModelSpec,
                  amount: int) -> Callable[[], Reservation]:
        """:meth:`reserve` begun on the budgets' threads, left to run while the caller goes on
        (a stream opens its endpoint's stream meanwhile): the call returned, made once, waits
        for it and gives what :meth:`reserve` gives, or raises what it raises."""
        return self._reserving(key_id, model, amount, early=True)

    def _reserving(self, key_id: str | None, model: ModelSpec, amount: int,
                   early: bool) -> Callable[[], Reservation]:
        who, now = key_id or ANONYMOUS, self._clock()
        windows = self.windows(who, model)
        outcomes = self._start(
            [functools.partial(self._take, window, who, now, amount) for window in windows],
            early=early)
        return functools.partial(self._reserved, windows, who, now, amount, model.name,
                                 outcomes)

    def _reserved(self, windows: Sequence[Window], who: str, now: float, amount: int,
                  model: str, outcomes: Callable[[], list[tuple[bool, int] | CounterError]]
                  ) -> Reservation:
        """The reservation its windows' outcomes make (a refusal: what was taken given back).

        Raises:
            BudgetExceeded: a window had no room.
        """
        held = Reservation(self.counters, amount, now)
        refusals = []
        for window, outcome in zip(windows, outcomes(), strict=True):
            if isinstance(outcome, CounterError):
                held.failed("reserve", outcome)
                continue
            taken, used = outcome
            found = standing(window, who, now, used)
            if taken:
                held.standings.append(found)
            else:
                refusals.append(found)
        if refusals:
            self._note(who, refusals)
            held.settle(0)  # what the other windows took, given back
            raise BudgetExceeded(longest(refusals, amount), amount, now, model, held.errors)
        self._note(who, [found for found in held.standings if found.remaining < amount])
        return held

    def _take(self, window: Window, who: str, now: float, amount: int) -> tuple[bool, int]:
        """One window's reservation. One larger than the window is refused unasked: the
        count, for the refusal's message and headers, is read, 0 when the read fails (the
        refusal needs no table, so it never fails open)."""
        item = window.item(who, now)
        if amount > window.limit:
            try:
                return False, self.counters.read(item)
            except CounterError as error:
                logger.warning("token budget read failed: %s (the request is larger than "
                               "the window: refused)", error)
                return False, 0
        return self.counters.reserve(item, amount, window.limit,
                                     window.ends(now) + EXPIRY_MARGIN)

    def _at_once(self, calls: Sequence[Callable[[], _T]]) -> list[_T | CounterError]:
        """Each call's result (or its CounterError), the calls made at once: a request waits
        for one round trip to the table before its endpoint call, not one a window."""
        return self._start(calls, early=False)()

    def _start(self, calls: Sequence[Callable[[], _T]],
               early: bool) -> Callable[[], list[_T | CounterError]]:
        """The calls begun (``early``, or more than one: on the pool, at once; else made
        here and now); the call returned waits for each one's result or CounterError."""
        if len(calls) < 2 and not early:
            found = [_outcome(call) for call in calls]
            return lambda: found
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_WINDOWS, thread_name_prefix="budgets")
            pool = self._pool
        futures = [pool.submit(_outcome, call) for call in calls]
        return lambda: [future.result() for future in futures]

    def standings(self, key_id: str | None, model: ModelSpec | None = None,
                  models: Sequence[ModelSpec] = ()) -> tuple[list[Standing], int, float]:
        """Each window of the key on ``model`` (None: the stage's) and on ``models``, as its
        count stands; how many reads failed; the time read."""
        who, now = key_id or ANONYMOUS, self._clock()
        windows = dict.fromkeys(self.windows(who, model))
        for other in models:
            windows.update(dict.fromkeys(self.windows(who, other)))
        found, errors = [], 0
        for window, used in zip(windows, self._at_once(
                [functools.partial(self.counters.read, window.item(who, now))
                 for window in windows]), strict=True):
            if isinstance(used, CounterError):
                logger.warning("token budget read failed: %s (budgets fail open)", used)
                errors += 1
                continue
            found.append(standing(window, who, now, used))
        return found, errors, now


def _outcome(call: Callable[[], _T]) -> _T | CounterError:
    try:
        return call()
    except CounterError as error:
        return error


class Reservation:
    """What a request took in its windows, given back or settled once with what it spent."""

    def __init__(self, counters: Counters, amount: int, now: float) -> None:
        self.amount, self.now = amount, now
        self.standings: list[Standing] = []
        self.errors = 0
        self.overrun = 0
        """Tokens spent above the reservation (its settlement's; 0: none)."""
        self._counters = counters
        self._settled = False
        self._lock = threading.Lock()

    def failed(self, operation: str, error: CounterError) -> None:
        """A window whose counter failed: not applied (budgets fail open), logged, counted."""
        self.errors += 1
        logger.warning("token budget %s failed: %s (budgets fail open)", operation, error)

    def headers(self) -> dict[str, str]:
        """The tightest window's headers (none when no window applies)."""
        found = tightest(self.standings)
        return {} if found is None else found.headers(self.now)

    def settle(self, spent: int) -> None:
        """Once: each window's count moved from the reservation to ``spent`` (0: given back)."""
        with self._lock:
            if self._settled:
                return
            self._settled = True
        difference = spent - self.amount
        self.overrun = max(0, difference)
        if difference == 0:
            return
        for index, found in enumerate(self.standings):
            try:
                used = self._counters.add(found.item, difference, found.expires_at())
            except CounterError as error:
                self.failed("settlement", error)
                continue
            self.standings[index] = dataclasses.replace(found, used=used)


class BudgetExceeded(OpenAIError):
    """A window has no room for the request: OpenAI's 429, with ``Retry-After`` (the window's
    end) and the window's ``x-ratelimit-*-tokens`` headers."""

    def __init__(self, found: Standing, amount: int, now: float, model: str,
                 errors: int = 0) -> None:
        window = found.window
        wait = max(1, math.ceil(found.ends_at - now))
        scope = "" if window.model == EVERY_MODEL else f" on {window.model}"
        where = f"for {model}{scope} on {NAMES[window.span]}: Limit {window.limit}"
        message = (f"Request too large {where}, Requested {amount} (max_tokens and the "
                   "prompt's bytes). Ask for fewer max_tokens or send a shorter prompt."
                   if amount > window.limit else
                   f"Rate limit reached {where}, Used {found.used}, Requested {amount}. "
                   f"Please try again in {duration(found.ends_at - now)}.")
        super().__init__(
            429, message, code=RATE_LIMITED, kind=TOKENS,
            headers={"Retry-After": str(wait), **found.headers(now)})
        self.standing, self.errors = found, errors
