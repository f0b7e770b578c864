"""OpenAI's routes through the real app (chalice.test.Client) and a real botocore client with a
Stubber: ``invoke_endpoint`` answered with real ``StreamingBody``s, and
``invoke_endpoint_with_response_stream`` with a body that yields ``{"PayloadPart": {"Bytes"}}``
events as botocore's ``EventStream`` does (raising its ``EventStreamError`` for an error event)
and records being closed. The stream's buffered answer under Chalice, mid-stream failures, the
stream closed when its reader goes away, and the log line's usage and timing."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import EventStreamError
from botocore.stub import ANY
from chalice.app import Request

import app as app_module
from chalicelib.http import completions
from tests.functional.conftest import Harness, endpoint_response
from tests.functional.test_observability import emitted

MODEL = "smollm2"  # chalicelib/models/smollm2: schema lmi-chat
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STREAM = "invoke_endpoint_with_response_stream"


class Upstream:
    """A response stream's body as botocore yields it: one event a part, an error event
    raised as ``EventStreamError`` after ``fail_after`` parts."""

    def __init__(self, parts: list[bytes], fail_after: int | None = None,
                 code: str = "ModelStreamError") -> None:
        self.parts, self.fail_after, self.code = parts, fail_after, code
        self.read = 0
        self.closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index, part in enumerate(self.parts):
            if index == self.fail_after:
                raise EventStreamError({"Error": {"Code": self.code,
                                                  "Message": "the container stopped"}},
                                       "InvokeEndpointWithResponseStream")
            self.read += 1
            yield {"PayloadPart": {"Bytes": part}}
        if self.fail_after == len(self.parts):
            raise EventStreamError({"Error": {"Code": self.code, "Message": "stopped"}},
                                   "InvokeEndpointWithResponseStream")

    def close(self) -> None:
        self.closed = True


def jsonlines(*documents: Any) -> bytes:
    return b"".join(json.dumps(document).encode() + b"\n" for document in documents)


def chat_chunk(text: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {} if text is None else {"content": text}
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def token(index: int, text: str, **last: Any) -> dict[str, Any]:
    return {"token": {"id": index, "text": text, "log_prob": -0.3}, **last}


PARIS = jsonlines(chat_chunk("The"), chat_chunk(" capital"), chat_chunk(" is"),
                  chat_chunk(" Paris."), chat_chunk(finish="eos_token"))


def split(raw: bytes, size: int) -> list[bytes]:
    """Parts that cut lines anywhere, as real containers' PayloadParts do."""
    return [raw[start:start + size] for start in range(0, len(raw), size)]


def expect_stream(harness: Harness, upstream: Upstream, body: Any = ANY) -> None:
    response = {"Body": {}, "ContentType": "application/jsonlines",
                "InvokedProductionVariant": "AllTraffic"}
    harness.stubber.add_response(STREAM, response, {
        "EndpointName": MODEL, "Body": body, "ContentType": "application/json",
        "Accept": "application/json", "InferenceId": ANY})
    response["Body"] = upstream  # (after the Stubber checked the response's other fields)


def post(harness: Harness, path: str, document: Any) -> tuple[int, dict[str, str], str]:
    response = harness.post(path, json.dumps(document))
    body = response.body.decode() if isinstance(response.body, bytes) else response.body
    return response.status_code, response.headers, body


def events(body: str) -> list[Any]:
    """The SSE body's ``data:`` payloads, parsed (``[DONE]`` as the string)."""
    assert body.endswith("\n\n")
    found = []
    for event in body.split("\n\n")[:-1]:
        assert event.startswith("data: ")
        payload = event[len("data: "):]
        found.append(payload if payload == "[DONE]" else json.loads(payload))
    return found


def text_of(chunks: list[Any]) -> str:
    return "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks
                   if isinstance(chunk, dict) and chunk.get("choices"))


# --- not streamed ------------------------------------------------------------------------

def test_a_chat_completion_is_sent_as_lmis_chat_body_and_answered_as_openais(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    answer = {"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Paris."},
         "finish_reason": "eos_token"}], "usage": {"prompt_tokens": 14, "completion_tokens": 3}}
    sent = {"messages": QUESTION, "max_tokens": 16, "temperature": 0.0}
    harness.stubber.add_response("invoke_endpoint", endpoint_response(json.dumps(answer).encode()),
                                 {"EndpointName": MODEL, "Body": json.dumps(sent).encode(),
                                  "ContentType": "application/json",
                                  "Accept": "application/json", "InferenceId": ANY})
    capsys.readouterr()
    status, headers, body = post(harness, "/v1/chat/completions",
                                 {"model": MODEL, "messages": QUESTION, "max_tokens": 16,
                                  "temperature": 0})
    assert status == 200 and headers["Content-Type"] == "application/json"
    document = json.loads(body)
    assert document["object"] == "chat.completion" and document["model"] == MODEL
    assert document["id"] == "chatcmpl-" + headers["X-Request-Id"]
    assert document["choices"] == [{"index": 0, "message": {
        "role": "assistant", "content": "Paris.", "refusal": None}, "logprobs": None,
        "finish_reason": "stop"}]
    assert document["usage"] == {"prompt_tokens": 14, "completion_tokens": 3,
                                 "total_tokens": 17}
    [log], metrics = emitted(capsys)
    assert (log["model"], log["prompt_tokens"], log["completion_tokens"],
            log["usage_source"], log["finish_reason"], log["streamed"]) == (
        MODEL, 14, 3, {"prompt": "container", "completion": "container"}, "stop", False)
    assert metrics[0]["CompletionTokens"] == [3.0] and metrics[0]["model"] == MODEL


def test_a_text_completion_is_sent_as_lmis_generate_body(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    answer = {"generated_text": " Paris.", "details": {"finish_reason": "length",
                                                       "generated_tokens": 3}}
    harness.stubber.add_response("invoke_endpoint", endpoint_response(json.dumps(answer).encode()),
                                 {"EndpointName": MODEL, "Body": ANY,
                                  "ContentType": "application/json",
                                  "Accept": "application/json", "InferenceId": ANY})
    capsys.readouterr()
    status, _, body = post(harness, "/v1/completions",
                           {"model": MODEL, "prompt": "The capital of France is",
                            "max_tokens": 3, "stop": "\n"})
    assert status == 200
    document = json.loads(body)
    assert document["object"] == "text_completion"
    assert document["choices"] == [{"index": 0, "text": " Paris.", "logprobs": None,
                                    "finish_reason": "length"}]
    # the container counted the completion; the prompt's tokens are estimated (4 bytes each)
    assert document["usage"] == {"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9}
    [log], _ = emitted(capsys)
    assert log["usage_source"] == {"prompt": "estimated", "completion": "container"}


def test_an_endpoint_failure_is_openais_error_with_sagegates_status(harness: Harness) -> None:
    harness.stubber.add_client_error("invoke_endpoint", "ModelError", "boom", 424,
                                     response_meta={"OriginalStatusCode": 500})
    status, _, body = post(harness, "/v1/chat/completions",
                           {"model": MODEL, "messages": QUESTION})
    assert status == 502
    assert json.loads(body) == {"error": {
        "message": "The model failed to process the request (status None).",
        "type": "server_error", "param": None, "code": "model_error"}}


@pytest.mark.parametrize(("document", "status", "param"), [
    ({"model": "iris", "messages": QUESTION}, 404, "model"),  # not a language model
    ({"model": MODEL, "messages": QUESTION, "n": 2}, 400, "n"),
    ({"model": MODEL, "messages": QUESTION, "tools": [{"type": "function"}]}, 400, "tools"),
    ({"model": MODEL, "messages": QUESTION, "max_tokens": 100_000}, 400, "max_tokens"),
])
def test_a_bad_request_is_a_4xx_in_openais_shape_never_sagegates(
        harness: Harness, document: dict[str, Any], status: int, param: str) -> None:
    code, headers, body = post(harness, "/v1/chat/completions", document)
    answer = json.loads(body)
    assert code == status and set(answer) == {"error"} and "Code" not in body
    assert answer["error"]["param"] == param and headers["X-Request-Id"]


def test_a_body_that_is_not_json_is_a_400_whatever_its_type(harness: Harness) -> None:
    response = harness.post("/v1/completions", b"\xff\xfe", "text/plain")
    assert response.status_code == 400
    assert json.loads(response.body)["error"]["code"] == "invalid_json"


def test_the_model_list_is_the_language_models_in_openais_shape(harness: Harness) -> None:
    response = harness.client.http.get("/v1/models")
    assert json.loads(response.body) == {"object": "list", "data": [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": "sagegate"}]}


def test_the_model_route_passes_the_containers_body_through(harness: Harness) -> None:
    body = json.dumps({"inputs": "Hello", "parameters": {"max_new_tokens": 4}}).encode()
    answer = json.dumps({"generated_text": " there"}).encode()
    harness.stubber.add_response("invoke_endpoint", endpoint_response(answer),
                                 {"EndpointName": MODEL, "Body": body,
                                  "ContentType": "application/json",
                                  "Accept": "application/json", "InferenceId": ANY})
    response = harness.post(f"/models/{MODEL}/predict", body)
    assert response.status_code == 200 and response.body == answer
    described = json.loads(harness.client.http.get(f"/models/{MODEL}").body)
    assert described["pipeline"] == "llm" and described["llm"]["schema"] == "lmi-chat"
    assert described["example"]["messages"] == QUESTION


# --- streamed (answered whole under Chalice) ------------------------------------------------

def test_a_stream_is_answered_as_server_sent_events_whatever_the_parts(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    upstream = Upstream(split(PARIS, 7))  # lines cut across parts
    expect_stream(harness, upstream, json.dumps(
        {"messages": QUESTION, "max_tokens": 128, "temperature": 0.0, "stream": True,
         "stream_options": {"include_usage": True}}).encode())
    capsys.readouterr()
    status, headers, body = post(harness, "/v1/chat/completions", {
        "model": MODEL, "messages": QUESTION, "stream": True,
        "stream_options": {"include_usage": True}})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    chunks = events(body)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert text_of(chunks) == "The capital is Paris."
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] == 4
    assert chunks[-1] == "[DONE]"
    assert all(chunk["usage"] is None for chunk in chunks[:-2])
    assert upstream.closed
    [log], metrics = emitted(capsys)
    assert log["streamed"] is True and log["completion_tokens"] == 4
    assert log["usage_source"] == {"prompt": "estimated", "completion": "counted"}
    assert log["time_to_first_token_ms"] >= 0 and "TimeToFirstToken" in metrics[0]


def test_a_streamed_text_completion_reads_lmi_tokens_and_their_details(
        harness: Harness) -> None:
    raw = jsonlines(token(1, " Paris"), token(2, "."),
                    token(3, "", generated_text=" Paris.",
                          details={"finish_reason": "eos_token", "generated_tokens": 3,
                                   "prompt_tokens": 6}))
    expect_stream(harness, Upstream(split(raw, 5)))
    status, _, body = post(harness, "/v1/completions", {
        "model": MODEL, "prompt": "The capital of France is", "stream": True,
        "stream_options": {"include_usage": True}})
    chunks = events(body)
    assert status == 200 and chunks[0]["object"] == "text_completion"
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks[:-2]) == " Paris."
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["usage"] == {"prompt_tokens": 6, "completion_tokens": 3,
                                   "total_tokens": 9}


@pytest.mark.parametrize("upstream", [
    Upstream(split(PARIS, 40), fail_after=2),  # a ModelStreamError event mid-stream
    Upstream([jsonlines(token(1, "Par"), token(-1, "", generated_text="CUDA out of memory",
                                                  details={"finish_reason": "error"}))]),
])
def test_a_failure_mid_stream_ends_it_with_an_error_event(
        harness: Harness, upstream: Upstream, capsys: pytest.CaptureFixture[str]) -> None:
    if upstream.fail_after is None:  # LMI's token error is a text completion's stream
        expect_stream(harness, upstream)
        path, document = "/v1/completions", {"model": MODEL, "prompt": "x", "stream": True}
    else:
        expect_stream(harness, upstream)
        path, document = "/v1/chat/completions", {"model": MODEL, "messages": QUESTION,
                                                  "stream": True}
    capsys.readouterr()
    status, _, body = post(harness, path, document)
    chunks = events(body)
    assert status == 200  # the stream had begun
    assert set(chunks[-1]) == {"error"} and chunks[-1]["error"]["code"] == "model_error"
    assert "[DONE]" not in chunks and upstream.closed
    [log], _ = emitted(capsys)
    assert log["error_code"] == "model_error"


def test_a_stream_that_fails_before_its_first_event_is_an_error_answer(
        harness: Harness) -> None:
    expect_stream(harness, Upstream([PARIS], fail_after=0))
    status, headers, body = post(harness, "/v1/chat/completions",
                                 {"model": MODEL, "messages": QUESTION, "stream": True})
    assert status == 502 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "model_error"


def test_a_throttled_stream_is_retried_before_its_first_byte(harness: Harness) -> None:
    harness.stubber.add_client_error(STREAM, "ThrottlingException", "slow down", 400)
    upstream = Upstream([PARIS])
    expect_stream(harness, upstream)
    status, _, body = post(harness, "/v1/chat/completions",
                           {"model": MODEL, "messages": QUESTION, "stream": True})
    assert status == 200 and text_of(events(body)) == "The capital is Paris."
    assert len(harness.sleeps) == 1


def test_a_missing_endpoint_is_openais_error_not_a_stream(harness: Harness) -> None:
    harness.stubber.add_client_error(
        STREAM, "ValidationError", "Endpoint smollm2 of account 123 not found.", 400)
    status, _, body = post(harness, "/v1/chat/completions",
                           {"model": MODEL, "messages": QUESTION, "stream": True})
    assert status == 502 and json.loads(body)["error"]["code"] == "endpoint_not_found"


# --- a server that streams (serve_streaming): the reader going away -----------------------

def served_request(document: Any, path: str = "/v1/chat/completions") -> Request:
    return Request({
        "multiValueQueryStringParameters": None, "headers": {"content-type": "application/json"},
        "pathParameters": None, "requestContext": {"httpMethod": "POST", "resourcePath": path,
                                                   "path": path},
        "body": json.dumps(document), "isBase64Encoded": False, "stageVariables": None})


def test_each_event_comes_as_it_is_read_and_the_log_line_at_the_end(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    upstream = Upstream(split(PARIS, 9))
    expect_stream(harness, upstream)
    capsys.readouterr()
    status, headers, body = completions.serve_streaming(
        lambda: app_module.services.llm, app_module.exchanges,
        served_request({"model": MODEL, "messages": QUESTION, "stream": True}))
    assert status == 200 and headers["X-Request-Id"]
    first = next(body)
    assert b'"role":"assistant"' in first and upstream.read == 1  # nothing read ahead
    assert emitted(capsys)[0] == []  # no log line while it streams
    rest = list(body)
    assert rest[-1] == b"data: [DONE]\n\n"
    # the body's iteration ends right after [DONE]: the bookkeeping waits for close(), which
    # the server calls once it has written the response's end
    assert emitted(capsys)[0] == []
    body.close()
    assert upstream.closed
    [log], _ = emitted(capsys)
    assert log["status"] == 200 and log["completion_tokens"] == 4


def test_a_body_closed_before_its_first_event_is_still_counted_and_logged(
        harness: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    upstream = Upstream(split(PARIS, 9))
    expect_stream(harness, upstream)
    capsys.readouterr()
    _, _, body = completions.serve_streaming(
        lambda: app_module.services.llm, app_module.exchanges,
        served_request({"model": MODEL, "messages": QUESTION, "stream": True}))
    body.close()
    assert upstream.closed
    [log], _ = emitted(capsys)
    assert log["streamed"] is True and log["completion_tokens"] == 0
    assert log["usage_source"] == {"prompt": "estimated", "completion": "estimated"}


@pytest.mark.parametrize("read", [0, 2])
def test_a_reader_that_goes_away_closes_the_containers_stream(
        harness: Harness, read: int, capsys: pytest.CaptureFixture[str]) -> None:
    upstream = Upstream(split(PARIS, 9))
    expect_stream(harness, upstream)
    _, _, body = completions.serve_streaming(
        lambda: app_module.services.llm, app_module.exchanges,
        served_request({"model": MODEL, "messages": QUESTION, "stream": True}))
    for _ in range(read):
        next(body)
    capsys.readouterr()
    body.close()
    body.close()  # (twice is once)
    assert upstream.closed and upstream.read < len(upstream.parts)
    [log], _ = emitted(capsys)
    assert log["status"] == 200


def test_a_fault_of_sagegates_own_mid_stream_ends_it_with_a_server_error_event(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever breaks in sagegate while it streams, the client reads an error event (never
    a stream cut short without a word, nor a traceback); the log has the traceback."""
    from chalicelib.llm.schemas import SCHEMAS
    from chalicelib.registry.specs import LlmSchema

    schema = SCHEMAS[LlmSchema.LMI_CHAT]
    read = schema.piece
    calls = iter(range(100))

    def piece(line: Any, request: Any) -> Any:
        if next(calls) == 2:
            raise RuntimeError("a bug")
        return read(line, request)

    monkeypatch.setattr(schema, "piece", piece)
    upstream = Upstream(split(PARIS, 9))
    expect_stream(harness, upstream)
    capsys.readouterr()
    status, _, body = post(harness, "/v1/chat/completions",
                           {"model": MODEL, "messages": QUESTION, "stream": True})
    chunks = events(body)
    assert status == 200 and "[DONE]" not in chunks and upstream.closed
    assert chunks[-1] == {"error": {"message": "The server had an error while processing "
                                               "your request.", "type": "server_error",
                                    "param": None, "code": "server_error"}}
    assert text_of(chunks[:-1]) == "The capital"  # what was made before it
    [log], _ = emitted(capsys)
    assert log["error_code"] == "server_error"


@pytest.mark.parametrize(("document", "named"), [
    ({"inputs": "Hello", "parameters": {"max_new_tokens": 100000}},
     "'parameters.max_new_tokens' is 100000; this model gives at most 512 tokens."),
    ({"messages": QUESTION, "max_tokens": 513}, "'max_tokens' is 513"),
    ({"messages": QUESTION, "max_completion_tokens": 1e9}, "'max_completion_tokens' is"),
    ({"inputs": "x" * 8193}, "The prompt is 8193 bytes; model 'smollm2' takes at most 8192."),
    ({"messages": [{"role": "user", "content": "Hi", "name": "n" * 9000}]},
     "The prompt is 9030 bytes"),
    ({"messages": [{"role": "user", "content": ""}] * 1025}, "array too long"),
])
def test_the_model_route_holds_the_models_limits(harness: Harness, document: Any,
                                                 named: str) -> None:
    """model.json's ``llm.limits`` bound the container's own body too (nothing is sent: the
    Stubber has no answer queued); a refusal is sagegate's 400 naming the field."""
    response = harness.post(f"/models/{MODEL}/predict", json.dumps(document))

    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (400, "InvalidParameter")
    assert named in answer["Message"]


@pytest.mark.parametrize(("answer", "counts"), [
    ({"generated_text": " Paris", "details": {"prompt_tokens": 6, "generated_tokens": 2}},
     (6, 2)),
    ([{"generated_text": " Paris", "details": {"prefill": [{}, {}, {}],
                                               "generated_tokens": 2}}], (3, 2)),
    ({"object": "chat.completion", "choices": [], "usage": {"prompt_tokens": 14,
                                                           "completion_tokens": 3}}, (14, 3)),
])
def test_the_model_routes_log_line_has_the_usage_its_container_gives(
        harness: Harness, capsys: pytest.CaptureFixture[str], answer: Any,
        counts: tuple[int, int]) -> None:
    body = json.dumps({"inputs": "The capital of France is",
                       "parameters": {"max_new_tokens": 4}}).encode()
    harness.stubber.add_response("invoke_endpoint", endpoint_response(
        json.dumps(answer).encode()), {"EndpointName": MODEL, "Body": body,
                                       "ContentType": "application/json",
                                       "Accept": "application/json", "InferenceId": ANY})
    capsys.readouterr()

    assert harness.post(f"/models/{MODEL}/predict", body).status_code == 200

    [log], metrics = emitted(capsys)
    assert (log["prompt_tokens"], log["completion_tokens"]) == counts
    assert log["usage_source"] == {"prompt": "container", "completion": "container"}
    assert any("PromptTokens" in document for document in metrics)
