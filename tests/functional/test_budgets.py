"""Token budgets on OpenAI's routes through the real app (chalice.test.Client) and
``serve_streaming`` (what chalice local and the streaming function call), a botocore Stubber
for the endpoint and the budgets' counters in memory: the 429 in OpenAI's shape with its
headers, the headers on 200s, streams and 4xx answers, the settlement with what was spent
(a cache hit nothing), ``GET /v1/usage``, failing open; a stream's reservation made while its
endpoint's stream opens (a refused one cancelled, unrecorded), a whole answer's before its
call."""
from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import ANY
from chalice.app import Request

import app as app_module
from chalicelib.http import completions, modelcalls
from chalicelib.llm.budgets import CounterError, Limits, MemoryCounters, TokenBudgets
from chalicelib.services import Services
from tests.functional.conftest import Harness, endpoint_response, make_settings
from tests.functional.test_observability import emitted
from tests.functional.test_openai_routes import (
    MODEL,
    PARIS,
    QUESTION,
    Upstream,
    events,
    expect_stream,
    post,
    split,
)

HEADERS = ("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
           "x-ratelimit-reset-tokens")
ANSWER = {"id": "x", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Paris."},
     "finish_reason": "eos_token"}], "usage": {"prompt_tokens": 14, "completion_tokens": 3}}
PROMPT_BYTES = 24 + len("user") + len(QUESTION[0]["content"])  # a chat message's framing
TEMPLATE_TOKENS = 30  # smollm2's model.json: llm.budgets.template_tokens
RESERVED = PROMPT_BYTES + TEMPLATE_TOKENS
"""What a chat of QUESTION reserves besides its max_tokens."""


class BrokenCounters(MemoryCounters):
    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        raise CounterError("ResourceNotFoundException")

    def read(self, item: str) -> int:
        raise CounterError("ResourceNotFoundException")


@pytest.fixture
def counters(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryCounters]:
    found = MemoryCounters()
    serve_with(harness, monkeypatch, TokenBudgets(found, Limits(1000, 5000)))
    yield found


def serve_with(harness: Harness, monkeypatch: pytest.MonkeyPatch,
               budgets: TokenBudgets | None, capturer: Any = None) -> None:
    monkeypatch.setattr(app_module, "services", Services(
        make_settings(), endpoint=harness.endpoint, budgets=budgets, capturer=capturer))


STREAM_OPERATION = "InvokeEndpointWithResponseStream"
WAIT_SECONDS = 10.0
"""The longest a gated reservation waits for the endpoint's stream to open."""


class Gated(MemoryCounters):
    """Counters whose reservations wait (bounded) for the endpoint's stream to be opened: made
    one after the other, they wait in vain (noted in ``overlapped``); whether the endpoint's
    call was ``answered`` as each began noted in ``after_call``; each ``add`` counted."""

    def __init__(self, opened: threading.Event,
                 answered: threading.Event | None = None) -> None:
        super().__init__()
        self.opened, self.answered = opened, answered
        self.overlapped: list[bool] = []
        self.after_call: list[bool] = []
        self.adds = 0

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        if self.answered is not None:
            self.after_call.append(self.answered.is_set())
        self.overlapped.append(self.opened.wait(WAIT_SECONDS))
        return super().reserve(item, amount, limit, expires_at)

    def add(self, item: str, amount: int, expires_at: int) -> int:
        self.adds += 1
        return super().add(item, amount, expires_at)


class Opening(Upstream):
    """An endpoint's stream that says when it is opened (its first event asked for)."""

    def __init__(self, parts: list[bytes], opened: threading.Event,
                 fail_after: int | None = None) -> None:
        super().__init__(parts, fail_after)
        self.opened = opened

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.opened.set()
        yield from super().__iter__()


class Recorder:
    """A capturer that keeps what it is handed."""

    writer = None  # (its records written as they are handed over)

    def __init__(self) -> None:
        self.exchanges: list[Any] = []

    def capture_exchange(self, exchange: Any, timeout: float | None) -> str:
        self.exchanges.append(exchange)
        return "captured"


def expect_answer(harness: Harness) -> None:
    harness.stubber.add_response("invoke_endpoint", endpoint_response(
        json.dumps(ANSWER).encode()), {"EndpointName": MODEL, "Body": ANY,
                                       "ContentType": "application/json",
                                       "Accept": "application/json", "InferenceId": ANY})


def ask(harness: Harness, **fields: Any) -> tuple[int, dict[str, str], str]:
    return post(harness, "/v1/chat/completions",
                {"model": MODEL, "messages": QUESTION, "max_tokens": 16, **fields})


def used(counters: MemoryCounters) -> list[int]:
    return sorted(counters.counts.values())


def test_a_whole_answer_is_settled_with_its_usage_and_carries_the_headers(
        harness: Harness, counters: MemoryCounters) -> None:
    expect_answer(harness)
    status, headers, _ = ask(harness, temperature=0.7)
    assert status == 200
    assert used(counters) == [17, 17]  # 14 + 3, in the minute's and the day's windows
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "983"
    assert headers["x-ratelimit-reset-tokens"].endswith("s")


def test_a_cache_hit_costs_nothing(harness: Harness, counters: MemoryCounters) -> None:
    expect_answer(harness)
    assert ask(harness, temperature=0)[0] == 200
    status, headers, _ = ask(harness, temperature=0)  # greedy: the cache answers
    assert (status, headers["X-Cache"]) == (200, "hit")
    assert used(counters) == [17, 17]


def test_over_budget_is_openais_429_with_retry_after_and_the_headers(
        harness: Harness, counters: MemoryCounters, capsys: pytest.CaptureFixture[str]) -> None:
    stage = app_module.services.llm.budgets
    assert stage is not None
    stage.reserve(None, app_module.services.registry.models[MODEL], 990)
    capsys.readouterr()
    status, headers, body = ask(harness)  # reserves 16 + the prompt's bytes: no room
    assert status == 429
    assert json.loads(body) == {"error": {
        "message": json.loads(body)["error"]["message"], "type": "tokens", "param": None,
        "code": "rate_limit_exceeded"}}
    assert "Limit 1000, Used 990, Requested " + str(16 + RESERVED) in body
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert (headers["x-ratelimit-limit-tokens"], headers["x-ratelimit-remaining-tokens"]) == (
        "1000", "10")
    assert used(counters) == [990, 990]  # nothing of the refused request kept
    [log], metrics = emitted(capsys)
    assert (log["status"], log["budget"], log["error_code"]) == (
        429, "rejected", "rate_limit_exceeded")
    assert any(metric.get("BudgetRejected") == [1.0] for metric in metrics)


def test_a_stream_carries_the_headers_and_is_settled_with_what_it_made(
        harness: Harness, counters: MemoryCounters, capsys: pytest.CaptureFixture[str]) -> None:
    expect_stream(harness, Upstream(split(PARIS, 7)))
    capsys.readouterr()
    status, headers, body = ask(harness, stream=True)
    assert status == 200 and events(body)[-1] == "[DONE]"
    [log], _ = emitted(capsys)
    spent = log["prompt_tokens"] + log["completion_tokens"]
    assert log["completion_tokens"] == 4 and spent == math.ceil(PROMPT_BYTES / 4) + 4
    assert used(counters) == [spent, spent]
    # a stream's headers go before its body: they count its reservation
    assert headers["x-ratelimit-remaining-tokens"] == str(1000 - 16 - RESERVED)


def test_spending_above_the_reservation_is_settled_logged_and_counted(
        harness: Harness, counters: MemoryCounters, capsys: pytest.CaptureFixture[str]) -> None:
    """A template's own text (a default system prompt) the reservation did not cover: the
    window is charged all of it, the log line says by how much it passed the reservation."""
    prompt = 1 + RESERVED + 40  # 40 tokens of the container's own over the reservation
    answer = {**ANSWER, "usage": {"prompt_tokens": prompt, "completion_tokens": 1}}
    harness.stubber.add_response("invoke_endpoint", endpoint_response(
        json.dumps(answer).encode()), {"EndpointName": MODEL, "Body": ANY,
                                       "ContentType": "application/json",
                                       "Accept": "application/json", "InferenceId": ANY})
    capsys.readouterr()
    assert ask(harness, max_tokens=1, temperature=0.5)[0] == 200
    assert used(counters) == [prompt + 1] * 2
    [log], metrics = emitted(capsys)
    assert log["budget_overrun"] == 41
    assert any(metric.get("BudgetOverrun") == [1.0] for metric in metrics)


def test_a_streams_reservation_is_made_while_its_first_event_is_awaited(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each window's reservation waits for the stream's first event to be asked for: made
    first, it would wait in vain. It begins once the endpoint has answered the call (its CPU
    never competes with the call's), and the answer still waits for it (the settlement is of
    a granted reservation)."""
    opened, answered = threading.Event(), threading.Event()
    counters = Gated(opened, answered)
    serve_with(harness, monkeypatch, TokenBudgets(counters, Limits(1000, 5000)))
    harness.endpoint.client.meta.events.register(
        f"after-call.sagemaker-runtime.{STREAM_OPERATION}", lambda **_: answered.set())
    expect_stream(harness, Opening(split(PARIS, 7), opened))
    capsys.readouterr()
    status, headers, body = ask(harness, stream=True)
    assert status == 200 and events(body)[-1] == "[DONE]"
    assert counters.overlapped == [True, True] and counters.after_call == [True, True]
    [log], _ = emitted(capsys)
    assert log["budget"] == "reserved"
    spent = log["prompt_tokens"] + log["completion_tokens"]
    assert used(counters) == [spent, spent]
    assert headers["x-ratelimit-remaining-tokens"] == str(1000 - 16 - RESERVED)


class Noting(MemoryCounters):
    """Counters that note, at each reservation, whether the endpoint was called yet."""

    def __init__(self, called: threading.Event) -> None:
        super().__init__()
        self.called = called
        self.called_first: list[bool] = []

    def reserve(self, item: str, amount: int, limit: int, expires_at: int) -> tuple[bool, int]:
        self.called_first.append(self.called.is_set())
        return super().reserve(item, amount, limit, expires_at)


def test_a_whole_answers_reservation_is_made_before_its_call(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole answer's call is the whole generation: a request its budget may refuse must
    not run it."""
    called = threading.Event()
    counters = Noting(called)
    serve_with(harness, monkeypatch, TokenBudgets(counters, Limits(1000, 5000)))
    response = endpoint_response(json.dumps(ANSWER).encode())
    read = response["Body"].read
    response["Body"].read = lambda *size: (called.set(), read(*size))[1]
    harness.stubber.add_response("invoke_endpoint", response)
    assert ask(harness, temperature=0.5)[0] == 200
    assert counters.called_first == [False, False] and called.is_set()
    assert used(counters) == [17, 17]


def refused_stream(harness: Harness, monkeypatch: pytest.MonkeyPatch,
                   upstream: Upstream | None = None) -> tuple[MemoryCounters, Recorder]:
    """Serve with 990 of key-7's 1000 tokens a minute taken by another process (this one
    knows nothing of it: :meth:`TokenBudgets.crowded`), after a first stream, unbudgeted, of
    ``upstream`` when given (its answer kept in the cache); captured."""
    counters, recorder = MemoryCounters(), Recorder()
    serve_with(harness, monkeypatch, None, capturer=recorder)
    if upstream is not None:
        expect_stream(harness, upstream)
        assert stream_as_key_7(max_tokens=1, temperature=0)[0] == 200
    app_module.services.llm.budgets = TokenBudgets(counters, Limits(1000, 5000))
    TokenBudgets(counters, Limits(1000, 5000)).reserve(
        "key-7", app_module.services.registry.models[MODEL], 990)
    return counters, recorder


def stream_as_key_7(**fields: Any) -> tuple[int, dict[str, str], bytes]:
    """A stream asked of ``serve_streaming`` (what chalice local and the streaming function
    do) with key-7's API key; its body read and closed."""
    status, headers, body = completions.serve_streaming(
        lambda: app_module.services.llm, app_module.exchanges,
        keyed_request({"model": MODEL, "messages": QUESTION, "stream": True,
                       "max_tokens": 40, **fields}))
    try:
        return status, headers, b"".join(body)
    finally:
        body.close()


def test_a_refused_stream_cancels_its_endpoints_stream_and_is_not_recorded_as_served(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The 429 with its headers and no event; the endpoint's stream, opened meanwhile, closed
    (its generation stops); no record, no usage, no cache outcome in the log line, which says
    429 and rejected."""
    counters, recorder = refused_stream(harness, monkeypatch)
    upstream = Upstream(split(PARIS, 7))
    expect_stream(harness, upstream)
    capsys.readouterr()
    status, headers, body = stream_as_key_7()
    assert status == 429 and json.loads(body)["error"]["code"] == "rate_limit_exceeded"
    assert int(headers["Retry-After"]) >= 1
    assert (headers["x-ratelimit-limit-tokens"], headers["x-ratelimit-remaining-tokens"]) == (
        "1000", "10")
    assert upstream.closed and upstream.read <= 1
    assert recorder.exchanges == []
    assert used(counters) == [990, 990]
    [log], metrics = emitted(capsys)
    assert (log["status"], log["budget"], log["error_code"]) == (
        429, "rejected", "rate_limit_exceeded")
    assert not {"endpoint", "prompt_tokens", "completion_tokens", "cache", "capture",
                "streamed", "time_to_first_token_ms"} & set(log)
    assert any(metric.get("BudgetRejected") == [1.0] for metric in metrics)
    assert not any("PromptTokens" in metric or "CacheMiss" in metric for metric in metrics)


def test_a_stream_of_a_key_refused_lately_reserves_before_its_call(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a key was refused, its streams cost the endpoint nothing until the window ends:
    the next one is refused before its call (the Stubber has no answer for one)."""
    refused_stream(harness, monkeypatch)
    upstream = Upstream(split(PARIS, 7))
    expect_stream(harness, upstream)
    assert stream_as_key_7()[0] == 429 and upstream.closed  # opened, then refused
    status, headers, _ = stream_as_key_7()
    assert status == 429 and headers["x-ratelimit-remaining-tokens"] == "10"
    harness.stubber.assert_no_pending_responses()


def test_a_refused_cached_stream_is_not_recorded_as_served(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A cache hit opens no endpoint stream: refused, it is no hit and counts no tokens."""
    counters, recorder = refused_stream(harness, monkeypatch, Upstream(split(PARIS, 7)))
    recorder.exchanges.clear()
    capsys.readouterr()
    status, headers, _ = stream_as_key_7(max_tokens=1, temperature=0)
    assert status == 429 and "X-Cache" not in headers
    assert recorder.exchanges == [] and used(counters) == [990, 990]
    [log], metrics = emitted(capsys)
    assert (log["status"], log["budget"]) == (429, "rejected")
    assert not {"prompt_tokens", "cache", "usage_source"} & set(log)
    assert not any("CacheHit" in metric or "PromptTokens" in metric for metric in metrics)
    app_module.services.llm.budgets = None  # the cache did have the answer
    assert stream_as_key_7(max_tokens=1, temperature=0)[1]["X-Cache"] == "hit"


def test_an_endpoint_failure_while_the_reservation_is_pending_gives_it_back_once(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    opened = threading.Event()
    counters = Gated(opened)
    serve_with(harness, monkeypatch, TokenBudgets(counters, Limits(1000, 5000)))
    expect_stream(harness, Opening(split(PARIS, 7), opened, fail_after=0))
    capsys.readouterr()
    status, headers, body = ask(harness, stream=True)
    assert status >= 400 and json.loads(body)["error"]
    assert counters.overlapped == [True, True]
    assert used(counters) == [0, 0] and counters.adds == 2  # a window each, once
    assert headers["x-ratelimit-remaining-tokens"] == "1000"
    [log], _ = emitted(capsys)
    assert log["budget"] == "reserved" and log["status"] == status


def keyed_request(document: Any, key_id: str = "key-7") -> Request:
    path = "/v1/chat/completions"
    return Request({
        "multiValueQueryStringParameters": None, "headers": {"content-type": "application/json"},
        "pathParameters": None, "requestContext": {
            "httpMethod": "POST", "resourcePath": path, "path": path,
            "identity": {"apiKeyId": key_id}},
        "body": json.dumps(document), "isBase64Encoded": False, "stageVariables": None})


def test_a_streaming_servers_body_holds_the_reservation_until_it_is_closed(
        harness: Harness, counters: MemoryCounters) -> None:
    """What chalice local and the streaming function do: the headers come before the first
    event (after the reservation), the settlement when the server closes the body."""
    expect_stream(harness, Upstream(split(PARIS, 9)))
    status, headers, body = completions.serve_streaming(
        lambda: app_module.services.llm, app_module.exchanges,
        keyed_request({"model": MODEL, "messages": QUESTION, "stream": True,
                       "max_tokens": 40}))
    reserved = 40 + RESERVED
    assert status == 200 and headers["x-ratelimit-remaining-tokens"] == str(1000 - reserved)
    assert list(body)[-1] == b"data: [DONE]\n\n"
    assert used(counters) == [reserved, reserved]  # until the server closes the body
    assert all(item.startswith("key-7#*#") for item in counters.counts)
    body.close()
    assert used(counters) == [math.ceil(PROMPT_BYTES / 4) + 4] * 2


def test_a_failed_call_gives_its_reservation_back(harness: Harness,
                                                  counters: MemoryCounters) -> None:
    harness.stubber.add_client_error("invoke_endpoint", "ModelError", "boom", 424,
                                     response_meta={"OriginalStatusCode": 500})
    status, headers, _ = ask(harness)
    assert status == 502 and used(counters) == [0, 0]
    assert headers["x-ratelimit-remaining-tokens"] == "1000"


@pytest.mark.parametrize("document", [
    {"model": MODEL, "messages": QUESTION, "n": 3},  # refused before any reservation
    {"model": "nope", "messages": QUESTION}])
def test_a_refused_request_carries_the_headers_and_costs_nothing(
        harness: Harness, counters: MemoryCounters, document: dict[str, Any]) -> None:
    status, headers, _ = post(harness, "/v1/chat/completions", document)
    assert status in (400, 404) and all(name in headers for name in HEADERS)
    assert set(counters.counts.values()) <= {0}


def test_the_usage_route_shows_the_callers_windows(harness: Harness,
                                                   counters: MemoryCounters) -> None:
    expect_answer(harness)
    ask(harness, temperature=0.5)
    response = harness.client.http.get("/v1/usage")
    document = json.loads(response.body)
    assert response.status_code == 200 and document["object"] == "list"
    assert (document["api_key_id"], document["budgets"]) == (None, True)
    assert [(entry["model"], entry["window"], entry["limit_tokens"], entry["used_tokens"],
             entry["remaining_tokens"]) for entry in document["data"]] == [
        ("*", "minute", 1000, 17, 983), ("*", "day", 5000, 17, 4983)]
    assert document["data"][0]["resets_at"] % 60 == 0
    assert response.headers["x-ratelimit-remaining-tokens"] == "983"
    models = harness.client.http.get("/v1/models")
    assert models.headers["x-ratelimit-remaining-tokens"] == "983"


def test_without_a_table_there_are_no_budgets_and_no_headers(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    serve_with(harness, monkeypatch, None)
    expect_answer(harness)
    status, headers, _ = ask(harness, temperature=0.5)
    assert status == 200 and not any(name in headers for name in HEADERS)
    document = json.loads(harness.client.http.get("/v1/usage").body)
    assert (document["budgets"], document["data"]) == (False, [])


def test_a_failing_table_fails_open_logged_and_counted(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    serve_with(harness, monkeypatch, TokenBudgets(BrokenCounters(), Limits(1000, 1000)))
    expect_answer(harness)
    capsys.readouterr()
    status, headers, _ = ask(harness, temperature=0.5)
    assert status == 200 and not any(name in headers for name in HEADERS)
    [log], metrics = emitted(capsys)
    assert log["budget_errors"] == 2
    assert any(metric.get("BudgetErrors") == [2.0] for metric in metrics)
    assert harness.client.http.get("/v1/usage").status_code == 200


def test_a_browser_may_read_the_headers_across_origins() -> None:
    """Where CORS is on, every route's Access-Control-Expose-Headers (app.py) names them."""
    exposed = {name.lower() for name in modelcalls.MODEL_EXPOSE_HEADERS}
    assert set(HEADERS) <= exposed
