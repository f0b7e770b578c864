"""Pipeline kinds: one module per kind, each what its models accept, how their requests are
read (by the route and by a job alike), their serving and job pipelines, and how the catalog
shows them (:class:`~.base.PipelineKind`). The registry lists them
(:data:`chalicelib.registry.kinds.KINDS`); :func:`kind_of` finds a model's."""
from __future__ import annotations

from typing import cast

from chalicelib.core.errors import UnsupportedMediaTypeError
from chalicelib.core.media import bare
from chalicelib.kinds.base import PipelineKind
from chalicelib.registry.kinds import implementation
from chalicelib.registry.specs import ModelSpec


def kind_of(model: ModelSpec) -> PipelineKind:
    """The model's pipeline kind (its module is imported the first time)."""
    return cast(PipelineKind, implementation(model.kind.implementation, "KIND"))


def accepts(model: ModelSpec, content_type: str) -> bool:
    """Whether ``model`` reads a body of ``content_type`` (parameters ignored)."""
    return bare(content_type) in kind_of(model).accepts(model)


def check_type(model: ModelSpec, content_type: str) -> str:
    """``content_type`` without its parameters, when the model reads it.

    Raises:
        UnsupportedMediaTypeError: it does not (the message lists what it reads).
    """
    kind = bare(content_type)
    if not accepts(model, kind):
        raise UnsupportedMediaTypeError(
            f"Model {model.name!r} does not read {kind[:64]!r}; it reads "
            f"{', '.join(kind_of(model).accepts(model))}.")
    return kind
