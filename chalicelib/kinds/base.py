"""What a pipeline kind is (KServe's answer: one ``Model`` class per kind, one registry of
them): :class:`PipelineKind`, and :class:`BodyKind`, the defaults of a kind whose request body
is the model's own (everything but the image classifier)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, cast

from chalicelib.calls import Call, CallOptions, ModelRequest
from chalicelib.core.media import bare
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.serving import ModelServer, ServingPipeline, SplitPipeline
from chalicelib.inference.timing import StageTimer
from chalicelib.reading.options import HttpRequest, read_model_request
from chalicelib.registry.specs import ModelSpec


@dataclasses.dataclass(frozen=True)
class Parts:
    """What a kind builds a pipeline from: the synchronous route's endpoint client or the
    jobs', and a job's cap on an image's pixels (None: the model's own)."""

    endpoint: EndpointClient
    server: ModelServer
    max_image_pixels: int | None = None


class PipelineKind(Protocol):
    """One pipeline kind: its models' requests, from the HTTP request to the answer."""

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        """The content types a request (or an upload for a job) may have."""
        ...

    def read(self, request: HttpRequest, model: ModelSpec, *,
             max_body_bytes: int) -> ModelRequest:
        """Read a request of the model's route, options included, once.

        Raises:
            SagegateError: (a 4xx subclass) the body, an option or a header is not acceptable.
        """
        ...

    def read_job(self, body: bytes, content_type: str, options: CallOptions,
                 model: ModelSpec, *, max_body_bytes: int) -> ModelRequest:
        """Read a job's input as the route reads a request, with the job's options (read once,
        when the job was made).

        Raises:
            SagegateError: (a 4xx subclass) the input is not acceptable.
        """
        ...

    def pipeline(self, model: ModelSpec, parts: Parts) -> ServingPipeline:
        """The model's pipeline; one that also has ``preprocess`` and ``postprocess``
        (:class:`~chalicelib.inference.serving.SplitPipeline`) when the kind's rules say it
        splits."""
        ...

    def preflight(self, request: ModelRequest,
                  pipeline: Callable[[], ServingPipeline]) -> None:
        """Run sagegate's own preprocessing of a job's input when the job is made, so an input
        it cannot read is the caller's 4xx then, not a failed job later (a kind whose rules
        say it splits; a handler's work waits for the job).

        Raises:
            SagegateError: (a 4xx subclass) the input is not acceptable.
        """
        ...

    def applied_k(self, model: ModelSpec, k: int | None) -> int | None:
        """The ``k`` a request's options hold once read, when the client asked ``k``."""
        ...

    def load(self, model: ModelSpec, server: ModelServer) -> None:
        """Load and check what the model's pipeline runs (a handler file) at start-up.

        Raises:
            ConfigurationError: it does not load.
        """
        ...

    def example(self, model: ModelSpec) -> Any:
        """A request body ``GET /models/{name}`` shows when model.json gives none (None:
        none can be made)."""
        ...

    def describe(self, model: ModelSpec) -> dict[str, Any]:
        """What ``GET /models`` adds about the model for this kind."""
        ...


class BodyKind:
    """A kind whose request body is the model's own: its options come from the query string
    and headers (:func:`~chalicelib.reading.options.read_model_request`)."""

    read = staticmethod(read_model_request)

    def read_job(self, body: bytes, content_type: str, options: CallOptions,
                 model: ModelSpec, *, max_body_bytes: int) -> ModelRequest:
        return ModelRequest(Call(body, bare(content_type), None, options.custom_attributes),
                            options)

    def preflight(self, request: ModelRequest,
                  pipeline: Callable[[], ServingPipeline]) -> None:
        return None

    def applied_k(self, model: ModelSpec, k: int | None) -> int | None:
        return k

    def load(self, model: ModelSpec, server: ModelServer) -> None:
        return None

    def example(self, model: ModelSpec) -> Any:
        return None

    def describe(self, model: ModelSpec) -> dict[str, Any]:
        return {}


def preprocess_now(request: ModelRequest, pipeline: Callable[[], ServingPipeline]) -> None:
    """:meth:`PipelineKind.preflight` of a kind that splits: its pipeline's first half."""
    cast(SplitPipeline, pipeline()).preprocess(request, StageTimer())
