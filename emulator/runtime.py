"""The emulated SageMaker runtime: validation, endpoints, variant routing and faults.

HTTP-free: the server turns requests into :class:`InvokeRequest` and answers what
:meth:`Runtime.invoke` returns or raises.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Generic, TypeVar

from emulator import errors, faults
from emulator.config import (
    COMPONENT_PATTERN,
    NAME_MAX,
    NAME_PATTERN,
    EmulatorConfig,
    EndpointConfig,
    VariantConfig,
)
from emulator.container import Container, ContainerReply, ContainerStream, StreamingContainer

HEADER_MAX = 1024
INFERENCE_ID_MAX = 64
ORIGINAL_MESSAGE_MAX = 1024
NAME_CONSTRAINT = "Member must satisfy regular expression pattern: ^[a-zA-Z0-9](-*[a-zA-Z0-9])*"
COMPONENT_CONSTRAINT = (
    "Member must satisfy regular expression pattern: ^[a-zA-Z0-9]([\\-a-zA-Z0-9]*[a-zA-Z0-9])?$"
)
# SageMaker's answer to a call without InferenceComponentName to an endpoint that hosts
# inference components (as clients of such endpoints have reported it).
COMPONENT_REQUIRED = (
    "Inference Component Name header is required for endpoints to which you plan to deploy "
    "inference components. Please include Inference Component Name header or consider using "
    "SageMaker models."
)

ASYNC_ONLY = (
    "Endpoint {endpoint} is an asynchronous inference endpoint; invoke it with "
    "InvokeEndpointAsync."
)
"""The emulator's refusal of InvokeEndpoint on an asynchronous endpoint (SageMaker's exact
wording is not documented; the error code, ValidationError, is what it answers)."""


@dataclass(frozen=True)
class InvokeRequest:
    """One InvokeEndpoint call.

    Attributes:
        body_length: the body's length as sent; the server leaves ``body`` empty when it
            is over :data:`errors.MAX_BODY_BYTES`.
    """

    endpoint_name: str
    body: bytes = b""
    body_length: int = 0
    content_type: str | None = None
    accept: str | None = None
    custom_attributes: str | None = None
    target_variant: str | None = None
    target_model: str | None = None
    inference_id: str | None = None
    inference_component: str | None = None


@dataclass(frozen=True)
class InvokeResult:
    """A successful call: the container's answer and the variant that gave it."""

    reply: ContainerReply
    variant: str
    custom_attributes: str | None


@dataclass(frozen=True)
class StreamResult:
    """A started response stream: the variant, the container's content type, and the events
    (made as they are read); ``close`` stops the container's answer (always call it)."""

    variant: str
    custom_attributes: str | None
    content_type: str
    events: Iterator[bytes]
    close: Callable[[], None]


class WholeAnswer:
    """A container's whole answer, as a stream of one part."""

    def __init__(self, reply: ContainerReply) -> None:
        self.reply = reply
        self.content_type = reply.content_type

    def parts(self) -> Iterator[bytes]:
        """The body, in one piece."""
        return iter([self.reply.body])

    def close(self) -> None:
        """Nothing runs: nothing to stop."""


def check_request(request: InvokeRequest, body_limit: int = errors.MAX_BODY_BYTES) -> None:
    """Validates a request's members as the service does before routing it.

    Args:
        request: the call.
        body_limit: the largest body (InvokeEndpoint's 6 MB; an asynchronous input's cap).

    Raises:
        ValidationError: naming every member that fails its constraint.
    """
    checks = (
        _name_violations("endpointName", request.endpoint_name),
        _name_violations("targetVariant", request.target_variant),
        _length_violation("body", None, request.body_length, body_limit),
        _length_violation("contentType", request.content_type, None, HEADER_MAX),
        _length_violation("accept", request.accept, None, HEADER_MAX),
        _length_violation(
            "customAttributes", None, len(request.custom_attributes or ""), HEADER_MAX
        ),
        _length_violation("inferenceId", request.inference_id, None, INFERENCE_ID_MAX),
        _component_violations(request.inference_component),
    )
    violations = [item for group in checks for item in group]
    if violations:
        raise errors.validation_error(violations)


def _name_violations(field: str, value: str | None) -> list[str]:
    if value is None:
        return []
    found = _length_violation(field, value, None, NAME_MAX)
    if not NAME_PATTERN.fullmatch(value):
        found.append(errors.violation(field, value, NAME_CONSTRAINT))
    return found


def _component_violations(value: str | None) -> list[str]:
    if value is None:
        return []
    found = _length_violation("inferenceComponentName", value, None, NAME_MAX)
    if not COMPONENT_PATTERN.fullmatch(value):
        found.append(errors.violation("inferenceComponentName", value, COMPONENT_CONSTRAINT))
    return found


def route(
    endpoint: EndpointConfig, request: InvokeRequest, rng: random.Random
) -> VariantConfig:
    """Picks the variant that answers a request: by inference component on an endpoint that
    hosts them (which then requires one), else by :func:`choose_variant`.

    Raises:
        ValidationError: no component named where one is required, an unknown component, or
            a targeted variant that does not exist.
    """
    component = request.inference_component
    if not endpoint.components:
        if component is not None:
            raise errors.ValidationError(
                f"Inference Component {component} not found for endpoint {endpoint.name}."
            )
        return choose_variant(endpoint, request.target_variant, rng)
    if component is None:
        raise errors.ValidationError(COMPONENT_REQUIRED)
    variant = endpoint.components.get(component)
    if variant is None:
        raise errors.ValidationError(
            f"Inference Component {component} not found for endpoint {endpoint.name}."
        )
    if request.target_variant not in (None, variant.name):
        raise errors.ValidationError(
            f"Variant {request.target_variant} not found for endpoint {endpoint.name}."
        )
    return variant


def _length_violation(field: str, value: str | None, length: int | None, maximum: int) -> list[str]:
    size = len(value or "") if length is None else length
    if size <= maximum:
        return []
    constraint = f"Member must have length less than or equal to {maximum}"
    return [errors.violation(field, value, constraint)]


def choose_variant(
    endpoint: EndpointConfig, target: str | None, rng: random.Random
) -> VariantConfig:
    """Picks the variant of a request: the targeted one, else by weighted random draw.

    Args:
        endpoint: the endpoint called.
        target: the ``X-Amzn-SageMaker-Target-Variant`` header, or None.
        rng: the random source.

    Returns:
        The variant that answers.

    Raises:
        ValidationError: the targeted variant does not exist.
    """
    if target is not None:
        variant = endpoint.variant(target)
        if variant is None:
            raise errors.ValidationError(
                f"Variant {target} not found for endpoint {endpoint.name}."
            )
        return variant
    point = rng.random() * sum(variant.weight for variant in endpoint.variants)
    for variant in endpoint.variants:
        if point < variant.weight:
            return variant
        point -= variant.weight
    return next(variant for variant in reversed(endpoint.variants) if variant.weight > 0)


T = TypeVar("T")


class BackgroundCall(Generic[T]):
    """A call run in a daemon thread, so its caller can stop waiting for it (a timeout)."""

    def __init__(self, run: Callable[[], T], name: str) -> None:
        """Starts ``run`` in a thread called ``name``; ``done`` is set once it returned or
        raised."""
        self.done = threading.Event()
        self._outcome: list[T | BaseException] = []
        threading.Thread(target=self._target, args=(run,), daemon=True, name=name).start()

    def _target(self, run: Callable[[], T]) -> None:
        try:
            self._outcome.append(run())
        except BaseException as error:  # handed to the waiting thread
            self._outcome.append(error)
        finally:
            self.done.set()

    def outcome(self) -> T | BaseException:
        """What the call returned, or the exception it raised (once ``done`` is set)."""
        return self._outcome[0]


def _container_call(container: Container, request: InvokeRequest,
                    cancel: threading.Event) -> Callable[[], ContainerReply]:
    """The container's whole answer to ``request``: a generating container's stopped once
    ``cancel`` is set."""
    if isinstance(container, StreamingContainer):
        return partial(container.invoke, request.body, request.content_type, request.accept,
                       cancel)
    return partial(container.invoke, request.body, request.content_type, request.accept)


class Runtime:
    """Routes invocations to containers, applying the configured faults."""

    def __init__(
        self,
        config: EmulatorConfig,
        containers: Mapping[str, Container],
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        """Builds the runtime.

        Args:
            config: endpoints, variants and faults.
            containers: one container per key of ``config.models``.
            rng: the random source for variant weights and faults (default: seeded from
                ``config.seed``).
            sleep: waits a number of seconds (injected for tests).
            wait: waits for a real-time call's end up to the invocation timeout; False when
                it timed out (injected for tests).
        """
        missing = sorted(set(config.models) - set(containers))
        if missing:
            raise ValueError(f"no container for models {missing}")
        self.config = config
        self.containers = containers
        self.rng = rng if rng is not None else random.Random(config.seed)
        self.sleep = sleep
        self.wait = wait

    def invoke(
        self, request: InvokeRequest, asynchronous: bool = False, body_limit: int | None = None
    ) -> InvokeResult:
        """Answers one InvokeEndpoint call (or runs one queued asynchronous invocation).

        Args:
            request: the call.
            asynchronous: True when the asynchronous worker runs it (the endpoint must then
                be asynchronous; a real-time call to an asynchronous endpoint is refused).
            body_limit: the largest body (default: InvokeEndpoint's 6 MB).

        Returns:
            The container's 2xx answer and the variant name.

        Raises:
            EmulatorError: ValidationError, ModelError or an injected service fault.
        """
        check_request(request, errors.MAX_BODY_BYTES if body_limit is None else body_limit)
        endpoint, variant, plan = self._prepare(request, asynchronous)
        cancel = threading.Event()
        call = _container_call(self.containers[variant.model], request, cancel)
        run = partial(faults.run_container, plan, call, self.sleep)
        reply = run() if asynchronous else self._within_timeout(run, endpoint.name, cancel)
        if not 200 <= reply.status < 300:
            raise self._model_error(reply, endpoint.name)
        return InvokeResult(reply, variant.name, request.custom_attributes)

    def invoke_stream(self, request: InvokeRequest) -> StreamResult:
        """Answers one InvokeEndpointWithResponseStream call: checked, routed and started
        here (every refusal is an error answer, before any byte of the stream); the events
        are made as the caller reads them.

        A container that cannot stream answers whole, sent as one PayloadPart (as SageMaker
        relays such a container's answer).

        Raises:
            EmulatorError: ValidationError, ModelError, ThrottlingException (the model's
                concurrent generations are all taken) or an injected service fault.
        """
        check_request(request)
        endpoint, variant, plan = self._prepare(request, asynchronous=False)
        container = self.containers[variant.model]
        opened: ContainerStream | ContainerReply
        if isinstance(container, StreamingContainer) and plan.error != faults.MODEL_ERROR:
            opened = container.stream(request.body, request.content_type, request.accept)
        else:
            cancel = threading.Event()
            run = partial(faults.run_container, plan,
                          _container_call(container, request, cancel), self.sleep)
            opened = self._within_timeout(run, endpoint.name, cancel)
            plan = replace(plan, latency_ms=0.0)  # spent already
        if isinstance(opened, ContainerReply):
            if not 200 <= opened.status < 300:
                raise self._model_error(opened, endpoint.name)
            opened = WholeAnswer(opened)
        events = faults.stream_events(plan, opened.parts(), self.sleep,
                                      self.config.invocation_timeout_seconds)  # fmt: skip
        return StreamResult(variant.name, request.custom_attributes, opened.content_type,
                            events, opened.close)  # fmt: skip

    def generations(self) -> dict[str, dict[str, int]]:
        """Each streaming model's counts of its generations, by model name."""
        return {name: container.generations() for name, container in self.containers.items()
                if isinstance(container, StreamingContainer)}  # fmt: skip

    def _prepare(self, request: InvokeRequest, asynchronous: bool
                 ) -> tuple[EndpointConfig, VariantConfig, faults.FaultPlan]:
        """The endpoint and variant that answer a checked request, and its faults (a service
        fault is raised here)."""
        endpoint = self._endpoint(request.endpoint_name)
        if endpoint.asynchronous is not None and not asynchronous:
            raise errors.ValidationError(ASYNC_ONLY.format(endpoint=endpoint.name))
        if request.target_model is not None:
            raise errors.ValidationError(
                f"Endpoint {endpoint.name} is not a multi-model endpoint and does not "
                "support target model header."
            )
        variant = route(endpoint, request, self.rng)
        plan = self._plan(variant, request.custom_attributes)
        faults.raise_service_fault(plan)
        return endpoint, variant, plan

    def _within_timeout(self, run: Callable[[], ContainerReply], endpoint: str,
                        cancel: threading.Event) -> ContainerReply:
        """Runs a real-time call for at most ``invocation_timeout_seconds`` (SageMaker's 60 s):
        past it, SageMaker's ModelError, and ``cancel`` set: a generation stops before its
        next token and frees its place (another container's abandoned call ends in its
        thread).

        Raises:
            ModelError: the call did not end in time; or what the call raised.
        """
        running = BackgroundCall(run, f"invoke-{endpoint}")
        if not self.wait(running.done, self.config.invocation_timeout_seconds):
            cancel.set()
            raise errors.invocation_timeout(endpoint, self.config.account_id, self.config.region)
        result = running.outcome()
        if isinstance(result, BaseException):
            raise result
        return result

    def invoke_container(
        self, body: bytes, content_type: str | None, accept: str | None, attributes: str | None
    ) -> ContainerReply:
        """Answers ``POST /invocations`` as the default endpoint's first variant's container.

        Runtime-level faults (ServiceUnavailable ...) do not exist at this level; latency,
        ModelError and malformed answers do.

        Returns:
            The container's answer, whatever its status.
        """
        variant = self.config.endpoints[self.config.default_endpoint].variants[0]
        try:
            plan = self._plan(variant, attributes)
        except errors.ValidationError as error:
            return ContainerReply(400, error.message.encode(), "text/plain; charset=utf-8")
        if plan.error == faults.RESET:
            raise faults.ResetConnection()
        if plan.error in faults.SERVICE_FAULTS:
            plan = faults.FaultPlan(latency_ms=plan.latency_ms)
        call = partial(self.containers[variant.model].invoke, body, content_type, accept)
        return faults.run_container(plan, call, self.sleep)

    def endpoint(self, name: str) -> EndpointConfig:
        """Returns the endpoint called ``name``.

        Raises:
            ValidationError: there is none (the service's "not found" message).
        """
        return self._endpoint(name)

    def _endpoint(self, name: str) -> EndpointConfig:
        endpoint = self.config.endpoints.get(name)
        if endpoint is None:
            raise errors.ValidationError(
                f"Endpoint {name} of account {self.config.account_id} not found."
            )
        return endpoint

    def _plan(self, variant: VariantConfig, attributes: str | None) -> faults.FaultPlan:
        request = None
        if self.config.allow_fault_header:
            request = faults.parse_fault_request(attributes)
        return faults.plan_faults(variant.faults, self.rng, request)

    def _model_error(self, reply: ContainerReply, endpoint: str) -> errors.ModelError:
        message = reply.body.decode("utf-8", errors="replace")[:ORIGINAL_MESSAGE_MAX]
        return errors.model_error(
            reply.status, message, endpoint, self.config.account_id, self.config.region
        )
