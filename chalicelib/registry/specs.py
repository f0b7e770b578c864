"""What a registered model is: frozen dataclasses built once from ``model.json``."""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chalicelib.core.config import Settings
from chalicelib.registry.experiments import Experiment
from chalicelib.registry.kinds import BUILT_IN_KINDS, JobsBackend, KindRules


class DType(enum.StrEnum):
    """The tensor element types a signature may declare (numpy's names)."""

    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    BOOL = "bool"
    STRING = "string"

    @property
    def onnx_type(self) -> str:
        """The ONNX type string (``tensor(float)``...), as Cortex's ONNX signature shows it."""
        return f"tensor({_ONNX_NAMES.get(self, self.value)})"


_ONNX_NAMES = {DType.FLOAT32: "float", DType.FLOAT64: "double", DType.FLOAT16: "float16"}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model's signature; -1 in ``shape`` is any length."""

    name: str
    dtype: DType
    shape: tuple[int, ...]

    def describe(self) -> str:
        """``float32 of shape (-1, 4)``."""
        shape = "(" + ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1
                                                                 else "") + ")"
        return f"{self.dtype} of shape {shape}"

    def to_dict(self) -> dict[str, Any]:
        """As ``model.json`` and ``GET /models`` write it."""
        return {"name": self.name, "dtype": str(self.dtype), "shape": list(self.shape)}


@dataclasses.dataclass(frozen=True)
class Signature:
    """A model's declared inputs and outputs, in order."""

    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As ``model.json`` and ``GET /models`` write it."""
        return {"inputs": [spec.to_dict() for spec in self.inputs],
                "outputs": [spec.to_dict() for spec in self.outputs]}


DEFAULT_MAX_UPLOAD_BYTES = 100 * 1024 * 1024  # when model.json names no jobs.max_upload_bytes
MAX_UPLOAD_BYTES = 1024 ** 3
"""The largest cap a model may set: SageMaker Asynchronous Inference takes inputs up to 1 GB."""
DEFAULT_INVOCATION_TIMEOUT_SECONDS = 900  # SageMaker's default InvocationTimeoutSeconds
MAX_INVOCATION_TIMEOUT_SECONDS = 3600  # and its largest


@dataclasses.dataclass(frozen=True)
class JobsSpec:
    """A model's jobs (model.json's ``jobs``; defaults without it).

    Attributes:
        endpoint: the endpoint a job calls (the asynchronous one, or a real-time one); None
            for the model's own.
        max_upload_bytes: the largest upload (and so job input) the model takes.
    """

    backend: str = JobsBackend.REALTIME
    endpoint: str | None = None
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    invocation_timeout_seconds: int = DEFAULT_INVOCATION_TIMEOUT_SECONDS


class LlmSchema(enum.StrEnum):
    """What a language model's container speaks (model.json's ``llm.schema``)."""

    LMI = "lmi"
    """LMI's (DJL) text generation: ``{"inputs", "parameters"}`` -> ``{"generated_text",
    "details"}``; streams jsonlines of ``{"token": ...}``."""
    LMI_CHAT = "lmi-chat"
    """LMI with a chat template: chat requests as ``{"messages", ...}`` (its chat completions
    schema), text completions as :attr:`LMI`'s."""
    TGI = "tgi"
    """Hugging Face TGI: :attr:`LMI`'s generate schema; streams ``data:`` lines."""
    OPENAI = "openai"
    """The container speaks OpenAI's API itself: bodies passed through."""


@dataclasses.dataclass(frozen=True)
class LlmSpec:
    """A language model's container schema, limits and defaults (model.json's ``llm``).

    Attributes:
        max_prompt_bytes: the largest prompt (the messages' text, UTF-8) a request may send.
        max_tokens_ceiling: the largest ``max_tokens`` a request may ask.
        max_tokens: what a request that names none gets.
        temperature: likewise (0: greedy).
        tokens_per_minute, tokens_per_day: each API key's token budget on this model (0:
            none; the stage's budgets apply across models besides).
        template_tokens: the tokens the container's chat template adds to a chat's prompt
            beyond its messages and their framing (a default system prompt), reserved with
            every chat request's budget besides its prompt's bytes.
    """

    schema: LlmSchema
    max_prompt_bytes: int = 32_768
    max_tokens_ceiling: int = 2048
    max_tokens: int = 256
    temperature: float = 1.0
    tokens_per_minute: int = 0
    tokens_per_day: int = 0
    template_tokens: int = 0


def greedy(temperature: Any, top_p: Any = None) -> bool:
    """Whether sampling values ask for greedy decoding, the one definition (a request's, a
    container's body): a temperature of 0, or a ``top_p`` of 0, whose nucleus is the one most
    likely token (OpenAI's API accepts it; LMI, TGI and vLLM refuse it, so it is sent as greedy
    decoding). A value that is absent or not a number is not greedy (a container's own default
    is not known)."""
    return _zero(temperature) or _zero(top_p)


def _zero(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 0


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One registered model, validated (model.json's keys; see :mod:`.loading`).

    Attributes:
        name: the folder's name.
        endpoint: the SageMaker endpoint name (``$VAR`` resolved).
        target_model, variant, inference_component: defaults a request may override.
        metadata: the user's dict, handed to Cortex handlers.
        settings: the image settings (image-classification): the flat variables, overridden
            by ``image`` in ``model.json``.
    """

    name: str
    folder: Path
    endpoint: str
    pipeline: str
    content_type: str
    accept: str
    signature: Signature
    target_model: str | None = None
    variant: str | None = None
    inference_component: str | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    default_k: int = 5
    labels: tuple[str, ...] | None = None
    settings: Settings | None = None
    description: str | None = None
    example: Any = None
    cache: bool = True
    expose_handler_errors: bool = False
    """Whether a handler's exception type and message are in its 500 answer (off: the log
    alone has them)."""
    jobs: JobsSpec = dataclasses.field(default_factory=JobsSpec)
    experiment: Experiment | None = None
    llm: LlmSpec | None = None
    """A language model's (the ``llm`` kind's) container schema, limits and defaults."""
    kind: KindRules = None  # type: ignore[assignment]  # (a built-in's, by pipeline, when None)

    def __post_init__(self) -> None:
        if self.kind is None:  # a spec built by hand (a test, a tool) of a built-in kind
            object.__setattr__(self, "kind", BUILT_IN_KINDS[self.pipeline])

    @property
    def jobs_endpoint(self) -> str:
        """The endpoint a job of this model calls (the asynchronous one, or the model's)."""
        return self.jobs.endpoint or self.endpoint

    @property
    def handler_file(self) -> Path | None:
        name = self.kind.handler_file
        return self.folder / name if name else None
