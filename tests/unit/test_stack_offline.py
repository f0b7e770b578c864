"""``sagegate run`` for any stage points every AWS client at moto's server or the emulator:
what ``chalice local`` ends up with (the run's environment, the stage's variables over it, then
the run's overrides, as :class:`sagegate.local.chalice_local.LocalCLIFactory` applies them) has
no ``firehose://`` capture destination, no AWS endpoint off 127.0.0.1, and the topics the
emulator's asynchronous endpoints notify (``tests/integration/test_run_offline.py`` runs each
stage with every connection audited)."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from chalice.cli.factory import CLIFactory

from emulator import process
from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from sagegate.deploy import stages
from sagegate.deploy.stages import load_stage
from sagegate.local.auth import API_KEY_ENV
from sagegate.local.aws import MotoStack, emulator_topics
from sagegate.local.chalice_local import LocalCLIFactory
from sagegate.local.preflight import StartError, preflight
from sagegate.local.processes import OVERRIDES_ENV, ROOT, api_env
from sagegate.local.stack import parse_args

STAGES = sorted(json.loads((ROOT / ".chalice" / "config.json").read_text())["stages"])


def _args(stage: str, *more: str) -> Any:
    return parse_args(["--stage", stage, "--api-port", str(process.free_port()),
                       "--emulator-port", str(process.free_port()),
                       "--moto-port", str(process.free_port()), *more])


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
        if "path" in model:  # (a language model's file is found by its package)
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


def _jobs_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    """``stage`` as read by the local run, with its jobs off (``JOBS_BUCKET`` set empty, its
    other jobs variables gone) and its token budgets too (``TOKEN_BUDGET_TABLE`` empty): a
    copy of the config, the checkout's untouched."""
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    env = config["stages"][stage].setdefault("environment_variables", {})
    for name in [name for name in env if name.startswith("JOBS_")]:
        del env[name]
    env["JOBS_BUCKET"] = env["TOKEN_BUDGET_TABLE"] = ""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    real = stages.load_stage
    monkeypatch.setattr(stages, "load_stage", lambda name: real(name, path))


def test_a_stage_with_jobs_off_still_gets_moto_for_its_capture_bucket_and_cache_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dev without its jobs: its firehose:// captures go to an S3 bucket on moto's server
    and its cache to a DynamoDB table there, so moto starts and holds both."""
    _jobs_off(tmp_path, monkeypatch, "dev")
    monkeypatch.setenv(API_KEY_ENV, "k" * 20)
    plan = preflight(_args("dev"), {})
    assert not plan.settings.jobs_enabled
    assert plan.moto_port and plan.local_env["AWS_ENDPOINT_URL"] == \
        f"http://127.0.0.1:{plan.moto_port}"
    moto = MotoStack.for_plan(plan.moto_port, plan.settings, DEFAULT_EMULATOR_CONFIG, print)
    assert moto is not None
    assert (moto.jobs.capture_bucket, moto.jobs.cache_table) == (
        "sagegate-dev-data", "sagegate-dev-prediction-cache")
    api_env_of_run = moto.jobs.api_env()
    assert not any(name.startswith("JOBS_") for name in api_env_of_run)  # jobs stay off
    assert api_env_of_run["AWS_ENDPOINT_URL_S3"] == f"http://127.0.0.1:{plan.moto_port}"


def test_a_stage_that_needs_no_aws_points_its_clients_at_a_checked_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local stage with jobs off uses no AWS service: no moto, but a client nobody
    expected still fails on 127.0.0.1, at a port checked free, never at whatever another
    program serves."""
    _jobs_off(tmp_path, monkeypatch, "local")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StartError, match="MOTO_PORT"):
            preflight(parse_args(["--stage", "local", "--api-port", str(process.free_port()),
                                  "--emulator-port", str(process.free_port()),
                                  "--moto-port", str(port)]), {})
    plan = preflight(_args("local"), {})
    assert plan.moto_port == 0
    assert MotoStack.for_plan(plan.moto_port, plan.settings, DEFAULT_EMULATOR_CONFIG,
                              print) is None
