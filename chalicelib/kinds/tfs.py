"""The ``sagemaker-tfs`` kind: the model folder's ``inference.py``, the SageMaker TF Serving
container's contract (``input_handler``/``output_handler``, or ``handler``), run around the
endpoint call (:class:`~chalicelib.inference.userfiles.tfs.TfsHandler`)."""
from __future__ import annotations

from typing import Any

from chalicelib.calls import Answer, Call, Invoke
from chalicelib.core.media import MediaType
from chalicelib.inference.userfiles.tfs import TfsHandler
from chalicelib.kinds.handlers import HandlerKind
from chalicelib.registry.specs import ModelSpec

# The handler decides beyond these, as the TF Serving container passes every type to
# input_handler.
ACCEPTED = (str(MediaType.JSON), str(MediaType.JSONLINES), str(MediaType.CSV))


class TfsKind(HandlerKind):
    """See the module."""

    load_file = staticmethod(TfsHandler.load)

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    def answer(self, handler: Any, call: Call, invoke: Invoke, model: ModelSpec) -> Answer:
        answer: Answer = handler(call, invoke, model)
        return answer


KIND = TfsKind()
