"""Where ``sagegate monitor`` reads: training datasets, and capture files of a window from a
local folder or an ``s3://`` prefix (streamed, one file at a time)."""
from __future__ import annotations

import csv
import datetime
import json
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

from chalicelib.monitor import windows
from chalicelib.monitor.records import RecordReader, flatten_json

S3_SCHEME = "s3://"
_YEAR = re.compile(r"^\d{4}\Z")
_SNIFF_BYTES = 64 * 1024
Files = Iterator[tuple[str, Iterable[str | bytes]]]
"""(name for messages, the file's lines) for each capture file, in order."""


class SourceError(ValueError):
    """A dataset or capture source cannot be read; the message says which and why."""


def is_capture_source(source: str) -> bool:
    """Whether a dataset argument is a capture folder or prefix (not a dataset file)."""
    return source.startswith(S3_SCHEME) or Path(source).is_dir()


def dataset_rows(path: str, header: bool | None) -> Iterator[dict[str, Any]]:
    """The rows of a CSV (header detected when ``header`` is None) or JSON Lines file."""
    file = Path(path)
    if not file.is_file():
        raise SourceError(f"{path}: no such file")
    if file.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return _json_lines(file)
    return _csv_rows(file, header)


def _json_lines(file: Path) -> Iterator[dict[str, Any]]:
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
            except ValueError:
                raise SourceError(f"{file}:{number}: not JSON") from None
            if isinstance(document, dict) and "captureData" in document:
                yield from RecordReader().rows(str(file), [line])
            else:
                yield flatten_json(document, "feature", {})


def _csv_rows(file: Path, header: bool | None) -> Iterator[dict[str, Any]]:
    with file.open(encoding="utf-8", newline="") as handle:
        if header is None:
            sample = handle.read(_SNIFF_BYTES)
            handle.seek(0)
            header = _has_header(sample)
        reader = csv.reader(handle)
        first = next(reader, None)
        if first is None:
            return
        names = first if header else [f"_c{i}" for i in range(len(first))]
        rows = reader if header else chain([first], reader)
        for values in rows:
            if values:
                if len(values) > len(names):
                    names = names + [f"_c{i}" for i in range(len(names), len(values))]
                yield dict(zip(names, values, strict=False))


def _has_header(sample: str) -> bool:
    try:
        return csv.Sniffer().has_header(sample)
    except csv.Error:
        return False


# An S3 window of up to this many hours lists each hour's prefix (one call an hour, the
# fewest for the hourly check); a longer one walks the year/month/day/hour prefixes instead.
PROBE_HOURS = 24


def capture_files(source: str, start: datetime.datetime | None = None,
                  end: datetime.datetime | None = None) -> Files:
    """The capture files under an endpoint's folder or prefix (``<variant>/yyyy/mm/dd/hh``),
    only those of the hours of ``[start, end)`` when a window is given: the hour folders are
    found by walking those that exist (:func:`chalicelib.monitor.windows.hour_folders`), so a
    window of years costs what its folders hold."""
    if source.startswith(S3_SCHEME):
        return _s3_files(source, start, end)
    return _local_files(Path(source), start, end)


def _local_files(root: Path, start: datetime.datetime | None,
                 end: datetime.datetime | None) -> Files:
    if not root.is_dir():
        raise SourceError(f"{root}: no such folder")
    if start is None or end is None:
        paths = sorted(root.rglob("*.jsonl"))
    else:
        variants = [root] if any(_YEAR.match(p.name) for p in root.iterdir()) else \
            sorted(p for p in root.iterdir() if p.is_dir())
        paths = [path for variant in variants
                 for folder in windows.hour_folders(_subfolders(variant), start, end)
                 for path in sorted((variant / folder).glob("*.jsonl"))]
    for path in paths:
        with path.open("rb") as lines:
            yield str(path), lines


def _subfolders(variant: Path) -> Callable[[str], list[str]]:
    def children(path: str) -> list[str]:
        try:
            return [entry.name for entry in (variant / path).iterdir() if entry.is_dir()]
        except OSError:
            return []

    return children


def _s3_files(source: str, start: datetime.datetime | None,
              end: datetime.datetime | None) -> Files:
    from botocore.exceptions import BotoCoreError, ClientError  # deferred: s3:// sources only

    try:
        yield from _s3_objects(source, start, end)
    except (BotoCoreError, ClientError) as error:  # one line, not a traceback
        raise SourceError(f"{source}: {error}") from None


def _s3_objects(source: str, start: datetime.datetime | None,
                end: datetime.datetime | None) -> Files:
    import boto3  # deferred: boto3 costs to import, paid only for an s3:// source

    bucket, _, prefix = source[len(S3_SCHEME):].partition("/")
    prefix = prefix.strip("/")
    folder = f"{prefix}/" if prefix else ""
    s3 = boto3.client("s3")
    if start is None or end is None:
        prefixes = [folder]
    else:
        variants = _s3_children(s3, bucket, folder)
        if any(_YEAR.match(v.rstrip("/").rsplit("/", 1)[-1]) for v in variants):
            variants = [folder]
        prefixes = [f"{v}{folder}/" for v in variants
                    for folder in _s3_hour_folders(s3, bucket, v, start, end)]
    for key_prefix in prefixes:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                  Prefix=key_prefix):
            for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
                if item["Key"].endswith(".jsonl"):
                    body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                    yield f"{S3_SCHEME}{bucket}/{item['Key']}", body.iter_lines()


def _s3_hour_folders(s3: Any, bucket: str, variant: str, start: datetime.datetime,
                     end: datetime.datetime) -> Iterable[str]:
    if end - start <= PROBE_HOURS * windows.HOUR:
        return [windows.hour_folder(hour) for hour in windows.hours(start, end)]

    def children(path: str) -> list[str]:
        folder = f"{variant}{path}/" if path else variant
        return [p[len(folder):].rstrip("/") for p in _s3_children(s3, bucket, folder)]

    return windows.hour_folders(children, start, end)


def _s3_children(s3: Any, bucket: str, folder: str) -> list[str]:
    children: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder,
                                                              Delimiter="/"):
        children.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
    return sorted(children)


def capture_rows(reader: RecordReader, files: Files) -> Iterator[dict[str, Any]]:
    """Every row of every file, in order, one file open at a time."""
    for name, lines in files:
        yield from reader.rows(name, lines)
