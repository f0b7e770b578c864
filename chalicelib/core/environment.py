"""The process's environment variables: the one module of chalicelib that reads them.

Everything else is handed a mapping of variables and reads its own typed piece from it, so a
test or a tool passes its own mapping where the app passes this one. Each piece is read at its
own moment: at import (the access rules), when the container's objects are first used (the
settings, ``$VARIABLE`` endpoints) or when a scheduled function runs; never earlier, so a test
that sets a variable before then is read as a stage would be. Libraries read their own
documented variables (boto3 its ``AWS_*``, Powertools its ``POWERTOOLS_*`` metric names).

Standard library only: the capture extension and the log set-up read through it while
nothing else is imported (``tests/unit/test_environment_reads.py`` keeps every other module
of chalicelib off ``os.environ``).
"""
from __future__ import annotations

import os
from collections.abc import Mapping


def variables() -> Mapping[str, str]:
    """The process's environment variables, as they are when a value is read."""
    return os.environ
