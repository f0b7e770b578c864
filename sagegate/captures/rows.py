"""The default rows ``sagegate capture`` makes of capture records: metadata, endpoint,
``cacheHit``, top-k and ``prediction0..N``, each endpoint's named with its labels.

Nothing stops part-way over several endpoints: an endpoint whose answers do not fit its labels is
read with class indices, a record whose answer is not class probabilities gets a row without
them; either is said once per endpoint in one ``note:`` line naming it and the way out.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

import numpy as np

from chalicelib.core.errors import SagegateError
from chalicelib.inference import predictions
from chalicelib.monitor.captured_data import CapturedData, EventData, is_cache_hit


class CaptureFormatError(ValueError):
    """A line is not a Model Monitor capture record."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One capture record, where it was read and the endpoint whose folder holds it."""

    where: str
    """``file:line``."""
    endpoint: str | None
    record: CapturedData


def inference_id(record: CapturedData) -> str:
    """``eventMetadata.inferenceId``, or ``""`` (the analyzer's record has no attribute for it:
    handlers read it from ``event_dict``)."""
    return str(record.event_dict["eventMetadata"].get("inferenceId") or "")


def decoded(side: EventData) -> bytes:
    data = side.data or ""
    return base64.b64decode(data) if side.encoding == "BASE64" else data.encode("utf-8")


class LabelCountError(CaptureFormatError):
    """An endpoint answered another number of classes than its labels have."""


def output_rows(body: bytes) -> list[np.ndarray]:
    """The probabilities of each row an endpoint answered (a batch answers several)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        document = None
    batch = document.get("predictions") if isinstance(document, dict) else None
    if isinstance(batch, list) and len(batch) > 1:
        return [predictions.parse_probabilities(json.dumps(row).encode()) for row in batch]
    return [predictions.parse_probabilities(body)]


def flatten(entry: Entry, k: int, labels: Sequence[str] | None,
            with_output: bool = True) -> list[dict[str, Any]]:
    """The default rows of a record, one per row the endpoint answered (with ``row`` when
    several); ``with_output=False``: the metadata only.

    Raises:
        LabelCountError: not as many probabilities as ``labels``.
        CaptureFormatError: the answer is not class probabilities.
    """
    record, meta = entry.record, entry.record.event_metadata
    base: dict[str, Any] = {"eventId": meta.event_id if meta else "",
                            "inferenceTime": meta.event_time if meta else "",
                            "inferenceId": inference_id(record),
                            "endpoint": entry.endpoint or "",
                            "cacheHit": is_cache_hit(record.event_dict)}
    if record.endpoint_input is not None:
        base["inputContentType"] = record.endpoint_input.observedContentType
        try:
            base["inputBytes"] = len(decoded(record.endpoint_input))
        except binascii.Error:
            raise CaptureFormatError(f"{entry.where}: endpointInput's data is not base64") \
                from None
    if record.endpoint_output is None or not with_output:
        return [base]
    try:
        answers = output_rows(decoded(record.endpoint_output))
    except (SagegateError, binascii.Error) as error:
        raise CaptureFormatError(f"{entry.where}: the answer is not class probabilities "
                                 f"({getattr(error, 'message', error)})") from None
    if labels and any(answer.size != len(labels) for answer in answers):
        raise LabelCountError(f"{entry.where}: the endpoint returned {answers[0].size} "
                              f"classes; the label file has {len(labels)}")
    return [{**base, **({"row": index} if len(answers) > 1 else {}),
             **_prediction_columns(probabilities, k, labels)}
            for index, probabilities in enumerate(answers)]


def _prediction_columns(probabilities: np.ndarray, k: int,
                        labels: Sequence[str] | None) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for rank, p in enumerate(predictions.label_predictions(
            probabilities, predictions.top_k(probabilities, k), labels), 1):
        row[f"top{rank}_index"], row[f"top{rank}_label"] = p.index, p.label
        row[f"top{rank}_probability"] = p.probability
    row.update({f"prediction{i}": float(v) for i, v in enumerate(probabilities)})
    return row


class DefaultRows:
    """The default rows of every record, each endpoint's read with its labels (module docstring)."""

    def __init__(self, k: int, labels: Callable[[str | None], Sequence[str] | None],
                 notes: IO[str] | None = None) -> None:
        self._k = k
        self._labels = labels
        self._notes = notes
        self._indices: set[str | None] = set()
        self._no_output: set[str | None] = set()

    def __call__(self, entries: Iterable[Entry]) -> Iterator[dict[str, Any]]:
        for entry in entries:
            yield from self._rows(entry)

    def _rows(self, entry: Entry) -> list[dict[str, Any]]:
        endpoint = entry.endpoint
        labels = None if endpoint in self._indices else self._labels(endpoint)
        try:
            return flatten(entry, self._k, labels)
        except LabelCountError as error:
            self._indices.add(endpoint)
            self._note(f"{error}: endpoint {endpoint or '?'!r}: its rows have class indices "
                       f"(read its folder with --labels '' or with its own --labels NAME)")
            return self._rows(entry)
        except CaptureFormatError as error:
            if endpoint not in self._no_output:
                self._no_output.add(endpoint)
                self._note(f"{error}: endpoint {endpoint or '?'!r}: such rows have no "
                           f"prediction columns (--preprocess-handler FILE reads any answer)")
            return flatten(entry, self._k, None, with_output=False)

    def _note(self, text: str) -> None:
        print(f"note: {text}", file=self._notes or sys.stderr)
