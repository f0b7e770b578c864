"""The pending-work counter the capture writer, the shadow pool and the capture extension share:
a wait is released by a settle on another thread, gives up at its timeout, and waits only for
what was handed before it began; the counts hold under threads racing."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from chalicelib.core.pending import Pending

_T = TypeVar("_T")

WAIT = 30.0  # generous: a wait that should end ends long before


class Waiter:
    """A thread blocked in ``pending.wait``; its answer once it returns (looked for for
    ``WAIT``, half its own timeout: a wait released only by its timeout is seen as hung)."""

    def __init__(self, pending: Pending) -> None:
        self.answers: list[bool] = []
        self.thread = threading.Thread(target=lambda: self.answers.append(pending.wait(2 * WAIT)),
                                       daemon=True)

    def start(self) -> Waiter:
        self.thread.start()
        return self

    def answer(self) -> list[bool]:
        self.thread.join(WAIT)
        return self.answers


class _SpyCondition(threading.Condition):
    """Says when a wait has taken its target and holds the lock (so nothing handed before
    ``waiting`` is set can be counted in that wait's target)."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.waiting = threading.Event()

    def wait_for(self, predicate: Callable[[], _T], timeout: float | None = None) -> _T:
        self.waiting.set()
        return super().wait_for(predicate, timeout)


@pytest.fixture
def pending() -> Iterator[Pending]:
    work = Pending()
    spy = _SpyCondition()
    work._changed = spy
    yield work
    work.settle(1_000)  # a failing assert leaves no waiter blocked


def test_a_wait_with_nothing_handed_returns_at_once() -> None:
    assert Pending().wait(0)


def test_a_waiter_is_released_by_a_settle_on_another_thread(pending: Pending) -> None:
    pending.hand(2)
    waiter = Waiter(pending).start()
    assert _spy(pending).waiting.wait(WAIT)
    pending.settle()
    assert waiter.answers == [] and waiter.thread.is_alive()  # one of two still outstanding
    settler = threading.Thread(target=pending.settle)
    settler.start()
    settler.join(WAIT)
    assert waiter.answer() == [True]
    assert pending.outstanding == 0 and pending.settled == 2


def test_a_wait_gives_up_at_its_timeout_and_the_work_stays_outstanding() -> None:
    pending = Pending()
    pending.hand()
    assert pending.wait(0.05) is False
    assert pending.outstanding == 1 and pending.settled == 0


def test_a_wait_is_for_what_was_handed_before_it_began(pending: Pending) -> None:
    pending.hand()
    waiter = Waiter(pending).start()
    assert _spy(pending).waiting.wait(WAIT)  # its target taken: one piece of work
    pending.hand()  # handed after the wait began: does not hold it
    pending.settle()
    assert waiter.answer() == [True]
    assert pending.outstanding == 1


def test_a_settle_before_its_hand_counts() -> None:
    pending = Pending()
    pending.settle()  # the handler returned before its invocation was heard of
    pending.hand()
    assert pending.wait(0)
    assert pending.outstanding == 0


def test_counts_hold_under_threads_handing_and_settling_at_once() -> None:
    pending = Pending()
    start = threading.Barrier(8)

    def work() -> None:
        start.wait(WAIT)
        for _ in range(2_000):
            pending.hand()
            pending.settle()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert pending.settled == 16_000 and pending.outstanding == 0


def _spy(pending: Pending) -> _SpyCondition:
    spy = pending._changed
    assert isinstance(spy, _SpyCondition)
    return spy
