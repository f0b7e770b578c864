"""OpenAI's request bodies read and checked (chalicelib.llm.requests), and model.json's ``llm``
block (chalicelib.registry.llmblock): every refusal with its status, type, param and code; an
unsupported feature refused by name, never ignored."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError
from chalicelib.llm.errors import OpenAIError, from_sagegate
from chalicelib.llm.requests import Operation, read_request
from chalicelib.registry.loading import load_model
from chalicelib.registry.specs import LlmSchema, LlmSpec, ModelSpec

CHAT, TEXT = Operation.CHAT, Operation.TEXT


def llm_model(name: str = "smol", schema: LlmSchema = LlmSchema.LMI_CHAT,
              **limits: Any) -> ModelSpec:
    return ModelSpec(name=name, folder=Path("."), endpoint=name, pipeline="llm",
                     content_type="application/json", accept="application/json",
                     signature=None,  # type: ignore[arg-type]
                     llm=LlmSpec(schema, **limits))


MODELS = {"smol": llm_model(), "gen": llm_model("gen", LlmSchema.LMI),
          "tgi": llm_model("tgi", LlmSchema.TGI), "oai": llm_model("oai", LlmSchema.OPENAI),
          "tight": llm_model("tight", max_prompt_bytes=10, max_tokens_ceiling=8,
                             max_tokens=4)}
HELLO = [{"role": "user", "content": "Hello"}]


def read(document: Any, operation: Operation = CHAT) -> Any:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return read_request(body, operation, MODELS)


def refusal(document: Any, operation: Operation = CHAT) -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        read(document, operation)
    return caught.value


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "smol", "messages": HELLO, **fields}


@pytest.mark.parametrize(("document", "status", "param", "code"), [
    (b"{not json", 400, None, "invalid_json"),
    (b"[1, 2]", 400, None, "invalid_json"),
    ({"messages": HELLO}, 400, "model", "missing_required_parameter"),
    ({"model": 7, "messages": HELLO}, 400, "model", "invalid_type"),
    ({"model": "nope", "messages": HELLO}, 404, "model", "model_not_found"),
    ({"model": "gen", "messages": HELLO}, 400, "model", "model_not_supported"),
    ({"model": "tgi", "messages": HELLO}, 400, "model", "model_not_supported"),
    ({"model": "smol"}, 400, "messages", "missing_required_parameter"),
    ({"model": "smol", "messages": []}, 400, "messages", "invalid_value"),
    ({"model": "smol", "messages": "hi"}, 400, "messages", "invalid_type"),
    ({"model": "smol", "messages": ["hi"]}, 400, "messages[0]", "invalid_type"),
    ({"model": "smol", "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages[0].role", "invalid_value"),
    ({"model": "smol", "messages": [{"role": "tool", "content": "x"}]}, 400,
     "messages[0].role", "unsupported_parameter"),
    ({"model": "smol", "messages": [{"role": "user", "content": 3}]}, 400,
     "messages[0].content", "invalid_type"),
    ({"model": "smol", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content[0].type", "unsupported_parameter"),
    ({"model": "smol", "messages": [{"role": "user", "content": "x", "mood": "odd"}]}, 400,
     "messages[0].mood", "unknown_parameter"),
    (chat(n=2), 400, "n", "unsupported_parameter"),
    (chat(n="1"), 400, "n", "invalid_type"),
    (chat(tools=[{"type": "function"}]), 400, "tools", "unsupported_parameter"),
    (chat(tool_choice="auto"), 400, "tool_choice", "unsupported_parameter"),
    (chat(functions=[{"name": "f"}]), 400, "functions", "unsupported_parameter"),
    (chat(logprobs=True), 400, "logprobs", "unsupported_parameter"),
    (chat(top_logprobs=2), 400, "top_logprobs", "unsupported_parameter"),
    (chat(response_format={"type": "json_object"}), 400, "response_format",
     "unsupported_parameter"),
    (chat(presence_penalty=0.5), 400, "presence_penalty", "unsupported_parameter"),
    (chat(colour="blue"), 400, "colour", "unknown_parameter"),
    (chat(temperature="hot"), 400, "temperature", "invalid_type"),
    (chat(temperature=2.5), 400, "temperature", "invalid_value"),
    (chat(temperature=True), 400, "temperature", "invalid_type"),
    (chat(top_p=1.5), 400, "top_p", "invalid_value"),
    (chat(max_tokens=0), 400, "max_tokens", "invalid_value"),
    (chat(max_tokens=1.5), 400, "max_tokens", "invalid_type"),
    (chat(max_completion_tokens=5000), 400, "max_completion_tokens", "invalid_value"),
    (chat(stop=7), 400, "stop", "invalid_type"),
    (chat(stop=["a", "b", "c", "d", "e"]), 400, "stop", "invalid_value"),
    (chat(seed="x"), 400, "seed", "invalid_type"),
    (chat(stream="yes"), 400, "stream", "invalid_type"),
    (chat(stream_options={"include_usage": True}), 400, "stream_options", "invalid_value"),
    (chat(stream=True, stream_options=[]), 400, "stream_options", "invalid_type"),
    (chat(stream=True, stream_options={"include_usage": "y"}), 400,
     "stream_options.include_usage", "invalid_type"),
    (chat(user=5), 400, "user", "invalid_type"),
    ({"model": "tight", "messages": [{"role": "user", "content": "x" * 11}]}, 400,
     "messages", "context_length_exceeded"),
    ({"model": "tight", "messages": HELLO, "max_tokens": 9}, 400, "max_tokens",
     "invalid_value"),
])
def test_each_bad_chat_request_is_refused_in_openais_shape(
        document: Any, status: int, param: str | None, code: str) -> None:
    error = refusal(document)
    assert (error.status, error.param, error.code) == (status, param, code)
    shape = error.document()
    assert set(shape) == {"error"}
    assert set(shape["error"]) == {"message", "type", "param", "code"}
    assert shape["error"]["type"] == "invalid_request_error" and shape["error"]["message"]


@pytest.mark.parametrize(("document", "param", "code"), [
    ({"model": "gen"}, "prompt", "missing_required_parameter"),
    ({"model": "gen", "prompt": ["a", "b"]}, "prompt", "unsupported_parameter"),
    ({"model": "gen", "prompt": [1, 2, 3]}, "prompt", "invalid_type"),
    ({"model": "gen", "prompt": "x", "echo": True}, "echo", "unsupported_parameter"),
    ({"model": "gen", "prompt": "x", "best_of": 3}, "best_of", "unsupported_parameter"),
    ({"model": "gen", "prompt": "x", "logprobs": 2}, "logprobs", "unsupported_parameter"),
    ({"model": "gen", "prompt": "x", "suffix": "y"}, "suffix", "unsupported_parameter"),
    ({"model": "gen", "prompt": "x", "messages": HELLO}, "messages", "unknown_parameter"),
    ({"model": "tight", "prompt": "x" * 11}, "prompt", "context_length_exceeded"),
])
def test_each_bad_text_completion_is_refused_by_name(document: Any, param: str,
                                                     code: str) -> None:
    error = refusal(document, TEXT)
    assert (error.status, error.param, error.code) == (400, param, code)


def test_a_chat_request_is_read_with_the_models_defaults() -> None:
    request = read(chat(messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                               {"type": "text",
                                                                "text": "there"}],
                                   "name": "ann"}],
                        stop="\n", seed=3, stream=True,
                        stream_options={"include_usage": True}, user="u1"))
    assert [message.to_dict() for message in request.messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there", "name": "ann"}]
    spec = MODELS["smol"].llm
    assert spec is not None
    assert (request.sampling.max_tokens, request.sampling.temperature) == (spec.max_tokens,
                                                                           spec.temperature)
    assert request.sampling.stop == ("\n",) and request.sampling.seed == 3
    assert request.stream and request.include_usage and request.user == "u1"
    assert request.prompt_bytes == len("systemBe brief.userHi thereann") + 2 * 24  # framing


def test_neutral_values_of_unsupported_features_ask_for_nothing() -> None:
    request = read(chat(n=1, logprobs=False, presence_penalty=0, frequency_penalty=0.0,
                        response_format={"type": "text"}, logit_bias={}, tools=None,
                        max_completion_tokens=7, max_tokens=3))
    assert request.sampling.max_tokens == 7  # max_completion_tokens wins, as OpenAI's


def test_a_one_prompt_list_is_a_prompt() -> None:
    assert read({"model": "gen", "prompt": ["Once"]}, TEXT).prompt == "Once"


def test_an_openai_container_gets_the_features_it_may_have() -> None:
    request = read({"model": "oai", "messages": HELLO, "tools": [{"type": "function"}],
                    "logprobs": True, "something_new": 1})
    assert request.document["tools"] == [{"type": "function"}]
    assert refusal({"model": "oai", "messages": HELLO, "n": 3}).param == "n"


def test_sagegate_errors_become_openais_with_their_status_and_retry_after() -> None:
    from chalicelib.core.errors import EndpointUnavailableError, ModelError

    busy = from_sagegate(EndpointUnavailableError("busy", retry_after=3))
    assert (busy.status, busy.code, busy.kind, busy.headers) == (
        503, "endpoint_unavailable", "server_error", {"Retry-After": "3"})
    failed = from_sagegate(ModelError("The model failed."))
    assert (failed.status, failed.code) == (502, "model_error")
    hidden = from_sagegate(ConfigurationError("SECRET_VARIABLE is wrong"))
    assert "SECRET" not in hidden.message and hidden.status == 500


# --- model.json's llm block ------------------------------------------------------------------

SETTINGS = Settings(endpoint_name="efficientnet-lite0")
BLOCK = {"schema": "lmi", "limits": {"max_prompt_bytes": 100, "max_tokens": 50},
         "defaults": {"max_tokens": 20, "temperature": 0.5}}


def load(tmp_path: Path, document: dict[str, Any]) -> ModelSpec:
    folder = tmp_path / "llm-a"
    folder.mkdir(exist_ok=True)
    (folder / "model.json").write_text(json.dumps(document))
    return load_model(folder, SETTINGS, {})


def test_an_llm_block_is_read(tmp_path: Path) -> None:
    model = load(tmp_path, {"endpoint": "smol", "pipeline": "llm", "llm": BLOCK})
    assert model.llm == LlmSpec(LlmSchema.LMI, 100, 50, 20, 0.5)


@pytest.mark.parametrize(("document", "message"), [
    ({"pipeline": "llm"}, r"key 'llm' must be an object"),
    ({"pipeline": "llm", "llm": {"schema": "vllm"}}, r"key 'llm\.schema' must be one of lmi"),
    ({"pipeline": "llm", "llm": {"schema": ["lmi"]}}, r"key 'llm\.schema' must be one of"),
    ({"pipeline": "llm", "llm": {**BLOCK, "colour": 1}}, r"key 'llm\.colour' is not an llm key"),
    ({"pipeline": "llm", "llm": {**BLOCK, "limits": {"max_bytes": 1}}},
     r"key 'llm\.limits\.max_bytes' is not an llm\.limits key"),
    ({"pipeline": "llm", "llm": {**BLOCK, "limits": {"max_tokens": 0}}},
     r"key 'llm\.limits\.max_tokens' must be a whole number"),
    ({"pipeline": "llm", "llm": {**BLOCK, "defaults": {"max_tokens": 51}}},
     r"key 'llm\.defaults\.max_tokens' must be a whole number from 1 to 50"),
    ({"pipeline": "llm", "llm": {**BLOCK, "defaults": {"temperature": 3}}},
     r"key 'llm\.defaults\.temperature' must be a number from 0 to 2"),
    ({"pipeline": "llm", "llm": BLOCK, "content_type": "text/csv"},
     r"key 'content_type' must be application/json"),
    ({"pipeline": "tensor", "llm": BLOCK, "signature": {"inputs": [
        {"name": "x", "dtype": "float32", "shape": [-1, 1]}]}},
     r"key 'llm' is for llm models only, not tensor"),
])
def test_a_bad_llm_block_stops_start_up_naming_its_key(tmp_path: Path, document: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(ConfigurationError, match=r"llm-a/model\.json: " + message):
        load(tmp_path, {"endpoint": "smol", **document})


def test_a_chats_prompt_counts_each_messages_name_and_framing() -> None:
    """A long ``name`` and many empty messages are what the container is sent: they count
    toward ``max_prompt_bytes``, and a chat holds at most 1,024 messages."""
    models = {"smol": llm_model(max_prompt_bytes=1000)}

    def refused(messages: list[Any]) -> OpenAIError:
        body = json.dumps({"model": "smol", "messages": messages}).encode()
        with pytest.raises(OpenAIError) as caught:
            read_request(body, CHAT, models)
        return caught.value

    named = refused([{"role": "user", "content": "Hi", "name": "n" * 5_000_000}])
    empty = refused([{"role": "user", "content": ""}] * 36)  # 36 x (24 + 4) bytes
    many = refused([{"role": "user", "content": ""}] * 190_000)

    assert (named.status, named.param, named.code) == (400, "messages",
                                                       "context_length_exceeded")
    assert "5000030 bytes" in named.message
    assert (empty.param, empty.code) == ("messages", "context_length_exceeded")
    assert "1008 bytes" in empty.message
    assert (many.status, many.param, many.code) == (400, "messages", "array_above_max_length")
    assert "maximum length 1024, but got an array with length 190000" in many.message
    assert len(read(chat(messages=[{"role": "user", "content": ""}] * 1024)).messages) == 1024
