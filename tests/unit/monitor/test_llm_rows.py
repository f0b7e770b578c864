"""A language model's capture record as one row: recognised by its answer's shape (OpenAI's,
LMI's, TGI's) or sagegate's mark, never by an input alone; each column from where the record
holds it; a record of another model flattened as before."""
from __future__ import annotations

import json
from typing import Any

from chalicelib.monitor.flattening import flatten_record
from chalicelib.monitor.llm_rows import llm_row


def record(sent: Any, received: Any = None, **metadata: Any) -> dict[str, Any]:
    capture = {"endpointInput": {"observedContentType": "application/json", "mode": "INPUT",
                                 "data": json.dumps(sent), "encoding": "JSON"}}
    if received is not None:
        capture["endpointOutput"] = {"observedContentType": "application/json",
                                     "mode": "OUTPUT", "data": json.dumps(received),
                                     "encoding": "JSON"}
    return {"captureData": capture, "eventVersion": "0",
            "eventMetadata": {"eventId": "e", "inferenceTime": "2026-12-07T08:00:00Z",
                              **metadata}}


CHAT = {"messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Capital?"}]}]}
ANSWER = {"object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Paris."},
     "finish_reason": "length"}], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}


def test_a_chat_completion_without_sagegates_figures_gives_its_usage_and_lengths() -> None:
    assert llm_row(record(CHAT, ANSWER, sagegateLatencyMs=120.5)) == {
        "prompt_tokens": 9, "completion_tokens": 2, "latency_ms": 120.5,
        "time_to_first_token_ms": 120.5, "finish_reason": "length",
        "prompt_chars": len("Be brief.") + len("Capital?"), "completion_chars": 6}


def test_sagegates_figures_win_and_a_streams_first_token_is_its_own() -> None:
    figures = {"promptTokens": 11, "completionTokens": 3, "streamed": True,
               "timeToFirstTokenMs": 40.0, "tokensPerSecond": 25.0, "finishReason": "stop"}
    row = llm_row(record(CHAT, ANSWER, sagegateLatencyMs=200.0, sagegateLlm=figures))
    assert row is not None
    assert (row["prompt_tokens"], row["completion_tokens"], row["time_to_first_token_ms"],
            row["tokens_per_second"]) == (11, 3, 40.0, 25.0)


def test_lmi_and_tgi_generations_are_read_with_their_details() -> None:
    lmi = {"generated_text": " Paris.", "details": {
        "finish_reason": "eos_token", "generated_tokens": 2, "prompt_tokens": 5}}
    sent = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 8}}
    for answer in (lmi, [lmi]):
        assert llm_row(record(sent, answer)) == {
            "prompt_tokens": 5, "completion_tokens": 2, "finish_reason": "eos_token",
            "prompt_chars": 24, "completion_chars": 7}


def test_a_failed_or_abandoned_stream_says_so_in_its_finish_reason() -> None:
    failed = llm_row(record(CHAT, None, sagegateLlm={"streamed": True},
                            sagegateError={"Code": "model_error", "Message": "x"}))
    assert failed == {"finish_reason": "error", "prompt_chars": 17}
    partial = dict(ANSWER, choices=[{"index": 0, "message": {"content": "Pa"},
                                     "finish_reason": None}])
    row = llm_row(record(CHAT, partial, sagegateLlm={"partial": "client_disconnected"}))
    assert row is not None and row["finish_reason"] == "client_disconnected"


def test_other_models_json_is_not_read_as_a_language_models() -> None:
    classifier = record({"inputs": "I loved it"}, [{"label": "POSITIVE", "score": 0.99}])
    assert llm_row(classifier) is None
    assert list(flatten_record(classifier)) == [
        {"prediction0.label": "POSITIVE", "prediction0.score": 0.99,
         "inputs": "I loved it"}]
    assert llm_row(record({"instances": [[1, 2]]}, {"predictions": [[0.5]]})) is None
    mentions = record({"q": "choices"}, {"text": '"choices" and "generated_text"'})
    assert llm_row(mentions) is None


def test_flattening_gives_the_language_models_row_not_its_messages() -> None:
    rows = list(flatten_record(record(CHAT, ANSWER)))
    assert len(rows) == 1 and "messages.0.content" not in rows[0]
    assert rows[0]["finish_reason"] == "length"
