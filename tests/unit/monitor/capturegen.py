"""Realistic capture windows for the monitor's tests, in the record format sagegate writes.

A record is what ``chalicelib.capture`` writes (``captureData`` with ``endpointInput`` and
``endpointOutput``, ``eventMetadata`` with ``eventId``, ``inferenceTime``, ``inferenceId``,
``eventVersion`` "0"), one per line, in ``<endpoint>/<variant>/yyyy/mm/dd/hh/`` files named
``mm-ss-mmm-<eventId>.jsonl`` (one file per flushed batch: here, one per 500 records).
"""
from __future__ import annotations

import datetime
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
