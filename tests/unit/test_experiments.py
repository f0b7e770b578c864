"""model.json's experiment block checked at start-up, and the arm a request gets: sticky
callers keep theirs, weights are honoured, and changing a weight moves only the callers that
must move."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError
from chalicelib.experiments import assign
from chalicelib.inference.endpoint_config import shadow_policy, shadow_timeouts
from chalicelib.registry.experiments import Arm, Experiment
from chalicelib.registry.loading import load_model

SETTINGS = Settings(endpoint_name="efficientnet-lite0")
ARMS = [{"name": "a", "endpoint": "efficientnet-lite0", "weight": 50},
        {"name": "b", "endpoint": "efficientnet-lite0-int8", "weight": 50}]


def model_json(tmp_path: Path, experiment: Any) -> Path:
    folder = tmp_path / "lite0"
    folder.mkdir(exist_ok=True)
    (folder / "model.json").write_text(json.dumps({
        "endpoint": "efficientnet-lite0", "pipeline": "image-classification",
        "experiment": experiment}))
    return folder


def test_a_valid_block_is_read_with_its_defaults(tmp_path: Path) -> None:
    model = load_model(model_json(tmp_path, {
        "arms": ARMS, "shadow": [{"name": "s", "endpoint": "slow"}]}), SETTINGS, {})
    assert model.experiment is not None
    assert model.experiment.name == "lite0" and model.experiment.sticky == "caller"
    assert [arm.weight for arm in model.experiment.arms] == [50, 50]
    (shadow,) = model.experiment.shadows
    assert (shadow.sample, shadow.timeout_seconds) == (1.0, 5.0)
    shown = model.experiment.to_dict()
    assert [arm["share"] for arm in shown["arms"]] == [0.5, 0.5]


@pytest.mark.parametrize(("experiment", "key"), [
    ({"arms": [{**ARMS[0], "weight": 0}, ARMS[1]]}, "'experiment.arms[0].weight'"),
    ({"arms": [ARMS[0], {**ARMS[1], "weight": True}]}, "'experiment.arms[1].weight'"),
    ({"arms": [ARMS[0], {**ARMS[1], "name": "a"}]}, "'experiment'"),  # a duplicate arm
    ({"arms": ARMS, "sticky": "cookie"}, "'experiment.sticky'"),
    ({"arms": ARMS, "sticky": "header:"}, "'experiment.sticky'"),
    ({"arms": ARMS, "shadow": [{"name": "s", "endpoint": "efficientnet-lite0"}]},
     "'experiment.shadow[0]'"),  # a shadow equal to an arm
    ({"arms": ARMS, "shadow": [{"name": "b", "endpoint": "slow"}]}, "'experiment'"),
    ({"arms": ARMS, "shadow": [{"name": "s", "endpoint": "slow", "sample": 0}]},
     "'experiment.shadow[0].sample'"),
    ({"arms": ARMS, "shadow": [{"name": "s", "endpoint": "slow", "timeout_seconds": 61}]},
     "'experiment.shadow[0].timeout_seconds'"),
    ({"arms": []}, "'experiment.arms'"),
    ({"arms": [{**ARMS[0], "endpoint": "../x"}]}, "'experiment.arms[0].endpoint'"),
    ({"arms": ARMS, "colour": "red"}, "'experiment.colour'"),
    ({"arms": [{**ARMS[0], "weight": 1, "extra": 1}]}, "'experiment.arms[0].extra'"),
])
def test_a_bad_block_stops_start_up_with_one_line_naming_the_key(
        tmp_path: Path, experiment: Any, key: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_model(model_json(tmp_path, experiment), SETTINGS, {})
    message = str(raised.value)
    assert key in message and "\n" not in message and message.startswith("models/lite0/")


EXPERIMENT = Experiment("e", (Arm("a", "ep-a", weight=50), Arm("b", "ep-b", weight=50)))


def test_distinct_callers_split_by_the_weights() -> None:
    counts = Counter(assign.choose(EXPERIMENT, "m", f"caller-{n}").name for n in range(300))
    assert 0.4 <= counts["a"] / 300 <= 0.6  # 300 callers at 50/50 land within 40-60%
    uneven = Experiment("e", (Arm("a", "ep-a", weight=90), Arm("b", "ep-b", weight=10)))
    share = Counter(assign.choose(uneven, "m", f"caller-{n}").name for n in range(3000))
    assert 0.87 <= share["a"] / 3000 <= 0.93


def test_a_caller_keeps_their_arm_and_a_draw_follows_the_weights() -> None:
    assert len({assign.choose(EXPERIMENT, "m", "alice").name for _ in range(15)}) == 1
    other_model = {assign.choose(EXPERIMENT, f"m{n}", "alice").name for n in range(40)}
    assert other_model == {"a", "b"}  # the model is part of the hash
    draws = iter([0.1, 0.6, 0.49, 0.99])
    assert [assign.choose(EXPERIMENT, "m", None, rng=lambda: next(draws)).name
            for _ in range(4)] == ["a", "b", "a", "b"]


def test_changing_a_weight_moves_only_the_callers_that_must_move() -> None:
    callers = [f"caller-{n}" for n in range(2000)]
    before = {c: assign.choose(EXPERIMENT, "m", c).name for c in callers}
    heavier = Experiment("e", (Arm("a", "ep-a", weight=50), Arm("b", "ep-b", weight=80)))
    after = {c: assign.choose(heavier, "m", c).name for c in callers}
    moved = [c for c in callers if before[c] != after[c]]
    assert moved and all(before[c] == "a" and after[c] == "b" for c in moved)
    three = Experiment("e", (*EXPERIMENT.arms, Arm("c", "ep-c", weight=50)))
    added = {c: assign.choose(three, "m", c).name for c in callers}
    assert all(added[c] in (before[c], "c") for c in callers)  # only to the new arm


def test_a_shadow_samples_a_share_of_requests_by_their_id() -> None:
    picked = sum(assign.sampled("m", "s", f"req-{n}", 0.2) for n in range(5000))
    assert 900 <= picked <= 1100
    assert all(assign.sampled("m", "s", f"req-{n}", 1.0) for n in range(10))


@pytest.mark.parametrize("read_timeout", [2.0, 20.0, 26.0])
@pytest.mark.parametrize("seconds", [0.5, 5.0, 60.0])
def test_a_shadow_call_fits_its_own_timeout_whatever_the_stages_read_timeout(
        read_timeout: float, seconds: float) -> None:
    """A shadow's one attempt and its preprocessing fit in its timeout_seconds: a stage whose
    ENDPOINT_READ_TIMEOUT is longer than the shadow's timeout must not refuse every copy."""
    settings = Settings.from_env({"ENDPOINT_NAME": "e", "ENDPOINT_READ_TIMEOUT": str(read_timeout),
                                  "REQUEST_BUDGET_SECONDS": "29"})
    connect, read = shadow_timeouts(settings, seconds)
    assert 0 < connect <= settings.endpoint_connect_timeout and read > 0
    policy = shadow_policy(settings, seconds)
    assert policy.max_attempts == 1 and policy.budget_seconds == seconds
    assert policy.attempt_timeout == pytest.approx(connect + read)
    started = 1000.0
    preparing = policy.preprocessing_deadline(started + seconds) - started
    assert 0 < preparing <= min(1.0, seconds * 0.2) + 1e-9  # time left to preprocess


def test_a_target_keeps_the_models_routing_only_on_the_models_own_endpoint(
        tmp_path: Path) -> None:
    from chalicelib.experiments.assign import on_target
    from chalicelib.registry.experiments import Shadow

    folder = tmp_path / "iris"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps({
        "endpoint": "iris", "pipeline": "tensor", "variant": "Blue",
        "inference_component": "iris-ic", "signature": {
            "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 3]}]}}))
    model = load_model(folder, SETTINGS, {})
    same = on_target(model, Arm("b", "iris", variant="Green"))
    assert (same.variant, same.inference_component) == ("Green", "iris-ic")
    other = on_target(model, Shadow("s", "iris-next"))
    assert (other.endpoint, other.variant, other.inference_component) == ("iris-next", None,
                                                                         None)
