"""The ``cortex`` kind: the model folder's ``handler.py``, Cortex's ONNX contract
(``pre_inference`` and ``post_inference``), its ``sample`` the request's JSON body
(:class:`~chalicelib.inference.userfiles.cortex.CortexHandler`)."""
from __future__ import annotations

from typing import Any

from chalicelib.calls import Answer, Call, CallOptions, Invoke
from chalicelib.core.errors import UnsupportedMediaTypeError
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import MediaType, bare
from chalicelib.inference.serving import HandledModel, ModelServer
from chalicelib.inference.userfiles.cortex import CortexHandler
from chalicelib.inference.userfiles.failures import bound_json_depth
from chalicelib.kinds.base import BodyKind, Parts
from chalicelib.kinds.handlers import run_handler
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


class CortexKind(BodyKind):
    """See the module."""

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    def pipeline(self, model: ModelSpec, parts: Parts) -> HandledModel:
        server = parts.server

        def run(model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
                request_id: str) -> Answer:
            handler = server.handler(model, CortexHandler.load)
            return run_handler(model, request_id,
                               lambda: Answer.json(handler(_sample(call), invoke, model)))

        return HandledModel(server, model, run)

    def load(self, model: ModelSpec, server: ModelServer) -> None:
        server.handler(model, CortexHandler.load)


KIND = CortexKind()
