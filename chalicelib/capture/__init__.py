"""Data capture at the front-end, in the format SageMaker Model Monitor reads.

:class:`Capturer` decides (mode, sampling) and writes one record per successful prediction
(an answer served from the prediction cache included, marked as a hit, unless
``CAPTURE_CACHE_HITS`` is off) through a sink, before the response returns, within what is
left of the request's time budget: a sink that does not answer in time is a failed capture,
not a late response. A sink failure never fails the request: it is logged and counted, and the
outcome says so.
``sagegate capture`` reads them back (:mod:`sagegate.captures`, outside the Lambda package).
"""
from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chalicelib.calls import Served
from chalicelib.capture.records import CaptureRecord, Exchange, build_record
from chalicelib.capture.sinks import Sink, sink_for
from chalicelib.capture.writer import CaptureWriter
from chalicelib.core.config_names import CaptureMode
from chalicelib.core.observability import Outcome, emit_count

LOG = logging.getLogger("sagegate.capture")
# writes still running after their request stopped waiting for them; past that, a capture is
# refused at once (a sink that hangs must not pile records and threads up)
MAX_PENDING_WRITES = 4
_WRITERS = 16  # threads writing records; concurrent requests beyond that wait their turn
CLOSE_FLUSH_SECONDS = 5.0
"""What closing (a snapshot, the process's end) waits for records still held."""


class Capturer:
    """Captures inferences to a sink.

    Args:
        mode: ``off``, ``input``, ``output`` or ``both``.
        sampling_percentage: 0..100, the share of inferences captured.
        include_original: add the client's upload to each record.
        writer: store records after the response through this writer (its sink is
            ``sink``'s); None: before it, inline.
    """

    def __init__(self, mode: str, sink: Sink | None, sampling_percentage: float = 100.0,
                 include_original: bool = False,
                 rng: Callable[[], float] = random.random, cache_hits: bool = True,
                 writer: CaptureWriter | None = None) -> None:
        if mode != CaptureMode.OFF and sink is None:
            raise ValueError("a sink is needed when capture is on")
        self.mode = mode
        self._sink = sink
        self._share = sampling_percentage / 100.0
        self._include_original = include_original
        self._rng = rng
        self._cache_hits = cache_hits
        self._writers: ThreadPoolExecutor | None = None
        self._abandoned = 0
        self._lock = threading.Lock()
        self.writer = writer

    def background(self, **limits: Any) -> Capturer:
        """This capturer storing its records after the response (a
        :class:`~.writer.CaptureWriter` on its sink; ``limits``: the writer's bounds)."""
        if self.mode == CaptureMode.OFF or self._sink is None or self.writer is not None:
            return self
        mode, include_original = self.mode, self._include_original
        self.writer = CaptureWriter(
            self._sink, lambda exchange: build_record(exchange, mode, include_original),
            **limits)
        return self

    @classmethod
    def from_settings(cls, mode: str, destination: str, sampling_percentage: float,
                      include_original: bool, max_bytes: int = 0,
                      cache_hits: bool = True, background: bool = False) -> Capturer:
        """The capturer the settings describe (``CAPTURE_*``; ``max_bytes`` caps each
        endpoint's folder of a directory destination, see
        :class:`~chalicelib.capture.sinks.DirectorySink`; ``background``: records stored
        after the response, ``CAPTURE_WRITER=background``)."""
        sink = sink_for(destination, max_bytes) if mode != CaptureMode.OFF else None
        capturer = cls(mode, sink, sampling_percentage, include_original,
                       cache_hits=cache_hits)
        return capturer.background() if background else capturer

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the records handed to the writer are stored or dropped (True at once
        inline); False when ``timeout`` ran out first."""
        return True if self.writer is None else self.writer.flush(timeout)

    def close(self) -> None:
        """Store what the writer holds, then drop the sink's pooled connections (see
        :mod:`chalicelib.core.lifecycle`: before a snapshot, nothing may wait in memory)."""
        if self.writer is not None:
            self.writer.flush(CLOSE_FLUSH_SECONDS)
        if self._sink is not None:
            self._sink.close()

    def capture_served(self, served: Served, inference_id: str, custom_attributes: str | None,
                       deadline: float, *, arm: str | None = None,
                       latency_ms: float | None = None, shadow: bool = False) -> str:
        """Capture one served prediction within what is left of the request's budget; the
        client's original goes along only when originals are asked for.

        An answer from the prediction cache is captured too (unless ``cache_hits`` is off),
        marked as a hit, with the cached answer as the output. Its input is the body the
        pipeline made for the endpoint, or, when it made none (an image hit decodes nothing),
        the client's upload: the bytes the cache key is made of.
        """
        if served.cached and not self._cache_hits:
            return Outcome.OFF
        sent, sent_type = served.sent, served.sent_content_type
        if served.cached and not sent:
            sent, sent_type = served.original, served.original_content_type
        return self.capture(Exchange(
            endpoint=served.endpoint, variant=served.variant or "AllTraffic",
            inference_id=inference_id, sent=sent, cache_hit=served.cached,
            sent_content_type=sent_type, received=served.received,
            received_content_type=served.received_content_type,
            custom_attributes=custom_attributes,
            original=served.original if self._include_original else None,
            original_content_type=served.original_content_type, arm=arm, latency_ms=latency_ms,
            shadow=shadow, answered_at=time.time()), deadline - time.monotonic())

    def capture_exchange(self, exchange: Exchange, timeout: float | None) -> str:
        """Capture one exchange the caller described whole (a language model's, on OpenAI's
        routes): a cache hit only when hits are captured; never raises."""
        if exchange.cache_hit and not self._cache_hits:
            return Outcome.OFF
        return self.capture(exchange, timeout)

    def capture_shadow_failure(self, endpoint: str, variant: str | None, inference_id: str,
                               arm: str, error: Mapping[str, str],
                               latency_ms: float | None) -> str:
        """Capture a failed shadow call: a record with its error and no output, paired with
        the primary's by ``inference_id`` (the verdict counts a shadow's errors from them)."""
        return self.capture(Exchange(
            endpoint=endpoint, variant=variant or "AllTraffic", inference_id=inference_id,
            sent=b"", sent_content_type="application/octet-stream", received=b"",
            received_content_type="", arm=arm, latency_ms=latency_ms, shadow=True,
            error=error, answered_at=time.time()), None)

    def capture(self, exchange: Exchange, timeout: float | None = None) -> str:
        """Write the record of one inference; never raises. ``timeout``: seconds the request can
        still wait (None: as long as the sink takes)."""
        if self.mode == CaptureMode.OFF or self._sink is None:
            return Outcome.OFF
        if self._share < 1.0 and self._rng() >= self._share:
            return Outcome.SAMPLED_OUT
        if self.writer is not None:  # built and stored after the response
            if exchange.answered_at is None:  # now, not when the writer gets to it
                exchange = dataclasses.replace(exchange, answered_at=time.time())
            return Outcome.QUEUED if self.writer.submit(exchange) else Outcome.DROPPED
        try:
            record = build_record(exchange, self.mode, self._include_original)
            if timeout is None:
                refused = self._sink.write([record])
            else:
                refused = self._write_within(record, timeout)
        except Exception as error:  # a capture problem must never fail the user's request
            LOG.warning("data capture failed: %s: %s", type(error).__name__, error)
            return Outcome.FAILED
        if refused:  # the sink can never store it (logged there): dropped, not written
            emit_count("CaptureDropped", len(refused))
            return Outcome.DROPPED
        return Outcome.WRITTEN

    def _write_within(self, record: CaptureRecord,
                      timeout: float) -> Sequence[CaptureRecord] | None:
        """Write on a worker thread and wait at most ``timeout`` seconds for it; what the
        sink refused for good."""
        assert self._sink is not None
        with self._lock:
            if self._abandoned >= MAX_PENDING_WRITES:
                raise TimeoutError(f"{self._abandoned} earlier writes are still pending")
            if self._writers is None:
                self._writers = ThreadPoolExecutor(_WRITERS, thread_name_prefix="capture")
            future = self._writers.submit(self._sink.write, [record])
        try:
            return future.result(timeout=max(0.0, timeout))
        except TimeoutError:
            with self._lock:
                self._abandoned += 1
            future.add_done_callback(self._forget_abandoned)
            raise TimeoutError(f"the sink did not finish within the request's remaining "
                               f"{max(0.0, timeout):.1f} s") from None

    def _forget_abandoned(self, _: object) -> None:
        with self._lock:
            self._abandoned -= 1
