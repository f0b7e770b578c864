"""The web page's chat box in a real browser (Chromium, as tests/integration/test_web.py drives
it), against ``make run``'s pair: the emulator's default configuration, whose ``smollm2``
endpoint runs the real SmolLM2-135M-Instruct, and sagegate on the ``local`` stage.

Choosing ``smollm2`` (an ``llm`` model in ``GET /models``) swaps the image controls for a chat
box; the answer is written into the page as the ``text/event-stream``'s chunks arrive. Where
the local server streams (``serve_streaming``), the first token must be in the page's DOM
while the emulator still shows the generation active (``GET /emulator/generations``); where it
answers a stream whole, the same page shows the same answer at once. Which of the two the
server does is probed first with a plain HTTP client, so the page is held to what the server
gives. No wall-time assertion: only the order of events.
"""
from __future__ import annotations

import http.client
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import urllib3
from playwright.sync_api import Browser, Page, Route, expect

from emulator.process import EmulatorProcess, free_port, start_emulator
from sagegate.local.processes import ApiProcess, start_api
from tests.integration.test_web import CONTRAST_JS, Watched, watch

pytestmark = pytest.mark.integration

MODEL = "smollm2"
QUESTION = "What is the capital of France?"
ANSWER_WAIT_MS = 90_000


@dataclass
class LlmStack:
    api: ApiProcess
    emulator: EmulatorProcess
    streams: bool
    """The server delivers a stream's events as they are made (not whole at the end)."""

    def generations(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.emulator.url}/emulator/generations",
                                    timeout=10) as answer:
            counts: dict[str, int] = json.load(answer)[MODEL]
        return counts

    def wait_idle(self) -> dict[str, int]:
        deadline = time.monotonic() + 60
        while (counts := self.generations())["active"] and time.monotonic() < deadline:
            time.sleep(0.05)
        return counts


def _chat_body(content: str, max_tokens: int | None = None) -> bytes:
    document: dict[str, object] = {"model": MODEL, "stream": True,
                                   "messages": [{"role": "user", "content": content}]}
    if max_tokens is not None:
        document["max_tokens"] = max_tokens
    return json.dumps(document).encode()


def _load_model(api: ApiProcess) -> None:
    """The model loads on its first request, which may outlast that request (504, 503)."""
    http = urllib3.PoolManager(retries=False, timeout=120)
    body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 1}).encode()
    for _ in range(40):
        answer = http.request("POST", api.url + "/v1/completions", body=body,
                              headers={"Content-Type": "application/json"})
        if answer.status == 200:
            return
        assert answer.status in (503, 504), answer.data
        time.sleep(3)
    raise AssertionError("the model never answered")


def _server_streams(stack: LlmStack) -> bool:
    """Whether the first content chunk reaches a plain HTTP client while the emulator is still
    generating (a buffered server sends it only once the generation has ended)."""
    parts = urllib.parse.urlsplit(stack.api.url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                            timeout=120)
    try:
        connection.request("POST", "/v1/chat/completions", body=_chat_body(QUESTION, 24),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        for line in response:
            if line.startswith(b"data: {") and b'"content":"' in line \
                    and b'"content":""' not in line:
                active = stack.generations()["active"] > 0
                response.read()
                return active
        raise AssertionError("the stream had no content")
    finally:
        connection.close()
        stack.wait_idle()


@pytest.fixture(scope="module")
def llm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmStack]:
    logs = tmp_path_factory.mktemp("web-llm")
    with open(logs / "emulator.log", "w") as emulator_log, \
            start_emulator(echo_stderr=emulator_log) as emulator, \
            open(logs / "api.log", "wb") as api_log:
        api = start_api(free_port(), emulator.url, stage="local", log=api_log)
        try:
            _load_model(api)
            stack = LlmStack(api, emulator, streams=False)
            stack.streams = _server_streams(stack)
            yield stack
        finally:
            api.stop()


@pytest.fixture
def chat(browser: Browser, llm_stack: LlmStack) -> Iterator[Watched]:
    """The page with ``smollm2`` chosen: the chat box shown, the image controls gone."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    watched = watch(page, llm_stack.api.url)
    try:
        response = page.goto(llm_stack.api.url + "/")
        assert response is not None and response.ok
        expect(page.locator("#boot")).to_be_hidden()
        expect(page.locator("#model option[value=smollm2]")).to_have_text("smollm2 (chat)")
        expect(page.locator("#pick")).to_be_visible()  # an image model is the default
        expect(page.locator("#chat-input")).to_be_hidden()
        page.select_option("#model", MODEL)
        expect(page.locator("#chat-input")).to_be_visible()
        expect(page.locator("#pick")).to_be_hidden()
        expect(page.locator("#k")).to_be_hidden()
        yield watched
    finally:
        context.close()


ANSWER = "#chat-log .turn.assistant .text"
# Each change of the answer's text, as the page's own MutationObserver sees it (one entry per
# batch of mutations): tokens written as they come give several, an answer written at once one.
OBSERVE_JS = """() => {
  window.__answers = [];
  new MutationObserver(() => {
    const answers = document.querySelectorAll("#chat-log .turn.assistant .text");
    if (answers.length) window.__answers.push(answers[answers.length - 1].textContent);
  }).observe(document.getElementById("chat-log"),
             {childList: true, subtree: true, characterData: true});
}"""


def _ask(page: Page, text: str) -> None:
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")


def test_the_answer_is_written_into_the_page_as_its_tokens_arrive(
        chat: Watched, llm_stack: LlmStack) -> None:
    page = chat.page
    page.evaluate(OBSERVE_JS)
    before = llm_stack.generations()
    _ask(page, QUESTION)
    # watch the DOM while the model is still generating
    seen_while_active = []
    deadline = time.monotonic() + ANSWER_WAIT_MS / 1000
    while time.monotonic() < deadline:
        text = page.locator(ANSWER).last.text_content() or ""
        counts = llm_stack.generations()
        if text and counts["started"] > before["started"] and counts["active"]:
            seen_while_active.append(text)  # in the DOM before the generation ended
        if page.locator("#chat-status").text_content() != f"{MODEL} is answering…":
            break
        time.sleep(0.02)
    expect(page.locator("#chat-status")).to_have_text("Answered.")
    final = page.locator(ANSWER).last.text_content() or ""
    assert "Paris" in final, final
    assert page.locator("#chat-log .turn.user .text").last.text_content() == QUESTION
    snapshots = [text for text in page.evaluate("window.__answers") if text]
    assert snapshots and snapshots[-1] == final
    assert all(final.startswith(text) for text in snapshots)  # only ever appended to
    if llm_stack.streams:
        assert seen_while_active, "no token in the page while the model was generating"
        assert all(final.startswith(text) for text in seen_while_active)
        assert len(set(snapshots)) >= 2, snapshots
    # after the stream: the usage, the time to the first token, the finish reason
    expect(page.locator("#chat-facts")).to_be_visible()
    expect(page.locator("#chat-usage")).to_contain_text(" completion")
    assert page.locator("#chat-first").text_content().endswith(" ms")  # type: ignore[union-attr]
    expect(page.locator("#chat-finish")).to_have_text("stop")
    expect(page.locator("#chat-send")).to_be_enabled()
    expect(page.locator("#chat-stop")).to_be_disabled()
    assert page.evaluate(CONTRAST_JS) == []
    chat.assert_clean()


def test_a_follow_up_sends_the_conversation_and_the_image_controls_come_back(
        chat: Watched) -> None:
    page = chat.page
    _ask(page, QUESTION)
    expect(page.locator("#chat-status")).to_have_text("Answered.", timeout=ANSWER_WAIT_MS)
    first = page.locator(ANSWER).last.text_content()
    with page.expect_request("**/v1/chat/completions") as sent:
        _ask(page, "And of Italy?")
    body = json.loads(sent.value.post_data or "{}")
    assert [message["role"] for message in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == first
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    expect(page.locator("#chat-status")).to_have_text("Answered.", timeout=ANSWER_WAIT_MS)
    expect(page.locator("#chat-log .turn")).to_have_count(4)
    page.click("#chat-clear")
    expect(page.locator("#chat-log .turn")).to_have_count(0)
    page.select_option("#model", "efficientnet-lite0")
    expect(page.locator("#pick")).to_be_visible()
    expect(page.locator("#chat-input")).to_be_hidden()
    chat.assert_clean()


def test_stop_aborts_the_request_and_keeps_what_came(chat: Watched, llm_stack: LlmStack) -> None:
    page = chat.page
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(str(request.failure)))
    llm_stack.wait_idle()
    before = llm_stack.generations()
    _ask(page, "Write a long story about a cat who sails around the world.")
    if llm_stack.streams:  # stop it mid-answer
        expect(page.locator(ANSWER).last).not_to_have_text("", timeout=ANSWER_WAIT_MS)
    else:  # nothing comes before the end: stop it while it waits
        deadline = time.monotonic() + 60
        while llm_stack.generations()["started"] == before["started"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    kept = page.locator(ANSWER).last.text_content() or ""
    page.click("#chat-stop")
    expect(page.locator("#chat-status")).to_have_text("Stopped.")
    expect(page.locator("#chat-send")).to_be_enabled()
    expect(page.locator("#chat-stop")).to_be_disabled()
    assert any("ERR_ABORTED" in failure for failure in failed), failed
    assert (page.locator(ANSWER).last.text_content() or "").startswith(kept)
    expect(page.locator("#chat-finish")).to_have_text("stopped here")
    after = llm_stack.wait_idle()
    if llm_stack.streams:  # the dropped caller freed the model
        assert after["cancelled"] > before["cancelled"], (before, after)
    page.wait_for_timeout(300)
    assert page.locator("#chat-status").text_content() == "Stopped."
    chat.assert_clean()


def test_a_refused_request_shows_openais_error(chat: Watched) -> None:
    page = chat.page
    _ask(page, "tell me " * 1200)  # 9,600 bytes: over smollm2's 8,192
    expect(page.locator("#chat-error")).to_be_visible()
    expect(page.locator("#chat-error-code")).to_have_text("context_length_exceeded:")
    expect(page.locator("#chat-error-message")).to_contain_text("8192")
    expect(page.locator("#chat-status")).to_have_text("The answer failed.")
    assert page.evaluate(CONTRAST_JS) == []
    # the one console line Chromium writes for any 4xx fetch
    assert all("400" in line for line in chat.console_errors), chat.console_errors
    chat.console_errors.clear()
    chat.assert_clean()


def _sse(*documents: object) -> str:
    return "".join(f"data: {json.dumps(document)}\n\n" for document in documents)


def _chunk(text: str) -> dict[str, object]:
    return {"object": "chat.completion.chunk", "model": MODEL, "usage": None,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def test_an_error_event_mid_stream_ends_the_answer_with_the_error(chat: Watched) -> None:
    """A stream that fails after it began ends with a data: line holding an error object (the
    server's failure mid-stream, served here by the browser's network layer)."""
    page = chat.page
    body = _sse(_chunk("The capital"), _chunk(" is"),
                {"error": {"message": "the model stopped", "type": "server_error",
                           "param": None, "code": "model_error"}})

    def fail_mid_stream(route: Route) -> None:
        route.fulfill(status=200, body=body, headers={"Content-Type": "text/event-stream"})

    page.route("**/v1/chat/completions", fail_mid_stream)
    _ask(page, QUESTION)
    expect(page.locator("#chat-error-code")).to_have_text("model_error:")
    expect(page.locator("#chat-error-message")).to_have_text("the model stopped")
    expect(page.locator(ANSWER).last).to_have_text("The capital is")
    expect(page.locator("#chat-usage")).to_contain_text("not given (2 pieces")
    # a stream cut before its [DONE] is an error too, never a complete answer
    page.unroute("**/v1/chat/completions")
    page.route("**/v1/chat/completions", lambda route: route.fulfill(
        status=200, body=_sse(_chunk("Par")), headers={"Content-Type": "text/event-stream"}))
    _ask(page, QUESTION)
    expect(page.locator("#chat-error-code")).to_have_text("StreamCut:")
    chat.assert_clean()


def test_the_chat_controls_are_labelled_and_reachable_by_keyboard(chat: Watched) -> None:
    page = chat.page
    unlabelled = page.evaluate("""() => Array.from(
        document.querySelectorAll(".chat input, .chat textarea, .chat button")).filter((el) =>
        !((el.labels && el.labels.length) || el.getAttribute("aria-label") ||
          el.textContent.trim())).map((el) => el.id || el.tagName)""")
    assert unlabelled == []
    page.focus("#model")
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "chat-input":
            break
    assert page.evaluate("document.activeElement.id") == "chat-input"

