"""Bounds: every request the engine will not run is refused before the model runs, with a
ValueError naming the field (a server answers it 4xx)."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.llm.engine import Engine, Limits
from emulator.llm.errors import GenerationRefused
from emulator.llm.sampling import MAX_SEED, Sampling


@pytest.fixture(scope="module")
def small(engine: Engine) -> Engine:
    """The same model under tight limits."""
    limits = Limits(max_prompt_tokens=40, max_new_tokens=20, context_length=50, max_stop=2)
    return Engine(engine.transformer, engine.tokenizer, engine.template, limits)


@pytest.mark.parametrize(("field", "value"), [
    ("max_new_tokens", 0), ("max_new_tokens", True), ("max_new_tokens", 2.0),
    ("temperature", -0.1), ("temperature", float("nan")), ("temperature", 101),
    ("temperature", "1"), ("top_p", 0), ("top_p", 1.01), ("seed", -1), ("seed", MAX_SEED + 1),
    ("seed", 1.5), ("stop", ("",)), ("stop", "END"), ("stop", (3,)), ("top_k", 0),
    ("top_k", 1.5),
])
def test_refuses_parameters_out_of_range_naming_them(field: str, value: Any) -> None:
    with pytest.raises(GenerationRefused) as refused:
        Sampling(**{field: value})
    assert refused.value.param == field
    assert isinstance(refused.value, ValueError)


def test_refuses_a_prompt_over_the_limit(small: Engine) -> None:
    with pytest.raises(GenerationRefused, match="41 tokens, over this model's limit of 40"):
        small.generate(list(range(100, 141)), Sampling(max_new_tokens=1))


def test_refuses_max_new_tokens_over_the_ceiling(small: Engine) -> None:
    with pytest.raises(GenerationRefused, match="ceiling of 20") as refused:
        small.generate("Hi", Sampling(max_new_tokens=21))
    assert refused.value.param == "max_new_tokens"


def test_refuses_prompt_and_answer_over_the_context(small: Engine) -> None:
    with pytest.raises(GenerationRefused, match="exceed the context length of 50 tokens"):
        small.generate(list(range(100, 135)), Sampling(max_new_tokens=20))
    small.generate(list(range(100, 130)), Sampling(max_new_tokens=20)).close()  # 50 fits


@pytest.mark.parametrize(("prompt", "message"), [
    ("", "empty"), ([], "empty"), ([5, 49152], "outside the vocabulary"), ([-1], "outside"),
])
def test_refuses_empty_prompts_and_unknown_token_ids(small: Engine, prompt: Any,
                                                      message: str) -> None:
    with pytest.raises(GenerationRefused, match=message) as refused:
        small.generate(prompt)
    assert refused.value.param == "prompt"


def test_refuses_too_many_stop_strings(small: Engine) -> None:
    with pytest.raises(GenerationRefused, match="3 stop strings") as refused:
        small.generate("Hi", Sampling(max_new_tokens=1, stop=("a", "b", "c")))
    assert refused.value.param == "stop"


def test_the_context_is_never_more_than_the_models(engine: Engine) -> None:
    large = Engine(engine.transformer, engine.tokenizer, engine.template,
                   Limits(context_length=100_000))
    assert large.context_length == engine.transformer.context_length == 8192


def test_stop_strings_may_come_as_a_list() -> None:
    assert Sampling(stop=["a", "b"]).stop == ("a", "b")  # type: ignore[arg-type]


def test_an_unknown_backend_is_refused_before_anything_loads() -> None:
    with pytest.raises(ValueError, match="backend 'torch': one of onnxruntime, numpy"):
        Engine.load(backend="torch")
