"""The prediction cache's tiers, key, ``Cache-Control`` reading and single flight (see the
package)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chalicelib import awsclients
from chalicelib.calls import InvokeResult
from chalicelib.core import aws
from chalicelib.core.clients import DynamoTable
from chalicelib.core.config import Settings

logger = logging.getLogger("sagegate.cache")  # a child of Powertools' JSON logger

HIT, MISS, BYPASS = "hit", "miss", "bypass"
MEMORY, TABLE, FLIGHT = "memory", "dynamodb", "in-flight"
"""The tiers a hit can come from (``in-flight``: a concurrent request's endpoint call)."""

DYNAMODB_ITEM_LIMIT = 400 * 1024
"""DynamoDB's item size limit (attribute names and values)."""
MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The largest body a table item may inflate to (SageMaker answers at most 6 MB)."""
PUT_SECONDS = 3.0
"""The longest one PutItem can take (connect 1 s + read 2 s, one attempt)."""


class CorruptItemError(ValueError):
    """A table item is not one this module wrote."""


class MemoryTier:
    """An LRU of answers bounded in bytes (each entry's body and key), thread-safe.

    An entry larger than the bound is not kept; adding one evicts the least recently used
    until the total fits. Entries past their expiry are misses (and dropped).

    Hand-written rather than ``cachetools.TLRUCache`` (per-entry expiry, ``getsizeof``): that
    needs the same lock around it and a dependency in the function's package, and measured
    several times slower per get and put for the same guarantees.
    """

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[InvokeResult, float]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def size(key: str, result: InvokeResult) -> int:
        """What an entry counts against the bound."""
        return len(key) + len(result.body)

    @property
    def nbytes(self) -> int:
        """The bytes held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        """Least recently used first."""
        with self._lock:
            return list(self._entries)

    def get(self, key: str) -> tuple[InvokeResult, float] | None:
        """The answer and its expiry (epoch seconds), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[1] <= self._clock():
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return entry

    def put(self, key: str, result: InvokeResult, expires_at: float) -> bool:
        """Keep an answer; False when it alone is larger than the bound."""
        size = self.size(key, result)
        if size > self.max_bytes:
            return False
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (result, expires_at)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
        return True

    def _drop(self, key: str) -> None:
        result, _ = self._entries.pop(key)
        self._bytes -= self.size(key, result)


def encode_item(key: str, result: InvokeResult, expires_at: float) -> dict[str, Any] | None:
    """The DynamoDB item of an answer (body zlib-compressed); None when over the item limit."""
    item: dict[str, Any] = {
        "key": {"S": key}, "answer": {"B": zlib.compress(result.body, 6)},
        "content_type": {"S": result.content_type}, "variant": {"S": result.variant or ""},
        "expires_at": {"N": str(int(expires_at))}}
    if result.custom_attributes:
        item["custom_attributes"] = {"S": result.custom_attributes}
    return item if item_size(item) <= DYNAMODB_ITEM_LIMIT else None


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size as DynamoDB counts it (names and values; numbers counted as text,
    which is never less than DynamoDB's own count)."""
    total = 0
    for name, value in item.items():
        (data,) = value.values()
        total += len(name.encode()) + len(data if isinstance(data, bytes)
                                          else str(data).encode())
    return total


def decode_item(item: Mapping[str, Any], key: str, now: float) -> tuple[InvokeResult, float] | None:
    """An answer and its expiry from a table item; None when expired (TTL deletion lags).

    Raises:
        CorruptItemError: the item is not one :func:`encode_item` wrote.
    """
    try:
        if item["key"]["S"] != key:
            raise CorruptItemError("the item's key is not the one asked for")
        expires_at = float(item["expires_at"]["N"])
        content_type, variant = item["content_type"]["S"], item["variant"]["S"]
        compressed = item["answer"]["B"]
        attributes = item.get("custom_attributes", {}).get("S")
        if not all(isinstance(v, str) for v in (content_type, variant)) or \
                not isinstance(compressed, bytes | bytearray):
            raise CorruptItemError("an attribute has the wrong type")
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise CorruptItemError(f"malformed item ({type(error).__name__})") from None
    if expires_at < now:
        return None
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(bytes(compressed), MAX_ANSWER_BYTES)
    except zlib.error:
        raise CorruptItemError("the answer does not decompress") from None
    if not inflater.eof or inflater.unconsumed_tail:
        raise CorruptItemError("the answer is truncated or too large")
    return InvokeResult(body=body, content_type=content_type, variant=variant or None,
                        custom_attributes=attributes, attempts=0), expires_at


class TableTier(DynamoTable):
    """The shared tier: one DynamoDB table (``CACHE_TABLE``), key ``key`` (S), TTL attribute
    ``expires_at``. Reads are eventually consistent GetItems; a write is one PutItem. A None
    ``client`` is built on first use (short timeouts, one attempt; boto3 honours
    ``AWS_ENDPOINT_URL_DYNAMODB``).
    """

    def __init__(self, table: str, client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(table, _client, client, clock)

    def get(self, key: str) -> tuple[InvokeResult, float] | None:
        """The answer under ``key`` and its expiry, or None (absent or expired); raises
        CorruptItemError and botocore's errors."""
        answer = self.client.get_item(TableName=self.table, Key={"key": {"S": key}},
                                      ConsistentRead=False)
        item = answer.get("Item")
        return None if item is None else decode_item(item, key, self._clock())

    def put(self, key: str, result: InvokeResult, expires_at: float) -> bool:
        """Store an answer; False (nothing sent) when over the item limit; raises botocore's."""
        item = encode_item(key, result, expires_at)
        if item is None:
            return False
        self.client.put_item(TableName=self.table, Item=item)
        return True


def _client() -> Any:
    return awsclients.build("dynamodb", aws.CACHE_TABLE)


KEY_BYTES = 16
KEY_VERSION = b"sagegate-cache-2"  # hashed first: change it to re-key every entry


def cache_key(fields: Mapping[str, Any], body: bytes) -> str:
    """The key of ``body`` sent with ``fields`` (JSON-able values): 32 hex digits."""
    header = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str).encode()
    digest = hashlib.sha256(KEY_VERSION)
    digest.update(len(header).to_bytes(8, "big"))  # no header/body split is ambiguous
    digest.update(header)
    digest.update(body)
    return digest.hexdigest()[:2 * KEY_BYTES]


def file_digest(path: Any) -> str:
    """The content hash of a file (a handler file's, for the key)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, hashlib.sha256).hexdigest()


# one element of a Cache-Control or Pragma list: a name, maybe "=" and a token or quoted string
_DIRECTIVE = re.compile(r'([^\s=,"]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^\s,"]*))?')
_DELTA_SECONDS = re.compile(r"[0-9]{1,10}")
# what this cache does something with (RFC 9111 5.4: Pragma counts only without these)
_UNDERSTOOD = frozenset({"no-cache", "no-store", "max-age"})


@dataclasses.dataclass(frozen=True)
class CacheControl:
    """A request's cache directives (RFC 9111 5.2.1), from ``Cache-Control`` and ``Pragma``.

    ``no-cache`` and ``max-age=0`` skip the read (the fresh answer is still stored);
    ``max-age=N`` reads only answers stored at most N seconds ago; ``no-store`` skips the
    write (a cached answer may still be read: RFC 9111's request no-store forbids storing, not
    serving). ``Pragma: no-cache`` is ``no-cache`` when no directive of ``Cache-Control`` is
    one this cache understands (RFC 9111 5.4). A ``max-age`` that is not one non-negative
    integer (repeated, negative, a word) skips the read: a doubtful freshness demand is met
    with a fresh answer.
    """

    read: bool = True
    write: bool = True
    max_age: int | None = None
    """The oldest answer (seconds since it was stored) the client accepts; None: any."""

    @classmethod
    def parse(cls, header: str | None, pragma: str | None = None) -> CacheControl:
        """The directives of one ``Cache-Control`` value and one ``Pragma`` (None: absent)."""
        return cls.from_lines([] if header is None else [header],
                              [] if pragma is None else [pragma])

    @classmethod
    def from_lines(cls, cache_control: Sequence[str], pragma: Sequence[str] = ()
                   ) -> CacheControl:
        """The directives of every field line of ``Cache-Control`` and ``Pragma`` (several
        lines of one field are one comma-separated list, RFC 9110 5.3)."""
        directives = _directives(cache_control)
        if pragma and not directives.keys() & _UNDERSTOOD and "no-cache" in _directives(pragma):
            directives["no-cache"] = [""]
        max_age = _max_age(directives.get("max-age"))
        read = "no-cache" not in directives and max_age != 0
        return cls(read=read, write="no-store" not in directives,
                   max_age=max_age if read else None)

    def accepts(self, age: float) -> bool:
        """Whether an answer stored ``age`` seconds ago may be served."""
        return self.read and (self.max_age is None or age <= self.max_age)


def _directives(lines: Sequence[str]) -> dict[str, list[str]]:
    """Directive names (lower-cased) and their values (unquoted), in order, of every line."""
    found: dict[str, list[str]] = {}
    for line in lines:
        for match in _DIRECTIVE.finditer(line):
            value = match[2] or ""
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            found.setdefault(match[1].lower(), []).append(value)
    return found


def _max_age(values: list[str] | None) -> int | None:
    """``max-age``'s seconds; 0 (no read) when it is invalid or given more than once."""
    if values is None:
        return None
    if len(values) != 1 or not _DELTA_SECONDS.fullmatch(values[0]):
        return 0
    return int(values[0])


def request_cache_control(headers: Mapping[str, str],
                          multi_value_headers: Mapping[str, Sequence[str]] | None = None
                          ) -> CacheControl:
    """A request's :class:`CacheControl`, from every line of its headers: API Gateway keeps
    only the last line of a repeated header in ``headers``, every line (names as sent) in
    ``multi_value_headers`` (None under ``chalice local``).
    """
    lines: dict[str, list[str]] = {"cache-control": [], "pragma": []}
    for key, values in (multi_value_headers or {}).items():  # every line: the multi-value ones,
        if key.lower() in lines:
            lines[key.lower()].extend(values or ())
    for name, found in lines.items():  # else the single header's
        single = headers.get(name)
        if not found and single is not None:
            found.append(single)
    if not lines["cache-control"] and not lines["pragma"]:
        return NO_DIRECTIVES  # most requests say nothing: nothing to parse
    return CacheControl.from_lines(lines["cache-control"], lines["pragma"])


BYPASSED = CacheControl(read=False, write=False)
NO_DIRECTIVES = CacheControl()
"""A request that says nothing: read and write, any age."""


class _Flight:
    """One endpoint call that concurrent requests for the same key wait for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: InvokeResult | None = None


class PredictionCache:
    """Both tiers (each may be None), the TTL and the single flight; requests use it through
    :meth:`request`.

    Args:
        flight_wait: the longest a request waits for a concurrent call of the same key.
        reserve: the budget a request keeps to call the endpoint itself after waiting (an
            endpoint attempt's connect and read timeouts).
    """

    def __init__(self, memory: MemoryTier | None, table: TableTier | None,
                 ttl_seconds: float = 86_400, *, flight_wait: float = 5.0, reserve: float = 0.0,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.memory, self.table = memory, table
        self.ttl_seconds = ttl_seconds
        self.flight_wait, self.reserve = flight_wait, reserve
        self._clock, self._monotonic = clock, monotonic
        self._flights: dict[str, _Flight] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> PredictionCache:
        """The cache ``CACHE_*`` describe (either tier may be off)."""
        attempt = settings.endpoint_connect_timeout + settings.endpoint_read_timeout
        return cls(MemoryTier(settings.cache_memory_bytes) if settings.cache_memory_bytes
                   else None,
                   TableTier(settings.cache_table) if settings.cache_table else None,
                   settings.cache_ttl_seconds, flight_wait=attempt, reserve=attempt)

    @property
    def enabled(self) -> bool:
        """Whether either tier is on."""
        return self.memory is not None or self.table is not None

    def request(self, control: CacheControl = NO_DIRECTIVES, *, enabled: bool = True,
                scope: Mapping[str, Any] | None = None) -> CacheUse:
        """One request's use of the cache (``enabled=False``: a model whose answers must be
        fresh, a bypass); ``scope`` goes into every key it makes (the model's name)."""
        on = enabled and (self.memory is not None or self.table is not None)  # (self.enabled)
        control = control if on else BYPASSED
        return CacheUse(self, control, scope=dict(scope or {}),
                        active=control.read or control.write)

    def close(self) -> None:
        """Drop the table client's pooled connections."""
        if self.table is not None:
            self.table.close()

    def read(self, key: str, use: CacheUse) -> InvokeResult | None:
        """Memory, then the table (a table hit is promoted to memory); an answer older than
        the request's ``max-age`` is a miss."""
        found = self._from_memory(key, use)
        return found if found is not None else self._from_table(key, use)

    def recheck(self, key: str, use: CacheUse) -> InvokeResult | None:
        """The second look of a request that has just become a flight's leader: a flight of
        the same key may have landed between its :meth:`read` and its :meth:`join`.

        Memory when it is on (a leader keeps its answer there before its flight lands, so
        no second GetItem is needed), else the table, unless it already failed this request
        (asking a failing table twice doubles the load on it and the warnings).
        """
        if self.memory is not None:
            return self._from_memory(key, use)
        return None if use.errors else self._from_table(key, use)

    def _from_memory(self, key: str, use: CacheUse) -> InvokeResult | None:
        if self.memory is None:
            return None
        entry = self.memory.get(key)
        # an entry expiring at entry[1] was stored a TTL before it
        if entry is None or not use.control.accepts(self._clock() - (entry[1] - self.ttl_seconds)):
            return None
        use.tier = MEMORY
        return entry[0]

    def _from_table(self, key: str, use: CacheUse) -> InvokeResult | None:
        if self.table is None:
            return None
        try:
            entry = self.table.get(key)
        except Exception as error:  # a cache failure never fails the request
            use.failed("read", error)
            return None
        if entry is None or not use.control.accepts(self._clock() - (entry[1] - self.ttl_seconds)):
            return None
        if self.memory is not None:
            self.memory.put(key, entry[0], entry[1])
        use.tier = TABLE
        return entry[0]

    def join(self, key: str) -> tuple[_Flight, bool]:
        """The flight of ``key`` and whether this request leads it (makes the call)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = self._flights[key] = _Flight()
            return flight, True

    def land(self, key: str, flight: _Flight, result: InvokeResult | None) -> None:
        """End a flight: its waiters get ``result`` (None: they call the endpoint)."""
        flight.result = result
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.done.set()

    def wait(self, flight: _Flight, deadline: float | None) -> InvokeResult | None:
        """Wait for another request's call, leaving budget to make one's own."""
        timeout = self.flight_wait
        if deadline is not None:
            remaining = deadline - self._monotonic()
            room = remaining - self.reserve
            timeout = max(0.0, min(timeout, room if room > 0 else remaining))
        flight.done.wait(timeout)
        return flight.result

    def remember(self, key: str, result: InvokeResult) -> None:
        """Keep an answer in memory."""
        if self.memory is not None:
            self.memory.put(key, result, self._clock() + self.ttl_seconds)

    def store(self, key: str, result: InvokeResult, use: CacheUse,
              deadline: float | None) -> None:
        """Write an answer to the table: one PutItem, only when it fits the budget left."""
        if self.table is None:
            return
        if deadline is not None and deadline - self._monotonic() < PUT_SECONDS:
            use.write_skipped = True
            return
        try:
            if not self.table.put(key, result, self._clock() + self.ttl_seconds):
                use.skipped_too_large += 1
        except Exception as error:  # a cache failure never fails the request
            use.failed("write", error)


@dataclasses.dataclass
class CacheUse:
    """One request's use of the cache, and what it did (for the log, metrics, headers)."""

    cache: PredictionCache | None
    control: CacheControl = BYPASSED
    scope: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # in every lookup's key
    status: str = BYPASS
    """``hit`` (every lookup hit), ``miss`` (one did not) or ``bypass``."""
    tier: str | None = None
    lookup_ms: float = 0.0
    errors: int = 0
    skipped_too_large: int = 0
    write_skipped: bool = False  # too little of the request's budget was left for the table
    active: bool = False
    """Whether this request reads or writes the cache at all."""
    _lookups: int = dataclasses.field(default=0, repr=False)

    def failed(self, operation: str, error: Exception) -> None:
        """Log and count a failure of the table tier (its code or type, never its message)."""
        self.errors += 1
        code = aws.error_code(error)
        logger.warning("prediction cache %s failed: %s", operation,
                       code or type(error).__name__)

    def fetch(self, fields: Mapping[str, Any], body: bytes,
              compute: Callable[[], InvokeResult], deadline: float | None = None
              ) -> InvokeResult:
        """The cached answer for ``body`` and ``fields`` (``attempts`` 0: no endpoint call),
        else ``compute()``'s, stored unless the request says ``no-store``.

        ``compute`` raising (the endpoint's error) stores nothing and propagates.
        """
        if not self.active or self.cache is None:
            return compute()
        cache = self.cache
        started = time.perf_counter()
        key = cache_key(fields, body)
        found, flight = self._look_up(cache, key, deadline)
        self.lookup_ms += (time.perf_counter() - started) * 1000.0
        self._lookups += 1
        if self._lookups == 1 or found is None:  # one miss makes the request's a miss
            self.status = HIT if found is not None else MISS
        if found is not None:
            return dataclasses.replace(found, attempts=0)
        result = None
        try:
            result = compute()
            if self.control.write:
                cache.remember(key, result)
        finally:
            if flight is not None:  # release the waiters first, then the table write
                cache.land(key, flight, result)
        if self.control.write:
            cache.store(key, result, self, deadline)
        return result

    def peek(self, fields: Mapping[str, Any], body: bytes) -> InvokeResult | None:
        """The cached answer for ``body`` and ``fields`` (``attempts`` 0), else None, counted
        as :meth:`fetch` counts: for an answer made while it is delivered (a stream), which
        waits for no other request's call and is stored afterwards with :meth:`keep`."""
        if not self.active or self.cache is None:
            return None
        started = time.perf_counter()
        found = self.cache.read(cache_key(fields, body), self) if self.control.read else None
        self.lookup_ms += (time.perf_counter() - started) * 1000.0
        self._lookups += 1
        if self._lookups == 1 or found is None:
            self.status = HIT if found is not None else MISS
        return None if found is None else dataclasses.replace(found, attempts=0)

    def keep(self, fields: Mapping[str, Any], body: bytes, result: InvokeResult,
             deadline: float | None = None) -> None:
        """Store the answer :meth:`peek` did not find (unless the request says no-store)."""
        if not self.active or self.cache is None or not self.control.write:
            return
        key = cache_key(fields, body)
        self.cache.remember(key, result)
        self.cache.store(key, result, self, deadline)

    def _look_up(self, cache: PredictionCache, key: str, deadline: float | None
                 ) -> tuple[InvokeResult | None, _Flight | None]:
        """A cached answer, else the flight this request leads (None: it leads none)."""
        if not self.control.read:
            return None, None
        found = cache.read(key, self)
        if found is not None:
            return found, None
        flight, leader = cache.join(key)
        if not leader:
            found = cache.wait(flight, deadline)
            if found is not None:
                self.tier = FLIGHT
            return found, None
        found = cache.recheck(key, self)  # reading and joining are two steps: look again
        if found is not None:
            cache.land(key, flight, found)  # whoever joined meanwhile gets it too
            return found, None
        return None, flight
