"""One stage's settings as the deploy helpers read them: the :class:`Stage` value.

Only :func:`sagegate.deploy.stages.load_stage` makes one (resolved as Chalice resolves it, then
checked). It sits below that module and what its checks call
(:func:`sagegate.deploy.jobs.check_jobs`), so it imports no other module of
:mod:`sagegate.deploy`.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chalicelib.monitor.deployed_settings import MonitorSettings

MONITOR_FUNCTION = "monitor"  # app.py's scheduled monitor, by its name in lambda_functions
MONITOR_PLAN, MONITOR_MAP, MONITOR_REDUCE = "monitor_plan", "monitor_map", "monitor_reduce"
MONITOR_FANOUT_FUNCTIONS = (MONITOR_PLAN, MONITOR_MAP, MONITOR_REDUCE)
"""app.py's functions of a fanned-out monitor, called by the stage's state machine."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """What the deploy helpers need to know about one stage.

    Attributes:
        env: the function's environment variables (global merged with the stage's).
        python_version: the Lambda runtime (``python3.11``), as Chalice picks it.
        log_retention_in_days: None: forever.
        snapstart: publish versions with SnapStart behind the ``live`` alias API Gateway invokes
            (sagegate's own stage key; Chalice ignores it).
        open_api: no authentication on purpose (``SAGEGATE_OPEN_API=true`` beside
            ``SAGEGATE_AUTH=none``, which the function checks again on Lambda).
        tags: as Chalice resolves them (the stage's and ``aws-chalice``), given to the resources
            sagegate adds.
        capture_stream: where the stage's own capture stream delivers (sagegate's own key): set,
            the stack creates the Firehose stream ``CAPTURE_DESTINATION`` names; empty, none.
        lambda_functions: the stage's per-function settings as written, which the templates size
            what calls those functions by.
        lambda_memory_size: the API function's memory (MB), as Chalice resolves it; the
            streaming function's too unless ``lambda_functions.stream`` sets its own.
        architecture: Chalice's ``lambda_architecture`` (``x86_64`` or ``arm64``), the same for
            every function of the stage and for the layer built for it.
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
    lambda_memory_size: int | None = None
    architecture: str = "x86_64"

    def built_for(self, architecture: str | None) -> Stage:
        """This stage, built for ``architecture`` instead of its own (None: its own); the
        tests run an arm64 stage's x86_64 build on this machine's x86_64 CPU."""
        if architecture is None or architecture == self.architecture:
            return self
        return dataclasses.replace(self, architecture=architecture)

    @property
    def cache_table(self) -> str:
        """``CACHE_TABLE``; empty: the in-process cache only, no table deployed or granted."""
        return self.env.get("CACHE_TABLE", "").strip()

    @property
    def budget_table(self) -> str:
        """``TOKEN_BUDGET_TABLE``; empty: no token budgets, no table deployed or granted."""
        return self.env.get("TOKEN_BUDGET_TABLE", "").strip()

    @property
    def monitor(self) -> MonitorSettings | None:
        """The scheduled monitor's settings (None: not monitored).

        Raises:
            ValueError: monitoring on without an ``s3://`` ``CAPTURE_DESTINATION``, or a monitor
                setting not an ``s3://`` URI.
        """
        # deferred: the monitor's analysis modules cost more to import than this whole
        # module; only a command that reads a stage's monitor settings pays for them
        from chalicelib.monitor.deployed_settings import MonitorSettings

        return MonitorSettings.from_env(self.env)

    @property
    def monitor_function_name(self) -> str:
        """Chalice's name for app.py's ``@app.schedule(..., name="monitor")``."""
        return f"{self.function_name}-{MONITOR_FUNCTION}"

    @property
    def endpoint_name(self) -> str:
        return self.env["ENDPOINT_NAME"]

    @property
    def auth(self) -> str:
        """``SAGEGATE_AUTH`` (checked present by :func:`load_stage`)."""
        return self.env.get("SAGEGATE_AUTH", "").strip().lower()
