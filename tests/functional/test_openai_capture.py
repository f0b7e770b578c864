"""OpenAI's routes through the real app (chalice.test.Client) on an in-memory sagemaker-runtime
that answers LMI's chat body, whole and streamed: each exchange captured in Model Monitor's
format (the body sent, the assembled completion, sagegate's figures), a failed stream with its
error, a gone client's partial answer marked; temperature 0 answered from the prediction cache
(streamed as chunks), a sampled request never; arms and shadows across llm endpoints; and
``sagegate monitor baseline`` / ``check`` reading the captured records into useful columns."""
from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from chalice.test import Client

import app as app_module
from chalicelib.capture import Capturer
from chalicelib.capture.sinks import DirectorySink
from chalicelib.core.config import Settings
from chalicelib.core.observability import RequestLog
from chalicelib.core.retries import RetryPolicy
from chalicelib.http import completions
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.llm.requests import Operation
from chalicelib.monitor.llm_rows import COLUMNS
from chalicelib.registry.loading import load_registry
from chalicelib.services import Services
from sagegate.monitor import cli
from tests.functional.test_openai_routes import Upstream, events, served_request, text_of

MODEL = "smollm2"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
LLM = {"schema": "lmi-chat", "limits": {"max_prompt_bytes": 8192, "max_tokens": 64},
       "defaults": {"max_tokens": 16, "temperature": 0}}


class Runtime:
    """sagemaker-runtime in memory: each endpoint answers ``"<words> (<endpoint>)"``, whole as a
    ``chat.completion`` or streamed as LMI's chunk lines with its usage line; ``fail`` cuts a
    stream after two parts with a ``ModelStreamError``; ``down`` endpoints refuse."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.bodies: list[dict[str, Any]] = []
        self.down: set[str] = set()
        self.fail = False
        self.upstreams: list[Upstream] = []
        self.lock = threading.Lock()

    def _words(self, params: dict[str, Any], streamed: bool) -> list[str]:
        endpoint = params["EndpointName"]
        with self.lock:
            self.calls.append((endpoint, streamed))
            self.bodies.append(json.loads(params["Body"]))
        if endpoint in self.down:
            raise ClientError({"Error": {"Code": "ValidationError", "Message": "no such"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "InvokeEndpoint")
        return ["The", " capital", " is", " Paris", f" ({endpoint})."]

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        words = self._words(params, False)
        body = json.dumps({"object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "".join(words)},
             "finish_reason": "eos_token"}],
            "usage": {"prompt_tokens": 14, "completion_tokens": len(words)}}).encode()
        return {"Body": StreamingBody(io.BytesIO(body), len(body)),
                "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}

    def invoke_endpoint_with_response_stream(self, **params: Any) -> dict[str, Any]:
        words = self._words(params, True)
        lines: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            for word in words]
        lines.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "eos_token"}]})
        lines.append({"choices": [], "usage": {"prompt_tokens": 14,
                                               "completion_tokens": len(words)}})
        upstream = Upstream([json.dumps(line).encode() + b"\n" for line in lines],
                            fail_after=2 if self.fail else None)
        self.upstreams.append(upstream)
        return {"Body": upstream, "ContentType": "application/jsonlines",
                "InvokedProductionVariant": "AllTraffic"}


class Lab:
    """The app on the runtime, capturing into ``captures``."""

    def __init__(self, client: Client, runtime: Runtime, services: Services,
                 captures: Path) -> None:
        self.client, self.runtime, self.services, self.captures = \
            client, runtime, services, captures

    def post(self, path: str, document: Any, **headers: str) -> Any:
        return self.client.http.post(path, body=json.dumps(document).encode(), headers={
            "Content-Type": "application/json", **headers})

    def chat(self, **fields: Any) -> Any:
        return self.post("/v1/chat/completions",
                         {"model": MODEL, "messages": QUESTION, **fields})

    def records(self, shadows: bool = False) -> list[dict[str, Any]]:
        assert self.services.shadows.flush(10) and self.services.capturer.flush(10)
        found = [json.loads(line) for path in sorted(self.captures.rglob("*.jsonl"))
                 for line in path.open()]
        return [record for record in found if shadows or record["eventMetadata"].get(
            "invocationSource") != "ShadowExperiment"]


def make_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models: Path | None = None,
             capturer: Capturer | None = None) -> Lab:
    captures = tmp_path / "captures"
    settings = Settings.from_env({"ENDPOINT_NAME": MODEL, "DEFAULT_MODEL": MODEL})
    runtime = Runtime()
    endpoint = EndpointClient(runtime,  # type: ignore[arg-type]
                              RetryPolicy(max_attempts=1, budget_seconds=10),
                              sleep=lambda _: None)
    registry = None if models is None \
        else load_registry(settings, {"DEFAULT_MODEL": MODEL}, root=models)
    services = Services(settings, registry=registry, endpoint=endpoint,
                        capturer=capturer or Capturer("both", DirectorySink(captures)))
    monkeypatch.setattr(app_module, "services", services)
    return Lab(Client(app_module.app, stage_name="local"), runtime, services, captures)


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    found = make_lab(tmp_path, monkeypatch)
    with found.client:
        yield found


def data(record: dict[str, Any], side: str) -> Any:
    captured = record["captureData"][side]
    assert (captured["encoding"], captured["observedContentType"]) == \
        ("JSON", "application/json")
    return json.loads(captured["data"])


# --- capture ---------------------------------------------------------------------------------

def test_a_whole_answer_is_captured_as_the_body_sent_and_the_completion(lab: Lab) -> None:
    answer = lab.chat(max_tokens=8)
    assert answer.status_code == 200
    (record,) = lab.records()
    assert data(record, "endpointInput") == lab.runtime.bodies[0]
    assert data(record, "endpointInput")["messages"] == QUESTION
    assert data(record, "endpointOutput") == json.loads(answer.body)
    metadata = record["eventMetadata"]
    assert metadata["inferenceId"] == answer.headers["X-Request-Id"]
    figures = metadata["sagegateLlm"]
    assert figures == {"model": MODEL, "operation": "chat.completion", "streamed": False,
                       "promptTokens": 14, "completionTokens": 5,
                       "usageSource": {"prompt": "container", "completion": "container"},
                       "finishReason": "stop", "tokensPerSecond": figures["tokensPerSecond"]}
    assert metadata["sagegateLatencyMs"] >= 0 and record["eventVersion"] == "0"


def test_a_stream_is_captured_as_the_answer_it_assembles(lab: Lab) -> None:
    answer = lab.chat(stream=True, temperature=0.5, max_tokens=8)
    text = text_of(events(answer.body.decode()))
    (record,) = lab.records()
    sent = data(record, "endpointInput")
    assert sent["stream"] is True and sent == lab.runtime.bodies[0]
    completion = data(record, "endpointOutput")
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == text == \
        "The capital is Paris (smollm2)."
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["usage"]["completion_tokens"] == 5
    figures = record["eventMetadata"]["sagegateLlm"]
    assert figures["streamed"] is True and figures["finishReason"] == "stop"
    assert figures["timeToFirstTokenMs"] >= 0 and "partial" not in figures


def test_a_stream_that_fails_midway_is_captured_with_its_error(lab: Lab) -> None:
    lab.runtime.fail = True
    answer = lab.chat(stream=True)
    assert "error" in events(answer.body.decode())[-1]
    (record,) = lab.records()
    assert "endpointOutput" not in record["captureData"]
    assert data(record, "endpointInput")["stream"] is True
    assert record["eventMetadata"]["sagegateError"]["Code"] == "model_error"


def test_a_client_that_leaves_is_captured_with_what_was_made_marked_partial(lab: Lab) -> None:
    service = lab.services.llm
    request = service.read(json.dumps({"model": MODEL, "messages": QUESTION,
                                       "stream": True}).encode(), Operation.CHAT)
    stream = service.stream(request, "req-1", RequestLog("req-1", "POST", "/v1"))
    assert [next(stream) for _ in range(3)][-1].startswith(b"data: ")  # role, two words
    stream.close()
    assert lab.runtime.upstreams[0].closed
    (record,) = lab.records()
    completion = data(record, "endpointOutput")
    assert completion["choices"][0]["message"]["content"] == "The capital"
    assert completion["choices"][0]["finish_reason"] is None
    assert record["eventMetadata"]["sagegateLlm"]["partial"] == "client_disconnected"


def test_a_stream_closed_before_its_first_event_is_captured_as_abandoned(lab: Lab) -> None:
    service = lab.services.llm
    request = service.read(json.dumps({"model": MODEL, "messages": QUESTION,
                                       "stream": True}).encode(), Operation.CHAT)
    log = RequestLog("req-2", "POST", "/v1")
    service.stream(request, "req-2", log).close()
    assert lab.runtime.upstreams[0].closed and log.completion_tokens == 0
    (record,) = lab.records()
    assert data(record, "endpointOutput")["choices"][0]["finish_reason"] is None
    assert record["eventMetadata"]["sagegateLlm"]["partial"] == "client_disconnected"


def test_capture_modes_and_sampling_apply_as_for_other_models(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = make_lab(tmp_path, monkeypatch,
                     capturer=Capturer("input", DirectorySink(tmp_path / "captures")))
    with found.client:
        found.chat(stream=True)
        (record,) = found.records()
        assert list(record["captureData"]) == ["endpointInput"]
    sampled = make_lab(tmp_path / "none", monkeypatch, capturer=Capturer(
        "both", DirectorySink(tmp_path / "none"), sampling_percentage=0.0))
    with sampled.client:
        assert sampled.chat().status_code == 200
        assert sampled.records() == []


def test_the_streaming_servers_path_captures_after_the_last_chunk_not_before(
        lab: Lab) -> None:
    status, headers, body = completions.serve_streaming(
        lambda: app_module.services.llm, app_module.exchanges,
        served_request({"model": MODEL, "messages": QUESTION, "stream": True,
                        "temperature": 0.2}))
    assert status == 200 and headers["X-Cache"] == "bypass"
    chunks = list(body)  # ends right after [DONE]: the record waits for the server's close
    assert chunks[-1] == b"data: [DONE]\n\n" and lab.records() == []
    body.close()
    (record,) = lab.records()
    assert record["eventMetadata"]["inferenceId"] == headers["X-Request-Id"]
    assert data(record, "endpointOutput")["choices"][0]["message"]["content"] == \
        "The capital is Paris (smollm2)."


# --- cache -----------------------------------------------------------------------------------

def test_temperature_zero_is_answered_from_the_cache_whole_or_streamed(lab: Lab) -> None:
    first = lab.chat(max_tokens=8)
    assert first.headers["X-Cache"] == "miss"
    again = lab.chat(max_tokens=8)
    assert again.headers["X-Cache"] == "hit"
    streamed = lab.chat(max_tokens=8, stream=True, stream_options={"include_usage": True})
    assert streamed.headers["X-Cache"] == "hit"
    assert lab.runtime.calls == [(MODEL, False)]
    chunks = events(streamed.body.decode())
    whole = json.loads(first.body)
    assert text_of(chunks) == whole["choices"][0]["message"]["content"]
    assert len([c for c in chunks if isinstance(c, dict) and c["choices"]]) > 3  # words
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["usage"] == whole["usage"] and chunks[-1] == "[DONE]"
    assert json.loads(again.body)["id"] == "chatcmpl-" + again.headers["X-Request-Id"]
    hits = [r for r in lab.records() if r["eventMetadata"].get("sagegateCacheHit")]
    assert len(hits) == 2
    assert {r["eventMetadata"]["sagegateLlm"]["streamed"] for r in hits} == {False, True}


def test_a_streamed_answer_is_kept_for_the_next_request(lab: Lab) -> None:
    assert lab.chat(stream=True).headers["X-Cache"] == "miss"
    answer = lab.chat()
    assert answer.headers["X-Cache"] == "hit"
    assert lab.runtime.calls == [(MODEL, True)]
    assert json.loads(answer.body)["choices"][0]["message"]["content"] == \
        "The capital is Paris (smollm2)."


def test_a_sampled_or_no_cache_request_is_never_answered_from_the_cache(lab: Lab) -> None:
    for _ in range(2):
        assert lab.chat(temperature=0.7).headers["X-Cache"] == "bypass"
    lab.chat()
    assert lab.chat(**{}).headers["X-Cache"] == "hit"
    answer = lab.post("/v1/chat/completions", {"model": MODEL, "messages": QUESTION},
                      **{"Cache-Control": "no-cache"})
    assert answer.headers["X-Cache"] == "miss"
    assert len(lab.runtime.calls) == 4


def test_the_model_route_caches_only_a_body_that_asks_for_greedy_decoding(lab: Lab) -> None:
    greedy = json.dumps({"messages": QUESTION, "max_tokens": 8, "temperature": 0})
    sampled = json.dumps({"messages": QUESTION, "max_tokens": 8})
    headers = {"Content-Type": "application/json"}
    statuses = [lab.client.http.post(f"/models/{MODEL}/predict", body=body,
                                     headers=headers).headers["X-Cache"]
                for body in (greedy, greedy, sampled, sampled)]
    assert statuses == ["miss", "hit", "bypass", "bypass"]
    assert len(lab.runtime.calls) == 3


def test_a_streamed_answer_is_kept_within_the_requests_deadline(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.cache.prediction import CacheUse

    kept: list[float | None] = []
    keep = CacheUse.keep

    def spy(self: CacheUse, fields: Any, body: bytes, result: Any,
            deadline: float | None = None) -> None:
        kept.append(deadline)
        keep(self, fields, body, result, deadline)

    monkeypatch.setattr(CacheUse, "keep", spy)
    before = time.monotonic()
    lab.chat(stream=True)
    assert len(kept) == 1 and kept[0] is not None  # a PutItem never outlives the request
    assert before < kept[0] <= time.monotonic() + lab.services.settings.request_budget_seconds


def test_an_openai_containers_usage_chunk_is_passed_back_never_doubled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models" / MODEL
    models.mkdir(parents=True)
    (models / "model.json").write_text(json.dumps({
        "endpoint": MODEL, "pipeline": "llm", "cache": False,
        "llm": {**LLM, "schema": "openai"}}))
    lab = make_lab(tmp_path, monkeypatch, models=tmp_path / "models")
    with lab.client:
        answer = lab.chat(stream=True, stream_options={"include_usage": True})
    chunks = events(answer.body.decode())
    usages = [chunk for chunk in chunks if isinstance(chunk, dict) and chunk.get("usage")]
    assert len(usages) == 1 and usages[0]["usage"]["prompt_tokens"] == 14
    assert chunks[-1] == "[DONE]"
    assert lab.runtime.bodies[0]["stream_options"] == {"include_usage": True}
    assert lab.runtime.bodies[0]["max_tokens"] == LLM["defaults"]["max_tokens"]  # type: ignore[index]


# --- experiments -----------------------------------------------------------------------------

@pytest.fixture
def arms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    models = tmp_path / "models" / MODEL
    models.mkdir(parents=True)
    (models / "model.json").write_text(json.dumps({
        "endpoint": "llm-a", "pipeline": "llm", "llm": LLM, "experiment": {
            "name": "smaller", "sticky": "header:X-User",
            "arms": [{"name": "a", "endpoint": "llm-a", "weight": 50},
                     {"name": "b", "endpoint": "llm-b", "weight": 50}],
            "shadow": [{"name": "s", "endpoint": "llm-shadow", "sample": 1.0,
                        "timeout_seconds": 5}]}}))
    found = make_lab(tmp_path, monkeypatch, models=tmp_path / "models")
    with found.client:
        yield found


def test_an_llm_experiment_routes_each_caller_to_an_arm_named_in_the_answer(arms: Lab) -> None:
    chosen = {}
    for user in [f"user-{n}" for n in range(16)]:
        answers = [arms.post("/v1/chat/completions", {
            "model": MODEL, "messages": QUESTION, "temperature": 0.5, "stream": stream},
            **{"X-User": user}) for stream in (False, True)]
        seen = {answer.headers["X-Sagegate-Arm"] for answer in answers}
        assert len(seen) == 1  # sticky by the header, streamed or not
        arm = chosen[user] = seen.pop()
        whole = json.loads(answers[0].body)["choices"][0]["message"]["content"]
        assert whole.endswith(f"(llm-{arm}).")  # the arm's endpoint answered
        assert text_of(events(answers[1].body.decode())) == whole
    assert set(chosen.values()) == {"a", "b"}
    primary = arms.records()
    assert {(r["eventMetadata"]["sagegateArm"], data(r, "endpointOutput")["model"])
            for r in primary} == {("a", MODEL), ("b", MODEL)}


def test_an_llm_shadow_gets_a_whole_copy_captured_as_shadow_traffic(arms: Lab) -> None:
    answer = arms.post("/v1/chat/completions", {"model": MODEL, "messages": QUESTION,
                                                "stream": True}, **{"X-User": "u"})
    assert answer.status_code == 200
    records = arms.records(shadows=True)
    (shadow,) = [r for r in records
                 if r["eventMetadata"].get("invocationSource") == "ShadowExperiment"]
    assert shadow["eventMetadata"]["inferenceId"] == answer.headers["X-Request-Id"]
    assert shadow["eventMetadata"]["sagegateArm"] == "s"
    assert "stream" not in data(shadow, "endpointInput")
    assert data(shadow, "endpointOutput")["choices"][0]["message"]["content"].endswith(
        "(llm-shadow).")
    assert ("llm-shadow", False) in arms.runtime.calls


def test_a_failing_llm_shadow_is_captured_with_its_error_and_changes_nothing(
        arms: Lab) -> None:
    arms.runtime.down.add("llm-shadow")
    answer = arms.post("/v1/chat/completions", {"model": MODEL, "messages": QUESTION},
                       **{"X-User": "u"})
    assert answer.status_code == 200
    (shadow,) = [r for r in arms.records(shadows=True)
                 if r["eventMetadata"].get("invocationSource") == "ShadowExperiment"]
    assert "sagegateError" in shadow["eventMetadata"]


# --- the monitor on the captured records ------------------------------------------------------

def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_monitor_baselines_and_checks_llm_captures_with_useful_columns(
        lab: Lab, tmp_path: Path) -> None:
    for n in range(6):
        question = [{"role": "user", "content": "What is the capital of France?" + "?" * n}]
        for stream in (False, True):
            assert lab.post("/v1/chat/completions", {
                "model": MODEL, "messages": question, "stream": stream, "temperature": 0.3},
            ).status_code == 200
    lab.records()
    captures = lab.captures / MODEL
    assert cli.main(["baseline", str(captures), "-o", str(tmp_path / "baseline")]) == 0
    statistics = _json(tmp_path / "baseline" / "statistics.json")
    features = {f["name"]: f for f in statistics["features"]}
    assert set(features) == set(COLUMNS)
    assert statistics["dataset"]["item_count"] == 12
    assert features["finish_reason"]["inferred_type"] == "String"
    assert features["completion_tokens"]["inferred_type"] == "Integral"
    assert features["completion_tokens"]["numerical_statistics"]["mean"] == 5
    longest = len(QUESTION[0]["content"]) + 5
    assert features["prompt_chars"]["numerical_statistics"]["max"] == longest
    assert features["tokens_per_second"]["inferred_type"] == "Fractional"
    constraints = _json(tmp_path / "baseline" / "constraints.json")
    assert {f["name"] for f in constraints["features"]} == set(COLUMNS)
    assert cli.main(["check", str(captures), "--baseline", str(tmp_path / "baseline"),
                     "-o", str(tmp_path / "same"), "--start", "-PT1H", "--end", "now"]) == 0
    assert _json(tmp_path / "same" / "constraint_violations.json")["violations"] == []
    lab.runtime.fail = True  # failed streams: a finish reason the baseline never saw
    for _ in range(4):
        lab.chat(stream=True, temperature=0.3)
    lab.records()
    cli.main(["check", str(captures), "--baseline", str(tmp_path / "baseline"),
              "-o", str(tmp_path / "drift"), "--start", "-PT1H", "--end", "now"])
    violations = _json(tmp_path / "drift" / "constraint_violations.json")["violations"]
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in violations}
    assert {("finish_reason", "categorical_values_check"),
            ("finish_reason", "baseline_drift_check"),
            ("completion_chars", "completeness_check")} <= checks  # (no answer: no text)


def test_the_llm_service_is_built_again_when_a_part_it_holds_is_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As a model's route is: a registry, cache or capturer put in its place (as a test or a
    warm start does) is what the OpenAI routes then use, never the one the service kept."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # (the endpoint client's; no call)
    services = Services(Settings.from_env({"ENDPOINT_NAME": "e"}))
    first = services.llm
    assert services.llm is first  # kept while its parts are
    services._capturer = Capturer("both", DirectorySink(Path("unused")))
    second = services.llm
    assert second is not first and services.llm is second
    services._cache = None
    assert services.llm is not second
