"""Read capture records back and flatten them, as a Model Monitor record preprocessor does.

``python -m chalicelib.capture SOURCE`` reads every ``.jsonl`` under a directory or an
``s3://bucket/prefix`` and writes one flat row per record (JSON Lines or CSV): the event
metadata, the top-k and the probabilities as ``prediction0..N``. ``--preprocess-handler
file.py`` runs a Model Monitor-style ``preprocess_handler(inference_record)`` from that file,
unchanged, instead (its dict is the row; ``[]`` drops the record), then its
``postprocess_handler()`` if it has one.
"""
from __future__ import annotations

import argparse
import base64
import csv
import importlib.util
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from chalicelib import predictions
from chalicelib.errors import SagegateError


class CaptureFormatError(ValueError):
    """A line is not a Model Monitor capture record."""


class CapturedData:
    """One side of ``captureData``, with the attribute names Model Monitor's handlers use."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.data: str = raw["data"]
        self.encoding: str = raw["encoding"]
        self.mode: str = raw.get("mode", "")
        self.observed_content_type: str = raw.get("observedContentType", "")
        self.observedContentType = self.observed_content_type

    def decoded(self) -> bytes:
        """The body as bytes (base64 undone)."""
        if self.encoding == "BASE64":
            return base64.b64decode(self.data)
        return self.data.encode("utf-8")


class EventMetadata:
    """``eventMetadata``, under both its wire and its Python names."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.event_id: str = raw["eventId"]
        self.inference_time: str = raw["inferenceTime"]
        self.inference_id: str | None = raw.get("inferenceId")
        self.custom_attributes: list[str] = list(raw.get("customAttributes") or [])
        self.eventId, self.inferenceTime = self.event_id, self.inference_time
        self.inferenceId, self.customAttributes = self.inference_id, self.custom_attributes


class InferenceRecord:
    """What a Model Monitor ``preprocess_handler(inference_record)`` receives."""

    def __init__(self, raw: dict[str, Any], source: str = "") -> None:
        try:
            capture = raw["captureData"]
            self.event_metadata = EventMetadata(raw["eventMetadata"])
            self.event_version: str = raw["eventVersion"]
            self.endpoint_input = (CapturedData(capture["endpointInput"])
                                   if "endpointInput" in capture else None)
            self.endpoint_output = (CapturedData(capture["endpointOutput"])
                                    if "endpointOutput" in capture else None)
        except (KeyError, TypeError) as error:
            raise CaptureFormatError(f"{source}: not a capture record ({error})") from None
        self.source = source


def read_lines(source: str) -> Iterator[tuple[str, str]]:
    """``(where, line)`` for every line of every ``.jsonl`` under a directory or S3 prefix."""
    if source.startswith("s3://"):
        yield from _s3_lines(source)
        return
    root = Path(source)
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    for path in files:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    yield f"{path}:{number}", line


def _s3_lines(source: str) -> Iterator[tuple[str, str]]:
    import boto3

    bucket, _, prefix = source[len("s3://"):].partition("/")
    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
            if not item["Key"].endswith(".jsonl"):
                continue
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode("utf-8")
            for number, line in enumerate(body.splitlines(), 1):
                if line.strip():
                    yield f"s3://{bucket}/{item['Key']}:{number}", line


def read_records(source: str) -> Iterator[InferenceRecord]:
    """Every capture record under ``source``, parsed and checked."""
    for where, line in read_lines(source):
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise CaptureFormatError(f"{where}: invalid JSON ({error.msg})") from None
        if not isinstance(raw, dict):
            raise CaptureFormatError(f"{where}: not a JSON object")
        yield InferenceRecord(raw, where)


def flatten(record: InferenceRecord, k: int, labels: Sequence[str] | None) -> dict[str, Any]:
    """The default row: metadata, top-k and ``prediction0..N``."""
    meta = record.event_metadata
    row: dict[str, Any] = {"eventId": meta.event_id, "inferenceTime": meta.inference_time,
                           "inferenceId": meta.inference_id or ""}
    if record.endpoint_input is not None:
        row["inputContentType"] = record.endpoint_input.observed_content_type
        row["inputBytes"] = len(record.endpoint_input.decoded())
    if record.endpoint_output is not None:
        probabilities = predictions.parse_probabilities(record.endpoint_output.decoded(),
                                                        len(labels) if labels else None)
        for rank, p in enumerate(predictions.label_predictions(
                probabilities, predictions.top_k(probabilities, k), labels), 1):
            row[f"top{rank}_index"], row[f"top{rank}_label"] = p.index, p.label
            row[f"top{rank}_probability"] = p.probability
        row.update({f"prediction{i}": float(v) for i, v in enumerate(probabilities)})
    return row


def load_handler(path: str | Path) -> ModuleType:
    """Import a Model Monitor record preprocessor file (it needs ``preprocess_handler``)."""
    spec = importlib.util.spec_from_file_location("capture_preprocessor", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "preprocess_handler", None)):
        raise ValueError(f"{path}: has no preprocess_handler(inference_record)")
    return module


def rows(records: Iterable[InferenceRecord],
         make_row: Callable[[InferenceRecord], Any]) -> Iterator[dict[str, Any]]:
    """Apply ``make_row``; ``[]``/``None``/``{}`` drops a record (Model Monitor's contract)."""
    for record in records:
        row = make_row(record)
        if not row:
            continue
        if not isinstance(row, dict):
            raise ValueError(f"{record.source}: the handler returned {type(row).__name__}, "
                             "not a dict")
        yield row


def write_rows(out: IO[str], items: Iterable[dict[str, Any]], fmt: str) -> int:
    """Write rows as JSON Lines or CSV (columns: the first row's, then any new ones)."""
    if fmt == "jsonl":
        count = 0
        for row in items:
            out.write(json.dumps(row) + "\n")
            count += 1
        return count
    collected = list(items)
    columns: dict[str, None] = {}
    for row in collected:
        columns.update(dict.fromkeys(row))
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(collected)
    return len(collected)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m chalicelib.capture SOURCE [--format csv|jsonl] [--output FILE] ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m chalicelib.capture",
        description="Flatten sagegate / SageMaker Model Monitor capture records.")
    parser.add_argument("source", help="a capture directory, a .jsonl file or s3://bucket/prefix")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    parser.add_argument("--output", "-o", help="file to write (default: standard output)")
    parser.add_argument("--top-k", type=int, default=5, help="top classes per row (default 5)")
    parser.add_argument("--labels", default="imagenet1k",
                        help="label file in chalicelib/labels ('' for indices)")
    parser.add_argument("--preprocess-handler", metavar="FILE",
                        help="a Model Monitor record preprocessor file to apply instead")
    args = parser.parse_args(argv)
    if args.preprocess_handler:
        handler = load_handler(args.preprocess_handler)
        make_row: Callable[[InferenceRecord], Any] = handler.preprocess_handler
    else:
        labels = predictions.load_labels(args.labels)
        make_row = lambda record: flatten(record, args.top_k, labels)  # noqa: E731
    out = open(args.output, "w", newline="") if args.output else sys.stdout  # noqa: SIM115
    try:
        count = write_rows(out, rows(read_records(args.source), make_row), args.format)
    except (CaptureFormatError, ValueError, SagegateError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        if out is not sys.stdout:
            out.close()
    if args.preprocess_handler and callable(getattr(handler, "postprocess_handler", None)):
        handler.postprocess_handler()
    print(f"{count} record(s) from {args.source}", file=sys.stderr)
    return 0
