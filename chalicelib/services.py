"""The container-wide objects requests share, built once by one builder.

A Lambda container serves many requests; the settings, the prediction pipeline (with its
boto3 client and connection pool) and the data capture sink are built on first use and kept.
:class:`Services` is that builder: ``app.py`` holds one (``app.services``), and a test that
needs other parts builds its own and puts it there (``Services(settings, endpoint=...)``):
whatever it is not given, it builds from the settings as the real one does.
"""
from __future__ import annotations

import atexit
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from chalicelib import awsclients
from chalicelib.cache.prediction import PredictionCache
from chalicelib.capture import CLOSE_FLUSH_SECONDS, Capturer
from chalicelib.capture.extension import AfterHandlers
from chalicelib.capture.extension import start as start_extension
from chalicelib.core import aws, environment, lifecycle
from chalicelib.core.clients import LazyClient
from chalicelib.core.config import Settings
from chalicelib.core.config_names import ENDPOINT_NAME, CaptureWriter
from chalicelib.core.errors import JobsDisabledError
from chalicelib.core.observability import logger
from chalicelib.experiments import assign
from chalicelib.experiments.shadows import Shadows
from chalicelib.http.modelcalls import ModelRoute, Target
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.inference.endpoint_config import make_client, policy_from, shadow_endpoint
from chalicelib.inference.pipeline import warm_up_codecs
from chalicelib.inference.predictions import load_labels
from chalicelib.inference.serving import ModelServer, ServingPipeline
from chalicelib.kinds import kind_of
from chalicelib.kinds.base import Parts
from chalicelib.registry import kinds
from chalicelib.registry.kinds import BackendRules, KindRules
from chalicelib.registry.loading import Registered, Registry, load_registry
from chalicelib.registry.specs import ModelSpec

if TYPE_CHECKING:
    from mypy_boto3_sagemaker_runtime import SageMakerRuntimeClient

    from chalicelib.jobs.execution import JobsExecution
    from chalicelib.jobs.service import JobsContext, JobsService
    from chalicelib.jobs.store import JobStore
    from chalicelib.llm.budgets import TokenBudgets
    from chalicelib.llm.completions import LlmService


class Services:
    """Settings, registry, endpoint client, pipelines, capturer and prediction cache: each
    built on first use, once, then kept.

    Every part given as None is built from the settings as the real one is (the settings
    from the environment, the registry from ``chalicelib/models/``, the job store in memory or
    the ``JOBS_TABLE`` table, the job endpoint client with the job's timeouts and budget).

    Args:
        read_settings: how settings are read when not given (``Settings.from_env`` of the
            process's environment, :mod:`chalicelib.core.environment`).
        env: the environment model.json's ``$VARIABLE`` endpoints are read from.
        kinds: the pipeline kinds models may name (:data:`chalicelib.registry.kinds.KINDS`
            when None; a deployment's own kind is its rules added to them).
        job_backends: likewise, :data:`chalicelib.registry.kinds.BACKENDS`.
        budgets: the OpenAI routes' token budgets (None: as the settings say,
            ``TOKEN_BUDGET_*``).
    """

    def __init__(self, settings: Settings | None = None, *,
                 capturer: Capturer | None = None, endpoint: EndpointClient | None = None,
                 registry: Registry | None = None, cache: PredictionCache | None = None,
                 read_settings: Callable[[], Settings] | None = None,
                 env: Mapping[str, str] | None = None, job_store: JobStore | None = None,
                 s3: Any = None, job_endpoint: EndpointClient | None = None,
                 kinds: Sequence[KindRules] = kinds.KINDS,
                 job_backends: Sequence[BackendRules] = kinds.BACKENDS,
                 budgets: TokenBudgets | None = None) -> None:
        self._settings = settings
        self.known = Registered.of(kinds, job_backends)
        self._capturer = capturer
        self._endpoint = endpoint
        self._registry = registry
        self._cache = cache
        self._read_settings = read_settings or (
            lambda: Settings.from_env(environment.variables()))
        self._env = env
        self._endpoint_given = self._endpoint is not None
        self._pipelines: dict[tuple[str | None, ...], ServingPipeline] = {}
        self._routes: dict[str | None, tuple[tuple[int, ...], ModelRoute]] = {}
        self._shadow_pipelines: dict[tuple[str | float | None, ...], ServingPipeline] = {}
        self._shadows: Shadows | None = None
        self._server: ModelServer | None = None
        self._job_store = job_store
        self._s3 = LazyClient(_s3_client, s3)
        self._job_endpoint = job_endpoint
        self._job_pipelines: dict[str, ServingPipeline] = {}
        self._jobs_context: JobsContext | None = None
        self._after_handlers: AfterHandlers | None = None
        self._llm: tuple[tuple[int, ...], LlmService] | None = None
        self._budgets = budgets
        self._lock = threading.RLock()  # one object is built at a time, and only once

    @property
    def settings(self) -> Settings:
        """The settings (a misconfiguration raises ``ConfigurationError`` on every use)."""
        if self._settings is None:
            self._settings = self._read_settings()
        return self._settings

    @property
    def endpoint(self) -> EndpointClient:
        """Every model's endpoint is called through it."""
        with self._lock:
            if self._endpoint is None:
                self._endpoint = build_endpoint(self.settings)
            return self._endpoint

    @property
    def registry(self) -> Registry:
        """Every registered model (``chalicelib/models/``), validated."""
        with self._lock:
            if self._registry is None:
                settings = self.settings
                # the flat settings describe the default model: its "$ENDPOINT_NAME" is theirs
                env = {**(environment.variables() if self._env is None else self._env),
                       ENDPOINT_NAME: settings.endpoint_name}
                self._registry = load_registry(settings, env, labels=load_labels(settings.labels),
                                               known=self.known)
            return self._registry

    @property
    def llm(self) -> LlmService:
        """OpenAI's routes' work, for the registry's llm models: built on first use, and again
        when a part it holds was replaced (a test's registry, settings, cache or capturer), as
        :meth:`route` is."""
        from chalicelib.llm.budgets import TokenBudgets  # deferred: OpenAI's routes only
        from chalicelib.llm.completions import LlmService

        held = self._llm
        if held is not None and held[0] == self._parts():
            return held[1]
        with self._lock:
            settings = self.settings
            service = LlmService(
                self.registry.models, self.endpoint, settings.request_budget_seconds,
                capturer=self.capturer, cache=self.cache, pool=lambda: self.shadows,
                budgets=self._budgets or TokenBudgets.from_settings(settings))
            self._llm = (self._parts(), service)
            return service

    def _parts(self) -> tuple[int, ...]:
        """The parts a route or the llm service holds, by identity (ids cannot be reused while
        they are held)."""
        return (id(self._registry), id(self._settings), id(self._cache), id(self._capturer),
                id(self._shadows))

    def route(self, name: str | None = None) -> ModelRoute:
        """How the model called ``name`` (the default when None) is served
        (:func:`chalicelib.http.modelcalls.serve`): settled on its first request, and again
        when a part it holds was replaced (a test's registry, cache or capturer).

        Raises:
            ModelNotFoundError: no such model.
        """
        # the route holds these very objects (so their ids cannot be reused while it is kept);
        # read inline, not through _parts(): this runs on every model request
        parts = (id(self._registry), id(self._settings), id(self._cache), id(self._capturer),
                 id(self._shadows))
        held = self._routes.get(name)
        if held is not None and held[0] == parts:
            return held[1]
        with self._lock:
            route = self._route(self.registry.get(name))
            self._routes[name] = (self._parts(), route)
            return route

    def _route(self, model: ModelSpec) -> ModelRoute:
        experiment = model.experiment
        settings = self.settings
        arms: dict[str, Target] = {}
        shadows: dict[str, tuple[ModelSpec, tuple[str | None, ...]]] = {}
        if experiment is not None:
            for arm in experiment.arms:
                on_arm = assign.on_target(model, arm)
                arms[arm.name] = Target(on_arm, self.pipeline_for(on_arm))
            shadows = {shadow.name: (assign.on_target(model, shadow), shadow.route())
                       for shadow in experiment.shadows}
        return ModelRoute(
            model=model, kind=kind_of(model),
            reads=model if experiment is None else assign.unrouted(model),
            target=None if experiment is not None else Target(model, self.pipeline_for(model)),
            arms=arms, shadows=shadows, max_body_bytes=settings.max_body_bytes,
            budget_seconds=settings.request_budget_seconds, cache=self.cache,
            capturer=self.capturer, pool=self.shadows if shadows else None,
            shadow_pipeline=self.shadow_pipeline_for,
            sticky_header=experiment.sticky_header if experiment is not None else None)

    def pipeline_for(self, model: ModelSpec) -> ServingPipeline:
        """The pipeline that serves ``model``'s requests (its kind's), built once per model
        and target (an experiment's arms and shadows are the model on other endpoints)."""
        key = _target_key(model)
        with self._lock:
            if key not in self._pipelines:
                self._pipelines[key] = self._pipeline(model)
            return self._pipelines[key]

    def shadow_pipeline_for(self, model: ModelSpec, seconds: float) -> ServingPipeline:
        """A shadow target's pipeline (``model`` on the shadow's endpoint), whose endpoint
        client reads for at most what the shadow's timeout, ``seconds``, leaves after its
        preprocessing, and does not retry (:mod:`chalicelib.inference.endpoint_config`)."""
        key = (*_target_key(model), seconds)
        with self._lock:
            if key not in self._shadow_pipelines:
                endpoint = self._shadow_endpoint(seconds)
                self._shadow_pipelines[key] = kind_of(model).pipeline(
                    model, Parts(endpoint, ModelServer(endpoint)))
            return self._shadow_pipelines[key]

    def _shadow_endpoint(self, seconds: float) -> EndpointClient:
        # an injected client (tests) is shared, with the shadow's policy
        return shadow_endpoint(self.settings, seconds,
                               self.endpoint.client if self._endpoint_given else None)

    @property
    def shadows(self) -> Shadows:
        """The experiments' shadow calls, run after the caller's answer."""
        with self._lock:
            if self._shadows is None:
                if self._after_handlers is None:
                    self._after_handlers = _after_handlers(self._flush_after_response)
                # where the handler itself would wait for them, no shadow call is made
                self._shadows = Shadows(off=self._after_handlers.held_work_waits())
            return self._shadows

    def _flush_after_response(self, timeout: float | None) -> bool:
        """Wait for the shadow calls, then for the capture records (theirs too), within
        ``timeout`` in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        shadows = self._shadows.flush(timeout) if self._shadows is not None else True
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self.capturer.flush(left) and shadows

    def _pipeline(self, model: ModelSpec) -> ServingPipeline:
        return kind_of(model).pipeline(model, Parts(self.endpoint, self.server))

    @property
    def server(self) -> ModelServer:
        """The runner of the non-image pipelines."""
        with self._lock:
            if self._server is None:
                self._server = ModelServer(self.endpoint)
            return self._server

    @property
    def cache(self) -> PredictionCache:
        """The prediction cache as configured (``CACHE_*``); either tier may be off."""
        with self._lock:
            if self._cache is None:
                self._cache = PredictionCache.from_settings(self.settings)
            return self._cache

    @property
    def capturer(self) -> Capturer:
        """Data capture as configured (``CAPTURE_*``; with ``CAPTURE_WRITER=background`` its
        records stored after the response: see :meth:`handler_ended`)."""
        with self._lock:
            if self._capturer is None:
                s = self.settings
                self._capturer = Capturer.from_settings(
                    s.capture_mode, s.capture_destination, s.capture_sampling_percentage,
                    s.capture_original, s.capture_max_bytes, s.capture_cache_hits,
                    background=s.capture_writer == CaptureWriter.BACKGROUND)
            if self._after_handlers is None and self._capturer.writer is not None:
                self._after_handlers = _after_handlers(self._flush_after_response)
            return self._capturer

    def handler_ended(self, context: Any = None) -> None:
        """A handler returned (``app.py``'s middleware, for every event): the capture records
        it handed over are stored after its response (on Lambda, by the internal extension
        before the environment may freeze; without one, now, within the invocation's
        remaining time, read from Lambda's ``context``; elsewhere by the writer's thread).
        """
        after = self._after_handlers
        if after is None or not after.acts:
            return
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        after.handler_ended(remaining() / 1000.0 if callable(remaining) else None)

    def warm_up(self, prime_codecs: bool = True) -> None:
        """Build everything and, with ``prime_codecs``, run the image path once (endpoint
        aside) so OpenCV's lazy set-up is done too.

        Called at import on Lambda (the init phase), so no request pays for it. Priming the
        codecs is only worth it where init is off every request's path (SnapStart's snapshot,
        provisioned concurrency): on an on-demand cold start it would add its cost to the
        first request's wait even when that request needs less (a JPEG passed through).
        """
        _ = self.capturer, self.cache
        for model in self.registry.models.values():  # a broken handler file fails init
            self.pipeline_for(model)
            kind_of(model).load(model, self.server)
            if model.experiment is not None and model.experiment.shadows:
                # its flush after the response is set up during init; a shadow's own pipeline
                # and client are built on the pool's thread when first needed (never on a
                # caller's path, and not at all where shadows are off: under SnapStart)
                _ = self.shadows
        for name in (None, *self.registry.models):  # each model's route, the default's too
            self.route(name)
        if prime_codecs:
            warm_up_codecs(self.settings)

    def initialise(self) -> None:
        """Lambda's init phase: :meth:`warm_up` (the codecs primed unless on demand), its time
        logged."""
        init_type = lifecycle.init_type()
        init_ms = lifecycle.timed(lambda: self.warm_up(prime_codecs=init_type != "on-demand"))
        logger.info("initialised", extra={"init_type": init_type,
                                          "warm_up_ms": round(init_ms, 1)})

    def connection_holders(self) -> list[lifecycle.Closable]:
        """The built objects that pool connections (closed around a SnapStart snapshot)."""
        # a table's store pools connections (the memory store has nothing to close)
        store = cast("lifecycle.Closable", self._job_store) \
            if hasattr(self._job_store, "close") else None
        return [holder for holder in (self._endpoint, self._capturer, self._cache,
                                      self._job_endpoint, store, self._s3)
                if holder is not None]

    # --- jobs: built on first use; the request path's cold start loads none of it ---------

    @property
    def job_store(self) -> JobStore:
        """The job records: the ``JOBS_TABLE`` table, or in memory (one process)."""
        # deferred, as every part of jobs: the request path's cold start loads none of it
        from chalicelib.jobs.store import MemoryJobStore
        from chalicelib.jobs.table import TableJobStore

        with self._lock:
            if self._job_store is None:
                table = self.settings.jobs_table
                self._job_store = TableJobStore(table) if table else MemoryJobStore()
            return self._job_store

    @property
    def job_endpoint(self) -> EndpointClient:
        """The endpoint client of jobs: SageMaker's own time limit per call, retries until the
        job's deadline, and no second call once an answer arrived
        (:mod:`chalicelib.jobs.invoking`)."""
        from chalicelib.jobs.invoking import WholeAnswers, job_retry_policy

        with self._lock:
            if self._job_endpoint is None:
                settings = self.settings
                client = make_client(settings, read_timeout=settings.job_read_timeout)
                self._job_endpoint = EndpointClient(
                    cast("SageMakerRuntimeClient", WholeAnswers(client)),
                    job_retry_policy(settings))
            return self._job_endpoint

    def job_pipeline_for(self, model: ModelSpec) -> ServingPipeline:
        """A model's pipeline inside a job: the job's image pixel cap, its endpoint client,
        and the job's endpoint (model.json's ``jobs.endpoint``, by default the model's own:
        a real-time job calls it, an asynchronous model's answers name it)."""
        with self._lock:
            if model.name not in self._job_pipelines:
                self._job_pipelines[model.name] = self._job_pipeline(model)
            return self._job_pipelines[model.name]

    def _job_pipeline(self, model: ModelSpec) -> ServingPipeline:
        model = dataclasses.replace(model, endpoint=model.jobs_endpoint)
        parts = Parts(self.job_endpoint, ModelServer(self.job_endpoint),
                      max_image_pixels=self.settings.job_max_image_pixels)
        return kind_of(model).pipeline(model, parts)

    @property
    def jobs_context(self) -> JobsContext:
        """What the jobs service and its runner work with; ``JobsDisabledError`` without
        ``JOBS_BUCKET``."""
        # Deferred on purpose: only the job routes and the job functions load the jobs room.
        from chalicelib.jobs.lifetime import RunnerLifetime
        from chalicelib.jobs.service import JobsContext

        settings = self.settings
        if not settings.jobs_enabled:
            raise JobsDisabledError("This stage serves no uploads or jobs (JOBS_BUCKET is not "
                                    "set).")
        with self._lock:
            if self._jobs_context is None:
                self._jobs_context = JobsContext(
                    settings=settings, registry=self.registry, store=self.job_store,
                    s3=self._s3.get(), endpoint=self.job_endpoint,
                    pipeline_for=self.job_pipeline_for, backends=self.known.backends,
                    capturer=self.capturer, lifetime=RunnerLifetime.from_env(
                        environment.variables() if self._env is None else self._env))
            return self._jobs_context

    @property
    def jobs(self) -> JobsService:
        """The routes' side of jobs (see :attr:`jobs_context`)."""
        from chalicelib.jobs.service import JobsService

        return JobsService(self.jobs_context)

    @property
    def job_execution(self) -> JobsExecution:
        """The event functions' side of jobs (see :attr:`jobs_context`)."""
        from chalicelib.jobs.execution import JobsExecution

        return JobsExecution(self.jobs_context)


def _after_handlers(flush: Callable[[float | None], bool]) -> AfterHandlers:
    """What happens to the work held after a response (shadow calls, capture records) as
    handlers end: on Lambda the internal extension, registered now (during init);
    everywhere, finished as the process exits (``chalice local`` stopped by Ctrl-C or
    SIGTERM)."""
    on_lambda = lifecycle.on_lambda()
    extension = start_extension(flush) if on_lambda else None
    atexit.register(flush, CLOSE_FLUSH_SECONDS)
    return AfterHandlers(flush, extension, on_lambda)


def _target_key(model: ModelSpec) -> tuple[str | None, ...]:
    return (model.name, model.endpoint, model.variant, model.target_model,
            model.inference_component)


def _s3_client() -> Any:
    # boto3 reads AWS_ENDPOINT_URL_S3 itself (the local stack's S3); presigned URLs need
    # Signature Version 4 (see aws.JOBS_S3)
    return awsclients.build("s3", aws.JOBS_S3)


def build_endpoint(settings: Settings) -> EndpointClient:
    """The endpoint client the settings describe (timeouts, retries, pool size)."""
    return EndpointClient(make_client(settings), policy_from(settings))
