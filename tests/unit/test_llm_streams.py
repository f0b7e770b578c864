"""Container schemas and streams (chalicelib.llm.schemas, .streams): what each schema is sent
and how its answers and stream lines are read; the line splitter (any split of a stream into
parts gives the same lines); OpenAI's chunks and their SSE framing."""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.core.errors import InvalidEndpointResponseError
from chalicelib.llm.requests import CompletionRequest, Operation, read_request
from chalicelib.llm.schemas import SCHEMAS, Generate, LmiChat, PassThrough
from chalicelib.llm.streams import DONE, MAX_LINE_BYTES, Chunks, lines, sse
from chalicelib.registry.specs import LlmSchema, LlmSpec
from tests.unit.test_llm_requests import HELLO, MODELS


def request(document: dict[str, Any], operation: Operation = Operation.CHAT) -> CompletionRequest:
    return read_request(json.dumps(document).encode(), operation, MODELS)


def sent(document: dict[str, Any], operation: Operation = Operation.CHAT) -> Any:
    read = request(document, operation)
    return json.loads(SCHEMAS[read.llm.schema].body(read))


# --- what each schema is sent -------------------------------------------------------------

def test_lmi_gets_inputs_and_parameters_greedy_at_temperature_zero() -> None:
    assert sent({"model": "gen", "prompt": "Once", "max_tokens": 9, "temperature": 0,
                 "stop": ["\n"], "seed": 4}, Operation.TEXT) == {
        "inputs": "Once", "parameters": {"max_new_tokens": 9, "do_sample": False,
                                         "details": True, "stop": ["\n"], "seed": 4}}


def test_sampling_parameters_go_only_when_sampling() -> None:
    body = sent({"model": "tgi", "prompt": "Once", "temperature": 0.7, "top_p": 0.9,
                 "stream": True}, Operation.TEXT)
    assert body["parameters"] == {"max_new_tokens": MODELS["tgi"].llm.max_tokens,  # type: ignore[union-attr]
                                  "do_sample": True, "details": True, "temperature": 0.7,
                                  "top_p": 0.9}
    assert body["stream"] is True


def test_lmi_chat_gets_messages_for_chat_and_inputs_for_text() -> None:
    assert sent({"model": "smol", "messages": HELLO, "max_tokens": 5, "temperature": 0,
                 "stream": True}) == {"messages": HELLO, "max_tokens": 5, "temperature": 0.0,
                                      "stream": True, "stream_options": {"include_usage": True}}
    developer = [{"role": "developer", "content": "Be brief."}, *HELLO]
    assert sent({"model": "smol", "messages": developer})["messages"][0]["role"] == "system"
    assert "inputs" in sent({"model": "smol", "prompt": "Once"}, Operation.TEXT)


OAI_DEFAULTS = {"max_tokens": LlmSpec(LlmSchema.OPENAI).max_tokens,
                "temperature": LlmSpec(LlmSchema.OPENAI).temperature}


def test_an_openai_container_gets_the_clients_body_without_the_model() -> None:
    assert sent({"model": "oai", "messages": HELLO, "logprobs": True, "max_tokens": 5,
                 "temperature": 0.3}) == {"messages": HELLO, "logprobs": True,
                                          "max_tokens": 5, "temperature": 0.3}


def test_an_openai_container_is_sent_the_models_defaults_the_client_left_out() -> None:
    assert sent({"model": "oai", "messages": HELLO}) == {"messages": HELLO, **OAI_DEFAULTS}
    assert sent({"model": "oai", "messages": HELLO, "max_completion_tokens": 7,
                 "temperature": None}) == {"messages": HELLO, "max_completion_tokens": 7,
                                           "temperature": OAI_DEFAULTS["temperature"]}


def test_an_openai_containers_whole_body_has_no_stream_fields_its_stream_has_them() -> None:
    streamed = request({"model": "oai", "messages": HELLO, "stream": True,
                        "stream_options": {"include_usage": True}})
    whole = dataclasses.replace(streamed, stream=False, include_usage=False)
    assert json.loads(PassThrough().body(whole)) == {"messages": HELLO, **OAI_DEFAULTS}
    assert json.loads(PassThrough().body(streamed)) == {
        "messages": HELLO, "stream": True, "stream_options": {"include_usage": True},
        **OAI_DEFAULTS}
    assert PassThrough().body(whole) == PassThrough().body(request(
        {"model": "oai", "messages": HELLO, "stream": False}))  # one cache key


@pytest.mark.parametrize(("fields", "greedy"), [
    ({"temperature": 0}, True), ({"temperature": 0.7, "top_p": 0}, True),
    ({"temperature": 0.7}, False), ({"temperature": 0.7, "top_p": 0.5}, False),
    ({}, False)])  # (the models' default temperature is 1.0)
def test_greedy_is_temperature_or_top_p_zero_and_sent_as_greedy(
        fields: dict[str, Any], greedy: bool) -> None:
    chat = request({"model": "smol", "messages": HELLO, **fields})
    assert chat.sampling.greedy is greedy
    body = json.loads(SCHEMAS[LlmSchema.LMI_CHAT].body(chat))
    assert (body["temperature"] == 0 and "top_p" not in body) is greedy
    text = sent({"model": "gen", "prompt": "Once", **fields}, Operation.TEXT)
    assert text["parameters"]["do_sample"] is not greedy
    assert ("top_p" in text["parameters"]) is (fields.get("top_p") == 0.5)


# --- whole answers ----------------------------------------------------------------------

TEXT_REQUEST = {"model": "gen", "prompt": "Once"}


@pytest.mark.parametrize("answer", [
    {"generated_text": " upon", "details": {"finish_reason": "length", "generated_tokens": 2,
                                            "prompt_tokens": 1}},
    [{"generated_text": " upon", "details": {"finish_reason": "length",
                                             "generated_tokens": 2, "prefill": [{"id": 1}]}}],
])
def test_a_generation_is_read_with_its_details(answer: Any) -> None:
    completion = Generate().answer(json.dumps(answer).encode(),
                                   request(TEXT_REQUEST, Operation.TEXT))
    assert (completion.text, completion.finish_reason, completion.prompt_tokens,
            completion.completion_tokens) == (" upon", "length", 1, 2)


@pytest.mark.parametrize(("reason", "mapped"), [("eos_token", "stop"), ("stop_sequence", "stop"),
                                                ("length", "length"), (None, "stop")])
def test_finish_reasons_are_openais(reason: str | None, mapped: str) -> None:
    body = json.dumps({"generated_text": "x", "details": {"finish_reason": reason}}).encode()
    assert Generate().answer(body, request(TEXT_REQUEST, Operation.TEXT)).finish_reason == mapped


@pytest.mark.parametrize("body", [b"not json", b'{"text": "x"}', b"[]", b'{"choices": []}'])
def test_an_answer_not_of_its_schema_is_an_invalid_endpoint_response(body: bytes) -> None:
    with pytest.raises(InvalidEndpointResponseError):
        Generate().answer(body, request(TEXT_REQUEST, Operation.TEXT))
    with pytest.raises(InvalidEndpointResponseError):
        LmiChat().answer(body, request({"model": "smol", "messages": HELLO}))


def test_a_chat_completion_is_read_with_its_usage() -> None:
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."},
                           "finish_reason": "eos_token"}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 3}}
    completion = LmiChat().answer(json.dumps(answer).encode(),
                                  request({"model": "smol", "messages": HELLO}))
    assert (completion.text, completion.finish_reason, completion.prompt_tokens,
            completion.completion_tokens) == ("Paris.", "stop", 9, 3)


# --- stream lines -------------------------------------------------------------------------

def test_lmi_token_lines_are_text_then_the_finish_and_counts() -> None:
    read = request(TEXT_REQUEST, Operation.TEXT)
    token = Generate().piece({"token": {"id": 5, "text": " up", "log_prob": -0.1}}, read)
    assert (token.text, token.tokens, token.finish_reason) == (" up", 1, None)
    last = Generate().piece({"token": {"id": 2, "text": "on", "log_prob": -0.2},
                             "generated_text": " upon",
                             "details": {"finish_reason": "eos_token", "generated_tokens": 2}},
                            read)
    assert (last.text, last.finish_reason, last.completion_tokens) == ("on", "stop", 2)


def test_tgi_special_tokens_carry_no_text() -> None:
    piece = Generate().piece({"token": {"id": 2, "text": "</s>", "logprob": 0.0,
                                        "special": True}, "generated_text": None,
                              "details": None}, request(TEXT_REQUEST, Operation.TEXT))
    assert (piece.text, piece.tokens) == ("", 1)


@pytest.mark.parametrize("line", [
    {"token": {"id": -1, "text": "", "log_prob": -1}, "generated_text": "CUDA out of memory",
     "details": {"finish_reason": "error"}},
    {"error": "Request failed during generation", "error_type": "generation"},
])
def test_a_failed_generation_is_an_error_piece(line: dict[str, Any]) -> None:
    assert Generate().piece(line, request(TEXT_REQUEST, Operation.TEXT)).error


def test_chat_chunks_are_read_and_an_openai_containers_kept() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Par"}, "finish_reason": None}]}
    piece = LmiChat().piece(chunk, request({"model": "smol", "messages": HELLO}))
    assert (piece.text, piece.tokens, piece.chunk) == ("Par", 1, None)
    passed = PassThrough().piece(chunk, request({"model": "oai", "messages": HELLO}))
    assert passed.chunk == chunk


# --- the line splitter --------------------------------------------------------------------

TOKEN_LINES = [json.dumps({"token": {"id": i, "text": text, "log_prob": -0.5}}).encode()
               for i, text in enumerate(["The", " capital", " é", " 🇫🇷", "\n", "\\n"])]


def _parts(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(cuts)), len(stream)]
    return [stream[start:end] for start, end in itertools.pairwise(bounds)]


@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=40),
       sse_prefix=st.booleans(), crlf=st.booleans())
def test_any_split_of_the_stream_gives_the_same_lines(cuts: list[int], sse_prefix: bool,
                                                      crlf: bool) -> None:
    newline = b"\r\n" if crlf else b"\n"
    framed = [(b"data:" + line + newline + newline) if sse_prefix else line + newline
              for line in TOKEN_LINES]
    stream = b"".join(framed) + (b"data: [DONE]" + newline if sse_prefix else b"")
    cuts = [cut % (len(stream) + 1) for cut in cuts]
    assert list(lines(_parts(stream, cuts))) == TOKEN_LINES


def test_the_last_line_needs_no_newline_and_sse_fields_are_skipped() -> None:
    parts = [b": keep-alive\nevent: message\nid: 3\n", b'data: {"a"', b": 1}"]
    assert list(lines(parts)) == [b'{"a": 1}']


def test_a_line_of_the_cap_is_read_and_one_byte_more_is_refused() -> None:
    line = b'"' + b"x" * 98 + b'"'
    assert list(lines([line + b"\n"], max_line_bytes=100)) == [line]
    with pytest.raises(InvalidEndpointResponseError):
        list(lines([line + b"x\n"], max_line_bytes=100))


def test_a_line_that_never_ends_is_refused_once_over_the_cap_never_buffered_on() -> None:
    read = 0

    def endless() -> Iterator[bytes]:
        nonlocal read
        while True:
            read += 1
            yield b"x" * 1000

    with pytest.raises(InvalidEndpointResponseError):
        list(lines(endless()))
    assert read == MAX_LINE_BYTES // 1000 + 1


def test_short_lines_under_the_cap_pass_whatever_came_before() -> None:
    parts = [b"a" * 60 + b"\n" + b"b" * 60, b"\n" + b"c" * 60 + b"\n"]
    assert list(lines(parts, max_line_bytes=60)) == [b"a" * 60, b"b" * 60, b"c" * 60]


# --- OpenAI's chunks and SSE ------------------------------------------------------------

def test_chat_chunks_open_with_the_role_and_close_with_the_usage() -> None:
    chunks = Chunks(Operation.CHAT, "chatcmpl-1", 7, "smol", include_usage=True)
    first, delta, finish = chunks.first(), chunks.delta("Hi"), chunks.finish("stop")
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert delta["choices"][0]["delta"] == {"content": "Hi"}
    assert finish["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                    "finish_reason": "stop"}
    assert {first["object"], first["id"], first["model"]} == {"chat.completion.chunk",
                                                              "chatcmpl-1", "smol"}
    assert first["usage"] is None and delta["usage"] is None
    usage = chunks.usage({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 3


def test_text_chunks_are_text_completions_without_usage_unless_asked() -> None:
    chunk = Chunks(Operation.TEXT, "cmpl-1", 7, "gen").delta(" upon")
    assert chunk["object"] == "text_completion" and "usage" not in chunk
    assert chunk["choices"] == [{"index": 0, "text": " upon", "logprobs": None,
                                 "finish_reason": None}]


def test_sse_frames_one_event_a_data_line() -> None:
    assert sse({"a": "é"}) == b'data: {"a":"\\u00e9"}\n\n'
    assert DONE == b"data: [DONE]\n\n"
    assert LlmSchema.LMI_CHAT in SCHEMAS and len(SCHEMAS) == len(LlmSchema)


# --- whatever a container sends, it is read or refused as the model's fault ---------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["token", "id", "text", "special", "details", "finish_reason",
                         "generated_text", "choices", "delta", "content", "usage",
                         "prompt_tokens", "completion_tokens", "error", "message", "index",
                         "generated_tokens", "inputs", "object"]) | st.text(max_size=4),
        inner, max_size=5),
    max_leaves=20)


@given(document=_JSON, chat=st.booleans())
def test_any_line_or_answer_of_any_shape_is_read_or_an_invalid_endpoint_response(
        document: Any, chat: bool) -> None:
    """A container's line or answer of whatever shape: a piece or a completion, else the
    endpoint's fault (InvalidEndpointResponseError, a 502), never another exception."""
    read = request({"model": "smol", "messages": HELLO}) if chat \
        else request(TEXT_REQUEST, Operation.TEXT)
    for schema in SCHEMAS.values():
        if isinstance(document, dict):
            schema.piece(document, read)
        with contextlib.suppress(InvalidEndpointResponseError):
            schema.answer(json.dumps(document).encode(), read)
