"""The llm kind's container: LMI's and the chat schemas read and answered, its bounds, and a
generation stopped by its consumer (over the session's one real engine)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from emulator import errors
from emulator.config import LlmSettings
from emulator.container import ContainerReply
from emulator.language import LanguageContainer, TokenStream, parse_request
from emulator.llm.engine import Engine

QUESTION = "What is the capital of France?"
PROMPT = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"


def container(engine: Engine, **bounds: Any) -> LanguageContainer:
    def load(path: Path | None) -> Engine:
        return engine

    return LanguageContainer("smollm2", LlmSettings(**bounds), load=load)


def body(document: object) -> bytes:
    return json.dumps(document).encode()


def refusal(reply: object) -> tuple[int, str]:
    assert isinstance(reply, ContainerReply)
    return reply.status, json.loads(reply.body)["error"]


def lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize(("document", "named"), [
    ({"inputs": "x", "prompt": "y"}, "unknown field prompt"),
    ({"inputs": "x", "parameters": {"max_tokens": 3}}, "unknown field parameters.max_tokens"),
    ({"inputs": 3}, "inputs must be a string"),
    ({"inputs": "x", "parameters": {"details": "yes"}}, "parameters.details must be true or false"),
    ({"inputs": "x", "parameters": {"max_new_tokens": 0}}, "max_new_tokens must be at least 1"),
    ({"inputs": "x", "parameters": {"temperature": -1}}, "temperature must be from 0"),
    ({"inputs": "x", "parameters": {"do_sample": True, "top_k": -2}}, "top_k must be -1 or 0"),
    ({"inputs": "x", "parameters": {"top_k": 2.5}}, "top_k must be an integer"),
    ({"inputs": "x", "parameters": {"stop": [""]}}, "stop[0] must be a non-empty string"),
    ({"messages": [], "tools": []}, "tools is not supported"),
    ({"messages": [], "n": 2}, "n must be 1"),
    ({"messages": [], "logprobs": True}, "logprobs is not supported"),
    ({"messages": [], "stream_options": {"x": 1}}, "unknown field stream_options.x"),
    ({"messages": "hi"}, "messages must be a list"),
    ({"prompt": "hi"}, "neither inputs"),
    ([1, 2], "the body must be a JSON object"),
])
def test_refuses_a_bad_body_naming_the_field(document: object, named: str) -> None:
    from emulator.language import Refused

    with pytest.raises(Refused, match=named.replace("[", r"\[")) as caught:
        parse_request(body(document), "application/json", None, 16)

    assert caught.value.status == 400


@pytest.mark.parametrize(("top_k", "sampled_from", "temperature"), [
    (50, 50, 0.7), (0, None, 0.7), (-1, None, 0.7), (1, None, 0.0)])
def test_lmi_top_k_reaches_the_sampler(top_k: int, sampled_from: int | None,
                                       temperature: float) -> None:
    """``top_k`` above 1 narrows the draw; 0 and -1 are off; 1 is greedy (temperature 0)."""
    request = parse_request(body({"inputs": "x", "parameters": {
        "do_sample": True, "temperature": 0.7, "top_k": top_k}}), "application/json", None, 16)

    assert (request.sampling.top_k, request.sampling.temperature) == (sampled_from, temperature)


def test_refuses_a_body_that_is_not_json_or_not_sent_as_json() -> None:
    from emulator.language import Refused

    with pytest.raises(Refused) as not_json:
        parse_request(b"{", "application/json", None, 16)
    with pytest.raises(Refused) as as_text:
        parse_request(body({"inputs": "x"}), "text/plain", None, 16)
    with pytest.raises(Refused) as accept:
        parse_request(body({"inputs": "x"}), "application/json", "image/png", 16)

    assert (not_json.value.status, as_text.value.status, accept.value.status) == (400, 415, 406)


def test_lmi_greedy_answer_with_details(engine: Engine) -> None:
    document = {"inputs": PROMPT, "parameters": {"max_new_tokens": 12, "details": True}}

    reply = container(engine).invoke(body(document), "application/json", None)

    answer = json.loads(reply.body)
    assert (reply.status, reply.content_type) == (200, "application/json")
    assert "Paris" in answer["generated_text"]
    details = answer["details"]
    assert (details["finish_reason"], details["inputs"]) == ("eos_token", PROMPT)
    assert details["generated_tokens"] == len(details["tokens"])
    assert "".join(token["text"] for token in details["tokens"]) == answer["generated_text"]
    assert details["tokens"][-1]["special_token"] is True
    assert details["prompt_tokens"] == len(engine.tokenizer.encode(PROMPT))


def test_lmi_finish_reasons_length_and_stop_sequence(engine: Engine) -> None:
    model = container(engine)
    short = {"inputs": PROMPT, "parameters": {"max_new_tokens": 2, "details": True}}
    stopped = {"inputs": PROMPT, "parameters": {"max_new_tokens": 12, "details": True,
                                                 "stop": [" France"]}}

    length = json.loads(model.invoke(body(short), "application/json", None).body)
    stop = json.loads(model.invoke(body(stopped), "application/json", None).body)

    assert (length["details"]["finish_reason"], length["details"]["generated_tokens"]) == (
        "length", 2)
    assert (stop["details"]["finish_reason"], stop["generated_text"]) == (
        "stop_sequence", "The capital of")


def test_return_full_text_prefixes_the_prompt(engine: Engine) -> None:
    document = {"inputs": PROMPT, "parameters": {"max_new_tokens": 2, "return_full_text": True}}

    answer = json.loads(container(engine).invoke(body(document), "application/json", None).body)

    assert answer == {"generated_text": PROMPT + "The capital"}


def test_stream_true_on_invoke_answers_json_lines_the_last_with_the_text(engine: Engine) -> None:
    document = {"inputs": PROMPT, "parameters": {"max_new_tokens": 3, "details": True},
                "stream": True}

    reply = container(engine).invoke(body(document), "application/json", None)

    answer = lines(reply.body)
    assert reply.content_type == "application/jsonlines"
    assert [set(line) for line in answer] == [{"token"}, {"token"},
                                               {"token", "generated_text", "details"}]
    assert answer[-1]["generated_text"] == "".join(line["token"]["text"] for line in answer)
    assert answer[-1]["details"] == {"finish_reason": "length", "generated_tokens": 3,
                                     "inputs": PROMPT,
                                     "prompt_tokens": len(engine.tokenizer.encode(PROMPT))}


def test_chat_completion_counts_its_usage(engine: Engine) -> None:
    document = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 12,
                "temperature": 0, "model": "asked-for"}

    answer = json.loads(container(engine).invoke(body(document), "application/json", None).body)

    assert answer["object"] == "chat.completion" and answer["model"] == "asked-for"
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "stop" and "Paris" in choice["message"]["content"]
    usage = answer["usage"]
    assert usage["prompt_tokens"] == len(engine.chat_prompt(document["messages"]))  # type: ignore[arg-type]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_bounds_are_refused_before_any_token(engine: Engine) -> None:
    model = container(engine, max_prompt_tokens=8, max_new_tokens=4)

    too_many = model.invoke(body({"inputs": "x", "parameters": {"max_new_tokens": 5}}),
                            "application/json", None)
    too_long = model.invoke(body({"inputs": PROMPT}), "application/json", None)
    huge = model.invoke(body({"inputs": "x" * 10_000}), "application/json", None)

    assert refusal(too_many) == (400, "max_new_tokens is 5, over this model's ceiling of 4")
    assert re.fullmatch(r"the prompt has \d+ tokens, over this model's limit of 8",
                        refusal(too_long)[1])
    assert refusal(huge)[1].startswith("the prompt has 10000 characters")
    assert model.generations()["started"] == 0


def test_generations_past_the_bound_are_throttled(engine: Engine) -> None:
    model = container(engine, max_concurrent=1)
    document = body({"inputs": PROMPT, "parameters": {"max_new_tokens": 4}})
    first = model.stream(document, "application/json", None)
    assert isinstance(first, TokenStream)

    with pytest.raises(errors.ThrottlingException):
        model.stream(document, "application/json", None)
    first.close()
    second = model.stream(document, "application/json", None)

    assert isinstance(second, TokenStream)
    second.close()


def test_closing_a_stream_stops_its_generation(engine: Engine) -> None:
    model = container(engine)
    opened = model.stream(body({"inputs": PROMPT, "parameters": {"max_new_tokens": 200}}),
                          "application/json", None)
    assert isinstance(opened, TokenStream)
    parts = opened.parts()

    first, second = next(parts), next(parts)
    opened.close()

    assert json.loads(first)["token"]["text"] == "The" and b"token" in second
    assert opened.generation.finish_reason == "cancelled"
    assert model.generations() == {"started": 1, "active": 0, "completed": 0, "cancelled": 1,
                                   "tokens": 2}


def test_chat_nulls_are_absent_fields() -> None:
    document = {"messages": [{"role": "user", "content": "Hi"}], "temperature": None,
                "top_p": None, "max_tokens": None, "n": None, "stop": None, "tools": None,
                "stream": None, "stream_options": None, "logprobs": None}

    request = parse_request(body(document), "application/json", None, 16)

    assert (request.sampling.temperature, request.sampling.top_p) == (1.0, 1.0)
    assert (request.sampling.max_new_tokens, request.stream, request.include_usage) == (
        16, None, False)


def test_lmi_null_parameters_are_absent_ones() -> None:
    document = {"inputs": "Hi", "parameters": {"max_new_tokens": None, "temperature": None,
                                               "stop": None, "details": None}}

    request = parse_request(body(document), "application/json", None, 16)

    assert (request.sampling.max_new_tokens, request.sampling.temperature, request.details) == (
        16, 0.0, False)


def test_a_refused_prompt_never_takes_a_generation_place(engine: Engine) -> None:
    """The prompt is rendered, tokenized and checked before a place is taken: with every
    place held, a prompt over the limit is still its 400, not a throttle."""
    model = container(engine, max_concurrent=1, max_prompt_tokens=8)
    held = model.stream(body({"inputs": "Hi", "parameters": {"max_new_tokens": 2}}),
                        "application/json", None)
    assert isinstance(held, TokenStream)

    too_long = model.stream(body({"messages": [{"role": "user", "content": QUESTION}]}),
                            "application/json", None)

    assert re.fullmatch(r"the prompt has \d+ tokens, over this model's limit of 8",
                        refusal(too_long)[1])
    held.close()
    assert model.generations()["started"] == 1


def test_chat_messages_are_bounded_before_the_template_renders_them(engine: Engine) -> None:
    from emulator.language import MAX_MESSAGES

    model = container(engine)
    many = [{"role": "user", "content": ""}] * (MAX_MESSAGES + 1)
    empty = [{"role": "user", "content": ""}] * MAX_MESSAGES

    too_many = model.invoke(body({"messages": many}), "application/json", None)
    framed = container(engine, max_prompt_tokens=100).invoke(
        body({"messages": empty}), "application/json", None)

    assert refusal(too_many) == (400, f"messages has {MAX_MESSAGES + 1} messages, over this "
                                      f"container's limit of {MAX_MESSAGES}")
    assert refusal(framed)[1].startswith(f"the prompt has {MAX_MESSAGES * 28} characters")
    assert model.generations()["started"] == 0
