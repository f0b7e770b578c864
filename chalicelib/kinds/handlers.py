"""What the handler-file kinds (``sagemaker-tfs``, ``cortex``) share: the user's code run
under the request's id, and what escapes it while sagegate reads what it returned."""
from __future__ import annotations

import logging
from collections.abc import Callable

from chalicelib.calls import Answer
from chalicelib.core.errors import HandlerError
from chalicelib.inference.userfiles.failures import HANDLER_FAILED, request_scope
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
