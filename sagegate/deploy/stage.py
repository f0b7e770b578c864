"""One stage's settings as the deploy helpers read them: the :class:`Stage` value.

Every deploy module reads a stage through this value, and only :mod:`sagegate.deploy.stages`
makes one (:func:`~sagegate.deploy.stages.load_stage`: the stage resolved from
``.chalice/config.json`` as Chalice resolves it, then checked). It sits below both that module
and what its checks call (:func:`sagegate.deploy.jobs.check_jobs`), so neither imports the
other's importer: this module imports no other module of :mod:`sagegate.deploy`.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chalicelib.monitor.deployed_settings import MonitorSettings

MONITOR_FUNCTION = "monitor"  # app.py's scheduled monitor, by its name in lambda_functions
MONITOR_PLAN, MONITOR_MAP, MONITOR_REDUCE = "monitor_plan", "monitor_map", "monitor_reduce"
MONITOR_FANOUT_FUNCTIONS = (MONITOR_PLAN, MONITOR_MAP, MONITOR_REDUCE)
"""app.py's functions of a fanned-out monitor (``MONITOR_ENGINE=stepfunctions``), called by
the stage's state machine (:mod:`sagegate.deploy.monitor_template`)."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """What the deploy helpers need to know about one stage.

    Attributes:
        name: the Chalice stage.
        app_name: the Chalice app name.
        function_name: the REST API handler's Lambda function name (``<app>-<stage>``).
        env: the function's environment variables (global merged with the stage's).
        xray: whether X-Ray tracing is on.
        layers: layer version ARNs from the config.
        python_version: the Lambda runtime (``python3.11``), as Chalice picks it.
        api_gateway_stage: the API Gateway stage name.
        log_retention_in_days: how long the function's logs are kept (None: forever).
        snapstart: publish versions with SnapStart behind the ``live`` alias that API Gateway
            invokes (``"snapstart"`` in the stage, sagegate's own key; Chalice ignores it).
        open_api: the stage deploys without authentication on purpose
            (``SAGEGATE_OPEN_API=true`` beside ``SAGEGATE_AUTH=none``, which the function
            itself checks again on Lambda).
        tags: the function's tags as Chalice resolves them (the stage's ``tags`` and
            Chalice's own ``aws-chalice``), given to the resources sagegate adds beside it.
        capture_stream: the ``s3://bucket/prefix`` the stage's own capture stream delivers
            to (``"capture_stream"`` in the stage, sagegate's own key; Chalice ignores it):
            set, the stack creates the Firehose stream ``CAPTURE_DESTINATION`` names
            (:mod:`sagegate.deploy.capture_template`); empty, it creates none.
        lambda_functions: the stage's ``lambda_functions`` settings as written (by
            function name: ``lambda_timeout``, ``reserved_concurrency``, ...), which the
            templates size what calls those functions by.
    """

    name: str
    app_name: str
    function_name: str
    env: dict[str, str]
    xray: bool
    layers: tuple[str, ...]
    python_version: str
    api_gateway_stage: str
    log_retention_in_days: int | None = None
    snapstart: bool = False
    open_api: bool = False
    tags: dict[str, str] = dataclasses.field(default_factory=dict)
    capture_stream: str = ""
    lambda_functions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def cache_table(self) -> str:
        """The DynamoDB table of the shared prediction cache (``CACHE_TABLE``; empty: the
        function keeps its in-process cache only, and no table is deployed or granted)."""
        return self.env.get("CACHE_TABLE", "").strip()

    @property
    def monitor(self) -> MonitorSettings | None:
        """The scheduled monitor's settings (``MONITOR_BASELINE``; None: not monitored).

        Raises:
            ValueError: monitoring is on without an ``s3://`` ``CAPTURE_DESTINATION``, or a
                monitor setting is not an ``s3://`` URI.
        """
        # deferred: the monitor's analysis modules cost more to import than this whole
        # module; only a command that reads a stage's monitor settings pays for them
        from chalicelib.monitor.deployed_settings import MonitorSettings

        return MonitorSettings.from_env(self.env)

    @property
    def monitor_function_name(self) -> str:
        """The scheduled monitor's Lambda function (``<app>-<stage>-monitor``, Chalice's
        name for app.py's ``@app.schedule(..., name="monitor")``)."""
        return f"{self.function_name}-{MONITOR_FUNCTION}"

    @property
    def endpoint_name(self) -> str:
        """The SageMaker endpoint the function calls."""
        return self.env["ENDPOINT_NAME"]

    @property
    def auth(self) -> str:
        """The authentication mode (``SAGEGATE_AUTH``; checked present by :func:`load_stage`)."""
        return self.env.get("SAGEGATE_AUTH", "").strip().lower()
