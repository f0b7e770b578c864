"""The ``cortex`` kind: the model folder's ``handler.py``, Cortex's ONNX contract
(``pre_inference`` and ``post_inference``), its ``sample`` the request's JSON body
(:class:`~chalicelib.inference.userfiles.cortex.CortexHandler`)."""
from __future__ import annotations

from typing import Any

from chalicelib.calls import Answer, Call, Invoke
from chalicelib.core.errors import UnsupportedMediaTypeError
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import MediaType, bare
from chalicelib.inference.userfiles.cortex import CortexHandler
from chalicelib.inference.userfiles.failures import bound_json_depth
from chalicelib.kinds.handlers import HandlerKind
from chalicelib.registry.specs import ModelSpec

ACCEPTED = (str(MediaType.JSON),)


def _sample(call: Call) -> Any:
    """A Cortex handler's ``sample``: the parsed JSON body, its depth bounded first."""
    if bare(call.content_type) not in (MediaType.JSON, ""):
        raise UnsupportedMediaTypeError(
            f"Unsupported Content-Type {call.content_type[:64]!r}; this model reads "
            f"{MediaType.JSON}.")
    bound_json_depth(call.body)
    return load_json(call.body)


class CortexKind(HandlerKind):
    """See the module."""

    load_file = staticmethod(CortexHandler.load)

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    def answer(self, handler: Any, call: Call, invoke: Invoke, model: ModelSpec) -> Answer:
        return Answer.json(handler(_sample(call), invoke, model))


KIND = CortexKind()
