"""The llm kind's model route uses the prediction cache only for a body that asks for greedy
decoding by name: a container's own sampling default is unknown, so a body that names none is
not replayed."""
from __future__ import annotations

import json

import pytest

from chalicelib.kinds.llm import greedy


@pytest.mark.parametrize("body", [
    {"messages": [], "temperature": 0},
    {"messages": [], "temperature": 0.0},
    {"inputs": "x", "parameters": {"do_sample": False, "temperature": 0.7}},
    {"inputs": "x", "parameters": {"temperature": 0}},
    {"messages": [], "temperature": 0.7, "top_p": 0},
    {"inputs": "x", "parameters": {"temperature": 0.7, "top_p": 0.0}},
])
def test_a_body_that_names_greedy_decoding_is_greedy(body: object) -> None:
    assert greedy(json.dumps(body).encode())


@pytest.mark.parametrize("raw", [
    json.dumps({"messages": []}), json.dumps({"messages": [], "temperature": 0.2}),
    json.dumps({"messages": [], "temperature": False}),
    json.dumps({"messages": [], "temperature": "0"}),
    json.dumps({"inputs": "x", "parameters": {"do_sample": True}}),
    json.dumps({"inputs": "x", "parameters": {}, "temperature": 0}),
    json.dumps({"messages": [], "top_p": False}), json.dumps({"messages": [], "top_p": 0.1}),
    json.dumps([0]), "not json", "[" * 100_000,
])
def test_anything_else_is_sampled_as_far_as_the_cache_knows(raw: str) -> None:
    assert not greedy(raw.encode())
