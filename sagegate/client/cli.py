"""``sagegate predict`` and ``sagegate resize``: the HTTP client (:mod:`sagegate.client`) from
the command line.

``sagegate predict PATH...`` classifies image files and directories (recursively), each photo
shrunk here by the model's rule before upload, several at a time over one client's keep-alive
connections; a file that fails gets a row with its error code and the batch goes on. A file still
too large after the shrink (or any, with ``--async``) goes through an upload and a job, with
progress bars on stderr when it is a terminal. Other models' files (``--model iris batch.json``)
are sent as they are, typed by extension or ``--content-type``; a directory's files that are not
images are named on stderr as skipped. Settings are read as the library reads them.

``sagegate resize PATH --width W --height H`` asks ``POST /resize`` for one image at an exact
size. ``main`` reads which command from ``prog``.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sagegate.client import Client, Mode
from sagegate.client.http import DEFAULT_URL, ClientError
from sagegate.client.inputs import UsageError, find, skipped_lines
from sagegate.client.jobs import DEFAULT_WAIT_S
from sagegate.client.progress import Bars
from sagegate.client.settings import (
    API_KEY_ENV,
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    URL_ENV,
    WAIT_TIMEOUT_ENV,
    seconds_argument,
)
from sagegate.client.shrinking import DEFAULT_ENCODING, Encoding

PROGRESS_FROM = 4
"""Runs of at least this many files show a progress bar."""
MAX_K = 1_000_000


@dataclasses.dataclass
class Outcome:

    path: str
    ok: bool
    bytes_original: int = 0
    bytes_sent: int = 0
    predictions: Any = None
    """The answer's ``predictions`` (a handler's answer without them: the whole answer)."""
    error: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": self.path, "ok": self.ok,
                                 "bytes_original": self.bytes_original,
                                 "bytes_sent": self.bytes_sent}
        if self.ok:
            entry["predictions"] = self.predictions
        else:
            entry["error"] = self.error
        return entry


def say(line: str) -> None:
    """One line on stderr, in one write (the files' threads share it)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def classify(client: Client, path: Path, args: argparse.Namespace, bars: Bars) -> Outcome:
    """Shrink (unless ``--no-shrink``) and classify one file, synchronously or through a job;
    errors become the outcome."""
    outcome = Outcome(str(path), False)
    try:
        upload = client.prepare(path, args.model, shrink=not args.no_shrink,
                                content_type=args.content_type)
        outcome.bytes_original, outcome.bytes_sent = upload.original_bytes, upload.size
        with bars.job(path.name) as (uploaded, waited):
            answer = client.deliver(upload, args.k, args.model,
                                    Mode.ASYNC if args.force_async else Mode.AUTO,
                                    timeout=args.wait_timeout, upload_progress=uploaded,
                                    wait_progress=waited,
                                    note=lambda text: say(f"note: {path}: {text}"))
    except ClientError as error:
        outcome.error = {"status": error.status, "code": error.code, "message": error.message}
        return outcome
    except OSError as error:
        outcome.error = {"status": 0, "code": "ReadError", "message": str(error)}
        return outcome
    outcome.ok = True
    outcome.predictions = answer.get("predictions", answer)
    return outcome


def run_all(client: Client, files: Sequence[Path], args: argparse.Namespace,
            bars: Bars) -> list[Outcome]:
    def one(path: Path) -> Outcome:
        try:
            return classify(client, path, args, bars)
        finally:
            bars.advance()

    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        return list(pool.map(one, files))


def _top(prediction: dict[str, Any]) -> str:
    label = prediction.get("label", prediction.get("index", "?"))
    probability = prediction.get("probability")
    return f"{label} ({probability:.3f})" if isinstance(probability, float) else str(label)


def summary(predictions: Any, limit: int = 300) -> str:
    """A file's predictions in one cell: an image's top-k, a batch's first row's (with the row
    count), or a handler's answer as JSON (cut at ``limit``)."""
    if isinstance(predictions, list) and all(isinstance(p, dict) for p in predictions):
        return "; ".join(_top(p) for p in predictions)
    if isinstance(predictions, list) and predictions and \
            all(isinstance(row, list) for row in predictions):
        first = summary(predictions[0], limit)
        return first if len(predictions) == 1 else f"{len(predictions):,} rows; first: {first}"
    text = json.dumps(predictions)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _rows(outcome: Outcome) -> list[tuple[str, list[Any]]]:
    """A file's (path, top-k) rows: one for an image, one per row of a batch (``batch.json[3]``),
    none for a handler's own answer."""
    predictions = outcome.predictions
    if not isinstance(predictions, list):
        return []
    if predictions and all(isinstance(row, list) for row in predictions):
        return [(f"{outcome.path}[{index}]", row) for index, row in enumerate(predictions)]
    return [(outcome.path, predictions)]


def render_table(outcomes: Sequence[Outcome], out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    grid = Table(show_lines=False)
    for column, justify in (("file", "left"), ("sent / original", "right"),
                            ("result", "left")):
        grid.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for outcome in outcomes:
        sizes = f"{outcome.bytes_sent:,} / {outcome.bytes_original:,}"
        if outcome.ok:
            result = summary(outcome.predictions).replace("[", "\\[")  # rich markup
        else:
            error = outcome.error or {}
            result = f"[red]{error.get('code')}[/red]: {error.get('message')}"
        grid.add_row(outcome.path, sizes, result)
    Console(file=out, soft_wrap=False).print(grid)


def render_csv(outcomes: Sequence[Outcome], out: Any) -> None:
    """One row per prediction (rank 1..k; a batch's rows as ``path[row]``), one per failed file;
    a handler's own answer as JSON in ``label``."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["path", "ok", "bytes_original", "bytes_sent", "rank", "index", "label",
                     "probability", "error_code", "error_message"])
    for o in outcomes:
        head = [o.path, str(o.ok).lower(), o.bytes_original, o.bytes_sent]
        if not o.ok:
            error = o.error or {}
            writer.writerow([*head, "", "", "", "", error.get("code"), error.get("message")])
            continue
        rows = _rows(o)
        if not rows:
            writer.writerow([*head, "", "", json.dumps(o.predictions), "", "", ""])
        for path, top in rows:
            for rank, p in enumerate(top, start=1):
                p = p if isinstance(p, dict) else {"probability": p}
                writer.writerow([path, *head[1:], rank, p.get("index"), p.get("label"),
                                 p.get("probability"), "", ""])


def _positive(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= limit:
            raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {limit}")
        return int(text)
    return parse


def _common(parser: argparse.ArgumentParser) -> None:
    # None: not given here, so the client reads the environment, then its default
    parser.add_argument("--url", help=f"the API (default ${URL_ENV}, else {DEFAULT_URL}: "
                        "make run)")
    parser.add_argument("--api-key", help=f"sent as x-api-key (default ${API_KEY_ENV})")
    parser.add_argument("--timeout", type=seconds_argument, metavar="SECONDS",
                        help=f"to connect, and for each answer (default ${TIMEOUT_ENV}, else "
                        f"{DEFAULT_TIMEOUT_S:g})")


def client_of(parser: argparse.ArgumentParser, args: argparse.Namespace,
              **options: Any) -> Client:
    """The client the options ask for; a bad variable is a usage error (exit code 2)."""
    try:
        return Client(args.url, args.api_key, timeout=args.timeout,
                      wait_timeout=getattr(args, "wait_timeout", None), **options)
    except ValueError as error:
        parser.error(str(error))


def predict_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Classify image files (directories are searched recursively "
        "for JPEG, PNG and WebP files). Each photo is shrunk here by the model's own rule "
        "before it is sent, unless the server would take it as it is. A file still too large "
        "for the synchronous route (4.7 MB: Lambda's 6 MB, base64-encoded) goes through an "
        "upload to S3 and a job (POST /uploads, POST /models/NAME/jobs, GET /jobs/ID), with "
        "progress on stderr when it is a terminal; the output is the same either way. Where "
        "the model runs jobs, so does a batch of more rows than a request carries (on "
        "asynchronous jobs), and a file the synchronous route refused with 504 "
        "EndpointTimeout or a 413 naming the job route, once, with a note on stderr.",
        epilog="Exit codes: 0 every file classified, 1 some failed (each has a row with its "
        "error code), 2 a usage error.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="image files or directories")
    _common(parser)
    parser.add_argument("--model", help="a model of GET /models (default: the default model, "
                        "POST /predict)")
    parser.add_argument("--k", type=_positive(MAX_K), default=5, help="top-k (default 5)")
    parser.add_argument("--concurrency", type=_positive(64), default=4,
                        help="requests in flight (default 4)")
    parser.add_argument("--no-shrink", action="store_true",
                        help="send every file as it is")
    parser.add_argument("--async", dest="force_async", action="store_true",
                        help="send every file through an upload and a job, even one that "
                        "fits the synchronous route")
    parser.add_argument("--wait-timeout", type=_positive(86_400), metavar="SECONDS",
                        help=f"how long to wait for a job (default ${WAIT_TIMEOUT_ENV}, else "
                        f"{DEFAULT_WAIT_S:g}: SageMaker Asynchronous Inference's longest)")
    parser.add_argument("--content-type", metavar="TYPE",
                        help="the type of files that are not images (default: by extension: "
                        ".json, .jsonl, .csv, .npy; else by their first bytes)")
    parser.add_argument("--encoding", choices=[str(e) for e in Encoding],
                        default=str(DEFAULT_ENCODING),
                        help="how a shrunk photo is encoded (default %(default)s: the smallest "
                        "lossless; png costs half the CPU, jpeg is not faithful)")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="table (default), json (one document) or csv")
    return parser


def predict(argv: Sequence[str], prog: str) -> int:
    parser = predict_parser(prog)
    args = parser.parse_args(argv)
    try:
        found = find(args.paths)
    except UsageError as error:
        parser.error(str(error))
    files = found.files
    for line in skipped_lines(found.skipped) if found.skipped else []:
        say(line)
    batch = len(files) >= PROGRESS_FROM and (args.format == "table" or sys.stdout.isatty())
    with client_of(parser, args, pool=args.concurrency, encoding=args.encoding) as client, \
            Bars(len(files) if batch else 0, jobs=sys.stderr.isatty()) as bars:
        outcomes = run_all(client, files, args, bars)
    if args.format == "json":
        json.dump([o.to_json() for o in outcomes], sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.format == "csv":
        render_csv(outcomes, sys.stdout)
    else:
        render_table(outcomes, sys.stdout)
    return 0 if all(o.ok for o in outcomes) else 1


def resize_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Resize one image to exactly WIDTH x HEIGHT with POST /resize.",
        epilog="Exit codes: 0 written, 1 the server refused (its error code on stderr), 2 a "
        "usage error.")
    parser.add_argument("path", metavar="PATH", help="the image file")
    parser.add_argument("--width", type=_positive(8192), required=True)
    parser.add_argument("--height", type=_positive(8192), required=True)
    parser.add_argument("--mode", choices=("stretch", "fit", "fill"), default="stretch",
                        help="stretch (default), fit (letterbox) or fill (crop)")
    parser.add_argument("--format", choices=("jpeg", "png", "webp"), default="jpeg",
                        help="the output format (default jpeg)")
    parser.add_argument("--quality", type=_positive(100), help="JPEG/WebP quality")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="where to write it (default PATH's name with -WxH and the "
                        "format's extension, beside it; - for stdout)")
    _common(parser)
    return parser


def default_output(path: Path, width: int, height: int, fmt: str) -> Path:
    """``samples/cat.jpg`` at 224x224 as PNG -> ``samples/cat-224x224.png``."""
    return path.with_name(f"{path.stem}-{width}x{height}.{'jpg' if fmt == 'jpeg' else fmt}")


def resize(argv: Sequence[str], prog: str) -> int:
    parser = resize_parser(prog)
    args = parser.parse_args(argv)
    source = Path(args.path)
    if not source.is_file():
        parser.error(f"{args.path}: no such file")
    try:
        with client_of(parser, args, pool=1) as client:
            image = client.resize(source, args.width, args.height, args.mode, args.format,
                                  args.quality)
    except ClientError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.buffer.write(image)
        sys.stdout.flush()
        return 0
    target = Path(args.output) if args.output else \
        default_output(source, args.width, args.height, args.format)
    target.write_bytes(image)
    print(f"{target} ({args.width}x{args.height} {args.format}, {len(image):,} bytes)")
    return 0


COMMANDS: dict[str, Callable[[Sequence[str], str], int]] = {"predict": predict,
                                                            "resize": resize}


def main(argv: Sequence[str] | None = None, prog: str = "sagegate predict") -> int:
    command = COMMANDS.get(prog.rsplit(" ", 1)[-1], predict)
    return command(list(sys.argv[1:] if argv is None else argv), prog)


if __name__ == "__main__":
    sys.exit(main())
