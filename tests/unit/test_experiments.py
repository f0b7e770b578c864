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
    ({"arms": ARMS, "shadow": [{"name": "s", "endpoint": "slow", "timeout_seconds": 60.5}]},
     "'experiment.shadow[0].timeout_seconds'"),  # past the 60 s bound by a fraction
    ({"arms": ARMS, "shadow": [{"name": "s", "endpoint": "slow", "timeout_seconds": 0}]},
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


@pytest.mark.parametrize("seconds", [60, 60.0, 0.25])
def test_a_shadow_timeout_up_to_sixty_seconds_is_accepted(tmp_path: Path,
                                                          seconds: float) -> None:
    """60 s (SageMaker's own InvokeEndpoint limit) is the bound, and is allowed."""
    model = load_model(model_json(tmp_path, {"arms": ARMS, "shadow": [
        {"name": "s", "endpoint": "slow", "timeout_seconds": seconds}]}), SETTINGS, {})
    assert model.experiment is not None
    assert model.experiment.shadows[0].timeout_seconds == seconds


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


CALLERS = [f"caller-{n}" for n in range(20_000)]


@pytest.mark.parametrize("weights", [(1, 1, 2), (1, 2, 3, 4, 10), (7, 1, 1, 1, 5, 25)])
def test_each_of_many_arms_gets_its_weights_share_of_distinct_callers(
        weights: tuple[int, ...]) -> None:
    """20,000 callers: each arm's share within 1.5 points of weight / total (a scoring formula
    that is only right for two arms, or for equal weights, misses by more)."""
    experiment = Experiment("e", tuple(Arm(f"arm{n}", f"ep-{n}", weight=weight)
                                       for n, weight in enumerate(weights)))
    counts = Counter(assign.choose(experiment, "m", caller).name for caller in CALLERS)
    total = sum(weights)
    shares = {f"arm{n}": weight / total for n, weight in enumerate(weights)}
    assert {name: round(counts[name] / len(CALLERS), 3) for name in shares} == pytest.approx(
        shares, abs=0.015)


def test_the_experiments_name_is_in_the_hash() -> None:
    """Two experiments with the same arms on one model split its callers differently, so a
    new experiment does not inherit the last one's groups."""
    arms = (Arm("a", "ep-a", weight=1), Arm("b", "ep-b", weight=1))
    first = {c: assign.choose(Experiment("first", arms), "m", c).name for c in CALLERS[:4000]}
    second = {c: assign.choose(Experiment("second", arms), "m", c).name
              for c in CALLERS[:4000]}
    moved = sum(first[c] != second[c] for c in first) / len(first)
    assert 0.4 <= moved <= 0.6  # independent halves: about half the callers change arm
    assert 0.45 <= Counter(second.values())["a"] / len(second) <= 0.55
