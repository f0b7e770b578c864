"""Which class names each endpoint's capture records are read with.

A capture folder holds several endpoints' records: each is read with the labels of the registered
models calling that endpoint, the registry read with a stage's variables as ``chalice local
--stage`` reads them. An endpoint no model calls, or whose models disagree, gets class indices
and one ``note:`` line naming it and the way out (``--labels``).
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.loading import load_registry

Labels = tuple[str, ...] | None
_DATE_PART = re.compile(r"^[0-9]{2,4}\Z")
LAYOUT_DEPTH = 7  # endpoint, variant, yyyy, mm, dd, hh, file


def endpoint_of(parts: Sequence[str]) -> str | None:
    """The endpoint of a capture file from its path, or None off
    ``{endpoint}/{variant}/yyyy/mm/dd/hh/{file}``."""
    if len(parts) < LAYOUT_DEPTH:
        return None
    tail = parts[-LAYOUT_DEPTH:]
    if not all(_DATE_PART.match(part) for part in tail[2:6]):
        return None
    return tail[0]


def registry_labels(stage: str, environ: Mapping[str, str] | None = None
                    ) -> dict[str, list[tuple[str, Labels]]]:
    """``endpoint -> [(model, labels), ...]`` from the registry, read with ``stage``'s variables
    over ``environ``.

    Raises:
        ValueError: the stage or the registry cannot be read.
    """
    # Deferred: the label reader comes with numpy, which the other sagegate commands skip.
    from chalicelib.inference.predictions import load_labels
    from sagegate.deploy.stages import load_stage

    try:
        env = {**(os.environ if environ is None else environ), **load_stage(stage).env}
        settings = Settings.from_env(env)
        registry = load_registry(settings, {**env, "ENDPOINT_NAME": settings.endpoint_name},
                                 labels=load_labels(settings.labels))
    except ConfigurationError as error:
        raise ValueError(error.message) from None
    except (KeyError, OSError, ValueError) as error:
        raise ValueError(f"stage {stage!r} of .chalice/config.json: {error}") from None
    by_endpoint: dict[str, list[tuple[str, Labels]]] = {}
    for name in registry.names():
        model = registry.models[name]
        by_endpoint.setdefault(model.endpoint, []).append((name, model.labels))
    return by_endpoint


class EndpointLabels:
    """The labels of each endpoint, decided once per endpoint (``load`` called at most once)."""

    def __init__(self, load: Callable[[], dict[str, list[tuple[str, Labels]]]],
                 notes: IO[str] | None = None) -> None:
        self._load = load
        self._registry: dict[str, list[tuple[str, Labels]]] | None = None
        self._decided: dict[str | None, Labels] = {}
        self._notes = notes
        self._unreadable = False

    def __call__(self, endpoint: str | None) -> Labels:
        """The labels for ``endpoint`` (None: not in the layout); notes the first time one is
        read with class indices."""
        if endpoint not in self._decided:
            self._decided[endpoint] = self._decide(endpoint)
        return self._decided[endpoint]

    def _decide(self, endpoint: str | None) -> Labels:
        if endpoint is None:
            return self._note("records outside {endpoint}/{variant}/yyyy/mm/dd/hh/ name no "
                              "endpoint: their rows have class indices (--labels NAME names "
                              "them)")
        models = self._models(endpoint)
        if models is None:
            return None
        if not models:
            return self._note(f"endpoint {endpoint!r} is not called by any registered model: "
                              f"its rows have class indices (read its folder with --labels "
                              f"NAME to name them)")
        distinct = {labels for _, labels in models if labels is not None}
        if len(distinct) > 1:
            names = ", ".join(name for name, _ in models)
            return self._note(f"endpoint {endpoint!r} serves models with different labels "
                              f"({names}): its rows have class indices (read its folder with "
                              f"--labels NAME)")
        return distinct.pop() if distinct else None

    def _models(self, endpoint: str) -> list[tuple[str, Labels]] | None:
        if self._registry is None:
            try:
                self._registry = self._load()
            except ValueError as error:
                self._registry = {}
                self._unreadable = True
                self._note(f"cannot read the model registry ({error}): rows have class "
                           f"indices (--labels NAME names them)")
        if self._unreadable:
            return None
        return self._registry.get(endpoint, [])

    def _note(self, text: str) -> Labels:
        print(f"note: {text}", file=self._notes or sys.stderr)
        return None
