"""``sagegate capture``: read capture records back and flatten them, as a Model Monitor
record preprocessor does.

``sagegate capture SOURCE`` reads every ``.jsonl`` under a directory or an
``s3://bucket/prefix`` and writes one flat row per record (JSON Lines or CSV): the event
metadata, the top-k and the probabilities as ``prediction0..N``. ``--preprocess-handler
file.py`` runs a Model Monitor-style ``preprocess_handler(inference_record)`` from that file,
unchanged, instead (its dict is the row; ``[]`` drops the record), then its
``postprocess_handler()`` if it has one.

A developer tool, not part of the Lambda package: the function only writes captures
(:mod:`chalicelib.capture`).
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
from chalicelib.config import S3_SCHEME, split_s3_uri
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
    if source.startswith(S3_SCHEME):
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

    bucket, prefix = split_s3_uri(source)
    folder = f"{prefix}/" if prefix else ""  # the prefix is a folder, as the S3 sink writes it
    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
        for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
            if not item["Key"].endswith(".jsonl"):
                continue
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode("utf-8")
            for number, line in enumerate(body.splitlines(), 1):
                if line.strip():
                    yield f"{S3_SCHEME}{bucket}/{item['Key']}:{number}", line


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


class HandlerError(ValueError):
    """A record preprocessor file is missing, unimportable or lacks ``preprocess_handler``."""


def load_handler(path: str | Path) -> ModuleType:
    """Import a Model Monitor record preprocessor file (it needs ``preprocess_handler``).

    Raises:
        HandlerError: the file is missing, fails to import, or has no preprocess_handler.
    """
    if not Path(path).is_file():
        raise HandlerError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location("capture_preprocessor", path)
    if spec is None or spec.loader is None:
        raise HandlerError(f"{path}: cannot be imported (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: report it, do not crash on it
        raise HandlerError(f"{path}: importing it failed: {type(error).__name__}: "
                           f"{error}") from None
    if not callable(getattr(module, "preprocess_handler", None)):
        raise HandlerError(f"{path}: has no preprocess_handler(inference_record)")
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


class SourceError(Exception):
    """The capture source cannot be read (missing, or S3 refused or unreachable)."""


def check_source(source: str) -> None:
    """Refuses a local source that does not exist, or an S3 URI without a bucket (S3 itself is
    checked when read).

    Raises:
        SourceError: naming the path.
        ValueError: ``s3://`` names no bucket.
    """
    if source.startswith(S3_SCHEME):
        split_s3_uri(source)
    elif not Path(source).exists():
        raise SourceError(f"{source}: no such file or directory")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Read the command line (argparse exits 2 with a usage message on bad arguments)."""
    parser = argparse.ArgumentParser(
        prog="sagegate capture",
        description="Flatten sagegate / SageMaker Model Monitor capture records.")
    parser.add_argument("source", help="a capture directory, a .jsonl file or s3://bucket/prefix")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    parser.add_argument("--output", "-o", help="file to write (default: standard output)")
    parser.add_argument("--top-k", type=_positive_int, default=5,
                        help="top classes per row (default 5)")
    parser.add_argument("--labels", default="imagenet1k",
                        help="label file in chalicelib/labels ('' for indices)")
    parser.add_argument("--preprocess-handler", metavar="FILE",
                        help="a Model Monitor record preprocessor file to apply instead")
    return parser.parse_args(argv)


def _row_maker(args: argparse.Namespace) -> tuple[Callable[[InferenceRecord], Any],
                                                   ModuleType | None]:
    if args.preprocess_handler:
        handler = load_handler(args.preprocess_handler)
        return handler.preprocess_handler, handler
    try:
        labels = predictions.load_labels(args.labels)
    except SagegateError:
        raise ValueError(f"--labels {args.labels!r}: no such non-empty label file in "
                         "chalicelib/labels ('' for class indices)") from None
    return (lambda record: flatten(record, args.top_k, labels)), None


def _convert(args: argparse.Namespace) -> int:
    """Reads, flattens and writes; returns the number of rows written."""
    check_source(args.source)
    make_row, handler = _row_maker(args)
    out = open(args.output, "w", newline="") if args.output else sys.stdout  # noqa: SIM115
    try:
        count = write_rows(out, rows(_read_checked(args.source), make_row), args.format)
    finally:
        if out is not sys.stdout:
            out.close()
    if handler is not None and callable(getattr(handler, "postprocess_handler", None)):
        handler.postprocess_handler()
    return count


def _read_checked(source: str) -> Iterator[InferenceRecord]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield from read_records(source)
    except (BotoCoreError, ClientError) as error:
        raise SourceError(f"{source}: cannot read from S3: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SourceError(f"{source}: cannot read: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """``sagegate capture SOURCE [--format csv|jsonl] [--output FILE] ...``.

    Returns:
        0 on success (``N record(s) from SOURCE`` on stderr); 2 when the arguments, the
        source, the labels, the handler file or a record is unusable; 1 when the source cannot
        be read or the handler raises. Every failure is one ``error: ...`` line on stderr.
    """
    args = parse_args(argv)
    try:
        count = _convert(args)
    except (CaptureFormatError, HandlerError, SagegateError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1 if args.source.startswith(S3_SCHEME) else 2
    except OSError as error:  # the output file
        print(f"error: cannot write {args.output or 'the output'}: {error.strerror}",
              file=sys.stderr)
        return 1
    except Exception as error:  # raised by the user's preprocess/postprocess handler
        print(f"error: the handler raised {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"{count} record(s) from {args.source}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
