"""The runtime without HTTP: validation, routing by weight or target, faults, ModelError."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from emulator import errors
from emulator.config import EmulatorConfig, parse_config
from emulator.container import ContainerReply
from emulator.runtime import InvokeRequest, Runtime, choose_variant
from tests.unit.emulator.fakes import FakeContainer

RAW = {
    "allow_fault_header": True,
    "models": {"m": {"path": "m.onnx"}, "n": {"path": "n.onnx"}},
    "endpoints": {
        "ab": {
            "variants": [
                {"name": "A", "model": "m", "weight": 0.7},
                {"name": "B", "model": "n", "weight": 0.3},
                {"name": "Shadow", "model": "n", "weight": 0},
            ]
        },
        "broken": {
            "variants": [
                {"name": "AllTraffic", "model": "m",
                 "faults": {"error_rate": {"ServiceUnavailable": 1.0}}},
            ]
        },
    },
}  # fmt: skip


def make_runtime(
    raw: dict[str, object] | None = None, containers: dict[str, FakeContainer] | None = None
) -> tuple[Runtime, dict[str, FakeContainer]]:
    config = parse_config(raw or RAW, Path("/configs"))
    fakes = containers or {name: FakeContainer() for name in config.models}
    slept: list[float] = []
    return Runtime(config, fakes, random.Random(42), slept.append), fakes


def request(endpoint: str = "ab", body: bytes = b"image", **fields: object) -> InvokeRequest:
    return replace(InvokeRequest(endpoint, body, len(body), "image/jpeg"), **fields)


def config() -> EmulatorConfig:
    return parse_config(RAW, Path("/configs"))


def test_weighted_choice_follows_the_weights() -> None:
    endpoint = config().endpoints["ab"]
    rng = random.Random(2024)

    counts = Counter(choose_variant(endpoint, None, rng).name for _ in range(20_000))

    assert counts["A"] / 20_000 == pytest.approx(0.7, abs=0.015)
    assert counts["B"] / 20_000 == pytest.approx(0.3, abs=0.015)
    assert counts["Shadow"] == 0


def test_target_variant_overrides_weights_even_a_zero_weight() -> None:
    endpoint = config().endpoints["ab"]

    assert choose_variant(endpoint, "Shadow", random.Random(0)).name == "Shadow"


def test_unknown_target_variant_is_a_validation_error() -> None:
    with pytest.raises(errors.ValidationError, match="Variant C not found"):
        choose_variant(config().endpoints["ab"], "C", random.Random(0))


def test_invoke_passes_the_request_to_the_chosen_variants_container() -> None:
    runtime, fakes = make_runtime()

    result = runtime.invoke(request(target_variant="B", accept="application/jsonlines",
                                    custom_attributes="trace=abc"))  # fmt: skip

    assert (result.variant, result.custom_attributes) == ("B", "trace=abc")
    assert result.reply == fakes["n"].reply
    assert fakes["n"].calls == [(b"image", "image/jpeg", "application/jsonlines")]
    assert fakes["m"].calls == []


def test_unknown_endpoint_is_reported_like_sagemaker() -> None:
    runtime, _ = make_runtime()

    with pytest.raises(errors.ValidationError) as raised:
        runtime.invoke(request("missing"))

    assert raised.value.message == "Endpoint missing of account 123456789012 not found."


@pytest.mark.parametrize(
    ("fields", "member"),
    [
        ({"endpoint": "bad_name"}, "'bad_name' at 'endpointName'"),
        ({"endpoint": "a" * 64}, "at 'endpointName' failed to satisfy constraint: Member must "
                                 "have length less than or equal to 63"),
        ({"target_variant": "-B"}, "'-B' at 'targetVariant'"),
        ({"custom_attributes": "x" * 1025}, "Value at 'customAttributes'"),
        ({"inference_id": "i" * 65}, "at 'inferenceId'"),
        ({"accept": "a" * 1025}, "at 'accept'"),
    ],
)  # fmt: skip
def test_invalid_members_are_validation_errors(fields: dict[str, object], member: str) -> None:
    runtime, _ = make_runtime()
    endpoint = str(fields.pop("endpoint", "ab"))

    with pytest.raises(errors.ValidationError, match="validation error detected") as raised:
        runtime.invoke(request(endpoint, **fields))

    assert member in raised.value.message


def test_a_body_over_6_mb_is_a_validation_error_that_hides_the_body() -> None:
    runtime, fakes = make_runtime()
    oversized = InvokeRequest("ab", b"", errors.MAX_BODY_BYTES + 1, "image/jpeg")

    with pytest.raises(errors.ValidationError) as raised:
        runtime.invoke(oversized)

    assert "Value at 'body'" in raised.value.message
    assert "6291456" in raised.value.message
    assert not fakes["m"].calls and not fakes["n"].calls


def test_a_body_of_exactly_6_mb_is_accepted() -> None:
    runtime, _ = make_runtime()

    assert runtime.invoke(request(body=b"x" * errors.MAX_BODY_BYTES)).variant in ("A", "B")


def test_target_model_on_a_single_model_endpoint_is_refused() -> None:
    runtime, _ = make_runtime()

    with pytest.raises(errors.ValidationError, match="not a multi-model endpoint"):
        runtime.invoke(request(target_model="model.tar.gz"))


def test_container_error_becomes_model_error_with_the_original_answer() -> None:
    refused = ContainerReply(400, b"unable to evaluate payload provided", "text/plain")
    runtime, _ = make_runtime(containers={"m": FakeContainer(refused), "n": FakeContainer()})

    with pytest.raises(errors.ModelError) as raised:
        runtime.invoke(request(target_variant="A"))

    error = raised.value
    assert (error.original_status, error.original_message) == (
        400, "unable to evaluate payload provided"
    )  # fmt: skip
    assert error.message.startswith('Received client error (400) from primary with message "unable')
    assert error.log_stream_arn.endswith(":log-group:/aws/sagemaker/Endpoints/ab")


def test_configured_service_fault_is_raised() -> None:
    runtime, fakes = make_runtime()

    with pytest.raises(errors.ServiceUnavailable):
        runtime.invoke(request("broken"))
    assert fakes["m"].calls == []


@pytest.mark.parametrize(
    ("trigger", "error"),
    [
        ("ModelNotReadyException", errors.ModelNotReadyException),
        ("InternalFailure", errors.InternalFailure),
        ("ServiceUnavailable", errors.ServiceUnavailable),
        ("InternalDependencyException", errors.InternalDependencyException),
        ("ThrottlingException", errors.ThrottlingException),
        ("ModelError:502", errors.ModelError),
    ],
)
def test_fault_header_triggers_the_named_error(trigger: str, error: type[Exception]) -> None:
    runtime, _ = make_runtime()

    with pytest.raises(error):
        runtime.invoke(request(custom_attributes=f"emulator-fault={trigger}"))


def test_fault_header_none_answers_normally_on_a_faulty_variant() -> None:
    runtime, _ = make_runtime()

    assert runtime.invoke(request("broken", custom_attributes="emulator-fault=none")).variant


def test_fault_header_is_ignored_unless_the_config_allows_it() -> None:
    runtime, _ = make_runtime({**RAW, "allow_fault_header": False})

    result = runtime.invoke(request(custom_attributes="emulator-fault=InternalFailure"))

    assert result.reply.status == 200


def test_container_route_uses_the_default_endpoints_first_variant() -> None:
    runtime, fakes = make_runtime()

    reply = runtime.invoke_container(b"img", "image/png", None, None)

    assert reply == fakes["m"].reply
    assert fakes["m"].calls == [(b"img", "image/png", None)]


def test_container_route_answers_model_errors_as_the_container_would() -> None:
    runtime, _ = make_runtime()

    reply = runtime.invoke_container(b"img", "image/png", None, "emulator-fault=ModelError:418")

    assert reply.status == 418


def test_container_route_has_no_service_faults_and_reports_bad_triggers_as_400() -> None:
    runtime, _ = make_runtime()

    ok = runtime.invoke_container(b"img", None, None, "emulator-fault=ServiceUnavailable")
    bad = runtime.invoke_container(b"img", None, None, "emulator-fault=Nope")

    assert (ok.status, bad.status) == (200, 400)


# --- inference components: an endpoint that hosts several models, routed by component name ---

COMPONENTS: dict[str, object] = {
    "models": {"m": {"path": "m.onnx"}, "n": {"path": "n.onnx"}},
    "endpoints": {
        "shared": {
            "inference_components": [
                {"name": "first-ic", "model": "m"},
                {"name": "second-ic", "model": "n", "variant": "Blue"},
            ]
        },
        "ab": {"variants": [{"name": "A", "model": "m"}]},
    },
}


def test_an_inference_component_routes_to_its_own_model() -> None:
    runtime, fakes = make_runtime(COMPONENTS)

    first = runtime.invoke(request("shared", inference_component="first-ic"))
    second = runtime.invoke(request("shared", b"other", inference_component="second-ic"))

    assert (first.variant, second.variant) == ("AllTraffic", "Blue")
    assert fakes["m"].calls == [(b"image", "image/jpeg", None)]
    assert fakes["n"].calls == [(b"other", "image/jpeg", None)]


def test_a_component_endpoint_refuses_a_call_without_a_component_as_sagemaker_does() -> None:
    runtime, fakes = make_runtime(COMPONENTS)

    with pytest.raises(errors.ValidationError) as raised:
        runtime.invoke(request("shared"))

    assert raised.value.message.startswith(
        "Inference Component Name header is required for endpoints to which you plan to deploy "
        "inference components."
    )
    assert fakes["m"].calls == fakes["n"].calls == []


@pytest.mark.parametrize("endpoint", ["shared", "ab"])
def test_an_unknown_component_is_a_validation_error_naming_it(endpoint: str) -> None:
    runtime, fakes = make_runtime(COMPONENTS)

    with pytest.raises(errors.ValidationError) as raised:
        runtime.invoke(request(endpoint, inference_component="third-ic"))

    expected = f"Inference Component third-ic not found for endpoint {endpoint}."
    assert raised.value.message == expected
    assert fakes["m"].calls == fakes["n"].calls == []


def test_a_component_answers_only_for_its_own_variant() -> None:
    runtime, _ = make_runtime(COMPONENTS)

    with pytest.raises(errors.ValidationError, match="Variant AllTraffic not found"):
        runtime.invoke(request("shared", inference_component="second-ic",
                               target_variant="AllTraffic"))  # fmt: skip
    assert runtime.invoke(request("shared", inference_component="second-ic",
                                  target_variant="Blue")).variant == "Blue"  # fmt: skip


@pytest.mark.parametrize("name", ["-ic", "ic-", "a_b", "x" * 64])
def test_a_malformed_component_name_is_a_member_violation(name: str) -> None:
    runtime, _ = make_runtime(COMPONENTS)

    with pytest.raises(errors.ValidationError, match="at 'inferenceComponentName'"):
        runtime.invoke(request("shared", inference_component=name))
