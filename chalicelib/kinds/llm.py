"""The ``llm`` kind: a language model's container. Its model route passes the container's own
body through, both ways, as the body kinds do (``POST /models/{name}/predict`` with LMI's
``{"inputs", "parameters"}``, say); OpenAI's routes (:mod:`chalicelib.llm`) are its other door,
and model.json's ``llm`` block (:mod:`chalicelib.registry.llmblock`) says what its container
speaks.

The model's limits hold on this route too, as OpenAI's routes check them
(:mod:`chalicelib.registry.llmlimits`): LMI's and TGI's ``parameters.max_new_tokens`` and a
chat body's ``max_tokens`` / ``max_completion_tokens`` within its ceiling, the prompt
(``inputs``, ``prompt`` or ``messages``) within ``max_prompt_bytes``, refused with a 400
``InvalidParameter`` naming the field before anything is sent. What else a body holds is the
container's to read. The usage the container's answer gives (LMI's and TGI's ``details``, a
chat completion's ``usage``) is written into the request's log line."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from chalicelib.cache.prediction import CacheUse
from chalicelib.calls import Answer, Call, CallOptions, Invoke, ModelRequest, Served, Usage
from chalicelib.core.errors import InvalidParameterError
from chalicelib.core.media import MediaType
from chalicelib.inference.serving import HandledModel
from chalicelib.inference.timing import StageTimer
from chalicelib.kinds.base import BodyKind, Parts
from chalicelib.registry import llmlimits
from chalicelib.registry.llmlimits import LimitExceeded
from chalicelib.registry.specs import LlmSchema, LlmSpec, ModelSpec
from chalicelib.registry.specs import greedy as sampling_greedy

ACCEPTED = (str(MediaType.JSON),)
OPENAI_PATHS = {LlmSchema.LMI: ("/v1/completions",), LlmSchema.TGI: ("/v1/completions",)}
"""The OpenAI routes a schema serves (every other: chat and text completions)."""
_BOTH = ("/v1/chat/completions", "/v1/completions")
CONTAINER, CACHED = "container", "cached"  # the log line's usage_source
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


def check_limits(model: ModelSpec, body: bytes) -> None:
    """A container's body within the model's limits (see the module); a body that is not a
    JSON object is the container's to refuse.

    Raises:
        InvalidParameterError: over one of them (the message names the field).
    """
    if model.llm is None:
        return
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return
    if not isinstance(document, dict):
        return
    try:
        _check(document, model.name, model.llm)
    except LimitExceeded as error:
        raise InvalidParameterError(error.message) from None


def _check(document: dict[str, Any], name: str, spec: LlmSpec) -> None:
    parameters = document.get("parameters")
    limits = [(document.get(field), field) for field in ("max_tokens", "max_completion_tokens")]
    if isinstance(parameters, dict):
        limits.append((parameters.get("max_new_tokens"), "parameters.max_new_tokens"))
    for value, field in limits:
        if isinstance(value, int | float) and not isinstance(value, bool):
            llmlimits.check_max_tokens(value, field, spec)
    messages = document.get("messages")
    if isinstance(messages, list):
        llmlimits.check_message_count(len(messages))
        size = sum(llmlimits.message_bytes(message.get("role"), message.get("content"),
                                           message.get("name"))
                   if isinstance(message, dict) else llmlimits.size(message)
                   for message in messages)
        llmlimits.check_prompt_bytes(size, "messages", name, spec)
    for field in ("inputs", "prompt"):
        if field in document:
            llmlimits.check_prompt_bytes(llmlimits.size(document[field]), field, name, spec)


def counted(served: Served) -> Usage | None:
    """The prompt's and the completion's tokens, as the container's answer gives them (LMI's
    and TGI's ``details``: ``prompt_tokens`` or TGI's ``prefill``, ``generated_tokens``; a
    chat or text completion's ``usage``; the last line of a JSON-lines answer), for the
    request's log line (their source: ``container``, or ``cached`` for an answer the
    prediction cache gave); None when it gives neither."""
    prompt, completion = usage(served.received)
    source = CACHED if served.cached else CONTAINER
    sources = {name: source for name, count in (("prompt", prompt), ("completion", completion))
               if count is not None}
    return Usage(prompt, completion, sources) if sources else None


def usage(answer: bytes) -> tuple[int | None, int | None]:
    """See :func:`counted`: (prompt tokens, completion tokens), None where not given."""
    try:
        document = json.loads(answer)
    except (ValueError, RecursionError):
        lines = answer.strip().rsplit(b"\n", 1)
        try:
            document = json.loads(lines[-1]) if lines[-1] else None
        except (ValueError, RecursionError):
            return None, None
    if isinstance(document, list) and len(document) == 1:  # TGI's
        document = document[0]
    if not isinstance(document, dict):
        return None, None
    found = document.get("usage")
    if isinstance(found, dict):
        return _count(found.get("prompt_tokens")), _count(found.get("completion_tokens"))
    details = document.get("details")
    if not isinstance(details, dict):
        return None, None
    prompt, prefill = _count(details.get("prompt_tokens")), details.get("prefill")
    if prompt is None and isinstance(prefill, list) and prefill:
        prompt = len(prefill)
    return prompt, _count(details.get("generated_tokens"))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


@dataclasses.dataclass(frozen=True)
class LlmPipeline:
    """The model route's pipeline: through the prediction cache only for a greedy body."""

    handled: HandledModel

    def serve(self, request: ModelRequest, request_id: str, timer: StageTimer,
              deadline: float | None = None, cache: CacheUse | None = None) -> Served:
        """See :meth:`HandledModel.serve` (a body over the model's limits is refused, a
        sampled one bypasses the cache).

        Raises:
            InvalidParameterError: the body is over one of the model's limits.
        """
        check_limits(self.handled.model, request.call.body)
        if cache is not None and not greedy(request.call.body):
            cache = None
        served = self.handled.serve(request, request_id, timer, deadline, cache=cache)
        served.usage = counted(served)
        return served


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
