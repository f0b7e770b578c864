"""A window's capture objects in S3: listed by hour folder, then fetched ahead of the check.

An endpoint's captures are ``<capture prefix>/<endpoint>/<variant>/yyyy/mm/dd/hh/`` ``*.jsonl``
(the S3 sink's) or ``*.jsonl.gz`` (Firehose's), or the same without the variant level. The
window's hour folders and one on each side are listed
(:func:`chalicelib.monitor.capture_format.listing_span`), the objects the window reads kept, then
fetched :data:`FETCHERS` at a time, at most :data:`PREFETCH_BYTES` (as stored) held ahead of the
check, handed over in key order, a GZIP object decompressed as read.
"""
from __future__ import annotations

import dataclasses
import datetime
import io
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from chalicelib.core.aws import S3Uri
from chalicelib.monitor import capture_format, windows

FETCHERS = 10
"""Objects fetched at once (botocore's default pool size): each ``GetObject`` is a round trip of
tens of milliseconds, and the S3 sink writes one small object per request."""
PREFETCH_BYTES = 64 * 1024 * 1024
_YEAR = re.compile(r"^\d{4}\Z")


@dataclasses.dataclass
class Reading:
    """How far :func:`capture_files` got: the files read, and those left unread because ``stop``
    said so."""

    files_read: int = 0
    files_left: int = 0


def never() -> bool:
    return False


def capture_files(s3: Any, captures: S3Uri, endpoint: str, start: datetime.datetime,
                  end: datetime.datetime, stop: Callable[[], bool] = never,
                  reading: Reading | None = None) -> Iterator[tuple[str, Iterable[bytes]]]:
    """Each capture file of the window's hours in key order, as (URI, lines); an object larger
    than a fetcher's share of :data:`PREFETCH_BYTES` is streamed in its turn.

    Args:
        captures: the capture prefix.
        stop: asked before each file; True ends the reading.
        reading: counts the files read and, when ``stop`` ended the reading, those left.
    """
    yield from fetch_objects(s3, captures, list(_capture_keys(s3, captures, endpoint, start,
                                                                end)), stop, reading)


def fetch_objects(s3: Any, captures: S3Uri, keys: Sequence[tuple[str, int]],
                  stop: Callable[[], bool] = never,
                  reading: Reading | None = None) -> Iterator[tuple[str, Iterable[bytes]]]:
    """Each of ``keys`` (key, size) in order as (URI, lines), fetched as :func:`capture_files`
    does; ``stop`` and ``reading`` as there."""
    reading = reading if reading is not None else Reading()
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
            lines: Iterable[bytes]
            if future is None:
                body = s3.get_object(Bucket=captures.bucket, Key=key)["Body"]
                lines = capture_format.gzip_lines(body, str(captures.join(key))) \
                    if capture_format.is_gzip(key) \
                    else capture_format.plain_lines(body, str(captures.join(key)))
            else:
                data = future.result()
                lines = capture_format.gzip_lines(io.BytesIO(data), str(captures.join(key))) \
                    if capture_format.is_gzip(key) else data.splitlines()
                ahead -= size
            reading.files_read += 1
            yield str(captures.join(key)), lines
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _fetch(s3: Any, bucket: str, key: str) -> bytes:
    data: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def _capture_keys(s3: Any, captures: S3Uri, endpoint: str, start: datetime.datetime,
                  end: datetime.datetime) -> Iterator[tuple[str, int]]:
    """(key, size) of each capture object the window reads, variant by variant, hour by hour."""
    paginator = s3.get_paginator("list_objects_v2")
    for variant in variant_folders(s3, captures, endpoint):
        for hour in windows.hours(*capture_format.listing_span(start, end)):
            prefix = f"{variant}{windows.hour_folder(hour)}/"
            for page in paginator.paginate(Bucket=captures.bucket, Prefix=prefix):
                for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
                    if capture_format.wanted(item["Key"], hour, start, end,
                                             item.get("LastModified")):
                        yield item["Key"], int(item.get("Size", 0))


def variant_folders(s3: Any, captures: S3Uri, endpoint: str) -> list[str]:
    """The endpoint's variant folders, or its own folder when it has no variant level (year
    folders directly under it)."""
    root = captures.folder(endpoint)
    variants = _children(s3, captures.bucket, root)
    if any(_YEAR.match(v.rstrip("/").rsplit("/", 1)[-1]) for v in variants):
        return [root]  # the endpoint's folder has no variant level
    return variants


def _children(s3: Any, bucket: str, folder: str) -> list[str]:
    children: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder,
                                                              Delimiter="/"):
        children.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
    return sorted(children)
