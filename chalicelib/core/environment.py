"""The process's environment variables: the one module of chalicelib that reads them.

Everything else is handed a mapping of variables and reads its own typed piece from it
(:meth:`Settings.from_env <chalicelib.core.config.Settings.from_env>`,
:class:`~chalicelib.core.access.Access`, :class:`~chalicelib.core.config_deployment.Deployment`,
the re-drive's, the runner's lifetime, the monitor's; Lambda's own runtime variables in
:mod:`chalicelib.core.lifecycle`), so a test or a tool passes its own mapping where the app
passes this one. Each piece is read at its own moment: at import (the access rules, the
event functions), when the container's objects are first used (the settings, the registry's
``$VARIABLE`` endpoints, the runner's lifetime), when a scheduled function runs (the re-drive,
the monitor), or as a request is served (the metric names, the page's S3 origin, as boto3
reads its own); never earlier, so a test that sets a variable before then is read as a stage
would be.

Standard library only: the capture extension and the log set-up read through it while
nothing else is imported (``tests/unit/test_environment_reads.py`` keeps every other module
of chalicelib off ``os.environ``).
"""
from __future__ import annotations

import os
from collections.abc import Mapping


def variables() -> Mapping[str, str]:
    """The process's environment variables, read-only, as they are when a value is read."""
    return os.environ
