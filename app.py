"""sagegate: HTTP routes only. Each view reads the request, calls chalicelib, renders."""
from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from chalice import Chalice, CognitoUserPoolAuthorizer, CORSConfig, IAMAuthorizer, Response
from chalice.app import Request

from chalicelib import awsclients
from chalicelib.cache.control import request_cache_control
from chalicelib.cache.prediction import CacheUse
from chalicelib.calls import Served
from chalicelib.core import aws, lifecycle, media
from chalicelib.core.access import Access, AuthMode
from chalicelib.core.errors import (
    ConfigurationError,
    EndpointTimeoutError,
    InvalidUploadError,
    SagegateError,
)
from chalicelib.core.jsonbody import load_json
from chalicelib.core.media import BINARY_TYPES
from chalicelib.core.observability import RequestLog, logger
from chalicelib.http import catalog, correlation, static
from chalicelib.images.resizer import resize_image
from chalicelib.inference.pipeline import StageTimer, limits_from
from chalicelib.inference.predictions import load_labels
from chalicelib.kinds import kind_of
from chalicelib.reading import jobrequest, options
from chalicelib.reading.resize import read_resize
from chalicelib.registry.specs import ModelSpec
from chalicelib.services import Services

# Logs are Powertools' JSON lines (chalicelib.core.observability), Chalice's own included.
app = Chalice(app_name="sagegate", configure_logs=False)
app.debug = False  # a traceback must never reach a client, in any stage
# Chalice's debug setter turns its logger, which is Powertools' (both are named "sagegate"), to
# ERROR; give it back the level Powertools chose (POWERTOOLS_LOG_LEVEL / LOG_LEVEL, else INFO).
logger.setLevel(None)
for _media_type in BINARY_TYPES:
    if _media_type not in app.api.binary_types:
        app.api.binary_types.append(_media_type)

_ANY_CONTENT_TYPE = ["*/*"]  # sagegate checks the type itself, answering its own 415
# The production variant that answered a model request (SageMaker's own response header name).
VARIANT_HEADER = "X-Amzn-Invoked-Production-Variant"
CACHE_HEADER = "X-Cache"  # hit | miss | bypass: whether the prediction cache answered


def _cors(access: Access) -> CORSConfig | bool:
    """The CORS rules every route answers with (False: no CORS headers at all)."""
    if not access.cors_origin:
        return False
    return CORSConfig(
        allow_origin=access.cors_origin,
        allow_headers=["X-Request-Id", "X-Correlation-Id", "X-Target-Variant",
                       "X-Target-Model", "X-Target-Inference-Component", "X-Custom-Attributes",
                       "Cache-Control"],
        expose_headers=["X-Request-Id", "X-Correlation-Id", "Server-Timing", "Retry-After",
                        "X-Custom-Attributes", VARIANT_HEADER, CACHE_HEADER],
        max_age=600)


def _auth(access: Access) -> dict[str, Any]:
    """The route arguments that make API Gateway authenticate a route (all but /health)."""
    if access.auth == AuthMode.API_KEY:
        return {"api_key_required": True}
    if access.auth == AuthMode.IAM:
        return {"authorizer": IAMAuthorizer()}
    if access.auth == AuthMode.COGNITO:
        return {"authorizer": CognitoUserPoolAuthorizer(
            "SagegateUserPool", provider_arns=list(access.user_pool_arns))}
    return {}


# Chalice fixes auth and CORS per route at import; `chalice deploy`/`package` import this file
# with the stage's environment variables set, so SAGEGATE_AUTH etc. come from the stage.
_ACCESS = Access.from_env(deployed=lifecycle.on_lambda())
app.api.cors = _cors(_ACCESS)
_PROTECTED = _auth(_ACCESS)

# The settings, predictor and capturer every request shares, built on first use. Tests that
# need other parts put their own Services here (see chalicelib.services).
services = Services()
# Chalice keeps the request on the app object, shared by every thread. Lambda serves one
# request per container, but `chalice local` is threaded: two concurrent requests would read
# each other's bodies. The middleware pins each thread's own request here instead.
_SERVING = threading.local()
SNAPSTART_HOOKS = lifecycle.Hooks(lambda: services.connection_holders())
lifecycle.register(SNAPSTART_HOOKS)


def current_request() -> Request:
    """The request this thread is serving (pinned by :func:`correlate`, else Chalice's)."""
    request: Request | None = getattr(_SERVING, "request", None) or app.current_request
    assert request is not None, "only called while serving a request"
    return request


def request_log() -> RequestLog:
    """The log record of the request this thread is serving."""
    log: RequestLog | None = getattr(_SERVING, "log", None)
    assert log is not None, "only called while serving a request"
    return log


def request_id() -> str:
    """The request id of record of the request this thread serves
    (:func:`chalicelib.http.correlation.request_id`)."""
    return correlation.request_id(current_request().context)


def error_response(error: SagegateError) -> Response:
    """Render any sagegate error as ``{"Code", "Message", "request_id", ...details}``."""
    if isinstance(error, ConfigurationError):
        logger.error("configuration error: %s", error.message)
        body: dict[str, Any] = {"Code": error.CODE, "Message": "The service is misconfigured."}
    else:
        body = {"Code": error.CODE, "Message": error.message, **error.details}
    body["request_id"] = request_id()
    return Response(body=body, status_code=error.STATUS_CODE, headers=dict(error.headers))


def renders_errors(view: Callable[..., Response]) -> Callable[..., Response]:
    """Turn sagegate's errors raised by a view into their HTTP answers."""
    @functools.wraps(view)
    def wrapper(**params: str) -> Response:  # (a route's path parameters, by name)
        try:
            return view(**params)
        except SagegateError as error:
            return error_response(error)
    return wrapper


@app.middleware("http")
def correlate(event: Any, get_response: Callable[[Any], Response]) -> Response:
    """Pin the thread's request; tag every answer, Chalice's own errors too, with its id;
    write the request's log line and metrics."""
    started = time.perf_counter()
    _SERVING.request = event
    try:
        rid, client_id = request_id(), correlation.correlation_id(event.headers)
        _SERVING.log = log = RequestLog(rid, event.method,
                                        event.context.get("resourcePath") or event.path,
                                        correlation_id=client_id)
        response = get_response(event)
    finally:
        _SERVING.request = _SERVING.log = None
    response.headers["X-Request-Id"] = rid
    if client_id:
        response.headers["X-Correlation-Id"] = client_id
    if response.status_code >= 400 and isinstance(response.body, dict):
        response.body.setdefault("request_id", rid)
    log.finish(response.status_code, response.body, (time.perf_counter() - started) * 1000.0)
    return response


def _http_request() -> options.HttpRequest:
    """The request this thread serves, as :mod:`chalicelib.http.options` reads it."""
    request = current_request()
    raw = request.raw_body or b""
    request_log().body_bytes = len(raw)
    return options.HttpRequest(body=raw if isinstance(raw, bytes) else raw.encode("utf-8"),
                               content_type=request.headers.get("content-type"),
                               headers=request.headers, query=request.query_params or {})


def _server_timing(durations: dict[str, float]) -> str:
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in durations.items())


@app.route("/predict", methods=["POST"], content_types=_ANY_CONTENT_TYPE, **_PROTECTED)
@renders_errors
def predict() -> Response:
    """Run the default model (``DEFAULT_MODEL``): for the image classifier, one image as JSON
    (base64 or data URL) or a binary body."""
    return _predict(services.registry.get())


@app.route("/models", methods=["GET"], **_PROTECTED)
@renders_errors
def list_models() -> Response:
    """Every registered model: pipeline, accepted content types, signature."""
    registry, jobs = services.registry, bool(services.settings.jobs_bucket)
    return Response(body={"default": registry.default,
                          "models": [catalog.describe(registry.models[name], jobs=jobs)
                                     for name in registry.names()]})


@app.route("/models/{name}", methods=["GET"], **_PROTECTED)
@renders_errors
def describe_model(name: str) -> Response:
    """One model, with an example request body a client can copy."""
    return Response(body=catalog.describe(services.registry.get(name), example=True,
                                          jobs=bool(services.settings.jobs_bucket)))


@app.route("/models/{name}/predict", methods=["POST"], content_types=_ANY_CONTENT_TYPE,
           **_PROTECTED)
@renders_errors
def predict_model(name: str) -> Response:
    """Run one registered model on the request's body."""
    return _predict(services.registry.get(name))


def _predict(model: ModelSpec) -> Response:
    """The one serve path, whatever the model's pipeline: read the request once, serve it,
    capture it, render it."""
    # the request's time budget runs from here: preprocessing, the endpoint and the capture
    settings = services.settings
    deadline = time.monotonic() + settings.request_budget_seconds
    timer = StageTimer()
    log = request_log()
    log.model = model.name
    log.stages_ms = timer.durations  # the same dict: stages that ran are logged even on error
    cache = _cache_use(model)
    try:
        with timer.stage("parse"):
            request = kind_of(model).read(_http_request(), model,
                                          max_body_bytes=settings.max_body_bytes)
        try:
            served = services.pipeline_for(model).serve(request, request_id(), timer, deadline,
                                                        cache=cache)
        except EndpointTimeoutError as error:
            raise EndpointTimeoutError(
                f"{error.message} If the model needs longer, run it as a job: POST "
                f"/models/{model.name}/jobs.", details=error.details) from None
        _note_served(served)
        if served.invoked or served.cached:  # a cache hit is traffic too (CAPTURE_CACHE_HITS)
            with timer.stage("capture"):
                log.capture = services.capturer.capture_served(
                    served, request_id(), request.options.custom_attributes, deadline)
    finally:
        _note_cache(cache, timer)  # an error answer's log line says it too
    return _model_answer(served, timer, cache)


def _cache_use(model: ModelSpec) -> CacheUse:
    """This request's use of the prediction cache: the client's ``Cache-Control`` and
    ``Pragma``, every line of them (:class:`chalicelib.cache.control.CacheControl`), unless
    the model is never cached."""
    request = current_request()
    control = request_cache_control(
        request.headers, request.to_original_event().get("multiValueHeaders"))
    return services.cache.request(control, enabled=model.cache, scope={"model": model.name})


def _note_cache(cache: CacheUse, timer: StageTimer) -> None:
    """The cache's outcome in the log line and, as the ``cache`` stage, Server-Timing."""
    log = request_log()
    log.cache, log.cache_tier = cache.status, cache.tier
    log.cache_errors = cache.errors or None
    log.cache_skipped_too_large = cache.skipped_too_large or None
    if cache.active:
        timer.durations["cache"] = cache.lookup_ms


def _note_served(served: Served) -> None:
    """The endpoint exchange (and an image pipeline's sizes) in the log line."""
    log = request_log()
    log.endpoint, log.variant, log.attempts = served.endpoint, served.variant, served.attempts
    if served.image_in is not None:
        log.image_in = served.image_in
    if served.image_out is not None:
        log.image_out = served.image_out


def _model_answer(served: Served, timer: StageTimer, cache: CacheUse) -> Response:
    headers: dict[str, str | list[str]] = {"Server-Timing": _server_timing(timer.durations),
                                           CACHE_HEADER: cache.status}
    if served.custom_attributes:
        headers["X-Custom-Attributes"] = served.custom_attributes
    headers["Content-Type"] = served.answer.content_type
    if served.variant and served.variant_header:
        headers[VARIANT_HEADER] = served.variant
    body: str | bytes = served.answer.body
    if not media.is_binary(served.answer.content_type):
        body = served.answer.body.decode("utf-8", errors="replace")
    return Response(body=body, headers=headers)


# --- jobs: uploads through S3, jobs on a real-time or an asynchronous endpoint -------------

JOB_LOCATION = "/jobs/{job_id}"  # relative to the API's stage, as the web page's URLs are


@app.route("/uploads", methods=["POST"], content_types=_ANY_CONTENT_TYPE, **_PROTECTED)
@renders_errors
def create_upload() -> Response:
    """A presigned S3 POST for one large input of a model: ``{"model", "content_type"}``."""
    jobs = services.jobs  # jobs off: 501, whatever the body
    asked = load_json(_http_request().body)
    if not isinstance(asked, dict) or set(asked) != {"model", "content_type"} \
            or not isinstance(asked["model"], str):
        raise InvalidUploadError('Send {"model": NAME, "content_type": TYPE}.')
    request_log().model = asked["model"][:64]
    return Response(body=jobs.presign(asked["model"], asked["content_type"], _caller()).view())


@app.route("/models/{name}/jobs", methods=["POST"], content_types=_ANY_CONTENT_TYPE,
           **_PROTECTED)
@renders_errors
def create_job(name: str) -> Response:
    """Run a model on an upload (``{"upload_id": ...}``) or a small inline body, as a job."""
    jobs = services.jobs
    model = services.registry.get(name)
    http = _http_request()
    request_log().model = model.name
    settings = services.settings
    queued = jobrequest.read_job(http, max_body_bytes=settings.max_body_bytes)
    caller = _caller()
    if queued.inline:
        job = jobs.create_from_body(model, http.body, http.content_type or "", queued.options,
                                    caller)
    else:
        job = jobs.create_from_upload(model, queued.upload_id, queued.options, caller)
    request_log().job_id = job.job_id
    return Response(body={"job_id": job.job_id, "state": str(job.state)}, status_code=202,
                    headers={"Location": JOB_LOCATION.format(job_id=job.job_id)})


@app.route("/jobs/{job_id}", methods=["GET"], **_PROTECTED)
@renders_errors
def describe_job(job_id: str) -> Response:
    """A job's state and, when it is done, its answer (or a presigned GET of it)."""
    jobs = services.jobs
    request_log().job_id = job_id[:64]
    return Response(body=jobs.view(job_id, _caller()))


def _caller() -> str | None:
    """The caller's identity, when auth identifies callers (a job is readable by its own)."""
    # deferred: the request path's cold start loads no part of jobs (bench/imports.py)
    from chalicelib.jobs.records import owner_of

    return owner_of(current_request().context)


@app.route("/resize", methods=["POST"], content_types=_ANY_CONTENT_TYPE, **_PROTECTED)
@renders_errors
def resize() -> Response:
    """Resize one image to exactly the width and height asked for."""
    settings = services.settings
    asked = read_resize(_http_request(), max_body_bytes=settings.max_body_bytes,
                                max_output_pixels=settings.max_output_pixels)
    resized = resize_image(asked.image, asked.options, limits_from(settings))
    if asked.options.binary:
        return Response(body=resized.data, headers={"Content-Type": asked.options.content_type})
    return Response(body=resized.to_dict())


@app.route("/", methods=["GET"])  # open: the page itself holds nothing secret
@renders_errors
def web_page() -> Response:
    """The web page: pick, drop, paste or photograph an image; see the top-k."""
    path = str(current_request().context.get("path") or "/")
    if not path.endswith("/"):  # /api -> /api/: the page's relative URLs need the stage's slash
        return Response(body="", status_code=301, headers={"Location": path + "/"})
    return _static_answer(*static.web_file("index.html"))


@app.route("/static/{name}", methods=["GET"])  # open, as the page
@renders_errors
def web_asset(name: str) -> Response:
    """The page's script, style sheet and icons."""
    return _static_answer(*static.web_file(name))


@app.route("/openapi.yaml", methods=["GET"])  # open: it says how to call the API, not with what
@renders_errors
def openapi_description() -> Response:
    """The OpenAPI 3.1 description of every route."""
    return _static_answer(static.openapi(), "application/yaml")


def _static_answer(body: str, content_type: str) -> Response:
    try:  # the page may post uploads to the jobs bucket (its CSP); it is served even so
        bucket = services.settings.jobs_bucket
    except ConfigurationError:
        bucket = ""
    headers = static.security_headers(static.upload_origins(bucket, os.environ))
    return Response(body=body, headers={"Content-Type": content_type, **headers})


@app.route("/health", methods=["GET"])  # open: no auth
@renders_errors
def health() -> Response:
    """Cheap liveness, no call to the endpoint. Open to anyone, so where the API has
    authentication it says ``status`` only: the rest is behind auth at ``/health/details``."""
    if _ACCESS.protected:
        _ = services.settings  # a misconfigured function is not healthy
        return Response(body={"status": "ok"})
    return health_details()


@app.route("/health/details", methods=["GET"], **_PROTECTED)
@renders_errors
def health_details() -> Response:
    """The configuration as loaded: endpoint, model input, resize rule, label count."""
    settings = services.settings
    labels = load_labels(settings.labels)
    return Response(body={
        "status": "ok",
        "endpoint": settings.endpoint_name,
        "model_input": {"width": settings.input_width, "height": settings.input_height},
        "resize": {"mode": settings.resize_mode, "shorter_side": settings.resize_shorter_side},
        "labels": len(labels) if labels is not None else 0,
    })


# The data-quality monitor (docs/MONITOR.md, "Deployed"): a scheduled function of its own,
# declared only for a stage that sets MONITOR_BASELINE (read at import, as the auth mode is:
# `chalice package` imports this file with the stage's environment variables).
MONITOR_FUNCTION = "monitor"  # its name in .chalice/config.json's lambda_functions
if os.environ.get("MONITOR_BASELINE", "").strip():
    @app.schedule(os.environ.get("MONITOR_SCHEDULE", "").strip() or "cron(5 * * * ? *)",
                  name=MONITOR_FUNCTION,
                  description="sagegate: check each endpoint's previous hour of captures")
    def monitor(event: Any) -> dict[str, Any]:
        """Check the previous hour of every registered endpoint's captures (Model Monitor's
        data quality files to S3, its metrics as EMF lines in the log)."""
        return run_monitor(event)


def run_monitor(event: Any, s3: Any = None) -> dict[str, Any]:
    """The scheduled monitor's work: the full hour before the event's scheduled ``time`` (a
    retried or late invocation checks the same hour), each registered endpoint."""
    # Deferred on purpose: the request path's cold start must not load chalicelib.monitor,
    # numpy's statistics or datasketches; only the scheduled function pays for them.
    from chalicelib.monitor import deployed, windows

    try:
        now = windows.parse_time(str(getattr(event, "time", "") or ""))
    except windows.WindowError:
        now = None  # no readable time: the hour before now
    settings = deployed.MonitorSettings.from_env(os.environ)
    if settings is None:
        raise ConfigurationError("MONITOR_BASELINE is not set: nothing to monitor")
    endpoints = deployed.endpoint_preprocessors(
        (model.endpoint, model.folder) for model in services.registry.models.values())
    schedule = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or f"{app.app_name}-{MONITOR_FUNCTION}"
    context: Any = getattr(event, "context", None)  # Lambda's: the remaining time
    remaining = (lambda: float(context.get_remaining_time_in_millis()) / 1000) \
        if hasattr(context, "get_remaining_time_in_millis") else None
    if s3 is None:
        s3 = awsclients.build("s3", aws.MONITOR_S3)
    runs = deployed.run(endpoints, settings, schedule, now=now, s3=s3, remaining=remaining)
    return {"endpoints": {run.endpoint: run.status for run in runs},
            "violations": sum(run.violations for run in runs)}


# The jobs' re-drive (chalicelib/jobs/redrive.py, docs/DEPLOY.md): a scheduled function that
# hands the job runner again the tickets of jobs still queued minutes after they were made
# (their S3 event was lost). Declared, as the job functions are, for a stage with JOBS_BUCKET.
JOB_REDRIVE_FUNCTION = "job_redrive"  # its name in .chalice/config.json's lambda_functions


def _redrive_rate() -> str:
    """EventBridge's rate for ``JOB_REDRIVE_PERIOD_SECONDS`` (default 300): whole minutes,
    rounded up. The value itself is checked where it is used (and by ``sagegate package``)."""
    raw = os.environ.get("JOB_REDRIVE_PERIOD_SECONDS", "").strip()
    minutes = max(1, -(-int(raw) // 60)) if raw.isdigit() else 5
    return f"rate({minutes} minute{'s' if minutes > 1 else ''})"


if os.environ.get("JOBS_BUCKET", "").strip():
    @app.schedule(_redrive_rate(), name=JOB_REDRIVE_FUNCTION,
                  description="sagegate: run again the queued jobs whose S3 event was lost")
    def job_redrive(event: Any) -> dict[str, Any]:
        """Re-deliver the tickets of the jobs still queued after their S3 event's time."""
        return redrive_jobs(str(getattr(event, "time", "") or ""))


def redrive_jobs(scheduled: str = "",
                 deliver: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The re-drive's run scheduled at ``scheduled`` (an ISO time; empty: now):
    :func:`chalicelib.jobs.redrive.run_scheduled`; the local event pump passes its own
    ``deliver`` (a message on its tickets queue)."""
    # Deferred on purpose, as in run_job_tickets: the request path loads no part of jobs.
    from chalicelib.jobs import redrive

    own = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or f"{app.app_name}-{JOB_REDRIVE_FUNCTION}"
    return redrive.run_scheduled(services.jobs_context, scheduled, own, deliver)


# The job functions (docs/DEPLOY.md): declared only for a stage that sets JOBS_BUCKET (read at
# import, as the monitor's: `chalice package` imports this file with the stage's variables).
JOB_RUNNER_FUNCTION = "job_runner"  # runs a job when its ticket is written
JOB_RESULTS_FUNCTION = "job_results"  # finishes asynchronous jobs (the success topic)
JOB_FAILURES_FUNCTION = "job_failures"  # fails them (the error topic, when it is another)
_JOBS_BUCKET = os.environ.get("JOBS_BUCKET", "").strip()
_JOBS_PREFIX = os.environ.get("JOBS_PREFIX", "").strip() or "jobs/"
_JOBS_SUCCESS_TOPIC = os.environ.get("JOBS_SUCCESS_TOPIC", "").strip()
_JOBS_ERROR_TOPIC = os.environ.get("JOBS_ERROR_TOPIC", "").strip()
if _JOBS_BUCKET:
    @app.on_s3_event(bucket=_JOBS_BUCKET, prefix=_JOBS_PREFIX + "tickets/",
                     events=["s3:ObjectCreated:*"], name=JOB_RUNNER_FUNCTION)
    def job_runner(event: Any) -> dict[str, Any]:
        """Run the jobs whose tickets were written."""
        return run_job_tickets(event.to_dict(), event.context)

    if _JOBS_SUCCESS_TOPIC:
        @app.on_sns_message(topic=_JOBS_SUCCESS_TOPIC, name=JOB_RESULTS_FUNCTION)
        def job_results(event: Any) -> dict[str, Any]:
            """Finish the asynchronous jobs an endpoint notified (success; failure too when
            both topics are one)."""
            return complete_jobs(event.to_dict())

    if _JOBS_ERROR_TOPIC and _JOBS_ERROR_TOPIC != _JOBS_SUCCESS_TOPIC:
        @app.on_sns_message(topic=_JOBS_ERROR_TOPIC, name=JOB_FAILURES_FUNCTION)
        def job_failures(event: Any) -> dict[str, Any]:
            """Fail the asynchronous jobs an endpoint notified of failure."""
            return complete_jobs(event.to_dict())


def run_job_tickets(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The job runner's work: each ticket of the S3 notification, run once (a retried event
    does nothing twice). Unexpected errors propagate, so Lambda retries the event.

    The runner is named by Lambda's ``context.aws_request_id``, which Lambda's retries of one
    event keep and a duplicate delivery does not: a job another invocation is running is not
    run again. Without a context (a test, a local call) each call is a runner of its own.
    Each job's work, its endpoint's retries included, ends before the invocation's time does
    (the context's remaining time, less a margin).
    """
    # Deferred on purpose: the request path's cold start must not load the jobs room (its
    # runner, the S3 side); only the job functions and the job routes pay for it.
    import uuid

    from chalicelib.jobs.events import s3_keys

    runner_id = str(getattr(context, "aws_request_id", None) or uuid.uuid4())
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    execution = services.job_execution
    return _job_states("job ran", (execution.run_ticket(key, runner_id, remaining_ms)
                                   for key in s3_keys(event, services.settings.jobs_bucket)))


def complete_jobs(event: dict[str, Any]) -> dict[str, Any]:
    """The SNS functions' work: each asynchronous endpoint notification, finished once."""
    # Deferred on purpose, as in run_job_tickets.
    from chalicelib.jobs.events import sns_messages

    execution = services.job_execution
    return _job_states("job completed",
                       (execution.complete(message) for message in sns_messages(event)))


def _job_states(what: str, jobs: Iterable[Any]) -> dict[str, Any]:
    """``{"jobs": {job_id: state}}`` of the jobs an event moved, each logged (None: the event
    named no job of this stage)."""
    states: dict[str, str] = {}
    for job in jobs:
        if job is not None:
            states[job.job_id] = str(job.state)
            logger.info(what, extra={"job_id": job.job_id, "model": job.model,
                                     "state": str(job.state)})
    return {"jobs": states}


# The monitor's function serves no request: it skips the request path's warm-up.
if lifecycle.on_lambda() and not os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "").endswith(
        f"-{MONITOR_FUNCTION}"):
    _init_ms = lifecycle.timed(
        lambda: services.warm_up(prime_codecs=lifecycle.init_type() != "on-demand"))
    logger.info("initialised", extra={"init_type": lifecycle.init_type(),
                                      "warm_up_ms": round(_init_ms, 1)})
