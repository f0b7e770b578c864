"""Fault drawing (seeded statistics), per-request triggers and malformed answers."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from emulator import errors, faults
from emulator.container import ContainerReply
from emulator.faults import FaultConfig, FaultPlan, FaultRequest

GOOD = ContainerReply(200, b"[0.1, 0.2, 0.7]", "application/json")


def test_draws_errors_at_their_configured_rates() -> None:
    config = FaultConfig(error_rate=(("ModelError", 0.1), ("ServiceUnavailable", 0.05)))
    rng = random.Random(1234)

    counts = Counter(faults.draw_faults(config, rng).error for _ in range(20_000))

    assert counts["ModelError"] / 20_000 == pytest.approx(0.10, abs=0.01)
    assert counts["ServiceUnavailable"] / 20_000 == pytest.approx(0.05, abs=0.01)
    assert counts[None] / 20_000 == pytest.approx(0.85, abs=0.01)


def test_draws_malformed_answers_only_when_no_error_is_drawn() -> None:
    config = FaultConfig(error_rate=(("InternalFailure", 0.5),), malformed_output=0.2)
    rng = random.Random(99)

    plans = [faults.draw_faults(config, rng) for _ in range(20_000)]

    assert not any(plan.error and plan.malformed for plan in plans)
    malformed = sum(plan.malformed is not None for plan in plans) / 20_000
    assert malformed == pytest.approx(0.5 * 0.2, abs=0.01)
    assert {plan.malformed for plan in plans} - {None} == set(faults.MALFORMED_KINDS)


def test_no_faults_configured_means_a_clean_plan() -> None:
    plan = faults.draw_faults(FaultConfig(), random.Random(0))

    assert plan == FaultPlan()


def test_is_reproducible_with_the_same_seed() -> None:
    config = FaultConfig(error_rate=(("ModelError", 0.3),), malformed_output=0.3)

    def run(seed: int) -> list[FaultPlan]:
        rng = random.Random(seed)
        return [faults.draw_faults(config, rng) for _ in range(200)]

    assert run(5) == run(5)
    assert run(5) != run(6)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ("emulator-fault=ModelError", FaultRequest("ModelError")),
        ("trace=1; emulator-fault=ModelError:503", FaultRequest("ModelError", "503")),
        ("emulator-fault=MalformedOutput:truncated", FaultRequest("MalformedOutput", "truncated")),
        ("a=b,emulator-latency-ms=250", FaultRequest(latency_ms=250.0)),
        ("Emulator-Fault = none", FaultRequest("none")),
        ("opaque text without pairs", FaultRequest()),
        (None, FaultRequest()),
    ],
)
def test_parses_fault_triggers_from_custom_attributes(
    attributes: str | None, expected: FaultRequest
) -> None:
    assert faults.parse_fault_request(attributes) == expected


@pytest.mark.parametrize(
    "attributes",
    [
        "emulator-fault=Boom",
        "emulator-fault=ModelError:200",
        "emulator-fault=ModelError:abc",
        "emulator-fault=MalformedOutput:sideways",
        "emulator-latency-ms=-1",
        "emulator-latency-ms=soon",
        "emulator-latency-ms=999999999",
    ],
)
def test_rejects_unknown_or_bad_triggers(attributes: str) -> None:
    with pytest.raises(errors.ValidationError):
        faults.parse_fault_request(attributes)


def test_a_trigger_replaces_the_random_draw() -> None:
    always = FaultConfig(latency_ms=5, error_rate=(("InternalFailure", 1.0),))

    plan = faults.plan_faults(always, random.Random(0), FaultRequest("ModelError", "404"))

    assert plan == FaultPlan(error="ModelError", status=404, latency_ms=5)


def test_none_trigger_suppresses_configured_faults() -> None:
    always = FaultConfig(error_rate=(("InternalFailure", 1.0),))

    assert faults.plan_faults(always, random.Random(0), FaultRequest("none")).error is None


def test_without_triggers_the_draw_applies_and_latency_can_be_overridden() -> None:
    always = FaultConfig(latency_ms=5, error_rate=(("ServiceUnavailable", 1.0),))

    plan = faults.plan_faults(always, random.Random(0), FaultRequest(latency_ms=40.0))

    assert plan == FaultPlan(error="ServiceUnavailable", latency_ms=40.0)
    assert faults.plan_faults(always, random.Random(0), None).latency_ms == 5


@pytest.mark.parametrize("code", sorted(faults.SERVICE_FAULTS))
def test_service_faults_raise_their_modeled_error(code: str) -> None:
    with pytest.raises(errors.EmulatorError) as raised:
        faults.raise_service_fault(FaultPlan(error=code))

    assert code == raised.value.CODE


def test_model_error_and_no_error_do_not_raise_at_the_service() -> None:
    faults.raise_service_fault(FaultPlan(error="ModelError"))
    faults.raise_service_fault(FaultPlan())


def test_run_container_sleeps_the_latency_then_calls() -> None:
    slept: list[float] = []

    reply = faults.run_container(FaultPlan(latency_ms=250), lambda: GOOD, slept.append)

    assert (reply, slept) == (GOOD, [0.25])


def test_run_container_answers_the_model_error_without_calling() -> None:
    def call() -> ContainerReply:
        raise AssertionError("the container must not run")

    reply = faults.run_container(FaultPlan(error="ModelError", status=503), call, lambda s: None)

    assert reply.status == 503
    assert b"fault injection" in reply.body


@pytest.mark.parametrize("kind", sorted(faults.MALFORMED_KINDS))
def test_malformed_answers_are_not_a_full_json_array(kind: str) -> None:
    reply = faults.run_container(FaultPlan(malformed=kind), lambda: GOOD, lambda s: None)

    assert reply.status == 200
    try:
        parsed = json.loads(reply.body)
    except json.JSONDecodeError:
        return
    assert len(parsed) != 3


def test_wrong_length_drops_one_value_of_a_jsonlines_record() -> None:
    body = b'{"prediction": [0.1, 0.2, 0.7]}'

    assert json.loads(faults.MALFORMED_KINDS["wrong-length"](body)) == {"prediction": [0.1, 0.2]}


def test_malformed_output_leaves_error_answers_alone() -> None:
    refused = ContainerReply(415, b"no", "text/plain")

    reply = faults.run_container(FaultPlan(malformed="empty"), lambda: refused, lambda s: None)

    assert reply == refused
