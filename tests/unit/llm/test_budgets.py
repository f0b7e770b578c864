"""Token budgets (chalicelib.llm.budgets): the windows' math, OpenAI's duration format, the
reservation's refusal and give-back, the settlement, failing open; the settings and
model.json's ``llm.budgets`` that configure them. In memory: no I/O."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError
from chalicelib.llm.budgets import (
    ANONYMOUS,
    BudgetExceeded,
    CounterError,
    Limits,
    MemoryCounters,
    TableCounters,
    TokenBudgets,
    Window,
    duration,
    reservation,
)
from chalicelib.llm.requests import Operation, read_request
from chalicelib.registry.loading import load_model
from chalicelib.registry.specs import LlmSchema, LlmSpec, ModelSpec

DAY_START = 1_765_065_600  # midnight UTC, 7 December 2025
NOW = DAY_START + 3600 * 10 + 25.5  # 10:00:25.5 UTC


def model(name: str = "smol", **llm: Any) -> ModelSpec:
    return ModelSpec(name=name, folder=Path("."), endpoint=name, pipeline="llm",
                     content_type="application/json", accept="application/json",
                     signature=None,  # type: ignore[arg-type]
                     llm=LlmSpec(LlmSchema.LMI_CHAT, **llm))


def budgets(per_minute: int = 100, per_day: int = 1000, counters: Any = None,
            keys: dict[str, Limits] | None = None) -> TokenBudgets:
    return TokenBudgets(counters or MemoryCounters(), Limits(per_minute, per_day), keys,
                        clock=lambda: NOW)


class FailingCounters(MemoryCounters):
    """A store that fails the operations named."""

    def __init__(self, *failing: str) -> None:
        super().__init__()
        self.failing = set(failing)

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        if "reserve" in self.failing:
            raise CounterError("ProvisionedThroughputExceededException")
        return super().reserve(item, amount, limit, expires_at)

    def add(self, item: str, amount: int, expires_at: int) -> int:
        if "add" in self.failing:
            raise CounterError("ConnectTimeoutError")
        return super().add(item, amount, expires_at)

    def read(self, item: str) -> int:
        if "read" in self.failing:
            raise CounterError("ReadTimeoutError")
        return super().read(item)


# --- windows and headers ----------------------------------------------------------------

def test_a_window_starts_at_its_minute_or_its_utc_day_and_names_its_item() -> None:
    minute, day = Window("*", "minute", 10), Window("smol", "day", 10)
    assert (minute.start(NOW), minute.ends(NOW)) == (DAY_START + 36000, DAY_START + 36060)
    assert (day.start(NOW), day.ends(NOW)) == (DAY_START, DAY_START + 86400)
    assert minute.item("key-1", NOW) == f"key-1#*#minute#{DAY_START + 36000}"
    assert day.item("key-1", NOW) == f"key-1#smol#day#{DAY_START}"


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "0s"), (-3.0, "0s"), (0.02, "20ms"), (0.9996, "1s"), (1.0, "1s"), (34.5, "34.5s"),
    (60.0, "1m0s"), (360.0, "6m0s"), (3723.25, "1h2m3.25s"), (86399.0, "23h59m59s")])
def test_a_reset_is_written_as_openais_headers_write_durations(seconds: float,
                                                                text: str) -> None:
    assert duration(seconds) == text


def test_the_stage_windows_apply_to_every_model_and_a_models_own_besides() -> None:
    found = budgets().windows("key-1", model(tokens_per_minute=50))
    assert found == [Window("*", "minute", 100), Window("*", "day", 1000),
                     Window("smol", "minute", 50)]
    assert budgets(per_minute=0).windows("key-1", None) == [Window("*", "day", 1000)]


def test_a_keys_own_limits_replace_the_stages() -> None:
    own = budgets(keys={"big": Limits(5000, 0)})
    assert own.windows("big", None) == [Window("*", "minute", 5000)]
    assert own.windows("other", None) == [Window("*", "minute", 100), Window("*", "day", 1000)]


def test_a_request_reserves_its_max_tokens_and_its_prompts_bytes() -> None:
    models = {"smol": model(max_tokens=64)}
    named = read_request(json.dumps({"model": "smol", "prompt": "héllo",
                                     "max_tokens": 7}).encode(), Operation.TEXT, models)
    default = read_request(json.dumps({"model": "smol", "prompt": "abc"}).encode(),
                           Operation.TEXT, models)
    assert reservation(named) == 7 + 6  # "héllo" is 6 bytes of UTF-8
    assert reservation(default) == 64 + 3  # the model's default max_tokens


def test_a_chat_reserves_its_templates_own_tokens_besides() -> None:
    models = {"smol": model(max_tokens=64, template_tokens=30)}
    chat = read_request(json.dumps({"model": "smol", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hi"}]}).encode(), Operation.CHAT, models)
    text = read_request(json.dumps({"model": "smol", "prompt": "hi",
                                    "max_tokens": 5}).encode(), Operation.TEXT, models)
    assert reservation(chat) == 5 + (24 + len("user") + 2) + 30
    assert reservation(text) == 5 + 2  # a text completion is sent without the template


# --- reserving ---------------------------------------------------------------------------

def test_a_reservation_counts_in_every_window_and_its_headers_are_the_tightest() -> None:
    counters = MemoryCounters()
    held = budgets(counters=counters).reserve("key-1", model(), 30)
    assert sorted(counters.counts.values()) == [30, 30]
    assert held.headers() == {"x-ratelimit-limit-tokens": "100",
                              "x-ratelimit-remaining-tokens": "70",
                              "x-ratelimit-reset-tokens": "34.5s"}


def test_a_window_without_room_refuses_with_openais_429_and_gives_the_others_back() -> None:
    counters = MemoryCounters()
    stage = budgets(per_minute=1000, per_day=1000, counters=counters)
    smol = model(tokens_per_minute=50)
    stage.reserve("key-1", smol, 40)
    with pytest.raises(BudgetExceeded) as caught:
        stage.reserve("key-1", smol, 20)  # the model's minute has 10 left
    refusal = caught.value
    assert (refusal.status, refusal.kind, refusal.code, refusal.param) == (
        429, "tokens", "rate_limit_exceeded", None)
    assert refusal.headers == {"Retry-After": "35", "x-ratelimit-limit-tokens": "50",
                               "x-ratelimit-remaining-tokens": "10",
                               "x-ratelimit-reset-tokens": "34.5s"}
    assert "smol on tokens per min (TPM): Limit 50, Used 40, Requested 20" in refusal.message
    assert sorted(counters.counts.values()) == [40, 40, 40]  # the stage's 20s given back


def test_a_request_larger_than_a_window_is_refused_without_counting() -> None:
    counters = MemoryCounters()
    with pytest.raises(BudgetExceeded, match="Request too large"):
        budgets(counters=counters).reserve(None, model(), 101)
    assert set(counters.counts.values()) <= {0}


def test_a_request_larger_than_a_window_is_refused_when_its_count_cannot_be_read() -> None:
    """The refusal needs no table: a failed read is a count of 0, never failing open."""
    with pytest.raises(BudgetExceeded, match="Request too large") as caught:
        budgets(counters=FailingCounters("read")).reserve(None, model(), 101)
    assert caught.value.headers["x-ratelimit-remaining-tokens"] == "100"


def test_of_several_refusing_windows_the_one_refusing_longest_is_told() -> None:
    counters = MemoryCounters()
    stage = budgets(per_minute=100, per_day=150, counters=counters)
    counters.counts[f"key-1#*#minute#{DAY_START + 36000}"] = 50
    counters.counts[f"key-1#*#day#{DAY_START}"] = 140
    with pytest.raises(BudgetExceeded) as caught:
        stage.reserve("key-1", model(), 60)  # the minute and the day both refuse
    refusal = caught.value
    assert refusal.headers["Retry-After"] == str(86400 - 36025)  # the day's end, not 35 s
    assert refusal.headers["x-ratelimit-limit-tokens"] == "150"
    assert "tokens per day (TPD): Limit 150, Used 140, Requested 60" in refusal.message


def test_a_window_the_request_is_larger_than_is_told_before_one_that_refuses_longer() -> None:
    counters = MemoryCounters()
    stage = budgets(per_minute=0, per_day=1000, counters=counters)
    counters.counts[f"key-1#*#day#{DAY_START}"] = 990
    with pytest.raises(BudgetExceeded, match=r"Request too large .*\(TPM\)") as caught:
        # the stage's day refuses first and longer; the model's minute is smaller than it
        stage.reserve("key-1", model(tokens_per_minute=50), 60)
    assert caught.value.headers["x-ratelimit-limit-tokens"] == "50"
    assert "try again" not in caught.value.message


def test_callers_without_a_key_share_one_budget() -> None:
    counters = MemoryCounters()
    stage = budgets(counters=counters)
    stage.reserve(None, model(), 60)
    with pytest.raises(BudgetExceeded):
        stage.reserve(None, model(), 60)
    assert all(item.startswith(ANONYMOUS + "#") for item in counters.counts)
    stage.reserve("key-2", model(), 60)  # another key's budget is its own


def test_requests_at_once_never_overspend_a_window() -> None:
    counters = MemoryCounters()
    stage = budgets(per_minute=1000, per_day=0, counters=counters)
    taken: list[int] = []

    def ask() -> None:
        try:
            stage.reserve("key-1", model(), 70)
            taken.append(70)
        except BudgetExceeded:
            pass

    threads = [threading.Thread(target=ask) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(taken) == 980 and list(counters.counts.values()) == [980]


def test_a_requests_windows_are_reserved_at_once() -> None:
    """One round trip to the table before the endpoint call, not one a window: each window's
    reservation waits for the other's (a bounded wait: reserved one after the other, the first
    would never see the second)."""
    class Meeting(MemoryCounters):
        def __init__(self) -> None:
            super().__init__()
            self.meeting = threading.Barrier(2, timeout=10)

        def reserve(self, item: str, amount: int, limit: int,
                    expires_at: int) -> tuple[bool, int]:
            self.meeting.wait()
            return super().reserve(item, amount, limit, expires_at)

    held = budgets(counters=Meeting()).reserve("key-1", model(), 5)
    assert len(held.standings) == 2


class Held(MemoryCounters):
    """Counters whose reservations wait (bounded) until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        assert self.go.wait(10)
        return super().reserve(item, amount, limit, expires_at)


@pytest.mark.parametrize("per_day", [1000, 0])  # two windows, and one
def test_a_reservation_begun_early_runs_while_the_caller_goes_on(per_day: int) -> None:
    """What a stream does while its endpoint's stream opens: ``reserving`` returns before the
    table has answered (made here, the reservation would wait in vain for ``go``)."""
    counters = Held()
    pending = budgets(per_day=per_day, counters=counters).reserving("key-1", model(), 5)
    counters.go.set()
    held = pending()
    assert len(held.standings) == (2 if per_day else 1)
    assert sorted(counters.counts.values()) == [5] * len(held.standings)


def test_a_reservation_begun_early_is_refused_when_waited_for() -> None:
    counters = MemoryCounters()
    stage = budgets(per_minute=100, per_day=1000, counters=counters)
    stage.reserve("key-1", model(), 90)
    pending = stage.reserving("key-1", model(), 20)
    with pytest.raises(BudgetExceeded):
        pending()
    assert sorted(counters.counts.values()) == [90, 90]  # the day's 20 given back


def test_a_key_is_crowded_from_a_refusal_or_a_tight_grant_until_the_window_ends() -> None:
    clock = [NOW]
    stage = TokenBudgets(MemoryCounters(), Limits(100, 1000), clock=lambda: clock[0])
    assert not stage.crowded("key-1")
    stage.reserve("key-1", model(), 30)  # 70 left: room for another as large
    assert not stage.crowded("key-1")
    stage.reserve("key-1", model(), 50)  # 20 left, less than it took
    assert stage.crowded("key-1") and not stage.crowded("key-2") and not stage.crowded(None)
    with pytest.raises(BudgetExceeded):
        stage.reserve(None, model(), 120)
    assert stage.crowded(None)
    clock[0] = (NOW // 60 + 1) * 60  # the minute's window ended
    assert not stage.crowded("key-1") and not stage.crowded(None)
    stage.reserve("key-1", model(), 10)  # a new minute, room left: cleared
    assert not stage.crowded("key-1")


# --- settling ----------------------------------------------------------------------------

def test_settling_moves_each_window_to_what_was_spent_once() -> None:
    counters = MemoryCounters()
    held = budgets(counters=counters).reserve("key-1", model(), 80)
    held.settle(25)
    held.settle(25)  # once only
    assert sorted(counters.counts.values()) == [25, 25]
    assert held.headers()["x-ratelimit-remaining-tokens"] == "75"


def test_spending_more_than_reserved_is_counted_too() -> None:
    counters = MemoryCounters()
    held = budgets(counters=counters).reserve("key-1", model(), 10)
    held.settle(130)
    assert sorted(counters.counts.values()) == [130, 130]
    assert held.headers()["x-ratelimit-remaining-tokens"] == "0"


def test_a_failing_table_fails_open_and_counts_its_errors() -> None:
    held = budgets(counters=FailingCounters("reserve")).reserve("key-1", model(), 50)
    assert (held.standings, held.errors, held.headers()) == ([], 2, {})
    settling = budgets(counters=FailingCounters("add")).reserve("key-1", model(), 5)
    settling.settle(1)
    assert settling.errors == 2


def test_table_counters_translate_the_tables_failures() -> None:
    class Broken:
        def update_item(self, **_: Any) -> Any:
            raise OSError("connection refused")

        def get_item(self, **_: Any) -> Any:
            raise OSError("connection refused")

    counters = TableCounters("budgets", Broken())
    for call in (lambda: counters.reserve("k", 1, 10, 0), lambda: counters.add("k", 1, 0),
                 lambda: counters.read("k")):
        with pytest.raises(CounterError, match="OSError"):
            call()


# --- configuration -----------------------------------------------------------------------

def test_budgets_are_off_without_a_table_and_read_from_the_settings() -> None:
    assert TokenBudgets.from_settings(Settings.from_env({"ENDPOINT_NAME": "e"})) is None
    on = TokenBudgets.from_settings(Settings.from_env({
        "ENDPOINT_NAME": "e", "TOKEN_BUDGET_TABLE": "budgets", "TOKEN_BUDGET_PER_MINUTE": "7",
        "TOKEN_BUDGET_KEYS": json.dumps({"k": {"tokens_per_day": 9}})}))
    assert on is not None and isinstance(on.counters, TableCounters)
    assert on.windows("k", None) == [Window("*", "minute", 7), Window("*", "day", 9)]
    assert on.windows("j", None) == [Window("*", "minute", 7), Window("*", "day", 2_000_000)]


@pytest.mark.parametrize(("env", "message"), [
    ({"TOKEN_BUDGET_PER_MINUTE": "-1"}, "TOKEN_BUDGET_PER_MINUTE must be between 0"),
    ({"TOKEN_BUDGET_TABLE": "a b"}, "TOKEN_BUDGET_TABLE must be a DynamoDB table name"),
    ({"TOKEN_BUDGET_KEYS": "[1]"}, "TOKEN_BUDGET_KEYS must be a JSON object"),
    ({"TOKEN_BUDGET_KEYS": '{"k": {"tpm": 1}}'}, r"TOKEN_BUDGET_KEYS\['k'\] has \['tpm'\]"),
    ({"TOKEN_BUDGET_KEYS": '{"k": {"tokens_per_day": true}}'},
     r"TOKEN_BUDGET_KEYS\['k'\]\.tokens_per_day must be a whole number"),
])
def test_a_bad_budget_setting_names_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env({"ENDPOINT_NAME": "e", **env})


def _load(tmp_path: Path, llm: dict[str, Any]) -> ModelSpec:
    folder = tmp_path / "llm-a"
    folder.mkdir(exist_ok=True)
    (folder / "model.json").write_text(json.dumps(
        {"endpoint": "smol", "pipeline": "llm", "llm": {"schema": "lmi", **llm}}))
    return load_model(folder, Settings.from_env({"ENDPOINT_NAME": "e"}), {})


def test_a_models_budgets_are_read_from_its_llm_block(tmp_path: Path) -> None:
    found = _load(tmp_path, {"budgets": {"tokens_per_minute": 500}}).llm
    assert found is not None and (found.tokens_per_minute, found.tokens_per_day,
                                  found.template_tokens) == (500, 0, 0)
    assert _load(tmp_path, {"budgets": {"template_tokens": 30}}).llm == LlmSpec(
        LlmSchema.LMI, template_tokens=30)


@pytest.mark.parametrize(("budgets_block", "message"), [
    ({"tokens_per_hour": 1}, r"key 'llm\.budgets\.tokens_per_hour' is not an llm\.budgets key"),
    ({"tokens_per_day": -5}, r"key 'llm\.budgets\.tokens_per_day' must be a whole number"),
    ({"tokens_per_minute": "9"}, r"key 'llm\.budgets\.tokens_per_minute' must be a whole"),
    ([1], r"key 'llm\.budgets' must be an object"),
    ({"template_tokens": -1}, r"key 'llm\.budgets\.template_tokens' must be a whole number "
                              r"from 0 \(none\) to 1000000"),
])
def test_a_bad_models_budget_stops_start_up_naming_its_key(
        tmp_path: Path, budgets_block: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _load(tmp_path, {"budgets": budgets_block})
