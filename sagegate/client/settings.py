"""Where and how :mod:`sagegate.client` talks to sagegate, read one way by the library
(``Client()``) and the command line (``sagegate predict``, ``sagegate resize``): an explicit
argument, else the environment, else the default."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping

from sagegate.client.http import DEFAULT_URL
from sagegate.client.jobs import DEFAULT_WAIT_S

URL_ENV = "SAGEGATE_URL"
API_KEY_ENV = "SAGEGATE_API_KEY"
TIMEOUT_ENV = "SAGEGATE_TIMEOUT"
WAIT_TIMEOUT_ENV = "SAGEGATE_WAIT_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0


def _seconds(value: float | None, environ: Mapping[str, str], name: str,
             default: float) -> float:
    """``value``, else the variable ``name``'s, else ``default``; a positive finite number.

    Raises:
        ValueError: not one (the message names the variable or the argument).
    """
    if value is None:
        text = environ.get(name, "").strip()
        if not text:
            return default
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        where = f"{name}={text!r}"
    else:
        where = f"{value!r}"
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: a timeout must be a number of seconds above 0")
    return float(value)


def seconds_argument(text: str) -> float:
    """A command line's ``--timeout``-style value: a positive, finite number of seconds.

    Raises:
        argparse.ArgumentTypeError: not one (argparse says it with the option's name).
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a number of seconds above 0")
    return value


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """Where and how a client talks to sagegate (module docstring).

    Attributes:
        url: :data:`URL_ENV`, else ``http://127.0.0.1:8000`` (``make run``).
        api_key: :data:`API_KEY_ENV` (sent as ``x-api-key``), else none.
        timeout: :data:`TIMEOUT_ENV`, else 30 s: to connect, and for each answer.
        wait_timeout: :data:`WAIT_TIMEOUT_ENV`, else 3600 s: for a job to end.
    """

    url: str = DEFAULT_URL
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    wait_timeout: float = DEFAULT_WAIT_S

    @classmethod
    def resolve(cls, url: str | None = None, api_key: str | None = None,
                timeout: float | None = None, wait_timeout: float | None = None,
                environ: Mapping[str, str] | None = None) -> ClientSettings:
        """The settings from the arguments given (None: not given) and ``environ`` (default: this
        process's).

        Raises:
            ValueError: a timeout (argument or variable) that is not a positive number.
        """
        env = os.environ if environ is None else environ
        return cls(url=url or env.get(URL_ENV, "").strip() or DEFAULT_URL,
                   api_key=api_key if api_key is not None else env.get(API_KEY_ENV) or None,
                   timeout=_seconds(timeout, env, TIMEOUT_ENV, DEFAULT_TIMEOUT_S),
                   wait_timeout=_seconds(wait_timeout, env, WAIT_TIMEOUT_ENV, DEFAULT_WAIT_S))
