"""Generation: the real answer at temperature 0, streamed pieces, seeded sampling, stop strings,
the length bound, and a consumer that stops or cancels stopping the model."""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterator
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator.llm import sampling
from emulator.llm.engine import Engine
from emulator.llm.generation import CANCELLED, LENGTH, STOP, _StopFilter
from emulator.llm.sampling import Sampler, Sampling
from emulator.llm.transformer import KVCache

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
PARIS = "The capital of France is Paris."


@pytest.fixture
def forward_calls(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many tokens each forward pass of the model ran, in order."""
    calls: list[int] = []
    real = engine.transformer.forward

    def counted(tokens: np.ndarray, cache: KVCache, all_logits: bool = False) -> np.ndarray:
        calls.append(len(tokens))
        return real(tokens, cache, all_logits)

    monkeypatch.setattr(engine.transformer, "forward", counted)
    yield calls


def test_greedy_answers_paris_and_the_pieces_make_the_text(engine: Engine,
                                                          forward_calls: list[int]) -> None:
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=16))
    pieces = list(generation)
    assert generation.text == "".join(p.text for p in pieces) == PARIS
    assert generation.finish_reason == STOP
    assert pieces[-1].token_id == engine.tokenizer.eos_id and pieces[-1].special
    assert [p.token_id for p in pieces] == generation.token_ids
    assert all(p.logprob <= 0 for p in pieces)
    # the prompt in one pass, then one token a step; none after the end token
    assert forward_calls == [generation.prompt_tokens] + [1] * (len(pieces) - 1)


def test_a_stop_string_ends_the_answer_before_it(engine: Engine) -> None:
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=16, stop=("of Fr", "xyz")))
    pieces = list(generation)
    assert generation.text == "The capital " and generation.finish_reason == STOP
    assert "".join(p.text for p in pieces) == "The capital "


def test_max_new_tokens_bounds_the_answer(engine: Engine) -> None:
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=3))
    assert generation.read() == "The capital of"
    assert len(generation.token_ids) == 3 and generation.finish_reason == LENGTH


def test_seeded_sampling_repeats_and_another_seed_differs(engine: Engine) -> None:
    prompt = engine.chat_prompt([{"role": "user", "content": "Tell me a story."}])

    def sample(seed: int) -> list[int]:
        generation = engine.generate(
            prompt, Sampling(max_new_tokens=6, temperature=1.2, top_p=0.95, seed=seed))
        generation.read()
        return generation.token_ids

    first = sample(7)
    assert sample(7) == first
    assert any(sample(seed) != first for seed in (8, 9, 10))


def test_a_consumer_that_stops_iterating_stops_the_model(engine: Engine,
                                                         forward_calls: list[int]) -> None:
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=50))
    next(generation)
    next(generation)
    generation.close()
    assert generation.finish_reason == CANCELLED
    assert list(generation) == []
    assert len(forward_calls) == 2


def test_cancel_from_another_thread_stops_before_the_next_step(
        engine: Engine, forward_calls: list[int]) -> None:
    cancel = threading.Event()
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=50), cancel=cancel)
    next(generation)
    thread = threading.Thread(target=cancel.set)
    thread.start()
    thread.join()
    assert list(generation) == [] and generation.finish_reason == CANCELLED
    assert len(forward_calls) == 1


def test_nothing_runs_before_the_first_piece_is_asked_for(engine: Engine,
                                                         forward_calls: list[int]) -> None:
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=5))
    generation.close()
    assert forward_calls == [] and generation.finish_reason == CANCELLED


@given(text=st.text("ab\n", max_size=30), cuts=st.lists(st.integers(0, 30), max_size=8),
       stops=st.lists(st.text("ab\n", min_size=1, max_size=4), min_size=1, max_size=3))
def test_stop_filter_gives_the_text_up_to_the_first_stop_however_it_is_cut(
        text: str, cuts: list[int], stops: list[str]) -> None:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]
    stop_filter = _StopFilter(stops)
    out = "".join(stop_filter.add(chunk) for chunk in chunks)
    if not stop_filter.stopped:
        out += stop_filter.release()
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    assert out == (text[:min(found)] if found else text)
    assert stop_filter.stopped == bool(found)


def test_sampler_greedy_and_a_narrow_nucleus_take_the_most_likely_token() -> None:
    logits = np.log(np.array([0.1, 0.6, 0.3], dtype=np.float32))
    token, logprob = Sampler(Sampling(temperature=0)).choose(logits)
    assert token == 1 and logprob == pytest.approx(np.log(0.6), abs=1e-5)
    narrow = Sampler(Sampling(temperature=1.0, top_p=0.5, seed=1))
    assert {narrow.choose(logits)[0] for _ in range(50)} == {1}
    wide = Sampler(Sampling(temperature=1.0, top_p=1.0, seed=1))
    assert {wide.choose(logits)[0] for _ in range(200)} == {0, 1, 2}


@pytest.mark.parametrize("backend", ["engine", "onnx_engine"])
def test_generations_in_parallel_threads_answer_as_one_alone(
        backend: str, request: pytest.FixtureRequest) -> None:
    engine: Engine = request.getfixturevalue(backend)
    questions = [FRANCE, [{"role": "user", "content": "What is 2 plus 2?"}]]
    alone = [engine.chat(q, Sampling(max_new_tokens=6)).read() for q in questions]
    together: dict[int, str] = {}

    def answer(index: int) -> None:
        together[index] = engine.chat(questions[index], Sampling(max_new_tokens=6)).read()

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [together[0], together[1]] == alone


def test_a_dropped_generation_is_freed_at_once_with_its_cache(engine: Engine) -> None:
    generation = engine.chat(FRANCE, Sampling(max_new_tokens=50))
    next(generation)
    frame = generation._steps.gi_frame
    assert frame is not None
    cache = weakref.ref(next(v for v in frame.f_locals.values() if isinstance(v, KVCache)))
    del generation, frame
    assert cache() is None  # no cycle: freed by reference counting, no gc.collect()


@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 40),
       top_p=st.floats(0.01, 1.0), top_k=st.one_of(st.none(), st.integers(1, 50)),
       candidates=st.integers(1, 12))
def test_nucleus_keeps_what_hf_keeps_top_k_then_top_p(seed: int, size: int, top_p: float,
                                                      top_k: int | None, candidates: int) -> None:
    probabilities = np.random.default_rng(seed).dirichlet(np.full(size, 0.3))
    k = size if top_k is None else min(top_k, size)
    order = np.argsort(-probabilities, kind="stable")[:k]
    kept = np.cumsum(probabilities[order] / probabilities[order].sum())
    expected = order[:int(np.searchsorted(kept, top_p, side="left")) + 1]
    with mock.patch.object(sampling, "NUCLEUS_CANDIDATES", candidates):
        chosen = sampling._nucleus(probabilities, top_p, top_k)
    if top_p >= 1 and k == size:
        assert sorted(chosen) == list(range(size))
    else:
        assert list(chosen) == list(expected)


def test_top_k_one_is_greedy() -> None:
    logits = np.log(np.array([0.3, 0.2, 0.5], dtype=np.float32))
    sampler = Sampler(Sampling(temperature=2.0, top_k=1, seed=3))
    assert {sampler.choose(logits)[0] for _ in range(30)} == {2}
