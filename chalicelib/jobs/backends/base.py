"""What a job backend is: :class:`JobBackend`, and :class:`JobSteps`, the steps of a job every
backend is made of (:class:`~chalicelib.jobs.execution.JobsExecution` has them)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, cast

from chalicelib.calls import Answer, Call, ModelRequest, Served
from chalicelib.core.errors import ConfigurationError, SagegateError
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.serving import ServingPipeline
from chalicelib.jobs.lifetime import RemainingMillis, RunnerLifetime
from chalicelib.jobs.records import Job
from chalicelib.registry.kinds import BackendRules, implementation
from chalicelib.registry.specs import ModelSpec


@dataclasses.dataclass(frozen=True)
class Run:
    """One delivery of a job's ticket to a runner.

    Attributes:
        deadline: when the job's work must end (``time.monotonic()``).
        lease_until: until when the runner's claim holds the job (epoch seconds).
    """

    job: Job
    model: ModelSpec
    runner_id: str
    deadline: float
    lease_until: float


class JobSteps(Protocol):
    """The steps a backend runs a job with (reading S3, the model's pipeline, the store)."""

    @property
    def store(self) -> Any:
        ...

    @property
    def endpoint(self) -> EndpointClient:
        """The jobs' endpoint client (one retry rule for every backend)."""
        ...

    def model(self, job: Job) -> ModelSpec:
        """The job's model (ModelNotFoundError when no longer registered)."""
        ...

    def request(self, job: Job, model: ModelSpec) -> ModelRequest:
        ...

    def pipeline(self, model: ModelSpec) -> ServingPipeline:
        """The model's pipeline with the job's endpoint and limits."""
        ...

    def capture(self, served: Served, job: Job, request: ModelRequest,
                deadline: float | None = None) -> None:
        ...

    def put_result(self, job: Job, answer: Answer) -> str:
        ...

    def fail(self, job: Job, error: SagegateError) -> Job:
        ...

    def endpoint_input(self, job: Job, request: ModelRequest, call: Call) -> str:
        ...

    def output(self, location: str) -> tuple[bytes, str]:
        ...

    def sent(self, job: Job) -> bytes:
        ...


class JobBackend(Protocol):
    """Where and how a model's jobs run."""

    def batch_limits(self, model: ModelSpec) -> tuple[int, int]:
        """The rows and values one job input may carry."""
        ...

    def lease_seconds(self, model: ModelSpec, lifetime: RunnerLifetime,
                      remaining_ms: RemainingMillis | None) -> float:
        """How long from its claim the job's holder may still move it: past it (and Lambda's
        retry wait), nothing will, and the job is lost."""
        ...

    def start(self, steps: JobSteps, run: Run) -> Job:
        """Run the job a ticket names, or hand it to what runs it; safe to run again."""
        ...

    def complete(self, steps: JobSteps, message: Any) -> Job | None:
        """Finish the job a notification is about; None when it is not this backend's about
        a job of this stage. Safe to run again."""
        ...


def backend_of(model: ModelSpec, backends: Mapping[str, BackendRules]) -> JobBackend:
    """The backend that runs ``model``'s jobs (its module imported the first time).

    Raises:
        ConfigurationError: the model names a backend not registered here.
    """
    rules = backends.get(model.jobs.backend)
    if rules is None:
        raise ConfigurationError(f"models/{model.name}: job backend {model.jobs.backend!r} is "
                                 "not registered")
    return cast(JobBackend, implementation(rules.implementation, "BACKEND"))


def implementations(backends: Mapping[str, BackendRules]) -> list[JobBackend]:
    return [cast(JobBackend, implementation(rules.implementation, "BACKEND"))
            for rules in backends.values()]
