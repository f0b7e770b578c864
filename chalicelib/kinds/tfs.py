"""The ``sagemaker-tfs`` kind: the model folder's ``inference.py``, the SageMaker TF Serving
container's contract (``input_handler``/``output_handler``, or ``handler``), run around the
endpoint call (:class:`~chalicelib.inference.userfiles.tfs.TfsHandler`)."""
from __future__ import annotations

from chalicelib.calls import Answer, Call, CallOptions, Invoke
from chalicelib.core.media import MediaType
from chalicelib.inference.serving import HandledModel, ModelServer
from chalicelib.inference.userfiles.tfs import TfsHandler
from chalicelib.kinds.base import BodyKind, Parts
from chalicelib.kinds.handlers import run_handler
from chalicelib.registry.specs import ModelSpec

# The handler decides beyond these, as the TF Serving container passes every type to
# input_handler.
ACCEPTED = (str(MediaType.JSON), str(MediaType.JSONLINES), str(MediaType.CSV))


class TfsKind(BodyKind):
    """See the module."""

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    def pipeline(self, model: ModelSpec, parts: Parts) -> HandledModel:
        server = parts.server

        def run(model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
                request_id: str) -> Answer:
            handler = server.handler(model, TfsHandler.load)
            return run_handler(model, request_id, lambda: handler(call, invoke, model))

        return HandledModel(server, model, run)

    def load(self, model: ModelSpec, server: ModelServer) -> None:
        server.handler(model, TfsHandler.load)


KIND = TfsKind()
