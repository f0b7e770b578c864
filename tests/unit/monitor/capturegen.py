"""Realistic capture windows for the monitor's tests, in the record format sagegate writes.

A record is what ``chalicelib.capture`` writes (``captureData`` with ``endpointInput`` and
``endpointOutput``, ``eventMetadata`` with ``eventId``, ``inferenceTime``, ``inferenceId``,
``eventVersion`` "0"), one per line, in ``<endpoint>/<variant>/yyyy/mm/dd/hh/`` files named
``mm-ss-mmm-<eventId>.jsonl`` (one file per flushed batch: here, one per 500 records).
"""
from __future__ import annotations

import dataclasses
import datetime
import gzip
import json
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOUR = datetime.datetime(2026, 11, 25, 9, tzinfo=datetime.UTC)
Features = Callable[[random.Random, int], list[float | None]]


def iris_like(shift: dict[int, float] | None = None) -> Features:
    """Four fractional features (iris-like scales); ``shift`` adds to some columns' means.
    A None in the returned list is a missing value."""
    means, scales = (5.8, 3.0, 3.8, 1.2), (0.8, 0.4, 1.7, 0.7)

    def features(rng: random.Random, index: int) -> list[float | None]:
        return [round(rng.gauss(m + (shift or {}).get(i, 0.0), s), 3)
                for i, (m, s) in enumerate(zip(means, scales, strict=True))]

    return features


def training_csv(path: Path, rows: int, header: bool, seed: int = 1) -> Path:
    """A training CSV: the label first (as Model Monitor's examples lay it out), then the four
    features; with or without a header line."""
    rng = random.Random(seed)
    features = iris_like()
    lines = ["label,sepal_length,sepal_width,petal_length,petal_width"] if header else []
    for index in range(rows):
        values = features(rng, index)
        lines.append(",".join([f"{rng.random():.4f}", *(str(v) for v in values)]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def record(features: list[float | None], score: float, when: datetime.datetime,
           metadata: dict[str, Any] | None = None, encoding: str = "CSV") -> dict[str, Any]:
    """One capture record, as sagegate's capture writes it."""
    if encoding == "CSV":
        sent = ",".join("" if v is None else str(v) for v in features)
        received, types = f"{score:.4f}", ("text/csv", "text/csv; charset=utf-8")
    else:
        sent = json.dumps({"instances": [features]})
        answer = [round(score, 4), round(1 - score, 4)]
        received, types = json.dumps({"predictions": [answer]}), ("application/json",) * 2
    event_id = str(uuid.uuid4())
    meta = {"eventId": event_id, "inferenceTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "inferenceId": f"req-{event_id[:8]}", **(metadata or {})}
    return {"captureData": {
        "endpointInput": {"observedContentType": types[0], "mode": "INPUT", "data": sent,
                          "encoding": encoding},
        "endpointOutput": {"observedContentType": types[1], "mode": "OUTPUT",
                           "data": received, "encoding": encoding}},
        "eventMetadata": meta, "eventVersion": "0"}


def write_window(root: Path, records: int, features: Features | None = None,
                 hour: datetime.datetime = HOUR, seed: int = 2, variant: str = "AllTraffic",
                 missing: tuple[int, int] | None = None, per_file: int = 500,
                 metadata: Callable[[int], dict[str, Any] | None] | None = None,
                 encoding: str = "CSV") -> Path:
    """Write one hour of captures under ``root/<variant>/yyyy/mm/dd/hh/``; returns ``root``.

    Args:
        missing: ``(column, every)``: that input column is empty in one record of ``every``.
        metadata: extra ``eventMetadata`` of record ``i`` (shadow, cache-hit marks).
    """
    rng = random.Random(seed)
    make = features or iris_like()
    folder = root / variant / f"{hour:%Y/%m/%d/%H}"
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for index in range(records):
        values = make(rng, index)
        if missing and index % missing[1] == 0:
            values[missing[0]] = None
        when = hour + datetime.timedelta(seconds=index * 3600 / max(records, 1))
        extra = metadata(index) if metadata else None
        lines.append(json.dumps(record(values, rng.random(), when, extra, encoding),
                                separators=(",", ":")))
        if len(lines) == per_file or index == records - 1:
            stamp = f"{when:%M-%S}-{when.microsecond // 1000:03d}-{uuid.uuid4()}"
            (folder / f"{stamp}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
            lines = []
    return root


@dataclasses.dataclass(frozen=True)
class FirehoseObject:
    """One object as a Firehose stream with dynamic partitioning delivers it."""

    key: str
    """``<prefix>/<endpoint>/<variant>/yyyy/mm/dd/hh/<stream>-1-<time>-<id>.jsonl.gz``: the
    folder is the arrival hour of the object's oldest record."""
    body: bytes
    """The records, one JSON line each, GZIP-compressed."""
    last_modified: datetime.datetime
    """When the buffer was flushed (S3's ``LastModified``)."""
    records: int


def firehose_window(prefix: str, endpoint: str, records: int,
                    hour: datetime.datetime = HOUR, seed: int = 3,
                    features: Features | None = None, variant: str = "AllTraffic",
                    buffer_seconds: int = 60, buffer_records: int = 400,
                    edge_seconds: int = 90) -> list[FirehoseObject]:
    """An hour of records (inferenceTime spread over ``hour``, and ``edge_seconds`` on each
    side of it) as a Firehose stream delivers them: each arrives a few seconds after its
    inference; a buffer opens with a record's arrival and is flushed ``buffer_seconds`` later
    or at ``buffer_records`` records, into the folder of the hour it opened in. So records of
    the hour's first seconds sit in the previous hour's folder, and records of its last
    seconds in the next hour's."""
    rng = random.Random(seed)
    make = features or iris_like()
    first = hour - datetime.timedelta(seconds=edge_seconds)
    span = 3600 + 2 * edge_seconds
    lines: list[tuple[datetime.datetime, bytes]] = []
    for index in range(records):
        when = first + datetime.timedelta(seconds=index * span / max(records, 1))
        when = when.replace(microsecond=0)
        arrival = when + datetime.timedelta(seconds=rng.uniform(0.2, 8.0))
        line = json.dumps(record(make(rng, index), rng.random(), when),
                          separators=(",", ":")) + "\n"
        lines.append((arrival, line.encode()))
    lines.sort(key=lambda item: item[0])
    objects: list[FirehoseObject] = []
    batch: list[bytes] = []
    opened = lines[0][0] if lines else first

    def flush(closed: datetime.datetime) -> None:
        stamp = f"{opened:%Y-%m-%d-%H-%M-%S}"
        key = (f"{prefix}/{endpoint}/{variant}/{opened:%Y/%m/%d/%H}/sagegate-dev-captures-1-"
               f"{stamp}-{uuid.UUID(int=rng.getrandbits(128))}.jsonl.gz")
        objects.append(FirehoseObject(key, gzip.compress(b"".join(batch), mtime=0),
                                      closed + datetime.timedelta(seconds=2), len(batch)))

    for arrival, line in lines:
        if batch and (arrival - opened >= datetime.timedelta(seconds=buffer_seconds)
                      or len(batch) >= buffer_records):
            flush(opened + datetime.timedelta(seconds=buffer_seconds))
            batch = []
        if not batch:
            opened = arrival
        batch.append(line)
    if batch:
        flush(opened + datetime.timedelta(seconds=buffer_seconds))
    return objects


def in_hour(objects: list[FirehoseObject], hour: datetime.datetime = HOUR) -> int:
    """How many of the objects' records have their inferenceTime in ``hour``."""
    count = 0
    for item in objects:
        for line in gzip.decompress(item.body).splitlines():
            when = datetime.datetime.fromisoformat(json.loads(line)["eventMetadata"][
                "inferenceTime"])
            count += hour <= when < hour + datetime.timedelta(hours=1)
    return count
