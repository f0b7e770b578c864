"""``sagegate capture``: read capture records back and flatten them, as a Model Monitor record
preprocessor does.

``sagegate capture SOURCE`` reads every ``.jsonl`` under a directory or ``s3://bucket/prefix``
and writes one flat row per record (JSON Lines or CSV): event metadata, endpoint, top-k and
``prediction0..N``, each endpoint's records named with its model's labels. ``--preprocess-handler
file.py`` runs a Model Monitor record preprocessor instead, unchanged and called as the analyzer
calls it, then its ``postprocess_handler()``, both in a worker process, never the command's:
records go to it in batches, its prints and logs to stderr
(:mod:`chalicelib.monitor.user_workers`); a handler that exits, or reads no record for
``--preprocess-timeout`` seconds, is one line, exit status 1. Cache hits are read too (their rows
say ``cacheHit``); ``--exclude-cache-hits`` leaves them out, as ``sagegate monitor`` does.

A developer tool, not part of the Lambda package: the function only writes captures.
"""
from __future__ import annotations

import argparse
import collections
import csv
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.aws import S3_SCHEME, S3Uri
from chalicelib.core.errors import SagegateError
from chalicelib.inference import predictions
from chalicelib.monitor import capture_format
from chalicelib.monitor.captured_data import CapturedData, is_cache_hit, is_shadow
from chalicelib.monitor.preprocessing import HandlerError, HandlerFailed, Preprocessor
from chalicelib.monitor.user_workers import (
    PREPROCESS_DEADLINE,
    UserWorkers,
    WorkerDied,
    preprocess_batch,
    preprocessor_postprocess,
)
from sagegate.captures.labels import EndpointLabels, endpoint_of, registry_labels
from sagegate.captures.rows import (
    CaptureFormatError,
    DefaultRows,
    Entry,
)


def _local_files(root: Path) -> Iterator[tuple[str, tuple[str, ...], Iterable[bytes]]]:
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    for path in files:
        with path.open("rb") as raw:  # lines bounded as the monitor's (MAX_LINE_BYTES)
            yield str(path), path.parts, capture_format.plain_lines(raw, str(path))


def _s3_files(source: str) -> Iterator[tuple[str, tuple[str, ...], Iterable[bytes]]]:
    uri = S3Uri.parse(source)
    bucket, folder = uri.bucket, uri.folder()  # a folder, as the S3 sink writes it
    s3 = awsclients.build("s3", aws.CLI)  # boto3 imported then: only for an s3:// source
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
        for item in sorted(page.get("Contents", []), key=lambda i: i["Key"]):
            if item["Key"].endswith(".jsonl"):
                name = f"{S3_SCHEME}{bucket}/{item['Key']}"
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"]
                yield (name, tuple(item["Key"].split("/")),
                       capture_format.plain_lines(body, name))


def read_entries(source: str) -> Iterator[Entry]:
    files = _s3_files(source) if source.startswith(S3_SCHEME) else _local_files(Path(source))
    for name, parts, lines in files:
        endpoint = endpoint_of(parts)
        for number, line in enumerate(lines, 1):
            if line.strip():
                where = f"{name}:{number}"
                yield Entry(where, endpoint, parse_record(line, where))


def parse_record(line: str | bytes, where: str) -> CapturedData:
    """One JSON line as the analyzer's record.

    Raises:
        CaptureFormatError: not JSON, or not a capture record (no ``captureData`` object).
    """
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as error:
        raise CaptureFormatError(f"{where}: invalid JSON ({error.msg})") from None
    except RecursionError:
        raise CaptureFormatError(f"{where}: JSON nested too deep for a capture record") \
            from None
    if not isinstance(raw, dict) or not isinstance(raw.get("captureData"), dict) or \
            not isinstance(raw.get("eventMetadata"), dict):
        raise CaptureFormatError(f"{where}: not a capture record (no captureData and "
                                 "eventMetadata objects)")
    return CapturedData(raw)


def read_records(source: str) -> Iterator[CapturedData]:
    return (entry.record for entry in read_entries(source))


def handler_rows(entries: Iterable[Entry], handler: Preprocessor,
                 skipped: list[int]) -> Iterator[dict[str, Any]]:
    """The handler's rows, called as the analyzer calls it: shadow records skipped first (counted
    in ``skipped[0]``), a falsy result dropping the record."""
    for entry in entries:
        if is_shadow(entry.record.event_dict):
            skipped[0] += 1
            continue
        row = handler(entry.record, entry.where)
        if row is not None:
            yield row


BATCH = 1000
"""Records sent to the preprocessor's worker at once: no round trip a record."""
IN_FLIGHT = 2
"""Batches sent ahead of the one awaited, so the worker never waits for this process."""


def isolated_rows(pool: UserWorkers, path: str, entries: Iterable[Entry],
                  skipped: list[int]) -> Iterator[dict[str, Any]]:
    """The rows of ``path``'s handler, called in ``pool``'s worker as :func:`handler_rows` calls
    it, in batches of :data:`BATCH`.

    Raises:
        HandlerFailed: it raised or returned a bad row; WorkerDied; PreprocessorStuck.
    """
    pending: collections.deque[tuple[int, Future[Any]]] = collections.deque()
    for number, batch in enumerate(_batches(entries, skipped), 1):
        pending.append((number, pool.submit(preprocess_batch, path, batch)))
        if len(pending) > IN_FLIGHT:
            yield from _answer(pool, *pending.popleft())
    while pending:
        yield from _answer(pool, *pending.popleft())


def _answer(pool: UserWorkers, number: int, future: Future[Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pool.wait(future, f"on batch {number}", f"batch {number}")
    return rows


def _batches(entries: Iterable[Entry], skipped: list[int]
             ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    batch: list[tuple[str, dict[str, Any]]] = []
    for entry in entries:
        if is_shadow(entry.record.event_dict):
            skipped[0] += 1
            continue
        batch.append((entry.where, entry.record.event_dict))
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def write_rows(out: IO[str], items: Iterable[dict[str, Any]], fmt: str) -> int:
    """Write rows as JSON Lines or CSV (columns: the first row's, then any new ones)."""
    if fmt == "jsonl":
        count = 0
        for row in items:
            out.write(_json_line(row) + "\n")
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


def _json_line(row: dict[str, Any]) -> str:
    """A row as strict JSON: NaN and the infinities (no JSON number; the monitor reads them as
    missing) are null."""
    try:
        return json.dumps(row, allow_nan=False)
    except ValueError:  # rare: the row is copied only then
        return json.dumps({key: None if isinstance(value, float) and not math.isfinite(value)
                           else value for key, value in row.items()}, allow_nan=False)


class SourceError(Exception):
    """The capture source cannot be read (missing, or S3 refused or unreachable)."""


def check_source(source: str) -> None:
    """Refuse a local source that does not exist, or an S3 URI without a bucket (S3 itself is
    checked when read).

    Raises:
        SourceError: naming the path. ValueError: ``s3://`` names no bucket.
    """
    if source.startswith(S3_SCHEME):
        S3Uri.parse(source)
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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text[:40]!r}") \
            from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text[:40]!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sagegate capture",
        description="Flatten sagegate / SageMaker Model Monitor capture records.")
    parser.add_argument("source", help="a capture directory, a .jsonl file or s3://bucket/prefix")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    parser.add_argument("--output", "-o", help="file to write (default: standard output)")
    parser.add_argument("--top-k", type=_positive_int, default=5,
                        help="top classes per row (default 5)")
    parser.add_argument("--labels", default=None,
                        help="label file in chalicelib/labels for every record ('' for "
                             "indices); default: each endpoint's model's labels")
    parser.add_argument("--stage", default="local",
                        help="the stage whose variables the model registry is read with "
                             "(default local)")
    parser.add_argument("--preprocess-handler", metavar="FILE",
                        help="a Model Monitor record preprocessor file to apply instead")
    parser.add_argument("--preprocess-timeout", type=_seconds, default=PREPROCESS_DEADLINE,
                        metavar="SECONDS",
                        help=f"stop (exit 1) when the preprocessor reads no record for SECONDS "
                        f"(default: {PREPROCESS_DEADLINE:g})")
    parser.add_argument("--exclude-cache-hits", action="store_true",
                        help="leave out records of answers served from the prediction cache "
                             "(eventMetadata.sagegateCacheHit)")
    return parser.parse_args(argv)


def _labels(args: argparse.Namespace) -> Callable[[str | None], Sequence[str] | None]:
    if args.labels is None:
        return EndpointLabels(lambda: registry_labels(args.stage))
    try:
        labels = predictions.load_labels(args.labels)
    except SagegateError:
        raise ValueError(f"--labels {args.labels!r}: no such non-empty label file in "
                         "chalicelib/labels ('' for class indices)") from None
    return lambda _endpoint: labels


class _Counted:

    def __init__(self, source: str, exclude_cache_hits: bool = False) -> None:
        self.source = source
        self.records = 0
        self.cache_hits_excluded = 0
        self._exclude_cache_hits = exclude_cache_hits

    def __iter__(self) -> Iterator[Entry]:
        # deferred: keeps botocore out of the CLI's start-up; paid only when captures are read
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            for entry in read_entries(self.source):
                self.records += 1
                if self._exclude_cache_hits and is_cache_hit(entry.record.event_dict):
                    self.cache_hits_excluded += 1
                    continue
                yield entry
        except (BotoCoreError, ClientError) as error:
            raise SourceError(f"{self.source}: cannot read from S3: {error}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise SourceError(f"{self.source}: cannot read: {error}") from None


def _convert(args: argparse.Namespace) -> str:
    check_source(args.source)
    entries, skipped = _Counted(args.source, args.exclude_cache_hits), [0]
    if args.preprocess_handler:
        count = _preprocessed(args, entries, skipped)
    else:
        count = _write(args, DefaultRows(args.top_k, _labels(args))(entries))
    shadow = f", {skipped[0]} shadow record(s) skipped" if skipped[0] else ""
    if entries.cache_hits_excluded:
        shadow += f", {entries.cache_hits_excluded} cache hit(s) excluded"
    return f"{count} row(s) from {entries.records} record(s) of {args.source}{shadow}"


def _preprocessed(args: argparse.Namespace, entries: Iterable[Entry],
                  skipped: list[int]) -> int:
    path = args.preprocess_handler
    with UserWorkers(1, path, args.preprocess_timeout) as pool:
        pool.check_import()
        count = _write(args, isolated_rows(pool, path, entries, skipped))
        pool.run(preprocessor_postprocess, path, "in its postprocess_handler",
                 "running its postprocess_handler")
    return count


def _write(args: argparse.Namespace, items: Iterable[dict[str, Any]]) -> int:
    out = open(args.output, "w", newline="") if args.output else sys.stdout  # noqa: SIM115
    try:
        return write_rows(out, items, args.format)
    finally:
        if out is not sys.stdout:
            out.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``sagegate capture SOURCE [--format csv|jsonl] [--output FILE] ...``.

    Returns:
        0 on success (a summary line on stderr); 2 when the arguments, source, labels, handler
            file or a record is unusable; 1 when the source cannot be read, the handler raises,
            or its worker dies or is stopped at ``--preprocess-timeout``. Every failure is one
            ``error: ...`` line on stderr.
    """
    args = parse_args(argv)
    try:
        summary = _convert(args)
    except (CaptureFormatError, HandlerError, SagegateError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1 if args.source.startswith(S3_SCHEME) else 2
    except (HandlerFailed, WorkerDied) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the output file
        print(f"error: cannot write {args.output or 'the output'}: {error.strerror}",
              file=sys.stderr)
        return 1
    print(summary, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
