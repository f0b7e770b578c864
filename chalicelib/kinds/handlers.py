"""What the handler-file kinds (``sagemaker-tfs``, ``cortex``) share: the user's file loaded once
into the shared server, run under the request's id, and what escapes it while sagegate reads
what it returned."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from chalicelib.calls import Answer, Call, CallOptions, Invoke
from chalicelib.core.errors import HandlerError
from chalicelib.inference.serving import HandledModel, ModelServer
from chalicelib.inference.userfiles.failures import HANDLER_FAILED, request_scope
from chalicelib.kinds.base import BodyKind, Parts
from chalicelib.registry.specs import ModelSpec

logger = logging.getLogger("sagegate.serving")


def run_handler(model: ModelSpec, request_id: str, handle: Callable[[], Answer]) -> Answer:
    """``handle()``, its failures logged under the client's request id. The handlers translate
    what the user's code raises; a RecursionError or MemoryError that still escapes (sagegate
    reading what that code returned) is a HandlerError with its type in the log, never an
    unhandled 500."""
    try:
        with request_scope(request_id):
            return handle()
    except (RecursionError, MemoryError) as error:
        logger.error("models/%s: %s reading what its handler returned (request_id %s)",
                     model.name, type(error).__name__, request_id,
                     extra={"request_id": request_id})
        raise HandlerError(HANDLER_FAILED) from None


class HandlerKind(BodyKind):
    """A kind that runs the model folder's handler file (loaded by its contract's class
    ``load``) around the endpoint call."""

    load_file: Callable[[ModelSpec], Any]

    def answer(self, handler: Any, call: Call, invoke: Invoke, model: ModelSpec) -> Answer:
        """The client's answer: the loaded handler run on one request."""
        raise NotImplementedError

    def pipeline(self, model: ModelSpec, parts: Parts) -> HandledModel:
        server = parts.server

        def run(model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
                request_id: str) -> Answer:
            handler = server.handler(model, self.load_file)
            return run_handler(model, request_id,
                               lambda: self.answer(handler, call, invoke, model))

        return HandledModel(server, model, run)

    def load(self, model: ModelSpec, server: ModelServer) -> None:
        server.handler(model, self.load_file)
