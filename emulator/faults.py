"""Fault injection: random faults per variant and per-request triggers for tests.

A variant's ``faults`` draw, per request, at most one error (by ``error_rate``), else maybe a
malformed answer (by ``malformed_output``), plus a fixed added latency. When the config sets
``allow_fault_header``, the custom attributes ``emulator-fault=<Name>[:<detail>]`` and
``emulator-latency-ms=<ms>`` replace that draw, so tests can ask for one fault exactly.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from emulator import errors, eventstream
from emulator.container import ContainerReply

MODEL_ERROR = "ModelError"
MALFORMED = "MalformedOutput"
NO_FAULT = "none"
SERVICE_FAULTS = frozenset(
    {
        "ThrottlingException",
        "ModelNotReadyException",
        "InternalFailure",
        "ServiceUnavailable",
        "InternalDependencyException",
    }
)
"""Errors the runtime answers itself, without reaching the container."""

ERROR_FAULTS = SERVICE_FAULTS | {MODEL_ERROR}
RESET = "ConnectionReset"
"""A request trigger: the server drops the connection with a TCP reset instead of answering."""
STREAM_ERROR = "ModelStreamError"
"""A request trigger for InvokeEndpointWithResponseStream: after :data:`STREAM_ERROR_AFTER`
parts, a ModelStreamError event (detail: its ErrorCode, StreamBroken by default) ends it."""
SPLIT = "SplitPayload"
"""A request trigger for InvokeEndpointWithResponseStream: the first part (a JSON line) is
sent as two PayloadParts, cut in its middle, as real containers sometimes send them."""
STREAM_FAULTS = frozenset({STREAM_ERROR, SPLIT})
STREAM_ERROR_CODES = (eventstream.STREAM_BROKEN, eventstream.TIME_EXCEEDED)
STREAM_ERROR_AFTER = 2
FAULT_ATTRIBUTE = "emulator-fault"
LATENCY_ATTRIBUTE = "emulator-latency-ms"
MAX_LATENCY_MS = 120_000.0
DEFAULT_MODEL_ERROR_STATUS = 500


def _truncate(body: bytes) -> bytes:
    return body[: len(body) // 2]


def _drop_last_value(body: bytes) -> bytes:
    data = json.loads(body)
    if isinstance(data, dict):
        data = {key: v[:-1] if isinstance(v, list) else v for key, v in data.items()}
    elif isinstance(data, list):
        data = data[:-1]
    return json.dumps(data).encode()


def _empty(body: bytes) -> bytes:
    return b""


MALFORMED_KINDS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": _truncate,
    "wrong-length": _drop_last_value,
    "empty": _empty,
}
"""How a malformed answer is made from a good one: cut JSON, one value short, no body."""


def _html(body: bytes) -> bytes:
    return b"<html><head><title>502 Bad Gateway</title></head><body>bad gateway</body></html>"


def _nan_first(body: bytes) -> bytes:
    data = json.loads(body)
    _first_float_to_nan(data)
    return json.dumps(data).encode()  # json writes NaN, as a careless container would


def _first_float_to_nan(value: object) -> bool:
    """Replaces the first float of a JSON document (depth first) with NaN: the first
    probability of a classifier's answer, the first value of a tensor model's predictions."""
    items: list[tuple[object, object]] = []
    if isinstance(value, list):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    for key, item in items:
        if isinstance(item, float):
            value[key] = float("nan")  # type: ignore[index]
            return True
        if _first_float_to_nan(item):
            return True
    return False


REQUESTED_MALFORMED_KINDS: dict[str, Callable[[bytes], bytes]] = {
    **MALFORMED_KINDS,
    "html": _html,
    "nan": _nan_first,
}
"""What a request may ask for: the random kinds plus an HTML error page (as ``text/html``)
and a first probability of NaN."""
MALFORMED_CONTENT_TYPES = {"html": "text/html; charset=utf-8"}


class ResetConnection(Exception):
    """Raised to make the server drop the connection with a TCP reset."""


@dataclass(frozen=True)
class FaultConfig:
    """A variant's random faults.

    Attributes:
        latency_ms: added to every request.
        error_rate: ``(error code, probability)`` pairs, codes from :data:`ERROR_FAULTS`.
        malformed_output: probability of a malformed 200 answer (when no error is drawn).
    """

    latency_ms: float = 0.0
    error_rate: tuple[tuple[str, float], ...] = ()
    malformed_output: float = 0.0


@dataclass(frozen=True)
class FaultPlan:
    """The faults one request gets.

    Attributes:
        error: an error code from :data:`ERROR_FAULTS`, or None.
        status: the container status of a ModelError.
        latency_ms: added before the container answers.
        malformed: a key of :data:`MALFORMED_KINDS`, or None.
        detail: a ModelStreamError's ErrorCode.
    """

    error: str | None = None
    status: int = DEFAULT_MODEL_ERROR_STATUS
    latency_ms: float = 0.0
    malformed: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class FaultRequest:
    """What a request's custom attributes ask for (only honoured when allowed)."""

    fault: str | None = None
    detail: str | None = None
    latency_ms: float | None = None


def parse_attributes(custom_attributes: str | None) -> dict[str, str]:
    """Splits custom attributes such as ``a=1; b=2`` (``;`` or ``,``) into a dict."""
    pairs = (custom_attributes or "").replace(",", ";").split(";")
    items = (pair.split("=", 1) for pair in pairs if "=" in pair)
    return {key.strip().lower(): value.strip() for key, value in items}


def parse_fault_request(custom_attributes: str | None) -> FaultRequest:
    """Reads the fault triggers from custom attributes.

    Args:
        custom_attributes: the request's ``X-Amzn-SageMaker-Custom-Attributes``.

    Returns:
        The requested fault, detail and latency (None where not asked).

    Raises:
        ValidationError: an unknown fault name, a bad detail or a bad latency.
    """
    attributes = parse_attributes(custom_attributes)
    latency = _parse_latency(attributes.get(LATENCY_ATTRIBUTE))
    raw = attributes.get(FAULT_ATTRIBUTE)
    if raw is None:
        return FaultRequest(latency_ms=latency)
    name, _, detail = raw.partition(":")
    request = FaultRequest(name, detail or None, latency)
    _check_fault_request(request)
    return request


def _parse_latency(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        latency = float(raw)
    except ValueError:
        latency = -1.0
    if not 0 <= latency <= MAX_LATENCY_MS:
        raise errors.ValidationError(f"{LATENCY_ATTRIBUTE} must be 0..{MAX_LATENCY_MS:.0f}")
    return latency


def _check_fault_request(request: FaultRequest) -> None:
    known = sorted(ERROR_FAULTS | STREAM_FAULTS | {MALFORMED, NO_FAULT, RESET})
    if request.fault not in known:
        raise errors.ValidationError(f"unknown {FAULT_ATTRIBUTE} {request.fault!r}; use {known}")
    kinds = REQUESTED_MALFORMED_KINDS
    if request.fault == MALFORMED and request.detail not in (None, *kinds):
        raise errors.ValidationError(f"unknown {MALFORMED} kind; use {sorted(kinds)}")
    detail = request.detail
    if request.fault == MODEL_ERROR and detail is not None and not _is_error_status(detail):
        raise errors.ValidationError(f"{MODEL_ERROR} status must be 400..599")
    if request.fault == STREAM_ERROR and detail not in (None, *STREAM_ERROR_CODES):
        raise errors.ValidationError(f"{STREAM_ERROR} ErrorCode must be one of "
                                     f"{list(STREAM_ERROR_CODES)}")


def _is_error_status(text: str) -> bool:
    return text.isdigit() and 400 <= int(text) <= 599


def draw_faults(config: FaultConfig, rng: random.Random) -> FaultPlan:
    """Draws one request's faults from a variant's configuration.

    Args:
        config: the variant's faults.
        rng: the random source (seed it for reproducible runs).

    Returns:
        At most one error, else maybe a malformed answer; always the configured latency.
    """
    draw = rng.random()
    for code, rate in config.error_rate:
        if draw < rate:
            return FaultPlan(error=code, latency_ms=config.latency_ms)
        draw -= rate
    malformed = None
    if config.malformed_output > 0 and rng.random() < config.malformed_output:
        malformed = rng.choice(sorted(MALFORMED_KINDS))
    return FaultPlan(latency_ms=config.latency_ms, malformed=malformed)


def plan_faults(config: FaultConfig, rng: random.Random, request: FaultRequest | None) -> FaultPlan:
    """Combines a variant's random faults with a request's triggers (which win).

    Args:
        config: the variant's faults.
        rng: the random source.
        request: the triggers of this request, or None when the header is not honoured.

    Returns:
        The faults to apply.
    """
    if request is None or request.fault is None:
        plan = draw_faults(config, rng)
    else:
        plan = _requested_plan(request, rng)
    latency = config.latency_ms
    if request is not None and request.latency_ms is not None:
        latency = request.latency_ms
    return replace(plan, latency_ms=latency)


def _requested_plan(request: FaultRequest, rng: random.Random) -> FaultPlan:
    if request.fault == MALFORMED:
        return FaultPlan(malformed=request.detail or rng.choice(sorted(MALFORMED_KINDS)))
    if request.fault == MODEL_ERROR:
        status = int(request.detail or DEFAULT_MODEL_ERROR_STATUS)
        return FaultPlan(error=MODEL_ERROR, status=status)
    if request.fault in ERROR_FAULTS or request.fault == RESET:
        return FaultPlan(error=request.fault)
    if request.fault in STREAM_FAULTS:
        return FaultPlan(error=request.fault, detail=request.detail)
    return FaultPlan()


def raise_service_fault(plan: FaultPlan) -> None:
    """Raises the runtime error a plan asks for, if it is one the runtime answers itself.

    Raises:
        EmulatorError: the planned ThrottlingException, ServiceUnavailable ...
        ResetConnection: the plan asks for a dropped connection.
    """
    if plan.error in SERVICE_FAULTS:
        raise errors.ERRORS[plan.error](f"{plan.error} (emulator fault injection)")
    if plan.error == RESET:
        raise ResetConnection()


def run_container(
    plan: FaultPlan, call: Callable[[], ContainerReply], sleep: Callable[[float], None]
) -> ContainerReply:
    """Runs a container call under a plan's latency, model error and malformed answer.

    Args:
        plan: the request's faults.
        call: invokes the container.
        sleep: waits a number of seconds (injected so tests need not wait).

    Returns:
        The container's answer, or the injected one.
    """
    if plan.latency_ms > 0:
        sleep(plan.latency_ms / 1000.0)
    if plan.error == MODEL_ERROR:
        message = f"model error (emulator fault injection, status {plan.status})"
        return ContainerReply(plan.status, message.encode(), "text/plain; charset=utf-8")
    reply = call()
    if plan.malformed is not None and 200 <= reply.status < 300:
        body = REQUESTED_MALFORMED_KINDS[plan.malformed](reply.body)
        content_type = MALFORMED_CONTENT_TYPES.get(plan.malformed, reply.content_type)
        reply = replace(reply, body=body, content_type=content_type)
    return reply


def stream_events(
    plan: FaultPlan,
    parts: Iterable[bytes],
    sleep: Callable[[float], None],
    first_part_timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bytes]:
    """Frames a container's streamed parts as PayloadPart events, under a plan's faults.

    The plan's latency is spent before the first part (the response headers are already
    sent: a slow first token). A first part later than ``first_part_timeout`` ends the stream
    with ModelStreamError ``ModelInvocationTimeExceeded``; the stream faults split the first
    part or end the stream with a ModelStreamError after :data:`STREAM_ERROR_AFTER` parts.

    Args:
        plan: the request's faults.
        parts: the container's answer, piece by piece.
        sleep: waits a number of seconds.
        first_part_timeout: how long the container has for its first part.
        clock: seconds, monotonic.

    Yields:
        Event stream messages, ready to send.
    """
    started = clock()
    if plan.latency_ms > 0:
        sleep(plan.latency_ms / 1000.0)
    for sent, part in enumerate(parts):
        if sent == 0 and clock() - started > first_part_timeout:
            yield eventstream.model_stream_error(
                f"The model did not start its answer within {first_part_timeout:g} s.",
                eventstream.TIME_EXCEEDED)
            return
        if plan.error == STREAM_ERROR and sent >= STREAM_ERROR_AFTER:
            break
        pieces = [part[: len(part) // 2], part[len(part) // 2 :]] if (
            plan.error == SPLIT and sent == 0 and len(part) > 1) else [part]
        for piece in pieces:
            yield eventstream.payload_part(piece)
    if plan.error == STREAM_ERROR:
        yield eventstream.model_stream_error(
            "The model's stream broke (emulator fault injection).",
            plan.detail or eventstream.STREAM_BROKEN)
