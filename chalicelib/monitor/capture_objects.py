"""A window's capture objects in S3: listed by hour folder, then fetched ahead of the check.

The captures of an endpoint are ``<capture prefix>/<endpoint>/<variant>/yyyy/mm/dd/hh/*.jsonl``
(or without the variant level). The window's hour folders alone are listed, one listing per
variant and hour; the objects are then fetched :data:`FETCHERS` at a time, with at most
:data:`PREFETCH_BYTES` of them held ahead of the check, and handed over in key order.
"""
from __future__ import annotations

import dataclasses
import datetime
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from chalicelib.monitor import windows
from chalicelib.monitor.deployed_settings import S3Location

FETCHERS = 10
"""Capture objects fetched at once (botocore's default connection pool size): each
``GetObject`` is a round trip of tens of milliseconds, and the S3 sink writes one small
object per request."""
PREFETCH_BYTES = 64 * 1024 * 1024
"""At most this much of objects fetched ahead of the check; a larger object is streamed."""
_YEAR = re.compile(r"^\d{4}\Z")


@dataclasses.dataclass
class Reading:
    """How far :func:`capture_files` got: the files read, and those listed but left unread
    because ``stop`` said so."""

    files_read: int = 0
    files_left: int = 0


def never() -> bool:
    """A ``stop`` that never stops the reading (no time limit)."""
    return False


def capture_files(s3: Any, captures: S3Location, endpoint: str, start: datetime.datetime,
                  end: datetime.datetime, stop: Callable[[], bool] = never,
                  reading: Reading | None = None) -> Iterator[tuple[str, Iterable[bytes]]]:
    """Each capture file of the window's hours, in key order, as (its URI, its lines).

    An object larger than a fetcher's share of :data:`PREFETCH_BYTES` is not held ahead: it
    is streamed when its turn comes.

    Args:
        s3: a boto3 S3 client.
        captures: the capture prefix.
        endpoint: the endpoint whose folder is read.
        start: the window's start.
        end: the window's end (excluded).
        stop: asked before each file; True ends the reading.
        reading: counts the files read and, when ``stop`` ended the reading, those left.
    """
    reading = reading if reading is not None else Reading()
    keys = list(_capture_keys(s3, captures, endpoint, start, end))
    large = PREFETCH_BYTES // FETCHERS
    pool = ThreadPoolExecutor(FETCHERS, thread_name_prefix="capture-fetch")
    pending: deque[tuple[str, int, Future[bytes] | None]] = deque()
    ahead = listed = 0
    try:
        while listed < len(keys) or pending:
            while listed < len(keys) and len(pending) < 2 * FETCHERS:
                key, size = keys[listed]
                if size > large:
                    pending.append((key, size, None))
                elif ahead + size <= PREFETCH_BYTES:
                    pending.append((key, size, pool.submit(_fetch, s3, captures.bucket, key)))
                    ahead += size
                else:
                    break
                listed += 1
            if stop():
                reading.files_left = len(keys) - reading.files_read
                return
            key, size, future = pending.popleft()
            if future is None:
                lines: Iterable[bytes] = s3.get_object(Bucket=captures.bucket,
                                                       Key=key)["Body"].iter_lines()
            else:
                lines = future.result().splitlines()
                ahead -= size
            reading.files_read += 1
            yield captures.object_uri(key), lines
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _fetch(s3: Any, bucket: str, key: str) -> bytes:
    data: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def _capture_keys(s3: Any, captures: S3Location, endpoint: str, start: datetime.datetime,
                  end: datetime.datetime) -> Iterator[tuple[str, int]]:
    """(key, size) of each ``.jsonl`` object of the window's hours, variant by variant."""
    root = captures.folder(endpoint)
    variants = _children(s3, captures.bucket, root)
    if any(_YEAR.match(v.rstrip("/").rsplit("/", 1)[-1]) for v in variants):
        variants = [root]  # the endpoint's folder has no variant level
    paginator = s3.get_paginator("list_objects_v2")
    for variant in variants:
        for hour in windows.hours(start, end):
            prefix = f"{variant}{windows.hour_folder(hour)}/"
            for page in paginator.paginate(Bucket=captures.bucket, Prefix=prefix):
                for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
                    if item["Key"].endswith(".jsonl"):
                        yield item["Key"], int(item.get("Size", 0))


def _children(s3: Any, bucket: str, folder: str) -> list[str]:
    children: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder,
                                                              Delimiter="/"):
        children.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
    return sorted(children)
