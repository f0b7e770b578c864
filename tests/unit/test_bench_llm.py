"""The llm part of the bench: how it reads both streams and what it computes from them (the
part itself runs against the real stack: ``python -m bench --part llm``)."""
from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import llm
from emulator.eventstream import exception_event, model_stream_error, payload_part


def test_only_a_chunks_text_counts_as_a_token() -> None:
    def chunk(delta: dict[str, object]) -> dict[str, object]:
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}

    assert llm._chat_piece(chunk({"content": " Paris"})) == " Paris"
    assert llm._chat_piece(chunk({"role": "assistant", "content": ""})) == ""
    assert llm._chat_piece({"choices": [], "usage": {"completion_tokens": 3}}) == ""
    assert llm._chat_piece([1, 2]) == ""
    with pytest.raises(RuntimeError, match="the stream failed"):
        llm._chat_piece({"error": {"message": "the model stopped"}})


def chunk_line(text: str) -> bytes:
    return json.dumps({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n"


def stream(*token_ms: float, tap_ms: tuple[float, ...] = (), arrived_ms: float = 0.0,
           text: str = "x") -> llm.Stream:
    """An answer read at ``token_ms`` whose tokens the tap handed on at ``tap_ms``."""
    found = llm.Stream(text=text, token_ms=list(token_ms), started=100.0)
    role = payload_part(json.dumps({"choices": [{"delta": {"role": "assistant"}}]}).encode()
                        + b"\n")
    pieces = [(100.0, role)]
    for at in tap_ms or token_ms:
        line = payload_part(chunk_line("t"))
        # each frame in two pieces, its token counted when its last byte is handed on
        pieces += [(100.0, line[:7]), (100.0 + at / 1000.0, line[7:])]
    found.tapped = llm.Tapped(arrived=100.0 + arrived_ms / 1000.0, pieces=pieces)
    return found


def test_the_tap_times_each_token_when_its_frame_is_whole() -> None:
    cut = chunk_line("Par") + chunk_line("is")
    tapped = llm.Tapped(arrived=1.0, pieces=[
        (2.0, payload_part(cut[:10])), (3.0, payload_part(cut[10:])[:5]),
        (4.0, payload_part(cut[10:])[5:])])
    assert tapped.token_times() == [4.0, 4.0]  # both lines complete in the second frame


@pytest.mark.parametrize("failure", [
    model_stream_error("the model stopped"),
    exception_event("InternalStreamFailure", {"Message": "try again"})])
def test_an_exception_frame_is_the_stream_failing_never_a_token(failure: bytes) -> None:
    tapped = llm.Tapped(arrived=1.0, pieces=[(2.0, payload_part(chunk_line("Par"))),
                                             (3.0, failure[:9]), (4.0, failure[9:])])
    with pytest.raises(RuntimeError, match=r"the stream failed: (ModelStream|InternalStream)"):
        tapped.token_times()


ANSWER = [payload_part(chunk_line("one")), payload_part(chunk_line("two"))]


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"".join(ANSWER) if self.path == "/invocations" else b"x" * (8 << 20)
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except ConnectionError:  # the tap let go (its caller went away)
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def tap() -> Iterator[llm.Tap]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    found = llm.Tap(f"http://127.0.0.1:{upstream.server_address[1]}")
    try:
        yield found
    finally:
        found.close()
        upstream.shutdown()
        upstream.server_close()


def test_the_tap_passes_the_answer_on_in_chunks_and_times_it(tap: llm.Tap) -> None:
    port = int(tap.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/invocations", body=b"{}")
        answer = connection.getresponse()
        assert answer.getheader("Transfer-Encoding") == "chunked"
        assert answer.getheader("Content-Type") == "application/vnd.amazon.eventstream"
        assert answer.read() == b"".join(ANSWER)
    finally:
        connection.close()
    tapped = tap.take()
    assert b"".join(piece for _, piece in tapped.pieces) == b"".join(ANSWER)
    assert len(tapped.token_times()) == 2


def test_the_tap_answers_an_http_1_0_caller_without_chunks(tap: llm.Tap) -> None:
    port = int(tap.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /invocations HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
        reader = sock.makefile("rb")
        head, _, body = reader.read().partition(b"\r\n\r\n")  # until the tap closed it
    assert b"Transfer-Encoding" not in head and b"Connection: close" in head
    assert body == b"".join(ANSWER)


def test_a_caller_gone_mid_answer_is_no_traceback(tap: llm.Tap,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    port = int(tap.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /big HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        assert sock.recv(12).startswith(b"HTTP/1.")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
    tapped = tap.take()  # recorded all the same
    assert tapped.caller_gone
    assert tapped.pieces and sum(len(piece) for _, piece in tapped.pieces) < 8 << 20
    assert "Traceback" not in capfd.readouterr().err


def test_time_outside_the_model_is_the_way_there_and_back() -> None:
    # the call reached the tap after 2 ms; its first token was handed on at 500 ms, read at 503
    found = stream(503.0, 534.0, 565.0, tap_ms=(500.0, 530.0, 560.0), arrived_ms=2.0)
    assert found.first_outside_ms == pytest.approx(5.0)
    assert found.to_tap_ms == pytest.approx(2.0)
    assert found.per_token_outside_ms == pytest.approx(1.0)  # the delay grew 3 -> 5 ms
    assert found.model_tokens_per_second == pytest.approx(1000.0 / 30.0)
    assert found.per_token_ms == pytest.approx(31.0) and found.first_ms == 503.0
    with pytest.raises(RuntimeError, match="no token"):
        llm.Stream(token_ms=[1.0]).first_outside_ms  # noqa: B018


def test_added_is_sagegates_time_outside_the_model_less_the_references() -> None:
    found = llm.Rounds(
        reference=[stream(400.0, 430.0, arrived_ms=1.0), stream(600.0, 630.0, arrived_ms=1.0),
                   stream(500.0, 530.0, arrived_ms=1.0)],
        sagegate=[stream(404.0, 434.5, tap_ms=(401.0, 431.0), arrived_ms=2.0),
                  stream(453.0, 483.0, tap_ms=(450.0, 480.0), arrived_ms=2.0),
                  stream(704.0, 734.0, tap_ms=(701.0, 731.0), arrived_ms=2.0)])
    figures = {figure.name: figure for figure in llm.figures(found)}
    first = figures["time to first token"]
    assert (first.reference, first.sagegate) == (500.0, 453.0)  # end to end: the model's
    assert (first.reference_outside, first.sagegate_outside) == pytest.approx((1.0, 5.0))
    assert first.added == pytest.approx(4.0) and first.target == llm.TTFT_TARGET_MS
    per_token = figures["time per token"]
    assert per_token.added == pytest.approx(0.0) and per_token.target == llm.PER_TOKEN_TARGET_MS
    assert found.mismatches() == 0
    found.sagegate[1].text = "y"
    assert found.mismatches() == 1


def test_both_sides_ask_for_the_same_greedy_answer() -> None:
    container = json.loads(llm.container_body(8))
    openai = json.loads(llm.openai_body(8))
    assert container["messages"] == openai["messages"]
    assert container["max_tokens"] == openai["max_tokens"] == 8
    assert container["temperature"] == openai["temperature"] == 0
    assert container["stream"] is openai["stream"] is True
    assert openai["model"] == llm.MODEL


def test_the_rounds_alternate_which_side_goes_first() -> None:
    order: list[str] = []

    def side(name: str) -> llm.Stream:
        order.append(name)
        return stream(1.0, 2.0)

    found = llm.run(lambda: side("ref"), lambda: side("ours"),
                    llm.Plan(rounds=3, warmup=1, max_tokens=4))
    assert order == ["ref", "ours", "ref", "ours", "ours", "ref", "ref", "ours"]
    assert len(found.reference) == len(found.sagegate) == 3
