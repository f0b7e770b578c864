"""The shadow pool: each target has its own queue and threads, so a target that hangs delays
and drops only its own copies; a copy that waited past its own timeout is dropped, never run
late; what waits is bounded in copies and bytes, and nothing of a copy is kept once it is
dropped or done. Every fake endpoint here blocks on a ``threading.Event`` that the fixture
opens in teardown, so a failing assert never leaves a pool thread blocked."""
from __future__ import annotations

import functools
import gc
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest

from chalicelib.capture.extension import AfterHandlers
from chalicelib.experiments.shadows import DROPPED, QUEUED, SKIPPED, Shadows

WAIT = 10.0
"""The longest any step here waits for a thread (a bound, never a measurement)."""


class Endpoint:
    """A fake shadow endpoint: each call says it started, then holds until ``gate`` opens."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.started = threading.Semaphore(0)
        self.ran: list[str] = []
        self._lock = threading.Lock()

    def call(self, payload: Payload) -> None:
        self.started.release()
        assert self.gate.wait(WAIT)
        with self._lock:
            self.ran.append(payload.name)

    def copy(self, name: str, size: int = 0) -> tuple[Callable[[], None], weakref.ref[Payload]]:
        """A copy's call holding a payload of ``size`` bytes, and a weak reference to it."""
        payload = Payload(name, size)
        return functools.partial(self.call, payload), weakref.ref(payload)

    def wait_started(self) -> None:
        assert self.started.acquire(timeout=WAIT), "the call never started"


class Payload:
    """What a copy holds (its request)."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.body = bytes(size)


@pytest.fixture
def gates() -> Iterator[Callable[[], threading.Event]]:
    """Makes closed gates; every one is opened in teardown, whatever the test did."""
    made: list[threading.Event] = []

    def gate(opened: bool = False) -> threading.Event:
        event = threading.Event()
        if opened:
            event.set()
        made.append(event)
        return event

    yield gate
    for event in made:
        event.set()


def submit(shadows: Shadows, target: str, endpoint: Endpoint, name: str, *,
           timeout: float = 5.0, size: int = 0) -> tuple[str, weakref.ref[Payload]]:
    call, ref = endpoint.copy(name, size)
    outcome = shadows.submit(target, call, timeout_seconds=timeout, size=size)
    del call
    return outcome, ref


def wait_until(condition: Callable[[], bool]) -> bool:
    stop = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > stop:
            return False
        time.sleep(0.01)
    return True


def test_a_hanging_target_neither_delays_nor_drops_another_targets_copies(
        gates: Callable[[], threading.Event]) -> None:
    shadows = Shadows(threads=2, max_waiting=8)
    hung = Endpoint(gates())
    outcomes = [submit(shadows, "hung", hung, f"h{n}")[0] for n in range(40)]
    assert outcomes.count(QUEUED) >= 8 and DROPPED in outcomes  # the hung target is full
    fine = Endpoint(gates())
    fine.gate.set()
    assert [submit(shadows, "fine", fine, f"f{n}")[0] for n in range(8)] == [QUEUED] * 8
    assert wait_until(lambda: len(fine.ran) == 8), f"{len(fine.ran)} of 8 ran"
    assert sorted(fine.ran) == sorted(f"f{n}" for n in range(8)) and hung.ran == []


def test_a_copy_past_its_own_timeout_when_a_thread_reaches_it_is_dropped_not_run(
        gates: Callable[[], threading.Event], capsys: pytest.CaptureFixture[str]) -> None:
    now = [1000.0]
    shadows = Shadows(threads=1, clock=lambda: now[0])
    endpoint = Endpoint(gates())
    assert submit(shadows, "t", endpoint, "first")[0] == QUEUED
    endpoint.wait_started()  # the one thread is held by the first copy
    _, short = submit(shadows, "t", endpoint, "short", timeout=5.0)
    assert submit(shadows, "t", endpoint, "long", timeout=30.0)[0] == QUEUED
    now[0] += 10.0  # "short" has waited past its 5 s, "long" has not
    endpoint.gate.set()
    assert shadows.flush(WAIT)
    assert endpoint.ran == ["first", "long"]
    assert (shadows.dropped, shadows.expired) == (1, 1)
    gc.collect()
    assert short() is None  # nothing of the dropped copy is kept
    assert '"ShadowDropped":[1' in capsys.readouterr().out.replace(" ", "")


def test_an_expired_copys_drop_carries_its_requests_dimensions(
        gates: Callable[[], threading.Event], capsys: pytest.CaptureFixture[str]) -> None:
    """The request's own ShadowDropped is in a line with its route, model and arm: the
    expired copy's line has the same dimensions, so CloudWatch counts both in one series."""
    now = [1000.0]
    shadows = Shadows(threads=1, clock=lambda: now[0])
    endpoint = Endpoint(gates())
    assert submit(shadows, "t", endpoint, "first")[0] == QUEUED
    endpoint.wait_started()
    request = {"route": "/models/{name}/predictions", "model": "iris", "arm": "champion"}
    call, _ = endpoint.copy("late")
    assert shadows.submit("t", call, timeout_seconds=5.0, dimensions=request) == QUEUED
    del call
    capsys.readouterr()
    now[0] += 10.0
    endpoint.gate.set()
    assert shadows.flush(WAIT)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if "ShadowDropped" in line]
    assert len(lines) == 1
    assert {key: lines[0][key] for key in request} == request
    metric = lines[0]["_aws"]["CloudWatchMetrics"][0]
    assert sorted(metric["Dimensions"][0]) == sorted(["service", *request])


def test_a_submit_does_not_hold_the_pools_lock_while_a_thread_starts(
        gates: Callable[[], threading.Event], monkeypatch: pytest.MonkeyPatch) -> None:
    shadows = Shadows(threads=2)
    held: list[bool] = []
    start = threading.Thread.start

    def checked(thread: threading.Thread) -> None:
        held.append(shadows._lock.locked())
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", checked)
    endpoint = Endpoint(gates())
    endpoint.gate.set()
    assert [submit(shadows, "t", endpoint, f"c{n}")[0] for n in range(3)] == [QUEUED] * 3
    assert shadows.flush(WAIT)
    assert held and not any(held)  # every thread started after the lock was let go


def test_waiting_copies_are_bounded_in_count_and_bytes_and_given_back(
        gates: Callable[[], threading.Event]) -> None:
    shadows = Shadows(threads=1, max_waiting=3, max_waiting_bytes=1000,
                      max_all_waiting_bytes=1500, idle_seconds=0.05)
    endpoint = Endpoint(gates())
    refs = []
    for target in ("a", "b", "c"):  # each target's one thread held by its first copy
        outcome, ref = submit(shadows, target, endpoint, f"{target}-running")
        assert outcome == QUEUED
        endpoint.wait_started()
        refs.append(ref)
    held = [submit(shadows, "a", endpoint, f"a{n}", size=100) for n in range(4)]
    assert [outcome for outcome, _ in held] == [QUEUED] * 3 + [DROPPED]  # 3 copies a target
    held += [submit(shadows, "b", endpoint, "b0", size=900),
             submit(shadows, "b", endpoint, "b1", size=200)]  # 1100 bytes > 1000 a target
    held += [submit(shadows, "c", endpoint, "c0", size=300),
             submit(shadows, "c", endpoint, "c1", size=1)]  # 1501 bytes > 1500 in all
    assert [outcome for outcome, _ in held[4:]] == [QUEUED, DROPPED, QUEUED, DROPPED]
    assert shadows.backlog()[:2] == (5, 1500)
    gc.collect()
    assert [ref() is None for _, ref in held] == [False, False, False, True,
                                                  False, True, False, True]
    endpoint.gate.set()
    assert shadows.flush(WAIT)
    gc.collect()
    assert all(ref() is None for ref in [*refs, *(ref for _, ref in held)])  # given back
    assert shadows.backlog()[:2] == (0, 0)
    assert wait_until(lambda: shadows.backlog().threads == 0)  # idle threads end


def test_a_full_target_drops_a_copy_at_once_and_warns_at_most_once_a_minute(
        gates: Callable[[], threading.Event], caplog: pytest.LogCaptureFixture) -> None:
    shadows = Shadows(threads=1, max_waiting=2)
    endpoint = Endpoint(gates())
    assert submit(shadows, "t", endpoint, "running")[0] == QUEUED
    endpoint.wait_started()
    assert [submit(shadows, "t", endpoint, "w")[0] for _ in range(2)] == [QUEUED, QUEUED]
    with caplog.at_level(logging.WARNING, logger="sagegate.experiments"):
        outcomes = [submit(shadows, "t", endpoint, "x")[0] for _ in range(50)]
    assert outcomes == [DROPPED] * 50 and shadows.dropped == 50
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("1 shadow copy dropped")
    endpoint.gate.set()
    assert shadows.flush(WAIT)
    assert submit(shadows, "t", endpoint, "again")[0] == QUEUED  # room again
    assert shadows.flush(WAIT)


def test_a_failing_call_is_logged_and_the_target_goes_on(
        gates: Callable[[], threading.Event], caplog: pytest.LogCaptureFixture) -> None:
    shadows = Shadows(threads=1)

    def fails() -> None:
        raise RuntimeError("endpoint said no")

    endpoint = Endpoint(gates())
    endpoint.gate.set()
    with caplog.at_level(logging.ERROR, logger="sagegate.experiments"):
        assert shadows.submit("t", fails, timeout_seconds=5.0) == QUEUED
        assert submit(shadows, "t", endpoint, "next")[0] == QUEUED
        assert shadows.flush(WAIT)
    assert endpoint.ran == ["next"]
    assert any("shadow call failed" in r.getMessage() for r in caplog.records)


def test_shadows_that_are_off_skip_every_copy_and_count_it() -> None:
    ran: list[int] = []
    shadows = Shadows(off="the handler would wait")
    assert shadows.submit("t", lambda: ran.append(1), timeout_seconds=5.0) == SKIPPED
    assert (shadows.skipped, shadows.dropped, ran) == (1, 0, [])
    assert shadows.flush(0)
    assert AfterHandlers(lambda _: True, None, on_lambda=True).held_work_waits()
    assert AfterHandlers(lambda _: True, None, on_lambda=False).held_work_waits() is None
