"""The llm part of the bench: how it reads both streams and what it computes from them (the
part itself runs against the real stack: ``python -m bench --part llm``)."""
from __future__ import annotations

import json

import pytest

from bench import llm


def test_lines_cut_across_parts_are_joined() -> None:
    first, second = b'{"a": 1}\n', b'{"b": 2}\n'
    parts = [first + second[:4], second[4:], b'{"c"', b": 3}"]
    assert list(llm._lines(iter(parts))) == [first.strip(), second.strip(), b'{"c": 3}']


def test_only_a_chunks_text_counts_as_a_token() -> None:
    def chunk(delta: dict[str, object]) -> dict[str, object]:
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}

    assert llm._chat_piece(chunk({"content": " Paris"})) == " Paris"
    assert llm._chat_piece(chunk({"role": "assistant", "content": ""})) == ""
    assert llm._chat_piece({"choices": [], "usage": {"completion_tokens": 3}}) == ""
    assert llm._chat_piece([1, 2]) == ""
    with pytest.raises(RuntimeError, match="the stream failed"):
        llm._chat_piece({"error": {"message": "the model stopped"}})


def stream(*token_ms: float, text: str = "x") -> llm.Stream:
    return llm.Stream(text=text, token_ms=list(token_ms))


def test_time_per_token_runs_from_the_first_token_to_the_last() -> None:
    assert stream(100.0, 130.0, 160.0, 190.0).per_token_ms == 30.0
    assert stream(100.0).per_token_ms == 0.0
    assert stream(100.0, 130.0).first_ms == 100.0


def test_added_is_the_median_of_each_rounds_difference() -> None:
    found = llm.Rounds(reference=[stream(400.0, 430.0), stream(420.0, 450.0),
                                  stream(500.0, 530.0)],
                       sagegate=[stream(401.0, 431.5), stream(423.0, 453.0),
                                 stream(498.0, 528.0)])
    figures = {name: (theirs, mine, added, goal)
               for name, theirs, mine, added, goal in llm.figures(found)}
    assert figures["time to first token"] == (420.0, 423.0, 1.0, llm.TTFT_TARGET_MS)
    assert figures["time per token"][2] == 0.0
    assert figures["time per token"][3] == llm.PER_TOKEN_TARGET_MS
    assert found.mismatches() == 0
    found.sagegate[1].text = "y"
    assert found.mismatches() == 1


def test_both_sides_ask_for_the_same_greedy_answer() -> None:
    container = json.loads(llm.container_body(8))
    openai = json.loads(llm.openai_body(8))
    assert container["messages"] == openai["messages"]
    assert container["max_tokens"] == openai["max_tokens"] == 8
    assert container["temperature"] == openai["temperature"] == 0
    assert container["stream"] is openai["stream"] is True
    assert openai["model"] == llm.MODEL


def test_the_rounds_alternate_which_side_goes_first() -> None:
    order: list[str] = []

    def side(name: str) -> llm.Stream:
        order.append(name)
        return stream(1.0, 2.0)

    found = llm.run(lambda: side("ref"), lambda: side("ours"),
                    llm.Plan(rounds=3, warmup=1, max_tokens=4))
    assert order == ["ref", "ours", "ref", "ours", "ours", "ref", "ref", "ours"]
    assert len(found.reference) == len(found.sagegate) == 3
