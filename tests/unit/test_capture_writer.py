"""Capture off the response path: the writer's thread stores what requests hand over, in
batches, retries a failing sink, and drops only past its retries or its bounds, counting and
saying so; the Lambda internal extension holds each invocation open until its records are
stored, after the handler returned."""
from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from chalicelib.calls import Answer, Served
from chalicelib.capture import Capturer
from chalicelib.capture import writer as writer_module
from chalicelib.capture.extension import AfterHandlers, CaptureExtension
from chalicelib.capture.records import CaptureRecord, Exchange, build_record
from chalicelib.capture.sinks import CaptureSinkError, S3Sink
from chalicelib.capture.writer import RETRY_POLICY, CaptureWriter
from chalicelib.core.observability import Outcome
from chalicelib.core.pending import Pending

ROOT = Path(__file__).resolve().parents[2]


def exchange(number: int, size: int = 10) -> Exchange:
    return Exchange(endpoint="iris", variant="AllTraffic", inference_id=f"r-{number}",
                    sent=b"x" * size, sent_content_type="text/csv", received=b"[0.5]",
                    received_content_type="application/json")


def build(item: Exchange) -> CaptureRecord:
    return build_record(item, "both", False)


class GatedSink:
    """A sink that stores nothing until its gate opens, and fails its first ``failures``
    writes (a sink killed mid-flight, then back)."""

    def __init__(self, failures: int = 0, gate_open: bool = True) -> None:
        self.gate = threading.Event()
        if gate_open:
            self.gate.set()
        self.entered = threading.Event()
        self.failures = failures
        self.calls = 0
        self.stored: list[CaptureRecord] = []

    def write(self, records: Sequence[CaptureRecord]) -> None:
        self.entered.set()
        self.gate.wait(10)
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("the sink is down (simulated)")
        self.stored.extend(records)

    def close(self) -> None:
        pass


def ids(records: Sequence[CaptureRecord]) -> list[str]:
    return [json.loads(record.line)["eventMetadata"]["inferenceId"] for record in records]


def test_every_record_handed_over_lands_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    sink = GatedSink()
    writer = CaptureWriter(sink, build, batch_records=7)
    for number in range(50):
        assert writer.submit(exchange(number))
    assert writer.flush(10)
    assert ids(sink.stored) == [f"r-{number}" for number in range(50)]
    assert (writer.written, writer.dropped, writer.pending) == (50, 0, 0)
    assert sink.calls >= 50 // 7  # in batches, not one call a record
    stored = sum(line["CaptureRecords"][0] for line in _metrics(capsys)
                 if "CaptureRecords" in line)
    assert stored == 50


def test_the_request_does_not_wait_for_the_sink() -> None:
    sink = GatedSink(gate_open=False)  # a sink that takes as long as the test says
    capturer = Capturer("both", sink).background()
    outcome = capturer.capture(exchange(1), timeout=0.0)  # no time left for a write at all
    assert outcome == Outcome.QUEUED  # handed over, the sink still blocked
    assert sink.entered.wait(10) and not sink.stored
    assert not capturer.flush(0.05)  # held while the sink is blocked
    sink.gate.set()
    assert capturer.flush(10) and ids(sink.stored) == ["r-1"]


def served(endpoint: str = "iris") -> Served:
    return Served(Answer(b"{}", "application/json"), endpoint, variant="AllTraffic",
                  sent=b"1,2", sent_content_type="text/csv", received=b"[0.5]",
                  received_content_type="application/json", invoked=True)


def test_a_record_keeps_the_time_its_answer_was_made_however_long_the_sink_held_it() -> None:
    sink = GatedSink(gate_open=False)  # down: the first record's write waits for the test
    capturer = Capturer("both", sink).background()
    try:
        assert capturer.capture_served(served(), "r-0", None, time.monotonic() + 5) == \
            Outcome.QUEUED
        assert sink.entered.wait(10)  # the writer is stuck on it; the next one waits its turn
        before = datetime.datetime.now(datetime.UTC)
        assert capturer.capture_served(served(), "r-1", None, time.monotonic() + 5) == \
            Outcome.QUEUED
        after = datetime.datetime.now(datetime.UTC)
        threading.Event().wait(0.05)  # the outage goes on a little after the answer
    finally:
        sink.gate.set()  # a failed assert must not leave the writer's thread blocked
    assert capturer.flush(10)
    record = sink.stored[1]
    assert before <= record.time <= after  # when the answer was made, not when it was built
    metadata = json.loads(record.line)["eventMetadata"]
    assert metadata["inferenceTime"] == record.time.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert record.partition() == f"iris/AllTraffic/{record.time:%Y/%m/%d/%H}"


def test_a_record_keeps_the_time_its_request_gave_it_even_across_an_hour() -> None:
    answered = datetime.datetime(2026, 11, 23, 9, 59, 59, 500000, tzinfo=datetime.UTC)
    sink = GatedSink()
    capturer = Capturer("both", sink).background()
    item = dataclasses.replace(exchange(1), answered_at=answered.timestamp())
    assert capturer.capture(item) == Outcome.QUEUED
    assert capturer.flush(10)
    [record] = sink.stored
    assert record.time == answered  # built later, in the next hour, filed in its own
    assert record.partition() == "iris/AllTraffic/2026/11/23/09"
    assert json.loads(record.line)["eventMetadata"]["inferenceTime"] == "2026-11-23T09:59:59Z"


def test_a_sink_killed_mid_flight_is_retried_and_nothing_is_lost() -> None:
    sink = GatedSink(failures=2)
    sleeps: list[float] = []
    # the jitter's draw at its top: each backoff is its ceiling, so the doubling shows
    writer = CaptureWriter(sink, build, attempts=5, sleep=sleeps.append, rng=lambda: 1.0)
    for number in range(5):
        writer.submit(exchange(number))
    assert writer.flush(10)
    assert ids(sink.stored) == [f"r-{number}" for number in range(5)]
    assert writer.dropped == 0 and len(sleeps) >= 2 and sleeps[1] > sleeps[0]  # backing off


def test_the_backoff_between_tries_is_the_one_retry_policys_full_jitter() -> None:
    sink = GatedSink(failures=1_000)
    sleeps: list[float] = []
    draws = iter([0.5, 0.25, 1.0])
    writer = CaptureWriter(sink, build, attempts=4, sleep=sleeps.append, rng=lambda: next(draws))
    writer.submit(exchange(1))
    assert writer.flush(10)
    # a draw times the ceiling after each failed try (0.2 s, doubling, up to 5 s): core/retries'
    # RetryPolicy.delay, as every other retry in sagegate waits
    ceilings = [RETRY_POLICY.ceiling(attempt) for attempt in (1, 2, 3)]
    assert ceilings == pytest.approx([0.2, 0.4, 0.8])
    assert sleeps == pytest.approx([0.5 * 0.2, 0.25 * 0.4, 1.0 * 0.8])
    assert writer.dropped == 1


def test_a_sink_that_stays_down_drops_only_after_its_retries_and_says_so(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    sink = GatedSink(failures=1_000)
    sleeps: list[float] = []
    writer = CaptureWriter(sink, build, attempts=3, batch_records=100, sleep=sleeps.append)
    for number in range(4):
        writer.submit(exchange(number))
    assert writer.flush(10)
    assert (writer.written, writer.dropped) == (0, 4) and sink.calls >= 3
    assert any("dropped" in record.message and "after 3 attempts" in record.message
               for record in caplog.records)
    dropped = sum(line["CaptureDropped"][0] for line in _metrics(capsys)
                  if "CaptureDropped" in line)
    assert dropped == 4


def test_the_hand_over_is_bounded_and_a_refusal_is_counted() -> None:
    sink = GatedSink(gate_open=False)
    writer = CaptureWriter(sink, build, max_pending_records=3, batch_records=1)
    assert writer.submit(exchange(0)) and sink.entered.wait(10)  # taken by the thread
    assert all(writer.submit(exchange(number)) for number in (1, 2, 3))
    assert not writer.submit(exchange(4))  # three waiting: the fourth is refused
    held = GatedSink(gate_open=False)
    bounded = CaptureWriter(held, build, max_pending_bytes=100, batch_records=1)
    assert bounded.submit(exchange(5, size=80)) and held.entered.wait(10)  # being stored
    assert bounded.submit(exchange(6, size=80))  # 85 bytes waiting
    assert not bounded.submit(exchange(7, size=80))  # 170 would be over 100: refused
    held.gate.set()
    assert bounded.flush(10) and (bounded.written, bounded.dropped) == (2, 1)
    sink.gate.set()
    assert writer.flush(10) and writer.dropped == 1 and len(sink.stored) == 4
    closed = CaptureWriter(GatedSink(), build)
    closed.close(1)
    assert not closed.submit(exchange(8)) and closed.dropped == 1


class CountingSink:
    """Stores nothing, counts what it was given."""

    def __init__(self) -> None:
        self.records = 0

    def write(self, records: Sequence[CaptureRecord]) -> None:
        self.records += len(records)

    def close(self) -> None:
        pass


def test_bytes_written_are_released_so_the_byte_cap_bounds_what_waits_not_the_total() -> None:
    """1 MB bodies, 8 MB handed over at a time, 80 MB in all: well over the 64 MB cap in
    total, never near it at once. Nothing is dropped."""
    body = b"x" * (1024 * 1024)  # one object shared by every exchange: the test holds 1 MB
    sink = CountingSink()
    writer = CaptureWriter(sink, build)
    assert writer_module.MAX_PENDING_BYTES == 64 * 1024 * 1024
    for batch in range(10):
        for number in range(8):
            assert writer.submit(dataclasses.replace(exchange(8 * batch + number), sent=body))
        assert writer.flush(30)
    assert (writer.written, writer.dropped, sink.records) == (80, 0, 80)
    small = CaptureWriter(CountingSink(), build, max_pending_bytes=1000, batch_records=3)
    for batch in range(20):  # 20 times the cap in all, 300 bytes and less waiting at a time
        assert all(small.submit(exchange(3 * batch + number, size=90)) for number in range(3))
        assert small.flush(10)
    assert (small.written, small.dropped) == (60, 0)


def test_a_flush_returns_once_the_stored_records_metric_is_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On Lambda the environment may freeze as soon as the flush returns: the batch's
    ``CaptureRecords`` line must be out by then, not printed by a thread frozen with it."""
    release = threading.Event()
    emitted: list[tuple[str, int]] = []

    def slow_emit(name: str, value: int) -> None:
        release.wait(10)
        emitted.append((name, value))

    monkeypatch.setattr(writer_module, "emit_count", slow_emit)
    writer = CaptureWriter(GatedSink(), build)
    assert writer.submit(exchange(1))
    try:
        assert not writer.flush(0.2)  # stored, but its metric is not written yet
    finally:
        release.set()
    assert writer.flush(10) and emitted == [("CaptureRecords", 1)]


def test_records_still_held_when_the_process_ends_are_dropped_counted_and_logged(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    sink = GatedSink(gate_open=False)  # a sink that stopped answering
    writer = CaptureWriter(sink, build, batch_records=7)
    try:
        assert all(writer.submit(exchange(number)) for number in range(60))
        assert sink.entered.wait(10)  # one batch in flight, the rest waiting
        assert not writer.close(0.05)  # the exit's last wait runs out
        assert (writer.written, writer.dropped, writer.pending) == (0, 60, 0)
        assert any("60 record(s)" in record.message and "exit" in record.message
                   for record in caplog.records if record.levelname == "WARNING")
        assert not writer.submit(exchange(60))  # closed: refused, counted
    finally:
        sink.gate.set()  # the batch in flight ends: it was counted with the others
        assert writer.flush(10)
    thread = writer._thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    assert (writer.written, writer.dropped) == (0, 61)  # nothing counted twice
    dropped = sum(line["CaptureDropped"][0] for line in _metrics(capsys)
                  if "CaptureDropped" in line)
    assert dropped == 61


def test_the_exit_hook_closes_the_open_writers_and_only_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit hook gives each open writer its last seconds; the set is the test's own, so
    no other writer alive in this process is closed by it."""
    closed: list[float | None] = []
    writer = CaptureWriter(GatedSink(), build)
    bystander = CaptureWriter(GatedSink(), build)
    monkeypatch.setattr(writer, "close", closed.append)
    monkeypatch.setattr(bystander, "close", lambda timeout: pytest.fail("closed a bystander"))
    only: weakref.WeakSet[CaptureWriter] = weakref.WeakSet([writer])
    monkeypatch.setattr(writer_module, "_OPEN", only)
    writer_module._close_at_exit()
    assert closed == [writer_module.EXIT_SECONDS]


_EXIT_ORDER = """
import atexit
from chalicelib.capture import writer as writer_module
from chalicelib.capture.records import build_record

class Sink:
    def write(self, records):
        pass

    def close(self):
        pass

class Writer(writer_module.CaptureWriter):
    def close(self, timeout=10.0):
        print("writer closed", flush=True)
        return super().close(timeout)

writer = Writer(Sink(), lambda item: build_record(item, "both", False))
atexit.register(lambda: print("app flushed", flush=True))  # as the app's services do
"""


def test_a_writer_still_holding_records_at_exit_is_closed_after_the_apps_own_flush() -> None:
    """The module's exit hook is registered when it is imported, so it runs after the flush
    the app registers later (atexit runs last in, first out): what that flush could not store
    is given up then, counted and logged. Seen in a process that really exits."""
    done = subprocess.run([sys.executable, "-c", _EXIT_ORDER], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["app flushed", "writer closed"]


class FailingPartitionS3:
    """PutObject that stores every key but those under ``failing`` (one partition whose
    prefix keeps answering 500), and counts its calls."""

    def __init__(self, failing: str) -> None:
        self.failing, self.stored, self.calls = failing, dict[str, bytes](), 0

    def put_object(self, Bucket: str, Key: str, Body: bytes, ContentType: str
                   ) -> dict[str, Any]:
        self.calls += 1
        if Key.startswith(self.failing):
            raise ClientError({"Error": {"Code": "InternalError", "Message": "down"},
                               "ResponseMetadata": {"HTTPStatusCode": 500}}, "PutObject")
        self.stored[Key] = Body
        return {"ETag": '"e"'}


def test_a_partition_that_keeps_failing_drops_only_its_own_records(
        capsys: pytest.CaptureFixture[str]) -> None:
    s3 = FailingPartitionS3("iris/B/")
    sink = S3Sink(s3, "bucket", "", sleep=lambda _: None)
    writer = CaptureWriter(sink, build, batch_records=100, attempts=3, sleep=lambda _: None)
    variants = ["A"] * 2 + ["B"] * 3 + ["C"] * 4
    for number, variant in enumerate(variants):
        assert writer.submit(dataclasses.replace(exchange(number), variant=variant))
    try:
        assert writer.flush(10)
    finally:
        writer.close(10)
    assert (writer.written, writer.dropped) == (6, 3)  # B's records only, A's and C's stored
    stored = b"".join(s3.stored.values()).splitlines()
    assert len(stored) == 6
    metrics = _metrics(capsys)
    assert sum(line["CaptureDropped"][0] for line in metrics if "CaptureDropped" in line) == 3
    assert sum(line["CaptureRecords"][0] for line in metrics if "CaptureRecords" in line) == 6


def test_one_write_of_many_partitions_shares_one_retry_budget() -> None:
    now = [0.0]
    s3 = FailingPartitionS3("iris/")  # every partition failing
    sink = S3Sink(s3, "bucket", "", sleep=lambda delay: now.__setitem__(0, now[0] + delay),
                  clock=lambda: now[0], rng=lambda: 1.0)
    records = [build(dataclasses.replace(exchange(n), variant=f"V{n}")) for n in range(20)]
    with pytest.raises(CaptureSinkError) as raised:
        sink.write(records)
    assert raised.value.unstored is not None and len(raised.value.unstored) == 20
    assert now[0] <= sink.policy.budget_seconds + sink.policy.max_delay  # not 20 x 2 s
    assert s3.calls < 20 * sink.policy.max_attempts


def _metrics(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()
            if line.startswith("{") and "_aws" in line]


# --- the internal extension, against a Extensions API on 127.0.0.1 ------------------------

class ExtensionsApi:
    """Lambda's side: a registration, then one INVOKE event per invocation the test starts;
    each next call after the first says the previous invocation's extension work is done."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.available = threading.Semaphore(0)
        self.next_calls = threading.Semaphore(0)
        self.registered: dict[str, Any] = {}
        self.at_next: list[int] = []  # records stored when each next call came
        self.stored: Any = None
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                api.registered = {"name": self.headers["Lambda-Extension-Name"],
                                  **json.loads(body)}
                self.send_response(200)
                self.send_header("Lambda-Extension-Identifier", "ext-1")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_GET(self) -> None:
                assert self.headers["Lambda-Extension-Identifier"] == "ext-1"
                api.at_next.append(len(api.stored()) if api.stored else 0)
                api.next_calls.release()
                api.available.acquire()
                event = json.dumps(api.events.pop(0)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(event)))
                self.end_headers()
                self.wfile.write(event)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def invoke(self, request_id: str) -> None:
        self.events.append({"eventType": "INVOKE", "requestId": request_id,
                            "deadlineMs": 4_102_444_800_000})  # far off
        self.available.release()


@pytest.fixture
def extensions_api() -> Iterator[ExtensionsApi]:
    api = ExtensionsApi()
    yield api
    api.server.shutdown()
    api.server.server_close()


def test_the_extension_asks_for_its_next_event_only_once_the_records_are_stored(
        extensions_api: ExtensionsApi) -> None:
    sink = GatedSink(gate_open=False)
    capturer = Capturer("both", sink).background()
    extensions_api.stored = lambda: sink.stored
    finished = Pending()
    extension = CaptureExtension(extensions_api.address, capturer.flush, finished)
    extension.register()
    assert extensions_api.registered == {"name": "sagegate-capture", "events": ["INVOKE"]}
    extension.start()
    assert extensions_api.next_calls.acquire(timeout=10)  # init done: waiting for an event
    after = AfterHandlers(capturer.flush, extension, on_lambda=True)
    for invocation in range(2):
        extensions_api.invoke(f"req-{invocation}")
        # the handler: two inferences handed over, then it returns (the response leaves)
        for number in range(2):
            assert capturer.capture(exchange(10 * invocation + number)) == Outcome.QUEUED
        after.handler_ended(remaining_seconds=5.0)
        assert not extensions_api.next_calls.acquire(timeout=0.2)  # held: sink still busy
        sink.gate.set()  # the sink answers after the response was sent
        assert extensions_api.next_calls.acquire(timeout=10)
        assert extensions_api.at_next[-1] == 2 * (invocation + 1)  # all stored before next
        sink.gate.clear()
    assert extension.invocations == 2


def test_without_the_extension_a_lambda_handler_stores_its_records_before_it_returns() -> None:
    sink = GatedSink()
    capturer = Capturer("both", sink).background()
    capturer.capture(exchange(1))
    AfterHandlers(capturer.flush, None, on_lambda=True).handler_ended(remaining_seconds=5.0)
    assert ids(sink.stored) == ["r-1"]  # SnapStart, or a failed registration
    held = GatedSink(gate_open=False)
    local = Capturer("both", held).background()
    local.capture(exchange(2))
    AfterHandlers(local.flush, None, on_lambda=False).handler_ended(None)  # chalice local
    assert local.writer is not None and local.writer.pending == 1  # its thread stores it
    held.gate.set()
    assert local.flush(10) and ids(held.stored) == ["r-2"]
