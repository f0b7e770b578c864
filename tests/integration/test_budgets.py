"""Token budgets on ``make run``'s stack: moto's server holding the budgets table (provisioned
as ``sagegate run`` does), the emulator's real ``smollm2``, sagegate under chalice local with
a small budget (600 tokens a day; no minute window) given over the local stage's generous one.
Many requests at once, whole and streamed, never overspend the window by more than one
reservation, and every answer settles to what it spent; a caller over its budget gets
OpenAI's 429 with ``Retry-After`` and the ``x-ratelimit-*-tokens`` headers. One stack, one
model load, for the module."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3

from emulator.process import free_port, start_emulator
from sagegate.local.aws import BUDGET_TABLE, LocalJobs, provision, start_moto
from sagegate.local.processes import ApiProcess, start_api
from sagegate.local.stack import warm_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODEL = "smollm2"
LIMIT = 600
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MAX_TOKENS = 4
TEMPLATE_TOKENS = 30  # smollm2's model.json: llm.budgets.template_tokens
RESERVATION = MAX_TOKENS + 24 + len("user") + len(QUESTION[0]["content"]) + TEMPLATE_TOKENS
"""What each request reserves: its max_tokens, its prompt's bytes (with 24 of framing) and
the template's own tokens."""
AT_ONCE = 20
MAX_BURSTS = 12
HEADERS = ("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
           "x-ratelimit-reset-tokens")


@dataclass
class Stack:
    api: ApiProcess
    moto_url: str
    http: urllib3.PoolManager

    def post(self, document: Any) -> urllib3.BaseHTTPResponse:
        return self.http.request("POST", self.api.url + "/v1/chat/completions",
                                 body=json.dumps(document).encode(),
                                 headers={"Content-Type": "application/json"})

    def usage(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.http.request(
            "GET", self.api.url + "/v1/usage").data)
        return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs: Path = tmp_path_factory.mktemp("budgets")
    with open(logs / "moto.log", "wb") as moto_log, \
            start_moto(free_port(), log=moto_log) as moto, \
            open(logs / "emulator.log", "w") as emulator_log, \
            start_emulator(echo_stderr=emulator_log) as emulator, \
            open(logs / "api.log", "wb") as api_log:
        local = provision(LocalJobs(moto.url, bucket="", success_topic="", error_topic=""),
                          key=moto.provision_key)
        loaded = warm_up(emulator.url, [MODEL])
        assert "is loaded" in loaded[0], loaded
        api = start_api(free_port(), emulator.url, stage="local", log=api_log,
                        env=local.api_env(), overrides={
                            "TOKEN_BUDGET_PER_MINUTE": "0",
                            "TOKEN_BUDGET_PER_DAY": str(LIMIT)})
        try:
            yield Stack(api, moto.url, urllib3.PoolManager(maxsize=AT_ONCE, retries=False,
                                                           timeout=120))
        finally:
            api.stop()


def spent_by(response: urllib3.BaseHTTPResponse, streamed: bool) -> int:
    """The answer's usage: a whole answer's ``usage``, a stream's usage chunk."""
    text = response.data.decode()
    if not streamed:
        total: int = json.loads(text)["usage"]["total_tokens"]
        return total
    payloads = [line[len("data: "):] for line in text.split("\n\n") if line]
    assert payloads[-1] == "[DONE]"
    usage = json.loads(payloads[-2])["usage"]
    return int(usage["total_tokens"])


def table_count(stack: Stack) -> int:
    """The day window's counter, read from the table itself."""
    dynamodb = boto3.client("dynamodb", endpoint_url=stack.moto_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")
    day = int(time.time() // 86_400) * 86_400
    item = dynamodb.get_item(TableName=BUDGET_TABLE, ConsistentRead=True,
                             Key={"key": {"S": f"anonymous#*#day#{day}"}})["Item"]
    return int(item["used"]["N"])


def settled_to(stack: Stack, expected: int) -> int:
    """The window's count once it reaches ``expected`` (a stream settles after its answer's
    end is written), or as it stands after 20 s."""
    deadline = time.monotonic() + 20
    used = -1
    while time.monotonic() < deadline:
        used = stack.usage()["data"][0]["used_tokens"]
        if used == expected:
            break
        time.sleep(0.1)
    return int(used)


def ask(stack: Stack, index: int) -> tuple[int, dict[str, str], int]:
    """One request of a burst (two in five streamed): its status, headers and spent tokens."""
    streamed = index % 5 < 2
    document = {"model": MODEL, "messages": QUESTION, "max_tokens": MAX_TOKENS,
                "temperature": 0.7, "stream": streamed}
    if streamed:
        document["stream_options"] = {"include_usage": True}
    response = stack.post(document)
    spent = spent_by(response, streamed) if response.status == 200 else 0
    return response.status, dict(response.headers), spent


def test_the_templates_own_tokens_are_within_a_chats_reservation(stack: Stack) -> None:
    """smollm2's template_tokens cover its template: a chat of one byte (one token, the most
    a byte makes) spends no more than it reserved, though more than its bytes and max_tokens
    (the default system turn its template adds)."""
    response = stack.post({"model": MODEL, "messages": [{"role": "user", "content": "a"}],
                           "max_tokens": 1, "temperature": 0.7})
    assert response.status == 200
    spent = spent_by(response, streamed=False)
    assert 1 + 24 + len("user") + 1 < spent <= 1 + 24 + len("user") + 1 + TEMPLATE_TOKENS
    assert settled_to(stack, spent) == spent


def test_requests_at_once_never_overspend_by_more_than_one_reservation(stack: Stack) -> None:
    """Bursts of 20 at once until the window refuses them all. The emulator generates two at
    a time: a call it throttles past the retries is a 503 that costs nothing."""
    before = stack.usage()["data"][0]["used_tokens"]
    answers: list[tuple[int, dict[str, str], int]] = []
    with ThreadPoolExecutor(AT_ONCE) as pool:
        for _ in range(MAX_BURSTS):
            burst = list(pool.map(lambda index: ask(stack, index), range(AT_ONCE)))
            answers += burst
            if all(status == 429 for status, _, _ in burst):
                break
    statuses = {status for status, _, _ in answers}
    assert {200, 429} <= statuses <= {200, 429, 503}, statuses
    assert all(name in headers for _, headers, _ in answers for name in HEADERS)
    spent = before + sum(tokens for _, _, tokens in answers)
    used = settled_to(stack, spent)
    assert used == spent == table_count(stack)  # every answer settled to what it spent
    assert LIMIT - RESERVATION < spent <= LIMIT


def test_a_caller_over_its_budget_gets_openais_429_with_the_headers(stack: Stack) -> None:
    before = stack.usage()
    [window] = before["data"]
    response = stack.post({"model": MODEL, "messages": QUESTION,  # (512: the model's ceiling;
                           # 0 left would be a 400: max_tokens is at least 1)
                           "max_tokens": max(1, min(512, window["remaining_tokens"]))})
    assert response.status == 429
    assert json.loads(response.data) == {"error": {
        "message": json.loads(response.data)["error"]["message"], "type": "tokens",
        "param": None, "code": "rate_limit_exceeded"}}
    assert 1 <= int(response.headers["Retry-After"]) <= 86_400
    assert response.headers["x-ratelimit-limit-tokens"] == str(LIMIT)
    assert response.headers["x-ratelimit-remaining-tokens"] == str(window["remaining_tokens"])
    assert response.headers["x-ratelimit-reset-tokens"].endswith("s")
    assert stack.usage()["data"][0]["used_tokens"] == window["used_tokens"]  # none kept
