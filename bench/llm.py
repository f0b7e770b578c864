"""LLM part: what sagegate's OpenAI route adds to a token stream, beside the endpoint's own.

``make run``'s stack (:func:`sagegate.local.processes.quiet_stack`: the default emulator, whose
``smollm2`` endpoint runs SmolLM2-135M-Instruct, and sagegate on the ``local`` stage) on free
ports. One question, temperature 0, the same ``max_tokens``, two ways, side by side in one run
(the one going first switching every round):

* **reference**: boto3's ``invoke_endpoint_with_response_stream`` straight to the emulator
  with the body sagegate's ``lmi-chat`` schema sends it (``messages``, ``max_tokens``,
  ``temperature``, ``stream``, ``stream_options.include_usage``), its ``PayloadPart`` events
  read as jsonlines chunks (one line may be cut across two parts);
* **sagegate**: ``POST /v1/chat/completions`` with ``"stream": true`` on a keep-alive
  ``http.client`` connection, the ``text/event-stream``'s ``data:`` lines read as they come
  (``Cache-Control: no-cache``: the endpoint generates every time, never the cache).

For each answer: the time to its first token (from the call to the first chunk with text) and
its time per token after that ((last - first) / (tokens - 1)). Added = sagegate's less the
reference's, the median of the rounds' differences (paired: drift hits both sides of a round).
The emulator's tokens/s is the reference's (tokens - 1) / (last - first). Both sides must give
the same text and the same number of tokens, or the run fails. If the local server answers a
stream whole (``chalice local``'s own buffering), the first token arrives with the last one:
the table shows it, and so does the line saying how far apart sagegate's first and last
tokens came.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import statistics
import time
import urllib.parse
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any

from bench import table
from bench.report import Report
from sagegate.local.processes import ApiProcess, quiet_stack

MODEL = "smollm2"
ENDPOINT = "smollm2"
QUESTION = "Count from one to twenty in words, separated by commas."
TTFT_TARGET_MS = 5.0
"""The time to the first token sagegate adds, median: at most this (aim: 1 ms)."""
PER_TOKEN_TARGET_MS = 0.2
"""The time per token sagegate adds, median: at most this."""
LOAD_ATTEMPTS = 40


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much to measure."""

    rounds: int
    warmup: int
    max_tokens: int

    @classmethod
    def full(cls) -> Plan:
        """About two minutes on two cores (the model makes 20 to 30 tokens a second)."""
        return cls(rounds=24, warmup=2, max_tokens=24)

    @classmethod
    def quick(cls) -> Plan:
        """A smoke run: the shape, not figures to quote."""
        return cls(rounds=4, warmup=1, max_tokens=8)


@dataclasses.dataclass
class Stream:
    """One streamed answer as its reader saw it (times in ms from the call)."""

    text: str = ""
    token_ms: list[float] = dataclasses.field(default_factory=list)

    def add(self, piece: str, started: float) -> None:
        """A chunk with text arrived now."""
        self.text += piece
        self.token_ms.append((time.perf_counter() - started) * 1000.0)

    @property
    def first_ms(self) -> float:
        """The time to the first token."""
        return self.token_ms[0]

    @property
    def per_token_ms(self) -> float:
        """The time per token after the first (0 for a single token)."""
        count = len(self.token_ms)
        return (self.token_ms[-1] - self.token_ms[0]) / (count - 1) if count > 1 else 0.0


def _chat_piece(document: Any) -> str:
    """A ``chat.completion.chunk``'s text ('' for the role, finish and usage chunks).

    Raises:
        RuntimeError: the line is an error event.
    """
    if not isinstance(document, dict):
        return ""
    if document.get("error"):
        raise RuntimeError(f"the stream failed: {document['error']}")
    choices = document.get("choices") or [{}]
    content = (choices[0].get("delta") or {}).get("content")
    return content if isinstance(content, str) else ""


def container_body(max_tokens: int) -> bytes:
    """What sagegate's ``lmi-chat`` schema sends the endpoint for the question, streamed."""
    return json.dumps({"messages": [{"role": "user", "content": QUESTION}],
                       "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()


def openai_body(max_tokens: int) -> bytes:
    """The OpenAI request a client sends sagegate for the same answer."""
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": QUESTION}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()


def _lines(parts: Iterator[bytes]) -> Iterator[bytes]:
    """Whole lines from byte parts, a line cut across two parts joined."""
    pending = b""
    for part in parts:
        pending += part
        *complete, pending = pending.split(b"\n")
        yield from complete
    if pending:
        yield pending


class Reference:
    """boto3's stream straight from the emulator."""

    def __init__(self, emulator_url: str, max_tokens: int) -> None:
        import boto3
        from botocore.config import Config

        self.client = boto3.client("sagemaker-runtime", endpoint_url=emulator_url,
                                   region_name="us-east-1", aws_access_key_id="testing",
                                   aws_secret_access_key="testing",
                                   config=Config(retries={"total_max_attempts": 1},
                                                 read_timeout=120))
        self.body = container_body(max_tokens)

    def __call__(self) -> Stream:
        stream = Stream()
        started = time.perf_counter()
        answer = self.client.invoke_endpoint_with_response_stream(
            EndpointName=ENDPOINT, Body=self.body, ContentType="application/json")
        parts = (event["PayloadPart"]["Bytes"] for event in answer["Body"]
                 if "PayloadPart" in event)
        for line in _lines(parts):
            if line.strip() and (piece := _chat_piece(json.loads(line))):
                stream.add(piece, started)
        return stream


class Sagegate:
    """The OpenAI route through sagegate, on one keep-alive connection."""

    def __init__(self, api: ApiProcess, max_tokens: int) -> None:
        parts = urllib.parse.urlsplit(api.url)
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                                     timeout=120)
        self.body = openai_body(max_tokens)

    def __call__(self) -> Stream:
        stream = Stream()
        started = time.perf_counter()
        self.connection.request("POST", "/v1/chat/completions", body=self.body,
                                headers={"Content-Type": "application/json",
                                         "Cache-Control": "no-cache"})
        response = self.connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"sagegate answered {response.status}: {response.read()[:300]!r}")
        if (response.getheader("X-Cache") or "").lower() == "hit":
            raise RuntimeError("sagegate answered from its cache despite no-cache")
        done = False
        for line in response:
            data = line.strip().removeprefix(b"data:").strip()
            if not line.startswith(b"data:") or not data:
                continue
            if data == b"[DONE]":
                done = True
                continue
            if piece := _chat_piece(json.loads(data)):
                stream.add(piece, started)
        if not done:
            raise RuntimeError("sagegate's stream ended without [DONE]")
        return stream

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()


def load_model(api: ApiProcess) -> None:
    """The model loads on its first request, which may outlast that request (503, 504)."""
    parts = urllib.parse.urlsplit(api.url)
    body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 1}).encode()
    for _ in range(LOAD_ATTEMPTS):
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                                timeout=120)
        try:
            connection.request("POST", "/v1/completions", body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()
        if response.status == 200:
            return
        time.sleep(3)
    raise RuntimeError(f"{MODEL} did not load")


@dataclasses.dataclass
class Rounds:
    """Both sides' answers, round by round."""

    reference: list[Stream] = dataclasses.field(default_factory=list)
    sagegate: list[Stream] = dataclasses.field(default_factory=list)

    def paired(self, measure: Callable[[Stream], float]) -> list[float]:
        """Each round's sagegate figure less the reference's."""
        return [measure(ours) - measure(theirs)
                for ours, theirs in zip(self.sagegate, self.reference, strict=True)]

    def mismatches(self) -> int:
        """Answers whose text differs from the reference's first (temperature 0: none)."""
        want = self.reference[0].text
        return sum(found.text != want for found in self.reference + self.sagegate)


def run(reference: Callable[[], Stream], ours: Callable[[], Stream], plan: Plan) -> Rounds:
    """``plan.warmup`` untimed rounds, then ``plan.rounds``, alternating which side goes first."""
    for _ in range(plan.warmup):
        reference()
        ours()
    found = Rounds()
    for number in range(plan.rounds):
        if number % 2 == 0:
            found.reference.append(reference())
            found.sagegate.append(ours())
        else:
            found.sagegate.append(ours())
            found.reference.append(reference())
    return found


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def figures(found: Rounds) -> list[tuple[str, float, float, float, float]]:
    """Per measure: reference median, sagegate median, added (median of paired differences),
    target."""
    measures: tuple[tuple[str, Callable[[Stream], float], float], ...] = (
        ("time to first token", attrgetter("first_ms"), TTFT_TARGET_MS),
        ("time per token", attrgetter("per_token_ms"), PER_TOKEN_TARGET_MS))
    return [(name, _median([measure(s) for s in found.reference]),
             _median([measure(s) for s in found.sagegate]), _median(found.paired(measure)), goal)
            for name, measure, goal in measures]


HEADERS = ["measure", "reference ms", "sagegate ms", "added ms", "x reference", "target ms",
           "met"]


def report(quick: bool = False) -> Report:
    """Run the part and print its table."""
    plan = Plan.quick() if quick else Plan.full()
    out = Report()
    out.say(table.section("LLM - what sagegate's OpenAI route adds to a token stream"),
            f"  make run's stack ('local' stage), the emulator's {MODEL} (the real model); "
            f"{plan.rounds} rounds after {plan.warmup} untimed,",
            f"  temperature 0, max_tokens {plan.max_tokens}, the side going first alternating; "
            "reference: boto3's invoke_endpoint_with_response_stream",
            "  straight to the emulator; sagegate: POST /v1/chat/completions, stream: true; "
            "added = median of each round's difference.", "")
    with quiet_stack(stage="local") as (api, emulator):
        load_model(api)
        ours = Sagegate(api, plan.max_tokens)
        try:
            found = run(Reference(emulator.url, plan.max_tokens), ours, plan)
        finally:
            ours.close()
    rows = []
    for name, theirs, mine, added, goal in figures(found):
        met = added <= goal
        rows.append([name, table.ms(theirs), table.ms(mine), table.ms(added),
                     table.times(mine / theirs) if theirs else "", table.ms(goal),
                     table.verdict(met)])
        if not met:
            out.missed.append(f"llm: {name} added {added:.3f} ms (target <= {goal:g} ms)")
    out.say(table.render(HEADERS, rows, left=1))
    _say_stream_facts(out, found)
    if mismatches := found.mismatches():
        out.failures.append(f"llm: {mismatches} answer(s) differed from the reference's text")
    return out


def _say_stream_facts(out: Report, found: Rounds) -> None:
    tokens = _median([float(len(s.token_ms)) for s in found.reference])
    rate = _median([1000.0 / s.per_token_ms for s in found.reference if s.per_token_ms > 0])
    spread_ref = _median([s.token_ms[-1] - s.first_ms for s in found.reference])
    spread_ours = _median([s.token_ms[-1] - s.first_ms for s in found.sagegate])
    out.say("", f"  the emulator's {MODEL}: {rate:.1f} tokens/s after the first token "
            f"({tokens:.0f} text chunks an answer);",
            f"  first to last token: {table.ms(spread_ref)} ms straight from the emulator, "
            f"{table.ms(spread_ours)} ms through sagegate"
            + (" (answered whole: the local server does not stream)"
               if spread_ours < 0.1 * spread_ref else " (streamed as made)"))
