"""A generation: the prompt run once, then one token a step, yielded as it is made.

``Generation`` is an iterator of ``Piece``s. The model runs only while it is iterated: the
prompt's pass (the time to first token) at the first ``next()``, one forward step per piece
after it. A consumer that stops iterating stops the model: ``close()`` (or dropping the
iterator) ends it and frees its KV cache, and a ``threading.Event`` given as ``cancel`` ends
it from another thread (a server whose client went away) before its next step.

Text comes out in whole characters (a character split across tokens waits for its last
byte), and a stop string never reaches the consumer: text that could be the start of one is
held back until the next tokens show it is not.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Generator, Iterator, Sequence

import numpy as np

from emulator.llm.sampling import Sampler, Sampling
from emulator.llm.tokenizer import TextStream, Tokenizer
from emulator.llm.transformer import Transformer

STOP = "stop"
"""Finish reasons (LMI's and OpenAI's words): an end token or a stop string,"""
LENGTH = "length"
"""max_new_tokens reached,"""
CANCELLED = "cancelled"
"""or the consumer cancelled."""


@dataclasses.dataclass(frozen=True)
class Piece:
    """One generated token and the text it adds (possibly "" while text is held back).

    Attributes:
        token_id: the token.
        text: the new text; the end token's piece carries any text still held back.
        logprob: the token's log-probability under the model.
        special: an end or control token, which has no text of its own.
    """

    token_id: int
    text: str
    logprob: float
    special: bool


@dataclasses.dataclass
class Progress:
    """What a generation has made so far: shared by ``Generation`` and its steps, so that the
    steps hold no reference to the ``Generation`` (a dropped one is freed at once, its KV
    cache with it, not at the next cyclic garbage collection)."""

    token_ids: list[int] = dataclasses.field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


class Generation(Iterator[Piece]):
    """The pieces of one answer, made as they are asked for.

    Attributes:
        prompt_tokens: how many tokens the prompt has.
        token_ids: the tokens generated so far.
        text: the text returned so far.
        finish_reason: None while running, then ``stop``, ``length`` or ``cancelled``.
    """

    def __init__(self, transformer: Transformer, tokenizer: Tokenizer, end_ids: frozenset[int],
                 prompt: Sequence[int], sampling: Sampling,
                 cancel: threading.Event | None = None) -> None:
        self.prompt_tokens = len(prompt)
        self._progress = Progress()
        self._steps = _steps(_Model(transformer, tokenizer, end_ids),
                             np.asarray(prompt, dtype=np.int64), sampling,
                             cancel or threading.Event(), self._progress)

    @property
    def token_ids(self) -> list[int]:
        return self._progress.token_ids

    @property
    def text(self) -> str:
        return self._progress.text

    @property
    def finish_reason(self) -> str | None:
        return self._progress.finish_reason

    def __next__(self) -> Piece:
        return next(self._steps)

    def close(self) -> None:
        """Stops the generation (no further forward step) and frees its cache."""
        self._steps.close()
        if self._progress.finish_reason is None:
            self._progress.finish_reason = CANCELLED

    def read(self) -> str:
        """Runs the generation to its end; returns the whole text."""
        for _ in self:
            pass
        return self.text


@dataclasses.dataclass(frozen=True)
class _Model:
    transformer: Transformer
    tokenizer: Tokenizer
    end_ids: frozenset[int]


def _steps(model: _Model, prompt: np.ndarray, sampling: Sampling, cancel: threading.Event,
           progress: Progress) -> Generator[Piece]:
    """The generation's pieces: the prompt's pass, then a forward step after each piece."""
    sampler, stops = Sampler(sampling), _StopFilter(sampling.stop)
    stream = TextStream(model.tokenizer)
    if cancel.is_set():
        progress.finish_reason = CANCELLED
        return
    cache = model.transformer.new_cache(len(prompt) + sampling.max_new_tokens)
    logits = model.transformer.prefill(prompt, cache)
    while True:
        token, logprob = sampler.choose(logits)
        progress.token_ids.append(token)
        ended = token in model.end_ids
        special = ended or model.tokenizer.is_special(token)
        text = stops.add("" if special else stream.add(token))
        last = ended or stops.stopped or len(progress.token_ids) >= sampling.max_new_tokens
        if last and not stops.stopped:
            text += stops.add(stream.flush()) + stops.release()
        progress.text += text
        if last:
            progress.finish_reason = STOP if ended or stops.stopped else LENGTH
        yield Piece(token, text, logprob, special)
        if last:
            return
        if cancel.is_set():
            progress.finish_reason = CANCELLED
            return
        logits = model.transformer.forward(np.array([token]), cache)


class _StopFilter:
    """Passes text on, holding back what may be the start of a stop string, and cutting the
    text at the first stop string found (``stopped``)."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._held = ""
        self.stopped = False

    def add(self, text: str) -> str:
        """The part of ``text`` (after what was held) that can be given out now."""
        if self.stopped or not self._stops:
            return "" if self.stopped else text
        held = self._held + text
        found = [i for i in (held.find(stop) for stop in self._stops) if i >= 0]
        if found:
            self.stopped, self._held = True, ""
            return held[:min(found)]
        keep = self._longest_stop_start(held)
        self._held = held[len(held) - keep:] if keep else ""
        return held[:len(held) - keep]

    def release(self) -> str:
        """What was held back, at the end of the generation."""
        held, self._held = self._held, ""
        return held

    def _longest_stop_start(self, text: str) -> int:
        """The length of the longest end of ``text`` that a stop string starts with."""
        longest = min(len(text), max(len(stop) for stop in self._stops) - 1)
        for size in range(longest, 0, -1):
            if any(stop.startswith(text[-size:]) for stop in self._stops):
                return size
        return 0
