"""The two tiers: an in-process LRU bounded in bytes, a DynamoDB table every container shares."""
from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib import awsclients
from chalicelib.calls import InvokeResult
from chalicelib.core import aws
from chalicelib.core.clients import DynamoTable

logger = logging.getLogger("sagegate.cache")  # a child of Powertools' JSON logger

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
        """The keys, least recently used first."""
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
    """The DynamoDB item of an answer (body zlib-compressed), or None when it is over
    DynamoDB's 400 KB item limit."""
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
    ``expires_at``. Reads are eventually consistent GetItems; a write is one PutItem.

    Args:
        table: the table's name.
        client: a boto3 DynamoDB client; built on first use when None (short timeouts, one
            attempt; boto3 honours ``AWS_ENDPOINT_URL_DYNAMODB``).
    """

    def __init__(self, table: str, client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(table, _client, client, clock)

    def get(self, key: str) -> tuple[InvokeResult, float] | None:
        """The answer under ``key`` and its expiry, or None (absent or expired).

        Raises:
            CorruptItemError, botocore's errors.
        """
        answer = self.client.get_item(TableName=self.table, Key={"key": {"S": key}},
                                      ConsistentRead=False)
        item = answer.get("Item")
        return None if item is None else decode_item(item, key, self._clock())

    def put(self, key: str, result: InvokeResult, expires_at: float) -> bool:
        """Store an answer; False (nothing sent) when it is over the item limit.

        Raises:
            botocore's errors.
        """
        item = encode_item(key, result, expires_at)
        if item is None:
            return False
        self.client.put_item(TableName=self.table, Item=item)
        return True


def _client() -> Any:
    return awsclients.build("dynamodb", aws.CACHE_TABLE)
