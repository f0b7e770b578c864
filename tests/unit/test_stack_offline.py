"""``sagegate run`` for any stage points every AWS client at moto's server or the emulator:
what ``chalice local`` ends up with (the run's environment, the stage's variables over it, then
the run's overrides, as :class:`sagegate.local.chalice_local.LocalCLIFactory` applies them) has
no ``firehose://`` capture destination, no AWS endpoint off 127.0.0.1, and the topics the
emulator's asynchronous endpoints notify (``tests/integration/test_run_offline.py`` runs each
stage with every connection audited)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from chalice.cli.factory import CLIFactory

from sagegate.deploy.stages import load_stage
from sagegate.local import processes
from sagegate.local.auth import API_KEY_ENV
from sagegate.local.aws import emulator_topics
from sagegate.local.chalice_local import LocalCLIFactory
from sagegate.local.preflight import StartError, preflight
from sagegate.local.processes import DEFAULT_EMULATOR_CONFIG, OVERRIDES_ENV, ROOT, api_env
from sagegate.local.stack import parse_args

STAGES = sorted(json.loads((ROOT / ".chalice" / "config.json").read_text())["stages"])


def _args(stage: str, *more: str) -> Any:
    return parse_args(["--stage", stage, "--api-port", str(processes.free_port()),
                       "--emulator-port", str(processes.free_port()),
                       "--moto-port", str(processes.free_port()), *more])


@pytest.mark.parametrize("stage", STAGES)
def test_chalice_local_of_every_stage_addresses_only_this_machine(
        stage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "k" * 20)
    plan = preflight(_args(stage), {})
    child = api_env("http://127.0.0.1:1", plan.jobs_env)
    seen = {**child, **load_stage(stage).env, **plan.local_env}  # chalice local's order

    endpoints = {name: value for name, value in seen.items()
                 if name.startswith("AWS_ENDPOINT_URL")}
    assert "AWS_ENDPOINT_URL" in endpoints and "AWS_ENDPOINT_URL_FIREHOSE" in endpoints
    assert all(value.startswith("http://127.0.0.1:") for value in endpoints.values()), endpoints
    assert not seen.get("CAPTURE_DESTINATION", "").startswith("firehose://")
    assert seen["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] == "false"
    if plan.settings.jobs_enabled:
        assert (seen["JOBS_SUCCESS_TOPIC"], seen["JOBS_ERROR_TOPIC"]) in emulator_topics(
            DEFAULT_EMULATOR_CONFIG)


def test_the_dev_stage_captures_to_its_streams_destination_and_its_topics_follow_the_emulator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "k" * 20)
    plan = preflight(_args("dev"), {})

    assert plan.local_env["CAPTURE_DESTINATION"] == "s3://sagegate-dev-data/captures"
    assert plan.settings.capture_destination == "s3://sagegate-dev-data/captures"
    [(success, error)] = emulator_topics(DEFAULT_EMULATOR_CONFIG)
    assert plan.local_env["JOBS_SUCCESS_TOPIC"] == plan.settings.jobs_success_topic == success
    assert plan.local_env["JOBS_ERROR_TOPIC"] == error


def test_topics_no_one_stage_can_subscribe_stop_the_start(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "k" * 20)
    config = json.loads(DEFAULT_EMULATOR_CONFIG.read_text())
    for model in config["models"].values():
        model["path"] = str(DEFAULT_EMULATOR_CONFIG.parent / model["path"])
    other = config["endpoints"]["iris-async"]["async"]
    other["success_topic"] = other["success_topic"].replace("local", "other")
    (tmp_path / "config.json").write_text(json.dumps(config))

    with pytest.raises(StartError, match="2 different pairs of topics"):
        preflight(_args("dev", "--emulator-config", str(tmp_path / "config.json")), {})


def test_chalice_local_sets_the_runs_overrides_after_the_stages_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: dict[str, str] = {}

    def load(self: CLIFactory, environment_variables: Any = None, validate: Any = True) -> Any:
        loaded.update(environment_variables or {})
        return None

    monkeypatch.setattr(CLIFactory, "load_chalice_app", load)
    monkeypatch.setenv(OVERRIDES_ENV, json.dumps({"CAPTURE_DESTINATION": "s3://b/p"}))

    LocalCLIFactory(str(ROOT)).load_chalice_app({"CAPTURE_DESTINATION": "firehose://x",
                                                 "OTHER": "1"})

    assert loaded == {"CAPTURE_DESTINATION": "s3://b/p", "OTHER": "1"}


@pytest.mark.parametrize("raw", ["[]", "{\"A\": 1}", "not json"])
def test_overrides_that_are_not_an_object_of_strings_stop_chalice_local(
        raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OVERRIDES_ENV, raw)

    with pytest.raises(SystemExit, match=OVERRIDES_ENV):
        LocalCLIFactory(str(ROOT)).load_chalice_app({})
