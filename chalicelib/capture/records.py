"""Data capture records in the SageMaker Model Monitor format (JSON Lines, one per line).

A record holds what was sent to the endpoint and what it answered, as Model Monitor's own
capture writes them::

    {"captureData": {"endpointInput": {"observedContentType": "application/x-image",
                                       "mode": "INPUT", "data": "<base64>",
                                       "encoding": "BASE64"},
                     "endpointOutput": {"observedContentType": "application/json",
                                        "mode": "OUTPUT", "data": "[1.4e-05, ...]",
                                        "encoding": "JSON"}},
     "eventMetadata": {"eventId": "<uuid4>", "inferenceTime": "2026-11-23T09:31:52Z",
                       "inferenceId": "<request id>", "customAttributes": ["..."]},
     "eventVersion": "0"}

sagegate may add ``originalInput`` (the client's upload, before resizing), a top-level key that
Model Monitor ignores, and marks the record of an answer served from its prediction cache with
``"sagegateCacheHit": true`` in ``eventMetadata`` (:data:`CACHE_HIT_KEY`; the monitor and
``sagegate capture`` read it). A language model's exchange on OpenAI's routes is the body sent
to its container and the assembled completion (a ``chat.completion`` as the whole answer would
be, a stream's too), with its usage and timing under ``sagegateLlm`` (:data:`LLM_KEY`).
"""
from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
import pybase64

from chalicelib.core.config_names import SAGEMAKER_NAME, CaptureMode
from chalicelib.core.media import MediaType

INVALID_NAME = "invalid-name"

# What a record can hold (capture "off" writes none).
RECORDED_MODES = (CaptureMode.INPUT, CaptureMode.OUTPUT, CaptureMode.BOTH)
EVENT_VERSION = "0"
# eventMetadata's keys of sagegate's own. CACHE_HIT_KEY is also chalicelib.monitor.records'
# (the monitor imports no other room).
CACHE_HIT_KEY = "sagegateCacheHit"
ARM_KEY = "sagegateArm"  # the experiment arm (or shadow)
LATENCY_KEY = "sagegateLatencyMs"  # the endpoint exchange's
ERROR_KEY = "sagegateError"  # a failed shadow call's {"Code", "Message"}
LLM_KEY = "sagegateLlm"
"""A language model's exchange (OpenAI's routes): model, usage and its source, time to first
token, tokens/s, finish reason, streamed, and ``partial`` when the client went away."""
INVOCATION_SOURCE = "invocationSource"
SHADOW_SOURCE = "ShadowExperiment"
"""SageMaker's own marker of a shadow variant's record (Model Monitor skips them)."""
_TEXT_ENCODINGS: dict[str, str] = {MediaType.JSON: "JSON", MediaType.JSONLINES: "JSON",
                                   MediaType.CSV: "CSV"}


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One inference as the front-end saw it."""

    endpoint: str
    variant: str
    inference_id: str
    sent: bytes = dataclasses.field(repr=False)
    sent_content_type: str
    received: bytes = dataclasses.field(repr=False)
    received_content_type: str
    custom_attributes: str | None = None
    original: bytes | None = dataclasses.field(default=None, repr=False)
    original_content_type: str | None = None
    cache_hit: bool = False
    arm: str | None = None
    latency_ms: float | None = None
    shadow: bool = False
    """A shadow's copy, marked as SageMaker marks one; its ``inference_id`` is the primary's."""
    error: Mapping[str, str] | None = None
    """A failed shadow call's (the record then has no output)."""
    llm: Mapping[str, Any] | None = None
    """A language model's exchange's figures (:data:`LLM_KEY`)."""
    answered_at: float | None = None
    """When the inference was answered (epoch seconds, taken on the request's path): the
    record's ``inferenceTime`` and its folder's hour, however long the record waits for a
    sink. None: when the record is built."""


@dataclasses.dataclass(frozen=True)
class CaptureRecord:
    """A record ready to write, with where it belongs."""

    endpoint: str
    variant: str
    event_id: str
    time: datetime.datetime
    line: bytes  # the JSON record and its newline

    def partition(self) -> str:
        """``{endpoint}/{variant}/yyyy/mm/dd/hh``: Model Monitor's layout.

        The names come from settings and from the endpoint's answer: anything that is not a
        SageMaker resource name (``../x``, a slash, a newline) becomes ``invalid-name``, so a
        path or key never leaves its prefix.
        """
        return f"{_path_name(self.endpoint)}/{_path_name(self.variant)}/{self.time:%Y/%m/%d/%H}"

    def file_stem(self) -> str:
        """A file name that sorts by time and never collides: ``mm-ss-mmm-<eventId>``."""
        return f"{self.time:%M-%S}-{self.time.microsecond // 1000:03d}-{self.event_id}"


def _path_name(name: str) -> str:
    return name if SAGEMAKER_NAME.fullmatch(name) else INVALID_NAME


def _body(data: bytes, content_type: str, mode: str) -> dict[str, str]:
    """One side of ``captureData``: text bodies as themselves, everything else base64."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    encoding = _TEXT_ENCODINGS.get(media_type)
    if encoding is not None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            encoding = None
    if encoding is None:
        encoding, text = "BASE64", pybase64.b64encode(data).decode("ascii")
    return {"observedContentType": content_type, "mode": mode, "data": text,
            "encoding": encoding}


def _sagegate_metadata(exchange: Exchange) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if exchange.custom_attributes:
        metadata["customAttributes"] = [exchange.custom_attributes]
    if exchange.cache_hit:
        metadata[CACHE_HIT_KEY] = True
    if exchange.shadow:
        metadata[INVOCATION_SOURCE] = SHADOW_SOURCE
    if exchange.arm is not None:
        metadata[ARM_KEY] = exchange.arm
    if exchange.latency_ms is not None:
        metadata[LATENCY_KEY] = round(exchange.latency_ms, 3)
    if exchange.error is not None:
        metadata[ERROR_KEY] = dict(exchange.error)
    if exchange.llm is not None:
        metadata[LLM_KEY] = dict(exchange.llm)
    return metadata


def build_record(exchange: Exchange, mode: str, include_original: bool = False,
                 now: datetime.datetime | None = None,
                 event_id: str | None = None) -> CaptureRecord:
    """The Model Monitor record of one inference.

    Args:
        include_original: add ``originalInput`` with the client's upload.
        now: the inference time (UTC); when None, the exchange's ``answered_at``, else the
            current time.
    """
    if mode not in RECORDED_MODES:
        raise ValueError(f"capture mode must be one of {', '.join(RECORDED_MODES)}, not "
                         f"{mode!r}")
    if now is None:
        now = datetime.datetime.now(datetime.UTC) if exchange.answered_at is None \
            else datetime.datetime.fromtimestamp(exchange.answered_at, datetime.UTC)
    event_id = event_id or str(uuid.uuid4())
    capture: dict[str, Any] = {}
    if mode in (CaptureMode.INPUT, CaptureMode.BOTH):
        capture["endpointInput"] = _body(exchange.sent, exchange.sent_content_type, "INPUT")
    if mode in (CaptureMode.OUTPUT, CaptureMode.BOTH) and exchange.error is None:
        capture["endpointOutput"] = _body(exchange.received, exchange.received_content_type,
                                          "OUTPUT")
    metadata: dict[str, Any] = {
        "eventId": event_id,
        "inferenceTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inferenceId": exchange.inference_id,
    }
    metadata.update(_sagegate_metadata(exchange))
    record: dict[str, Any] = {"captureData": capture, "eventMetadata": metadata,
                              "eventVersion": EVENT_VERSION}
    if include_original and exchange.original is not None:
        record["originalInput"] = _body(exchange.original,
                                        exchange.original_content_type or MediaType.X_IMAGE,
                                        "INPUT")
    # orjson and pybase64 (both in the layer): an image cache hit's record carries the whole
    # upload, and writing it must stay a small part of what the hit costs (bench --part cache)
    line = orjson.dumps(record) + b"\n"
    return CaptureRecord(exchange.endpoint, exchange.variant, event_id, now, line)
