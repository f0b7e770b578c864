"""What the engine refuses: a request outside its bounds, or a model file it cannot use."""

from __future__ import annotations


class GenerationRefused(ValueError):
    """A request the engine will not run (a prompt too long, a parameter out of range).

    The caller's fault, so a server answers it with a 4xx; ``param`` names the request field
    (``max_new_tokens``, ``temperature``, ``messages``, ...) so an answer can point at it.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class ModelFileError(RuntimeError):
    """The model file is missing, or holds something this engine does not run."""
