"""A slow model and InvokeEndpoint's own time limit: ``delay_seconds`` per model, and
``invocation_timeout_seconds`` (SageMaker's 60 s) past which a real-time call is the ModelError
SageMaker answers, while an asynchronous invocation waits for the model."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from emulator import errors
from emulator.config import ConfigError, load_config, parse_config
from emulator.container import Container, ContainerReply, SlowContainer
from emulator.runtime import InvokeRequest, Runtime
from tests.unit.emulator.fakes import FakeContainer

ROOT = Path(__file__).resolve().parents[3]
ASYNC = {"output_path": "s3://bucket/output"}


def raw_config(**top: object) -> dict[str, object]:
    return {
        "models": {"m": {"path": "m.onnx", "kind": "tensor", "delay_seconds": 4}},
        "endpoints": {"sync": {"variants": [{"name": "AllTraffic", "model": "m"}]},
                      "queued": {"variants": [{"name": "AllTraffic", "model": "m"}],
                                 "async": ASYNC}},
        **top,
    }


class Blocking:
    """A container that answers only once released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def invoke(self, body: bytes, content_type: str | None, accept: str | None) -> ContainerReply:
        self.release.wait(10)
        return ContainerReply(200, b'{"predictions": [[1.0]]}', "application/json")


def runtime(container: Container, waited: list[float] | None = None, in_time: bool = True,
            **top: object) -> Runtime:
    config = parse_config(raw_config(**top), Path("/configs"))

    def wait(event: threading.Event, timeout: float) -> bool:
        if waited is None:
            return event.wait(timeout)
        waited.append(timeout)
        return event.wait(10) if in_time else False

    return Runtime(config, {"m": container}, random.Random(1), lambda _: None, wait)


def call(endpoint: str = "sync") -> InvokeRequest:
    body = b'{"instances": [[1, 2, 3, 4]]}'
    return InvokeRequest(endpoint, body, len(body), "application/json")


def test_delay_seconds_and_the_invocation_timeout_are_read_from_the_config() -> None:
    config = parse_config(raw_config(invocation_timeout_seconds=2), Path("/c"))

    assert config.models["m"].delay_seconds == 4
    assert config.invocation_timeout_seconds == 2
    assert parse_config({"endpoints": {"e": {"variants": [{"name": "A", "model": "m"}]}}},
                        Path("/c")).invocation_timeout_seconds == 60


@pytest.mark.parametrize(("top", "model", "key"), [
    ({"invocation_timeout_seconds": 0}, {}, "invocation_timeout_seconds"),
    ({"invocation_timeout_seconds": "60"}, {}, "invocation_timeout_seconds"),
    ({}, {"delay_seconds": -1}, "models.m.delay_seconds"),
    ({}, {"delay_seconds": 3601}, "models.m.delay_seconds"),
])
def test_bad_values_are_refused_naming_the_key(top: dict[str, object],
                                               model: dict[str, object], key: str) -> None:
    raw = raw_config(**top)
    raw["models"] = {"m": {"path": "m.onnx", "kind": "tensor", **model}}

    with pytest.raises(ConfigError, match=f"^{key}: "):
        parse_config(raw, Path("/c"))


def test_a_slow_container_thinks_before_it_answers() -> None:
    slept: list[float] = []
    inner = FakeContainer()

    reply = SlowContainer(inner, 75, slept.append).invoke(b"x", "application/json", None)

    assert slept == [75] and reply == inner.reply and inner.calls == [
        (b"x", "application/json", None)]


def test_a_real_time_call_within_the_limit_answers() -> None:
    waited: list[float] = []

    result = runtime(FakeContainer(), waited, invocation_timeout_seconds=2).invoke(call())

    assert waited == [2] and result.reply.status == 200


def test_a_real_time_call_past_the_limit_is_sagemakers_model_error() -> None:
    with pytest.raises(errors.ModelError) as caught:
        runtime(FakeContainer(), [], in_time=False).invoke(call())

    assert caught.value.original_status == 0
    assert caught.value.message.startswith(
        'Received server error (0) from primary with message "Your invocation timed out '
        "while waiting for a response from container primary.")


def test_a_model_slower_than_the_limit_times_out_with_real_threads() -> None:
    blocking = Blocking()
    try:
        with pytest.raises(errors.ModelError, match="timed out"):
            runtime(blocking, invocation_timeout_seconds=0.05).invoke(call())
    finally:
        blocking.release.set()


def test_the_limit_does_not_apply_to_asynchronous_invocations() -> None:
    waited: list[float] = []

    result = runtime(FakeContainer(), waited, in_time=False).invoke(
        call("queued"), asynchronous=True)

    assert waited == [] and result.reply.status == 200


def test_errors_of_the_call_reach_the_caller() -> None:
    refused = FakeContainer(ContainerReply(400, b'{"error": "no"}', "application/json"))

    with pytest.raises(errors.ModelError) as caught:
        runtime(refused).invoke(call())

    assert caught.value.original_status == 400


def test_the_committed_config_serves_the_slow_model_and_the_jobs_bucket() -> None:
    config = load_config(ROOT / "emulator" / "config.json")

    assert config.invocation_timeout_seconds == 60
    slow = config.models[config.endpoints["slow"].variants[0].model]
    assert slow.delay_seconds > 60 and slow.path.name == "model.onnx"
    assert config.endpoints["slow"].asynchronous is None
    for name in ("slow-async", "iris-async", "efficientnet-lite0-async"):
        settings = config.endpoints[name].asynchronous
        assert settings is not None
        assert settings.output_path.startswith("s3://sagegate-local-jobs/")
        assert settings.success_topic is not None
        assert settings.success_topic.endswith(":sagegate-local-jobs-success")
        assert settings.max_input_bytes >= 30_000_000
    batch = config.models[config.endpoints["iris-async"].variants[0].model]
    assert batch.max_instances >= 2_000_000  # a 30 MB CSV of iris rows
