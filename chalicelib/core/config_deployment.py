"""What a stage deploys besides its API: which event functions app.py declares, and on what.

Chalice declares a Lambda function for each ``@app.schedule``, ``@app.on_s3_event`` and
``@app.on_sns_message`` it meets when ``app.py`` is imported, and ``chalice package`` imports it
with the stage's environment variables set: so these variables are read at import, once, into
one :class:`Deployment`. Reading them never raises: a stage whose :class:`~chalicelib.core.
config.Settings` are wrong still imports, so its routes can answer the misconfiguration (and its
functions meet it when they run); the values are the same text the settings read, checked there.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from chalicelib.core.config_names import (
    AWS_LAMBDA_FUNCTION_NAME,
    DEFAULT_JOB_REDRIVE_PERIOD_SECONDS,
    DEFAULT_JOBS_PREFIX,
    DEFAULT_MONITOR_SCHEDULE,
    JOB_REDRIVE_PERIOD_SECONDS,
    JOBS_BUCKET,
    JOBS_ERROR_TOPIC,
    JOBS_PREFIX,
    JOBS_SUCCESS_TOPIC,
    JOBS_TICKETS,
    MONITOR_BASELINE,
    MONITOR_ENGINE,
    MONITOR_FANNED_OUT,
    MONITOR_SCHEDULE,
)


class Deployment(NamedTuple):
    """The stage's event functions, as ``app.py`` declares them (a named tuple: built at
    every cold start, it costs a fraction of a dataclass to define).

    Each field is the variable of its name, upper-cased.

    Attributes:
        function_name: ``AWS_LAMBDA_FUNCTION_NAME`` (``<app>-<stage>`` for the API,
            ``<app>-<stage>-<function>`` for the others); empty off Lambda.
        monitor_engine: ``stepfunctions`` fans the monitor out (three functions a state
            machine calls); else one scheduled function.
        job_redrive_period_seconds: a value that is not a whole number is left to the
            re-drive's own check, which refuses it when it runs and when the stage is
            packaged: the default stands here.
    """

    function_name: str = ""
    monitor_baseline: str = ""
    monitor_schedule: str = DEFAULT_MONITOR_SCHEDULE
    monitor_engine: str = ""
    jobs_bucket: str = ""
    jobs_prefix: str = DEFAULT_JOBS_PREFIX
    jobs_success_topic: str = ""
    jobs_error_topic: str = ""
    job_redrive_period_seconds: int = DEFAULT_JOB_REDRIVE_PERIOD_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Deployment:
        """The deployment the variables ``env`` describe; never raises.

        A variable unset or empty takes its default. ``JOBS_PREFIX`` is read as
        :class:`~chalicelib.core.config.Settings` reads it (blanks stripped from a set value),
        so the runner's S3 event and the tickets the routes write agree; ``MONITOR_SCHEDULE``
        as the monitor reads it (blank: the default).
        """
        period = env.get(JOB_REDRIVE_PERIOD_SECONDS, "").strip()
        return cls(
            function_name=env.get(AWS_LAMBDA_FUNCTION_NAME, "").strip(),
            monitor_baseline=env.get(MONITOR_BASELINE, "").strip(),
            monitor_schedule=env.get(MONITOR_SCHEDULE, "").strip() or DEFAULT_MONITOR_SCHEDULE,
            monitor_engine=env.get(MONITOR_ENGINE, "").strip().lower(),
            jobs_bucket=env.get(JOBS_BUCKET, "").strip(),
            jobs_prefix=_as_settings_read(env, JOBS_PREFIX, DEFAULT_JOBS_PREFIX),
            jobs_success_topic=env.get(JOBS_SUCCESS_TOPIC, "").strip(),
            jobs_error_topic=env.get(JOBS_ERROR_TOPIC, "").strip(),
            job_redrive_period_seconds=int(period) if period.isascii() and period.isdigit()
            else DEFAULT_JOB_REDRIVE_PERIOD_SECONDS)

    @property
    def monitored(self) -> bool:
        return self.monitor_baseline != ""

    @property
    def monitor_fanned_out(self) -> bool:
        return self.monitored and self.monitor_engine == MONITOR_FANNED_OUT

    @property
    def jobs_enabled(self) -> bool:
        return self.jobs_bucket != ""

    @property
    def tickets_prefix(self) -> str:
        return self.jobs_prefix + JOBS_TICKETS

    @property
    def separate_error_topic(self) -> bool:
        return self.jobs_error_topic not in ("", self.jobs_success_topic)

    @property
    def job_redrive_rate(self) -> str:
        """EventBridge's rate for the re-drive's period: whole minutes, rounded up."""
        minutes = max(1, -(-self.job_redrive_period_seconds // 60))
        return f"rate({minutes} minute{'s' if minutes > 1 else ''})"

    def function_named(self, app_name: str, function: str) -> str:
        """This function's own name: Lambda's, else what Chalice names it (a local or test
        call has no Lambda name)."""
        return self.function_name or f"{app_name}-{function}"

    def runs(self, function: str) -> bool:
        """Whether this process is the Lambda function Chalice deployed for ``function``."""
        return self.function_name.endswith(f"-{function}")


def _as_settings_read(env: Mapping[str, str], name: str, default: str) -> str:
    """A text variable as ``Settings.from_env`` reads it: unset or empty is the default."""
    raw = env.get(name, "")
    return raw.strip() if raw != "" else default
