"""The stage's event functions as app.py declares them: read once at import, never raising,
with the defaults the readers of the same variables use."""
from __future__ import annotations

import pytest

from chalicelib.core import config_names
from chalicelib.core.config import Settings
from chalicelib.core.config_deployment import Deployment
from chalicelib.core.config_names import (
    DEFAULT_JOB_REDRIVE_PERIOD_SECONDS,
    DEFAULT_JOBS_PREFIX,
    DEFAULT_MONITOR_SCHEDULE,
    JOBS_TICKETS,
)


def test_a_stage_without_events_declares_none() -> None:
    deployment = Deployment.from_env({})
    assert deployment == Deployment()
    assert not deployment.monitored and not deployment.jobs_enabled
    assert deployment.jobs_prefix == DEFAULT_JOBS_PREFIX
    assert deployment.monitor_schedule == DEFAULT_MONITOR_SCHEDULE
    assert deployment.job_redrive_rate == "rate(5 minutes)"


def test_a_stage_with_events_names_what_they_listen_to() -> None:
    deployment = Deployment.from_env({
        "AWS_LAMBDA_FUNCTION_NAME": "sagegate-dev-job_redrive", "MONITOR_BASELINE": " s3://b/ ",
        "MONITOR_SCHEDULE": "rate(1 hour)", "JOBS_BUCKET": "jobs-bucket", "JOBS_PREFIX": "dev/",
        "JOBS_SUCCESS_TOPIC": "done", "JOBS_ERROR_TOPIC": "failed",
        "JOB_REDRIVE_PERIOD_SECONDS": "90"})
    assert deployment.monitored and deployment.jobs_enabled
    assert deployment.monitor_schedule == "rate(1 hour)"
    assert deployment.tickets_prefix == "dev/tickets/"
    assert deployment.separate_error_topic
    assert deployment.job_redrive_rate == "rate(2 minutes)"
    assert deployment.runs("job_redrive") and not deployment.runs("monitor")
    assert deployment.function_named("sagegate", "job_redrive") == "sagegate-dev-job_redrive"


def test_off_lambda_a_function_is_named_as_chalice_names_it() -> None:
    assert Deployment().function_named("sagegate", "monitor") == "sagegate-monitor"
    assert not Deployment().runs("monitor")


@pytest.mark.parametrize(("success", "error", "separate"), [
    ("", "", False), ("done", "", False), ("done", "done", False), ("done", "failed", True),
    ("", "failed", True)])
def test_failures_have_a_function_of_their_own_only_on_a_topic_of_their_own(
        success: str, error: str, separate: bool) -> None:
    deployment = Deployment.from_env({"JOBS_SUCCESS_TOPIC": success, "JOBS_ERROR_TOPIC": error})
    assert deployment.separate_error_topic is separate


@pytest.mark.parametrize(("period", "rate"), [
    ("", "rate(5 minutes)"), ("60", "rate(1 minute)"), ("1", "rate(1 minute)"),
    ("600", "rate(10 minutes)"), ("90", "rate(2 minutes)"), ("soon", "rate(5 minutes)"),
    (" 120 ", "rate(2 minutes)"), ("\u00b2", "rate(5 minutes)")])
def test_the_redrive_schedule_is_the_period_in_whole_minutes(period: str, rate: str) -> None:
    """A wrong value (the re-drive refuses it when it runs, ``sagegate package`` before) keeps
    the default here: reading the deployment never fails the import."""
    assert Deployment.from_env({"JOB_REDRIVE_PERIOD_SECONDS": period}).job_redrive_rate == rate


@pytest.mark.parametrize("prefix", ["", " ", "stage/", " stage/ "])
def test_the_runners_prefix_is_the_one_the_settings_write_tickets_under(prefix: str) -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "e", "JOBS_PREFIX": prefix})
    assert Deployment.from_env({"JOBS_PREFIX": prefix}).jobs_prefix == settings.jobs_prefix


def test_a_misconfigured_stage_still_reads() -> None:
    """Settings refuse these; the deployment reads them as they are (the routes answer the
    misconfiguration, the functions meet it when they run)."""
    env = {"JOBS_BUCKET": "Not A Bucket", "JOBS_PREFIX": "../", "MONITOR_SCHEDULE": "hourly",
           "JOBS_SUCCESS_TOPIC": "a topic?"}
    deployment = Deployment.from_env(env)
    assert (deployment.jobs_bucket, deployment.jobs_prefix) == ("Not A Bucket", "../")
    assert deployment.monitor_schedule == "hourly"


@pytest.mark.parametrize(("env", "fanned_out"), [
    ({"MONITOR_BASELINE": "s3://b/base", "MONITOR_ENGINE": "stepfunctions"}, True),
    ({"MONITOR_BASELINE": "s3://b/base", "MONITOR_ENGINE": " StepFunctions "}, True),
    ({"MONITOR_BASELINE": "s3://b/base", "MONITOR_ENGINE": "lambda"}, False),
    ({"MONITOR_BASELINE": "s3://b/base"}, False),
    ({"MONITOR_ENGINE": "stepfunctions"}, False)])  # no baseline: no monitor at all
def test_the_monitor_engine_is_read_once_with_the_rest(env: dict[str, str],
                                                       fanned_out: bool) -> None:
    assert Deployment.from_env(env).monitor_fanned_out is fanned_out


def test_each_default_is_the_one_its_other_readers_use() -> None:
    """The monitor room imports no other room and the re-drive keeps its own reader: each
    holds the same default as chalicelib.core.config_names, and so do the deploy tools."""
    from chalicelib.jobs import redrive, service
    from chalicelib.monitor import deployed_settings
    from sagegate.deploy import jobs

    assert deployed_settings.DEFAULT_SCHEDULE == DEFAULT_MONITOR_SCHEDULE
    assert deployed_settings.MONITOR_ENGINE == config_names.MONITOR_ENGINE
    assert deployed_settings.ENGINE_STEPFUNCTIONS == config_names.MONITOR_FANNED_OUT
    assert redrive.DEFAULT_PERIOD_SECONDS == DEFAULT_JOB_REDRIVE_PERIOD_SECONDS
    assert service.TICKETS == jobs.TICKETS == JOBS_TICKETS
    assert jobs.DEFAULT_PREFIX == DEFAULT_JOBS_PREFIX
    assert Settings.from_env({"ENDPOINT_NAME": "e"}).jobs_prefix == DEFAULT_JOBS_PREFIX
