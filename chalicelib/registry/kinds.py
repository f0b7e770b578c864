"""What ``model.json``'s reader must know of each pipeline kind and job backend, and where each
one's code is: the one list of them (:data:`KINDS`, :data:`BACKENDS`).

A pipeline kind (``"pipeline"`` in model.json) is one module of :mod:`chalicelib.kinds` (what
it accepts, how its request is read, its serving and job pipelines, how the catalog shows it);
a job backend (``"jobs": {"backend"}``) is one module of :mod:`chalicelib.jobs.backends`
(start, complete, lease, batch limits). Their rules here are plain facts, so the registry
checks every model.json at start-up without loading any of that code: each module is imported
the first time a model of its kind is served (:func:`implementation`), and the jobs room not at
all on the request path.

The built-in kinds' rules are listed here, not in their modules, because the registry sits
below the kinds and checks model.json without importing their code (numpy, OpenCV); what a kind
does with a model (read, pipeline, job preflight, catalog) is its module's alone. A deployment's
own kind or backend is its module, its ``RULES`` beside its code, and one line: that ``RULES``
in the sequences given to ``Services`` (``kinds=``, ``job_backends=``).
"""
from __future__ import annotations

import dataclasses
import enum
import importlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from chalicelib.core.media import MediaType


class Pipeline(enum.StrEnum):
    """The built-in pipeline kinds' names (a model's ``pipeline`` is any registered name)."""

    IMAGE_CLASSIFICATION = "image-classification"
    TENSOR = "tensor"
    SAGEMAKER_TFS = "sagemaker-tfs"
    CORTEX = "cortex"
    LLM = "llm"


class JobsBackend(enum.StrEnum):
    """The built-in job backends' names."""

    REALTIME = "realtime"
    ASYNC = "async"


@dataclasses.dataclass(frozen=True)
class KindRules:
    """One pipeline kind, as model.json's reader checks it.

    Attributes:
        implementation: the module whose ``KIND`` serves it.
        handler_file: the user's file in the model's folder it runs, if any.
        image: it reads images with the image settings (model.json's ``image`` block, the flat
            variables), and sends what they say (any ``accept``).
        content_type: the one type it sends the endpoint (None: model.json's, JSON by default).
        splits: its pre- and postprocessing run apart from the endpoint call (an
            asynchronous endpoint's jobs need it; a handler that runs around the call cannot).
        llm: a language model: model.json's ``llm`` block names its container's schema,
            limits and defaults (:mod:`.llmblock`), and OpenAI's routes serve it.
    """

    name: str
    implementation: str
    handler_file: str | None = None
    image: bool = False
    signature_required: bool = False
    content_type: str | None = None
    splits: bool = False
    llm: bool = False


@dataclasses.dataclass(frozen=True)
class BackendRules:
    """One job backend, as model.json's reader checks its ``jobs`` block.

    Attributes:
        implementation: the module whose ``BACKEND`` runs its jobs.
        needs_endpoint: ``jobs.endpoint`` must name the endpoint its jobs go to.
        needs_split: only for kinds that split (:attr:`KindRules.splits`).
    """

    name: str
    implementation: str
    needs_endpoint: bool = False
    needs_split: bool = False


KINDS: tuple[KindRules, ...] = (
    KindRules(Pipeline.IMAGE_CLASSIFICATION, "chalicelib.kinds.image", image=True, splits=True),
    KindRules(Pipeline.TENSOR, "chalicelib.kinds.tensor", signature_required=True,
              content_type=MediaType.JSON, splits=True),
    KindRules(Pipeline.SAGEMAKER_TFS, "chalicelib.kinds.tfs", handler_file="inference.py"),
    KindRules(Pipeline.CORTEX, "chalicelib.kinds.cortex", handler_file="handler.py"),
    KindRules(Pipeline.LLM, "chalicelib.kinds.llm", content_type=MediaType.JSON, llm=True),
)

BACKENDS: tuple[BackendRules, ...] = (
    BackendRules(JobsBackend.REALTIME, "chalicelib.jobs.backends.realtime"),
    BackendRules(JobsBackend.ASYNC, "chalicelib.jobs.backends.asynchronous",
                 needs_endpoint=True, needs_split=True),
)


_Rules = TypeVar("_Rules", KindRules, BackendRules)


def by_name(rules: Iterable[_Rules]) -> Mapping[str, _Rules]:
    """Rules by name (ValueError for a name given twice)."""
    named: dict[str, _Rules] = {}
    for rule in rules:
        if rule.name in named:
            raise ValueError(f"{rule.name!r} is registered twice")
        named[str(rule.name)] = rule
    return named


BUILT_IN_KINDS = by_name(KINDS)  # for a spec built without a registry (a test, a tool)

_IMPLEMENTATIONS: dict[str, Any] = {}
_LOCK = threading.Lock()


def implementation(module: str, attribute: str) -> Any:
    """``module``'s ``attribute`` (a kind's ``KIND``, a backend's ``BACKEND``), imported on
    first use and kept. A missing one raises (a registration error the tests that serve
    every registered kind find)."""
    key = f"{module}:{attribute}"
    found = _IMPLEMENTATIONS.get(key)
    if found is None:
        with _LOCK:
            found = _IMPLEMENTATIONS.get(key)
            if found is None:
                found = getattr(importlib.import_module(module), attribute)
                _IMPLEMENTATIONS[key] = found
    return found
