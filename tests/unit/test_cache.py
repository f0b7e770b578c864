"""The prediction cache on its own: keys, the byte-bounded LRU, the DynamoDB item, the single
flight and failures of the table tier (botocore's Stubber)."""
from __future__ import annotations

import dataclasses
import os
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.cache import prediction as cache_module
from chalicelib.cache.prediction import (
    BYPASS,
    DYNAMODB_ITEM_LIMIT,
    FLIGHT,
    HIT,
    MEMORY,
    MISS,
    TABLE,
    CacheControl,
    CorruptItemError,
    MemoryTier,
    PredictionCache,
    TableTier,
    cache_key,
    decode_item,
    encode_item,
    request_cache_control,
)
from chalicelib.calls import CallOptions, InvokeResult
from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError, EndpointUnavailableError
from chalicelib.inference.pipeline import Predictor, _pipeline_fields
from chalicelib.inference.serving import ModelServer
from chalicelib.registry.loading import MODELS_DIR, load_model

ANSWER = InvokeResult(b'{"predictions": [[0.9, 0.1]]}', "application/json", "AllTraffic",
                      None, 1)


def answer(body: bytes, variant: str = "AllTraffic") -> InvokeResult:
    return InvokeResult(body, "application/json", variant, None, 1)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- keys --------------------------------------------------------------------------------------

BASE_SETTINGS = Settings.from_env({"ENDPOINT_NAME": "efficientnet-lite0"})


@pytest.mark.parametrize("change", [
    {"endpoint_name": "other"}, {"resize_mode": "fill"}, {"resize_shorter_side": 300},
    {"input_width": 256}, {"input_height": 256}, {"upscale": True}, {"encode_format": "jpeg",
                                                                     "endpoint_content_type":
                                                                     "image/jpeg"},
    {"jpeg_quality": 80}, {"png_compression": 3}, {"passthrough": False},
    {"endpoint_content_type": "image/png"}, {"endpoint_accept": "application/jsonlines"},
    {"max_image_pixels": 1000}, {"max_aspect_ratio": 3.0}, {"allow_corrupt_images": True},
])
def test_every_image_pipeline_setting_is_in_the_key(change: dict[str, Any]) -> None:
    changed = dataclasses.replace(BASE_SETTINGS, **change)
    before = _pipeline_fields(BASE_SETTINGS, BASE_SETTINGS.passthrough)
    after = _pipeline_fields(changed, changed.passthrough and "image" in
                             changed.endpoint_content_type)
    assert cache_key(before, b"img") != cache_key(after, b"img")


def test_the_key_covers_bytes_model_variant_and_target_model_but_not_k() -> None:
    cache = PredictionCache(MemoryTier(1 << 20), None)
    predictor = Predictor(BASE_SETTINGS, None, None)  # type: ignore[arg-type]
    use = cache.request(scope={"model": "a"})

    def key(options: CallOptions, body: bytes = b"jpeg", model: str = "a") -> str:
        scoped = dataclasses.replace(use, scope={"model": model})
        return cache_key(predictor._key_fields(options, scoped), body)

    base = key(CallOptions(k=1))
    assert key(CallOptions(k=5)) == base  # top-k is computed per request
    assert key(CallOptions(k=1), b"jpeg ") != base
    assert key(CallOptions(k=1), model="b") != base
    assert key(CallOptions(k=1, variant="Primary")) != base
    assert key(CallOptions(k=1, target_model="m.tar.gz")) != base
    assert key(CallOptions(k=1, custom_attributes="x=1")) != base
    assert len(base) == 32 and int(base, 16) >= 0


@pytest.mark.parametrize("change", [
    {"endpoint": "other"}, {"content_type": "text/csv"}, {"accept": "application/jsonlines"},
    {"variant": "Primary"}, {"target_model": "m.tar.gz"}, {"inference_component": "ic-1"},
    {"custom_attributes": "x=1"}, {"model": "other"}])
def test_everything_sent_to_the_endpoint_is_in_the_other_pipelines_key(
        change: dict[str, Any]) -> None:
    """The tensor and handler pipelines: two calls that differ only in what the endpoint is
    asked for (``accept``: another media type, so another answer) never share an entry."""
    server = ModelServer(None)  # type: ignore[arg-type]  # keys only: no endpoint call
    iris = load_model(MODELS_DIR / "iris", BASE_SETTINGS, {})

    def key(model: str = "iris", endpoint: str = "iris", content_type: str = "application/json",
            accept: str = "application/json", **options: Any) -> str:
        use = PredictionCache(MemoryTier(1 << 20), None).request(scope={"model": model})
        fields = server._key_fields(dataclasses.replace(iris, endpoint=endpoint),
                                    CallOptions(**options), content_type, accept, use)
        return cache_key(fields, b"[[1, 2, 3, 4]]")

    assert key(**change) != key()


def test_the_key_is_unambiguous_between_fields_and_body() -> None:
    assert cache_key({"a": "b"}, b"c") != cache_key({"a": "bc"}, b"")
    assert cache_key({"a": 1}, b"") == cache_key({"a": 1}, b"")


@pytest.mark.parametrize(("header", "read", "write"), [
    (None, True, True), ("no-cache", False, True), ("no-store", True, False),
    ("No-Cache, no-store", False, False), ("max-age=0", False, True),
    ("private, no-cache=\"x\"", False, True), ("MAX-AGE=0", False, True),
    ('max-age="0"', False, True), ("no-transform,NO-CACHE", False, True),
    ("max-age=10, max-age=20", False, True), ("max-age=-1", False, True),
    ("max-age=soon", False, True), ("max-stale=60", True, True), ("", True, True)])
def test_cache_control(header: str | None, read: bool, write: bool) -> None:
    control = CacheControl.parse(header)
    assert (control.read, control.write) == (read, write)


@pytest.mark.parametrize(("cache_control", "pragma", "read"), [
    ([], ["no-cache"], False), ([], ["No-Cache"], False), ([], ["x-foo, no-cache"], False),
    (["max-age=60"], ["no-cache"], True),  # RFC 9111 5.4: understood Cache-Control wins
    (["x-unknown"], ["no-cache"], False),  # ...one it does not understand does not
    (["max-age=60", "no-cache"], [], False),  # every line of the field counts
    (["no-store", "max-age=0"], [], False), ([], ["x-foo"], True)])
def test_pragma_and_repeated_lines(cache_control: list[str], pragma: list[str],
                                   read: bool) -> None:
    assert CacheControl.from_lines(cache_control, pragma).read is read


def test_repeated_lines_come_from_api_gateways_multi_value_headers() -> None:
    # API Gateway keeps the last line of a repeated header in "headers"
    control = request_cache_control({"cache-control": "max-age=60"},
                                    {"Cache-Control": ["no-cache", "max-age=60"]})
    assert not control.read
    assert request_cache_control({"pragma": "no-cache"}, None).read is False
    assert request_cache_control({}, {}).read is True


def test_max_age_serves_only_answers_stored_that_recently() -> None:
    now = [1000.0]
    cache = PredictionCache(MemoryTier(1 << 20, clock=lambda: now[0]), None, 3600,
                            clock=lambda: now[0])
    endpoint = SlowEndpoint()
    cache.request().fetch({}, b"x", endpoint)
    now[0] += 60
    recent = cache.request(CacheControl.parse("max-age=60"))
    recent.fetch({}, b"x", endpoint)
    assert (recent.status, endpoint.calls) == (HIT, 1)
    older = cache.request(CacheControl.parse("max-age=59"))
    older.fetch({}, b"x", endpoint)
    assert (older.status, endpoint.calls) == (MISS, 2)
    again = cache.request(CacheControl.parse("max-age=59"))  # the fresh answer was stored
    again.fetch({}, b"x", endpoint)
    assert (again.status, endpoint.calls) == (HIT, 2)


def test_max_age_0_calls_the_endpoint_and_stores_its_answer() -> None:
    cache = PredictionCache(MemoryTier(1 << 20), None)
    endpoint = SlowEndpoint()
    cache.request().fetch({}, b"x", endpoint)
    revalidate = cache.request(CacheControl.parse("max-age=0"))
    revalidate.fetch({}, b"x", endpoint)
    assert (revalidate.status, endpoint.calls) == (MISS, 2)
    assert len(cache.memory or []) == 1


def test_settings_are_validated() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "e", "CACHE_TABLE": "sagegate-cache",
                                  "CACHE_MEMORY_BYTES": "0", "CACHE_TTL_SECONDS": "60"})
    assert (settings.cache_table, settings.cache_memory_bytes) == ("sagegate-cache", 0)
    assert Settings.from_env({"ENDPOINT_NAME": "e"}).cache_memory_bytes == 4 * 1024 * 1024
    for name, value in (("CACHE_TTL_SECONDS", "59"), ("CACHE_TTL_SECONDS", "31536001"),
                        ("CACHE_MEMORY_BYTES", "-1"), ("CACHE_TABLE", "no/slash"),
                        ("CACHE_TABLE", "ab")):
        with pytest.raises(ConfigurationError, match=name):
            Settings.from_env({"ENDPOINT_NAME": "e", name: value})


# -- memory tier -------------------------------------------------------------------------------

def test_the_lru_is_bounded_in_bytes_and_evicts_the_least_recently_used() -> None:
    memory = MemoryTier(3 * (32 + 100))
    keys = [f"{i:032x}" for i in range(4)]
    for key in keys[:3]:
        assert memory.put(key, answer(b"x" * 100), float("inf"))
    assert memory.nbytes == 3 * 132
    assert memory.get(keys[0]) is not None  # now the most recently used
    memory.put(keys[3], answer(b"y" * 100), float("inf"))
    assert memory.keys() == [keys[2], keys[0], keys[3]]  # keys[1] was evicted
    assert memory.nbytes <= memory.max_bytes
    memory.put(keys[3], answer(b"z" * 10), float("inf"))  # replaced: its size recounted
    assert memory.nbytes == 2 * 132 + 42


def test_an_entry_larger_than_the_bound_is_not_cached() -> None:
    memory = MemoryTier(1000)
    memory.put("a" * 32, answer(b"small"), float("inf"))
    assert not memory.put("b" * 32, answer(b"x" * 1000), float("inf"))
    assert memory.keys() == ["a" * 32]


def test_an_expired_memory_entry_is_a_miss() -> None:
    clock = Clock()
    memory = MemoryTier(1000, clock)
    memory.put("k", ANSWER, clock.now + 60)
    assert memory.get("k") is not None
    clock.now += 61
    assert memory.get("k") is None and len(memory) == 0 and memory.nbytes == 0


def test_the_memory_tier_is_thread_safe() -> None:
    memory = MemoryTier(50 * 40)

    def churn(seed: int) -> None:
        for i in range(2000):
            key = f"{(seed * 7919 + i) % 97:032x}"
            memory.put(key, answer(b"x" * 8), float("inf"))
            memory.get(key)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert memory.nbytes == (32 + 8) * len(memory) <= memory.max_bytes


# -- the table item ----------------------------------------------------------------------------

def test_an_item_round_trips_compressed() -> None:
    body = b'{"predictions": [' + b"0.001, " * 5000 + b"1]}"
    item = encode_item("k" * 32, answer(body, "Primary"), 2_000_000)
    assert item is not None
    assert len(item["answer"]["B"]) < len(body) / 10
    assert zlib.decompress(item["answer"]["B"]) == body
    decoded = decode_item(item, "k" * 32, 1_999_999)
    assert decoded is not None
    assert decoded[0].body == body and decoded[0].variant == "Primary"
    assert decoded[0].attempts == 0 and decoded[1] == 2_000_000


def test_an_expired_item_is_a_miss() -> None:
    item = encode_item("k", ANSWER, 1000)
    assert item is not None
    assert decode_item(item, "k", 999) is not None
    assert decode_item(item, "k", 1001) is None


def test_an_item_over_400_kb_after_compression_is_not_stored() -> None:
    incompressible = os.urandom(DYNAMODB_ITEM_LIMIT)
    assert encode_item("k", answer(incompressible), 1000) is None
    compressible = b"0" * (4 * DYNAMODB_ITEM_LIMIT)
    assert encode_item("k", answer(compressible), 1000) is not None


@pytest.mark.parametrize("damage", [
    lambda item: item.pop("answer"),
    lambda item: item.update(answer={"B": b"not zlib"}),
    lambda item: item.update(answer={"B": zlib.compress(b"x" * 100)[:-5]}),
    lambda item: item.update(expires_at={"N": "soon"}),
    lambda item: item.update(content_type={"N": "1"}),
    lambda item: item.update(key={"S": "another"}),
    lambda item: item.update(answer={"S": "text"}),
])
def test_a_corrupt_item_is_refused(damage: Any) -> None:
    item = encode_item("k", ANSWER, 1000)
    assert item is not None
    damage(item)
    with pytest.raises(CorruptItemError):
        decode_item(item, "k", 0)


# -- the cache: tiers, single flight, failures -------------------------------------------------

class SlowEndpoint:
    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.calls = 0
        self.delay, self.fail = delay, fail
        self.lock = threading.Lock()

    def __call__(self) -> InvokeResult:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            raise EndpointUnavailableError("busy")
        return ANSWER


def test_a_miss_calls_then_a_hit_does_not() -> None:
    cache = PredictionCache(MemoryTier(1 << 20), None)
    endpoint = SlowEndpoint()
    first, second = cache.request(), cache.request()
    assert first.fetch({"m": 1}, b"x", endpoint).attempts == 1
    hit = second.fetch({"m": 1}, b"x", endpoint)
    assert (first.status, second.status, second.tier) == (MISS, HIT, MEMORY)
    assert endpoint.calls == 1 and hit.attempts == 0 and hit.body == ANSWER.body


def test_no_cache_skips_the_read_no_store_the_write_and_bypass_both() -> None:
    cache = PredictionCache(MemoryTier(1 << 20), None)
    endpoint = SlowEndpoint()
    cache.request(CacheControl(write=False)).fetch({}, b"x", endpoint)
    assert len(cache.memory or []) == 0
    fresh = cache.request(CacheControl(read=False))
    fresh.fetch({}, b"x", endpoint)
    assert fresh.status == MISS and endpoint.calls == 2 and len(cache.memory or []) == 1
    stale_ok = cache.request(CacheControl(write=False))
    stale_ok.fetch({}, b"x", endpoint)
    assert stale_ok.status == HIT and endpoint.calls == 2
    off = cache.request(enabled=False)
    off.fetch({}, b"x", endpoint)
    assert (off.status, off.active, endpoint.calls) == (BYPASS, False, 3)
    nothing = PredictionCache(None, None).request()
    nothing.fetch({}, b"x", endpoint)
    assert nothing.status == BYPASS and endpoint.calls == 4


def test_errors_of_the_endpoint_are_never_cached() -> None:
    cache = PredictionCache(MemoryTier(1 << 20), None)
    failing = SlowEndpoint(fail=True)
    for _ in range(2):
        with pytest.raises(EndpointUnavailableError):
            cache.request().fetch({}, b"x", failing)
    assert failing.calls == 2 and len(cache.memory or []) == 0


class Waits:
    """How every wait for a flight ended: the timeout it was given and whether the flight's
    landing released it (False: it ran to its timeout)."""

    def __init__(self) -> None:
        self.ended: list[tuple[float | None, bool]] = []
        self._waiting = 0
        self._changed = threading.Condition()

    def entered(self) -> None:
        with self._changed:
            self._waiting += 1
            self._changed.notify_all()

    def finished(self, timeout: float | None, released: bool) -> None:
        with self._changed:
            self.ended.append((timeout, released))

    def until_waiting(self, count: int) -> None:
        """Block until ``count`` requests wait for a flight (a guard, not a measurement: a
        test that never gets there fails instead of hanging)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._waiting >= count, timeout=60):
                raise AssertionError(f"{self._waiting} of {count} requests waited")


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    """Every flight the cache makes reports how its waits end."""
    watched = Waits()

    class WatchedEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            watched.entered()
            released = super().wait(timeout)
            watched.finished(timeout, released)
            return released

    class WatchedFlight(cache_module._Flight):
        def __init__(self) -> None:
            super().__init__()
            self.done = WatchedEvent()

    monkeypatch.setattr(cache_module, "_Flight", WatchedFlight)
    return watched


def test_eight_concurrent_misses_make_one_endpoint_call(waits: Waits) -> None:
    cache = PredictionCache(MemoryTier(1 << 20), None, flight_wait=10)
    calls: list[int] = []

    def endpoint() -> InvokeResult:  # the leader answers once the seven others wait for it
        calls.append(1)
        waits.until_waiting(7)
        return ANSWER

    start = threading.Barrier(8)
    uses = [cache.request() for _ in range(8)]
    answers: list[InvokeResult] = []

    def run(n: int) -> None:
        start.wait()
        answers.append(uses[n].fetch({"m": 1}, b"same", endpoint))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert waits.ended == [(10, True)] * 7  # released by the landing, none at its timeout
    assert len(answers) == 8 and all(a.body == ANSWER.body for a in answers)
    assert sorted((use.status, use.tier) for use in uses) == [(HIT, FLIGHT)] * 7 + [
        (MISS, None)]


def test_waiters_call_the_endpoint_themselves_when_the_leader_fails(waits: Waits) -> None:
    mono = Clock(100.0)
    cache = PredictionCache(MemoryTier(1 << 20), None, flight_wait=10, reserve=22,
                            monotonic=mono)
    leader_in = threading.Event()

    def failing() -> InvokeResult:
        leader_in.set()
        waits.until_waiting(1)
        raise EndpointUnavailableError("busy")

    errors: list[Exception] = []

    def lead() -> None:
        try:
            cache.request().fetch({}, b"x", failing)
        except EndpointUnavailableError as error:
            errors.append(error)

    thread = threading.Thread(target=lead)
    thread.start()
    leader_in.wait()
    endpoint = SlowEndpoint()
    waiter = cache.request()
    assert waiter.fetch({}, b"x", endpoint, deadline=mono.now + 25).body == ANSWER.body
    thread.join()
    assert errors and endpoint.calls == 1 and waiter.status == MISS
    # it waited 25 - 22 s at most (keeping the reserve for its own call), and was released
    # by the failed leader's landing, not by that timeout
    assert waits.ended == [(pytest.approx(3), True)]


@pytest.mark.parametrize(("left", "timeout"), [
    (None, 5), (40, 5), (25, 3), (22.05, 0.05),  # flight_wait, or what the reserve leaves
    (3, 3), (-1, 0)])  # less than the reserve left: no call of its own fits, wait for the leader
def test_a_waiter_waits_only_while_budget_is_left_to_call_itself(
        waits: Waits, left: float | None, timeout: float) -> None:
    mono = Clock(100.0)
    cache = PredictionCache(MemoryTier(1 << 20), None, flight_wait=5, reserve=22,
                            monotonic=mono)
    flight, leader = cache.join("k")
    assert leader
    cache.land("k", flight, ANSWER)  # landed: the wait returns at once, its timeout is noted
    assert cache.wait(flight, None if left is None else mono.now + left) is ANSWER
    assert waits.ended == [(pytest.approx(timeout), True)]


def test_a_waiter_whose_leader_never_lands_calls_itself(waits: Waits) -> None:
    mono = Clock(100.0)
    cache = PredictionCache(MemoryTier(1 << 20), None, flight_wait=5, reserve=22,
                            monotonic=mono)
    flight, leader = cache.join("k")
    assert leader
    assert cache.wait(flight, deadline=mono.now + 22.05) is None
    assert waits.ended == [(pytest.approx(0.05), False)]
    assert cache.join("k") == (flight, False)
    cache.land("k", flight, ANSWER)
    assert cache.join("k")[1]  # a landed flight is gone: the next miss leads a new one


class RacingCache(PredictionCache):
    """Runs ``between`` once, after a request's read and before its join: the window where a
    whole flight of the same key can take off and land."""

    between: Callable[[], object] | None = None

    def join(self, key: str) -> Any:
        hook, self.between = self.between, None
        if hook is not None:
            hook()
        return super().join(key)


def test_a_flight_that_lands_between_a_read_and_the_join_is_not_called_again() -> None:
    cache = RacingCache(MemoryTier(1 << 20), None)
    endpoint = SlowEndpoint()
    late, early = cache.request(), cache.request()
    cache.between = lambda: early.fetch({}, b"x", endpoint)
    answer = late.fetch({}, b"x", endpoint)
    assert endpoint.calls == 1
    assert (early.status, late.status, late.tier) == (MISS, HIT, MEMORY)
    assert answer.attempts == 0 and answer.body == ANSWER.body
    assert cache.join(cache_key({}, b"x"))[1]  # the late request's flight landed too


class SlowTable(TableTier):
    """Runs ``between`` once, during a GetItem (the window is a whole round trip)."""

    between: Callable[[], object] | None = None

    def get(self, key: str) -> tuple[InvokeResult, float] | None:
        hook, self.between = self.between, None
        if hook is not None:
            hook()
        return super().get(key)


def test_a_flight_that_lands_during_a_getitem_is_not_called_again() -> None:
    client = dynamodb()
    table = SlowTable("t", client)
    cache = PredictionCache(MemoryTier(1 << 20), table)
    endpoint = SlowEndpoint()
    late, early = cache.request(), cache.request()
    table.between = lambda: early.fetch({}, b"x", endpoint)
    with Stubber(client) as stub:
        stub.add_response("get_item", {})  # the early request's read
        stub.add_response("put_item", {})  # its write
        stub.add_response("get_item", {})  # the late request's read, which began first
        late.fetch({}, b"x", endpoint)
        stub.assert_no_pending_responses()
    assert endpoint.calls == 1
    # the second look was in memory: no second GetItem (the Stubber has none queued)
    assert (late.status, late.tier, late.errors, early.errors) == (HIT, MEMORY, 0, 0)


def test_without_a_memory_tier_the_leader_looks_in_the_table_again() -> None:
    client = dynamodb()
    clock = Clock()
    table = SlowTable("t", client, clock)
    cache = PredictionCache(None, table, clock=clock)
    endpoint = SlowEndpoint()
    late, early = cache.request(), cache.request()
    table.between = lambda: early.fetch({}, b"x", endpoint)
    key = cache_key({}, b"x")
    with Stubber(client) as stub:
        for _ in range(2):  # the early request's read and second look, then its write
            stub.add_response("get_item", {})
        stub.add_response("put_item", {})
        stub.add_response("get_item", {})  # the late request's read
        stub.add_response("get_item", {"Item": encode_item(key, ANSWER, clock.now + 60)})
        late.fetch({}, b"x", endpoint)
        stub.assert_no_pending_responses()
    assert endpoint.calls == 1 and (late.status, late.tier, late.errors) == (HIT, TABLE, 0)


def dynamodb() -> Any:
    return boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def test_a_table_hit_is_promoted_to_memory() -> None:
    client = dynamodb()
    clock = Clock()
    cache = PredictionCache(MemoryTier(1 << 20, clock), TableTier("t", client, clock),
                            clock=clock)
    key = cache_key({}, b"x")
    item = encode_item(key, ANSWER, clock.now + 100)
    with Stubber(client) as stub:
        stub.add_response("get_item", {"Item": item},
                          {"TableName": "t", "Key": {"key": {"S": key}},
                           "ConsistentRead": False})
        use = cache.request()
        assert use.fetch({}, b"x", SlowEndpoint(fail=True)).body == ANSWER.body
        assert (use.status, use.tier) == (HIT, TABLE)
        again = cache.request()
        again.fetch({}, b"x", SlowEndpoint(fail=True))  # no stubbed response: memory
        assert (again.status, again.tier) == (HIT, MEMORY)


@pytest.mark.parametrize(("max_age", "status"), [(30, HIT), (29, MISS)])
def test_max_age_applies_to_table_items(max_age: int, status: str) -> None:
    """The item was stored 30 s ago (it expires a TTL after that)."""
    client = dynamodb()
    clock = Clock()
    cache = PredictionCache(None, TableTier("t", client, clock), 3600, clock=clock)
    key = cache_key({}, b"x")
    item = encode_item(key, ANSWER, clock.now - 30 + 3600)
    endpoint = SlowEndpoint()
    with Stubber(client) as stub:
        stub.add_response("get_item", {"Item": item})
        if status == MISS:
            stub.add_response("get_item", {"Item": item})  # the leader's second look
            stub.add_response("put_item", {})
        use = cache.request(CacheControl.parse(f"max-age={max_age}"))
        use.fetch({}, b"x", endpoint)
        stub.assert_no_pending_responses()
    assert (use.status, endpoint.calls, use.errors) == (status, 0 if status == HIT else 1, 0)


def test_a_miss_in_both_writes_both_with_the_ttl() -> None:
    client = dynamodb()
    clock = Clock()
    cache = PredictionCache(MemoryTier(1 << 20, clock), TableTier("t", client, clock),
                            ttl_seconds=600, clock=clock)
    key = cache_key({}, b"x")
    with Stubber(client) as stub:
        stub.add_response("get_item", {})
        stub.add_response("put_item", {}, {"TableName": "t",
                                           "Item": encode_item(key, ANSWER, clock.now + 600)})
        use = cache.request()
        use.fetch({}, b"x", SlowEndpoint(), deadline=time.monotonic() + 20)
        stub.assert_no_pending_responses()
    assert use.status == MISS and cache.memory is not None and cache.memory.keys() == [key]


def test_no_table_write_when_the_budget_has_no_room_for_one() -> None:
    client = dynamodb()
    cache = PredictionCache(None, TableTier("t", client))
    with Stubber(client) as stub:
        stub.add_response("get_item", {})
        stub.add_response("get_item", {})  # the leader's second look (no memory tier)
        use = cache.request()
        use.fetch({}, b"x", SlowEndpoint(), deadline=time.monotonic() + 1)
    assert use.write_skipped and use.errors == 0


def test_an_answer_too_large_for_the_table_is_counted_not_stored() -> None:
    client = dynamodb()
    cache = PredictionCache(None, TableTier("t", client))
    big = answer(os.urandom(DYNAMODB_ITEM_LIMIT))
    with Stubber(client) as stub:
        stub.add_response("get_item", {})
        stub.add_response("get_item", {})  # the leader's second look (no memory tier)
        use = cache.request()
        use.fetch({}, b"x", lambda: big)
    assert use.skipped_too_large == 1 and use.errors == 0


@pytest.mark.parametrize("code", ["ResourceNotFoundException",
                                  "ProvisionedThroughputExceededException"])
def test_table_failures_are_counted_and_fall_through_to_the_endpoint(
        code: str, caplog: pytest.LogCaptureFixture) -> None:
    client = dynamodb()
    cache = PredictionCache(None, TableTier("t", client))
    endpoint = SlowEndpoint()
    with Stubber(client) as stub:
        stub.add_client_error("get_item", code, "arn:aws:dynamodb:secret-account", 400)
        stub.add_client_error("put_item", code, "arn:aws:dynamodb:secret-account", 400)
        use = cache.request()
        assert use.fetch({}, b"x", endpoint).body == ANSWER.body
        stub.assert_no_pending_responses()
    assert endpoint.calls == 1 and use.errors == 2 and use.status == MISS
    warnings = [r.getMessage() for r in caplog.records if r.name == "sagegate.cache"]
    assert warnings == [f"prediction cache read failed: {code}",
                        f"prediction cache write failed: {code}"]
    assert "secret-account" not in caplog.text


def test_a_corrupt_table_item_is_an_error_and_a_miss() -> None:
    client = dynamodb()
    cache = PredictionCache(None, TableTier("t", client))
    key = cache_key({}, b"x")
    with Stubber(client) as stub:
        stub.add_response("get_item", {"Item": {"key": {"S": key}, "answer": {"B": b"junk"},
                                                "content_type": {"S": "a/b"},
                                                "variant": {"S": ""},
                                                "expires_at": {"N": "99999999999"}}})
        stub.add_response("put_item", {})
        use = cache.request()
        use.fetch({}, b"x", SlowEndpoint())
    assert use.errors == 1 and use.status == MISS


def test_an_expired_table_item_is_a_miss() -> None:
    client = dynamodb()
    clock = Clock()
    cache = PredictionCache(None, TableTier("t", client, clock), clock=clock)
    key = cache_key({}, b"x")
    endpoint = SlowEndpoint()
    with Stubber(client) as stub:
        for _ in range(2):  # the read and the leader's second look (no memory tier)
            stub.add_response("get_item", {"Item": encode_item(key, ANSWER, clock.now - 1)})
        stub.add_response("put_item", {})
        use = cache.request()
        use.fetch({}, b"x", endpoint)
    assert use.status == MISS and use.errors == 0 and endpoint.calls == 1


def test_the_cache_is_built_from_the_settings() -> None:
    built = PredictionCache.from_settings(Settings.from_env(
        {"ENDPOINT_NAME": "e", "CACHE_TABLE": "sagegate-cache", "CACHE_TTL_SECONDS": "120"}))
    assert built.memory is not None and built.memory.max_bytes == 4 * 1024 * 1024
    assert built.table is not None and built.table.table == "sagegate-cache"
    assert built.ttl_seconds == 120
    off = PredictionCache.from_settings(Settings.from_env(
        {"ENDPOINT_NAME": "e", "CACHE_MEMORY_BYTES": "0"}))
    assert not off.enabled and off.request().status == BYPASS
