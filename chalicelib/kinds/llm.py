"""The ``llm`` kind: a language model's container. Its model route passes the container's own
body through, both ways, as the body kinds do (``POST /models/{name}/predict`` with LMI's
``{"inputs", "parameters"}``, say); OpenAI's routes (:mod:`chalicelib.llm`) are its other door,
and model.json's ``llm`` block (:mod:`chalicelib.registry.llmblock`) says what its container
speaks."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from chalicelib.cache.prediction import CacheUse
from chalicelib.calls import Answer, Call, CallOptions, Invoke, ModelRequest, Served
from chalicelib.core.media import MediaType
from chalicelib.inference.serving import HandledModel
from chalicelib.inference.timing import StageTimer
from chalicelib.kinds.base import BodyKind, Parts
from chalicelib.registry.specs import LlmSchema, ModelSpec
from chalicelib.registry.specs import greedy as sampling_greedy

ACCEPTED = (str(MediaType.JSON),)
OPENAI_PATHS = {LlmSchema.LMI: ("/v1/completions",), LlmSchema.TGI: ("/v1/completions",)}
"""The OpenAI routes a schema serves (every other: chat and text completions)."""
_BOTH = ("/v1/chat/completions", "/v1/completions")
_EXAMPLES: dict[LlmSchema, Any] = {
    LlmSchema.LMI: {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 16}},
    LlmSchema.TGI: {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 16}},
    LlmSchema.LMI_CHAT: {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16},
    LlmSchema.OPENAI: {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16},
}


def run(model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
        request_id: str) -> Answer:
    """The container's body sent as it came; its answer returned as it came."""
    result = invoke(call.body, MediaType.JSON, model.accept)
    return Answer(result.body, result.content_type or MediaType.JSON)


def greedy(body: bytes) -> bool:
    """Whether a container's body asks for greedy decoding by name (``temperature`` or
    ``top_p`` 0, :func:`chalicelib.registry.specs.greedy`: a chat body's, or in LMI's
    ``parameters``, where ``do_sample: false`` says it too): the only answers the prediction
    cache may replay (a container's own default is not known here)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(document, dict):
        return False
    parameters = document.get("parameters")
    if isinstance(parameters, dict):
        return parameters.get("do_sample") is False or sampling_greedy(
            parameters.get("temperature"), parameters.get("top_p"))
    return sampling_greedy(document.get("temperature"), document.get("top_p"))


@dataclasses.dataclass(frozen=True)
class LlmPipeline:
    """The model route's pipeline: through the prediction cache only for a greedy body."""

    handled: HandledModel

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """See :meth:`HandledModel.serve` (a sampled body bypasses the cache)."""
        if cache is not None and not greedy(request.call.body):
            cache = None
        return self.handled.serve(request, request_id, timer, deadline, cache=cache)


class LlmKind(BodyKind):
    """See the module."""

    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ACCEPTED

    def pipeline(self, model: ModelSpec, parts: Parts) -> LlmPipeline:
        return LlmPipeline(HandledModel(parts.server, model, run))

    def example(self, model: ModelSpec) -> Any:
        assert model.llm is not None  # the registry reads an llm model's block
        return _EXAMPLES[model.llm.schema]

    def describe(self, model: ModelSpec) -> dict[str, Any]:
        spec = model.llm
        assert spec is not None
        return {"llm": {"schema": str(spec.schema),
                        "limits": {"max_prompt_bytes": spec.max_prompt_bytes,
                                   "max_tokens": spec.max_tokens_ceiling},
                        "defaults": {"max_tokens": spec.max_tokens,
                                     "temperature": spec.temperature},
                        "openai_paths": list(OPENAI_PATHS.get(spec.schema, _BOTH))}}


KIND = LlmKind()
