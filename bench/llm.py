"""LLM part: what sagegate's OpenAI route adds to a token stream, beside the endpoint's own.

``make run``'s stack (the default emulator, whose ``smollm2`` endpoint runs
SmolLM2-135M-Instruct, and sagegate under ``chalice local`` on the ``local`` stage, started with
``sagegate.local.processes``) on free ports. One question, temperature 0, the same
``max_tokens``, three ways, side by side in one run (the order changing every round, each
side going first and each pair in either order as often):

* **reference**: boto3's ``invoke_endpoint_with_response_stream`` straight to the emulator
  with the body sagegate's ``lmi-chat`` schema sends it (``messages``, ``max_tokens``,
  ``temperature``, ``stream``, ``stream_options.include_usage``), its ``PayloadPart`` events
  read as jsonlines chunks (one line may be cut across two parts);
* **sagegate**: ``POST /v1/chat/completions`` with ``"stream": true`` on a keep-alive
  ``http.client`` connection, the ``text/event-stream``'s ``data:`` lines read as they come
  (``Cache-Control: no-cache``: the endpoint generates every time, never the cache), token
  budgets off;
* **sagegate with token budgets**: the same, from a second ``chalice local`` whose budgets
  table is on moto's server, provisioned as ``make run`` provisions it (each request reserves
  and settles its tokens there, as on ``make run``).

The model's own time to a first token (its prefill) varies by tens of milliseconds from one
generation to the next on a shared machine, far more than the milliseconds a front adds, so
both sides call the emulator through a :class:`Tap`: a pass-through proxy in this process that
times each call's arrival and each frame of its answer on the bench's own clock. For each
answer, what its side spent **outside the model**: of the time to the first token, the call's
way to the tap plus the first token's way from the tap to the reader; of the time per token,
how much the delay between the tap handing on a token and the reader having it grows per token
((last delay - first delay) / (tokens - 1)). Added = sagegate's median less the reference's.
The table also gives the end-to-end medians (what a caller sees, the model's time included)
and the emulator's tokens/s (the tap's (tokens - 1) / (last - first) on the reference's
calls). Every side must give the same text, or the run fails. If the local server answered a
stream whole (``chalice local``'s own buffering), the first token would arrive with the last:
the added time per first token shows it, and so does the line saying how far apart
sagegate's first and last tokens came.
"""
from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import os
import queue
import statistics
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from operator import attrgetter
from typing import Any

from bench import table
from bench.report import Report
from chalicelib.llm.streams import lines
from emulator.process import free_port, start_emulator
from sagegate.local.aws import LocalJobs, provision, start_moto
from sagegate.local.processes import HOST, ApiProcess, start_api

MODEL = "smollm2"
ENDPOINT = "smollm2"
QUESTION = "Count from one to twenty in words, separated by commas."
TTFT_TARGET_MS = 5.0
"""The time to the first token sagegate adds, median: at most this (aim: 1 ms)."""
PER_TOKEN_TARGET_MS = 0.2
"""The time per token sagegate adds, median: at most this."""
LOAD_ATTEMPTS = 40
SAGEGATE, BUDGETED = "sagegate", "sagegate with token budgets"


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much to measure."""

    rounds: int
    warmup: int
    max_tokens: int

    @classmethod
    def full(cls) -> Plan:
        """About three minutes on two cores (the model makes 20 to 30 tokens a second)."""
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
    started: float = dataclasses.field(default_factory=time.perf_counter)
    tapped: Tapped | None = None
    """The call as the tap saw it."""

    def add(self, piece: str) -> None:
        """A chunk with text arrived now."""
        self.text += piece
        self.token_ms.append((time.perf_counter() - self.started) * 1000.0)

    def _tap_ms(self) -> tuple[float, list[float]]:
        """The tap's times, in ms from the call: the call's arrival, each token handed on."""
        if self.tapped is None or not self.tapped.token_times():
            raise RuntimeError("the tap saw no token of this answer")
        ms = [(moment - self.started) * 1000.0
              for moment in (self.tapped.arrived, *self.tapped.token_times())]
        return ms[0], ms[1:]

    @property
    def first_outside_ms(self) -> float:
        """Of the time to the first token, what was spent outside the model: the call's way to
        the tap and the first token's way back from it."""
        arrived, tokens = self._tap_ms()
        return arrived + (self.token_ms[0] - tokens[0])

    @property
    def to_tap_ms(self) -> float:
        """The call's way to the tap (the endpoint), from the call."""
        return self._tap_ms()[0]

    @property
    def per_token_outside_ms(self) -> float:
        """How much a token's way back from the tap grows per token (0 for one token)."""
        _, tokens = self._tap_ms()
        count = len(self.token_ms)
        if count < 2:
            return 0.0
        return ((self.token_ms[-1] - tokens[-1]) - (self.token_ms[0] - tokens[0])) / (count - 1)

    @property
    def model_tokens_per_second(self) -> float:
        """The model's pace as the tap saw it, after the first token."""
        _, tokens = self._tap_ms()
        return 1000.0 * (len(tokens) - 1) / (tokens[-1] - tokens[0]) if len(tokens) > 1 else 0.0

    @property
    def first_ms(self) -> float:
        """The time to the first token."""
        return self.token_ms[0]

    @property
    def per_token_ms(self) -> float:
        """The time per token after the first (0 for a single token)."""
        count = len(self.token_ms)
        return (self.token_ms[-1] - self.token_ms[0]) / (count - 1) if count > 1 else 0.0


@dataclasses.dataclass
class Tapped:
    """One call as the tap in front of the emulator saw it (``perf_counter`` seconds)."""

    arrived: float
    """The call's body read, just before it went on to the emulator."""
    pieces: list[tuple[float, bytes]] = dataclasses.field(default_factory=list)
    """Each piece of the answer, with the time it was handed on to the caller."""
    caller_gone: bool = False
    """The caller went away before the answer's end (sagegate gives up on a call that outlasts
    the model's load)."""

    def token_times(self) -> list[float]:
        """When each event stream frame holding a token of text was handed on: the answer's
        frames decoded by botocore, their ``PayloadPart``s' bytes read as jsonlines.

        Raises:
            RuntimeError: the answer holds an exception (or error) frame.
        """
        times: list[float] = []
        handed: list[float] = [0.0]  # when the frame being read was handed on
        for line in lines(self._payloads(handed)):
            if _chat_piece(json.loads(line)):
                times.append(handed[0])
        return times

    def _payloads(self, handed: list[float]) -> Iterator[bytes]:
        from botocore.eventstream import EventStreamBuffer

        frames = EventStreamBuffer()
        for at, piece in self.pieces:
            frames.add_data(piece)
            for message in frames:
                headers = message.headers
                if headers.get(":message-type") != "event":
                    kind = headers.get(":exception-type") or headers.get(":error-code")
                    raise RuntimeError(f"the stream failed: {kind}: {message.payload[:300]!r}")
                if headers.get(":event-type") == "PayloadPart":
                    handed[0] = at
                    yield message.payload


class _TapHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _TapServer

    def do_POST(self) -> None:
        from sagegate.local.chalice_local import BodyWriter  # (chalice: only once it serves)

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        record = Tapped(arrived=time.perf_counter())
        upstream = http.client.HTTPConnection(self.server.upstream.hostname or "127.0.0.1",
                                              self.server.upstream.port, timeout=120)
        try:
            headers = {name: value for name, value in self.headers.items()
                       if name.lower() not in _HOP_HEADERS}
            upstream.request("POST", self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            writer = BodyWriter(self)
            self.send_response(answer.status)
            passed = {name: value for name, value in answer.getheaders()
                      if name.lower() not in _HOP_HEADERS}
            for name, value in {**passed, **writer.headers()}.items():
                self.send_header(name, value)
            self.end_headers()
            while piece := answer.read1(65536):
                record.pieces.append((time.perf_counter(), piece))
                try:
                    writer.write(piece)
                except ConnectionError:  # the caller's side; the emulator's errors still raise
                    record.caller_gone = self.close_connection = True
                    return
            writer.end()
        finally:
            upstream.close()
            self.server.calls.put(record)

    def log_message(self, format: str, *args: object) -> None:
        return


_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class _TapServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _TapHandler)
        self.upstream = urllib.parse.urlsplit(upstream)
        self.calls: queue.Queue[Tapped] = queue.Queue()


class Tap:
    """A pass-through HTTP proxy in front of the emulator, in this process, that both sides
    call through: each call's arrival and each piece of its answer timed on the bench's own
    clock, so that what a side adds can be told apart from the model's own time, which varies
    from one generation to the next far more than the milliseconds measured here."""

    def __init__(self, upstream: str) -> None:
        self._server = _TapServer(upstream)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Where to point a SageMaker runtime client."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def take(self) -> Tapped:
        """The next call the tap finished (calls are made one at a time)."""
        return self._server.calls.get(timeout=120)

    def clear(self) -> None:
        """Forget the calls made so far (the model's loading)."""
        while not self._server.calls.empty():
            self._server.calls.get_nowait()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


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
        answer = self.client.invoke_endpoint_with_response_stream(
            EndpointName=ENDPOINT, Body=self.body, ContentType="application/json")
        parts = (event["PayloadPart"]["Bytes"] for event in answer["Body"]
                 if "PayloadPart" in event)
        for line in lines(parts):
            if piece := _chat_piece(json.loads(line)):
                stream.add(piece)
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
                stream.add(piece)
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
    """Every side's answers, round by round."""

    reference: list[Stream] = dataclasses.field(default_factory=list)
    sagegate: list[Stream] = dataclasses.field(default_factory=list)
    budgeted: list[Stream] = dataclasses.field(default_factory=list)
    """Through sagegate with token budgets (none: not measured)."""

    def sides(self) -> dict[str, list[Stream]]:
        """sagegate's sides measured, by name."""
        return {name: streams for name, streams in
                ((SAGEGATE, self.sagegate), (BUDGETED, self.budgeted)) if streams}

    def paired(self, measure: Callable[[Stream], float],
               side: str = SAGEGATE) -> list[float]:
        """Each round's figure of ``side`` less the reference's."""
        return [measure(ours) - measure(theirs)
                for ours, theirs in zip(self.sides()[side], self.reference, strict=True)]

    def mismatches(self) -> int:
        """Answers whose text differs from the reference's first (temperature 0: none)."""
        want = self.reference[0].text
        return sum(found.text != want for streams in (self.reference, *self.sides().values())
                   for found in streams)


def run(reference: Callable[[], Stream], ours: Callable[[], Stream], plan: Plan,
        budgeted: Callable[[], Stream] | None = None) -> Rounds:
    """``plan.warmup`` untimed rounds, then ``plan.rounds``, the sides' order going through
    every permutation in turn (two sides: alternating which goes first)."""
    found = Rounds()
    sides = [(reference, found.reference), (ours, found.sagegate)]
    if budgeted is not None:
        sides.append((budgeted, found.budgeted))
    for _ in range(plan.warmup):
        for call, _kept in sides:
            call()
    orders = list(itertools.permutations(sides))
    for number in range(plan.rounds):
        for call, kept in orders[number % len(orders)]:
            kept.append(call())
    return found


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclasses.dataclass(frozen=True)
class Figure:
    """One measure, the reference and one of sagegate's sides: end to end and outside the
    model (medians, ms)."""

    name: str
    reference: float
    sagegate: float
    reference_outside: float
    sagegate_outside: float
    target: float
    side: str = SAGEGATE

    @property
    def added(self) -> float:
        """What sagegate adds outside the model, over the reference."""
        return self.sagegate_outside - self.reference_outside


def figures(found: Rounds) -> list[Figure]:
    """The time to the first token and the time per token, the reference and each of
    sagegate's sides (the measure's rows together)."""
    measures: tuple[tuple[str, str, str, float], ...] = (
        ("time to first token", "first_ms", "first_outside_ms", TTFT_TARGET_MS),
        ("time per token", "per_token_ms", "per_token_outside_ms", PER_TOKEN_TARGET_MS))

    def median_of(streams: list[Stream], field: str) -> float:
        return _median([float(attrgetter(field)(stream)) for stream in streams])

    return [Figure(name, median_of(found.reference, whole), median_of(streams, whole),
                   median_of(found.reference, outside), median_of(streams, outside), goal,
                   side)
            for name, whole, outside, goal in measures
            for side, streams in found.sides().items()]


HEADERS = ["measure", "through", "reference ms", "sagegate ms",
           "outside the model: reference", "sagegate", "added ms", "target ms", "met"]


def _tapped(side: Callable[[], Stream], tap: Tap) -> Callable[[], Stream]:
    """``side``, each answer given the tap's view of its call."""
    def call() -> Stream:
        stream = side()
        stream.tapped = tap.take()
        return stream
    return call


def measure(plan: Plan) -> Rounds:
    """Start the stack with the tap in front of its emulator, a second sagegate with its
    budgets table on moto's server, and run the rounds."""
    with open(os.devnull, "wb") as log, start_emulator(port=0) as emulator, \
            start_moto(free_port(HOST), log=log) as moto:
        jobs = provision(LocalJobs(moto.url, bucket="", success_topic="", error_topic=""),
                         key=moto.provision_key)
        tap = Tap(emulator.url)
        apis = [start_api(free_port(HOST), tap.url, host=HOST, stage="local", log=log)]
        try:
            apis.append(start_api(free_port(HOST), tap.url, host=HOST, stage="local",
                                  log=log, env=jobs.settings_env()))
            ours, budgeted = (Sagegate(api, plan.max_tokens) for api in apis)
            try:
                for api in apis:
                    load_model(api)
                tap.clear()
                return run(_tapped(Reference(tap.url, plan.max_tokens), tap),
                           _tapped(ours, tap), plan, _tapped(budgeted, tap))
            finally:
                ours.close()
                budgeted.close()
        finally:
            for api in apis:
                api.stop()
            tap.close()


def report(quick: bool = False) -> Report:
    """Run the part and print its table."""
    plan = Plan.quick() if quick else Plan.full()
    out = Report()
    out.say(table.section("LLM - what sagegate's OpenAI route adds to a token stream"),
            f"  make run's stack ('local' stage), the emulator's {MODEL} (the real model); "
            f"{plan.rounds} rounds after {plan.warmup} untimed, temperature 0,",
            f"  max_tokens {plan.max_tokens}, the sides' order changing each round. reference: "
            "boto3's invoke_endpoint_with_response_stream straight to",
            "  the emulator; sagegate: POST /v1/chat/completions, stream: true, token budgets "
            "off; with token budgets: the same, its budgets",
            "  table on moto's server as make run has it. All call the emulator through a tap "
            "timing each token, so each side's time",
            "  outside the model is told apart from the model's own; added = sagegate's less "
            "the reference's (medians).", "")
    found = measure(plan)
    rows = []
    for figure in figures(found):
        met = figure.added <= figure.target
        rows.append([figure.name, figure.side, table.ms(figure.reference),
                     table.ms(figure.sagegate),
                     table.ms(figure.reference_outside), table.ms(figure.sagegate_outside),
                     table.ms(figure.added), table.ms(figure.target), table.verdict(met)])
        if not met:
            out.missed.append(f"llm: {figure.name} through {figure.side} added "
                              f"{figure.added:.3f} ms (target <= {figure.target:g} ms)")
    out.say(table.render(HEADERS, rows, left=1))
    _say_stream_facts(out, found)
    if mismatches := found.mismatches():
        out.failures.append(f"llm: {mismatches} answer(s) differed from the reference's text")
    return out


def _say_stream_facts(out: Report, found: Rounds) -> None:
    tokens = _median([float(len(s.token_ms)) for s in found.reference])
    rate = _median([s.model_tokens_per_second for s in found.reference])
    spread_ref = _median([s.token_ms[-1] - s.first_ms for s in found.reference])
    sides = found.sides()
    paired = {side: _median(found.paired(attrgetter("first_ms"), side)) for side in sides}
    ways = {side: (_median([s.to_tap_ms for s in streams]),
                   _median([s.first_outside_ms - s.to_tap_ms for s in streams]))
            for side, streams in (("reference", found.reference), *sides.items())}
    spreads = {side: _median([s.token_ms[-1] - s.first_ms for s in streams])
               for side, streams in sides.items()}
    out.say("", f"  the emulator's {MODEL}: {rate:.1f} tokens/s after the first token "
            f"({tokens:.0f} text chunks an answer); end to end, the rounds' median difference "
            "in time to first token "
            + ", ".join(f"{table.ms(value)} ms through {side}" for side, value in paired.items()),
            "  (the model's own time varies from one generation to the next);",
            *(f"  {side} outside the model, first token: {table.ms(there)} ms from the call to "
              f"the endpoint, {table.ms(back)} ms from the endpoint's token to the reader;"
              for side, (there, back) in ways.items()),
            f"  first to last token: {table.ms(spread_ref)} ms straight from the emulator, "
            + ", ".join(f"{table.ms(spread)} ms through {side}"
                        + (" (answered whole: the local server does not stream)"
                           if spread < 0.1 * spread_ref else " (streamed as made)")
                        for side, spread in spreads.items()))
