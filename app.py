"""sagegate: the routes and the event functions, each handing its request or event to a room
of chalicelib (jobs and the monitor imported in theirs, off the request path's cold start);
which event functions a stage declares is read once, at import (``Deployment``)."""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from chalice import Chalice, CognitoUserPoolAuthorizer, CORSConfig, IAMAuthorizer, Response

from chalicelib.core import environment, lifecycle
from chalicelib.core.access import Access, AuthMode
from chalicelib.core.config_deployment import Deployment
from chalicelib.core.errors import SagegateError
from chalicelib.core.media import BINARY_TYPES
from chalicelib.core.observability import logger
from chalicelib.http import catalog, exchange, jobcalls, modelcalls, resizing
from chalicelib.http.exchange import HttpAnswer
from chalicelib.services import Services

# Logs are Powertools' JSON lines (chalicelib.core.observability), Chalice's own included.
app = Chalice(app_name="sagegate", configure_logs=False)
app.debug = False  # a traceback must never reach a client, in any stage
# Chalice's debug setter turns its logger, which is Powertools' (both are named "sagegate"), to
# ERROR; give it back the level Powertools chose (POWERTOOLS_LOG_LEVEL / LOG_LEVEL, else INFO).
logger.setLevel(None)
app.api.binary_types.extend([kind for kind in BINARY_TYPES if kind not in app.api.binary_types])

_ANY_CONTENT_TYPE = ["*/*"]  # sagegate checks the type itself, answering its own 415


def _cors(access: Access) -> CORSConfig | bool:
    """The CORS rules every route answers with (False: no CORS headers at all)."""
    if not access.cors_origin:
        return False
    return CORSConfig(allow_origin=access.cors_origin, allow_headers=list(exchange.ALLOW_HEADERS),
                      expose_headers=list(modelcalls.MODEL_EXPOSE_HEADERS), max_age=600)


def _auth(access: Access) -> dict[str, Any]:
    """The route arguments that make API Gateway authenticate a route (all but the open)."""
    if access.auth == AuthMode.API_KEY:
        return {"api_key_required": True}
    if access.auth == AuthMode.IAM:
        return {"authorizer": IAMAuthorizer()}
    if access.auth == AuthMode.COGNITO:
        return {"authorizer": CognitoUserPoolAuthorizer(
            "SagegateUserPool", provider_arns=list(access.user_pool_arns))}
    return {}


# Chalice fixes auth and CORS per route, and declares the event functions, at import;
# `chalice deploy`/`package` import this file with the stage's environment variables set, so
# SAGEGATE_AUTH etc. and the events' variables come from the stage (read once, here).
_ACCESS = Access.from_env(environment.variables(), deployed=lifecycle.on_lambda())
DEPLOYMENT = Deployment.from_env(environment.variables())
app.api.cors = _cors(_ACCESS)
_PROTECTED = _auth(_ACCESS)

# What every request shares, built on first use (a test puts its own Services here).
services = Services()
# Each thread's own request and log line (chalice local is threaded; see chalicelib.http.exchange)
exchanges = exchange.Exchanges(lambda: app.current_request)
SNAPSTART_HOOKS = lifecycle.Hooks(lambda: services.connection_holders())
lifecycle.register(SNAPSTART_HOOKS)

RENDERS_ERRORS = "renders_errors"
"""The mark of a view whose sagegate errors become their HTTP answers (every route's)."""


def _response(answer: HttpAnswer) -> Response:
    """A room's answer as Chalice's."""
    return Response(body=answer.body, headers=dict(answer.headers),
                    status_code=answer.status_code)


def renders_errors(view: Callable[..., Response]) -> Callable[..., Response]:
    """A view's sagegate errors as their answers: per view, as Chalice answers a view's
    exception (a 500) before any middleware, and adds CORS headers only to what it returns."""
    @functools.wraps(view)
    def wrapper(**params: str) -> Response:  # (a route's path parameters, by name)
        try:
            return view(**params)
        except SagegateError as error:
            return _response(exchange.error_answer(error, exchanges.request_id()))
    setattr(wrapper, RENDERS_ERRORS, True)
    return wrapper


def route(path: str, method: str = "GET", *, open_route: bool = False,
          any_content_type: bool = False) -> Callable[[Callable[..., Response]],
                                                      Callable[..., Response]]:
    """Declare a route: its sagegate errors rendered, authenticated as the stage says unless
    ``open_route``, any body type taken (``any_content_type``: the view answers its own 415)."""
    options: dict[str, Any] = {} if open_route else dict(_PROTECTED)
    if any_content_type:
        options["content_types"] = _ANY_CONTENT_TYPE

    def declare(view: Callable[..., Response]) -> Callable[..., Response]:
        return app.route(path, methods=[method], **options)(renders_errors(view))
    return declare


@app.middleware("http")
def correlate(event: Any, get_response: Callable[[Any], Response]) -> Response:
    """Pin the thread's request; tag every answer with its id; write its log line, metrics."""
    started = time.perf_counter()
    with exchanges.serving(event) as log:
        response = get_response(event)
    exchange.answered(response, log, started)
    return response


@app.middleware("all")
def store_captures(event: Any, get_response: Callable[[Any], Any]) -> Any:
    """As every handler ends, its capture records are stored after its response."""
    try:
        return get_response(event)
    finally:
        services.handler_ended(getattr(event, "lambda_context", None)
                               or getattr(event, "context", None))


# --- models ------------------------------------------------------------------------------

@route("/predict", "POST", any_content_type=True)
def predict() -> Response:
    """Run the default model (``DEFAULT_MODEL``) on the request's body."""
    return _response(modelcalls.serve(services.route(), exchanges))


@route("/models")
def list_models() -> Response:
    """Every registered model: pipeline, accepted content types, signature."""
    return Response(body=catalog.describe_all(services.registry,
                                              jobs=services.settings.jobs_enabled))


@route("/models/{name}")
def describe_model(name: str) -> Response:
    """One model, with an example request body a client can copy."""
    return Response(body=catalog.describe(services.registry.get(name), example=True,
                                          jobs=services.settings.jobs_enabled))


@route("/models/{name}/predict", "POST", any_content_type=True)
def predict_model(name: str) -> Response:
    """Run one registered model on the request's body."""
    return _response(modelcalls.serve(services.route(name), exchanges))


# --- OpenAI's API for the llm models: OpenAI's error shape; a stream answered whole here ------

@route("/v1/chat/completions", "POST", any_content_type=True)
@route("/v1/completions", "POST", any_content_type=True)
@route("/v1/models")
@route("/v1/usage")
def openai_api() -> Response:
    """OpenAI's completions, models and the caller's token usage (docs/LLM.md)."""
    from chalicelib.http import completions  # deferred, as the page's: not every route's
    return _response(completions.serve(lambda: services.llm, exchanges))


# --- jobs: uploads through S3, jobs on a real-time or an asynchronous endpoint -------------

@route("/uploads", "POST", any_content_type=True)
def create_upload() -> Response:
    """A presigned S3 POST for one large input of a model: ``{"model", "content_type"}``."""
    # jobs off: 501, whatever the body
    return _response(jobcalls.create_upload(services.jobs, exchanges.current()))


@route("/models/{name}/jobs", "POST", any_content_type=True)
def create_job(name: str) -> Response:
    """Run a model on an upload (``{"upload_id": ...}``) or a small inline body, as a job."""
    return _response(jobcalls.create_job(services.jobs, services.registry.get(name),
                                         exchanges.current(),
                                         max_body_bytes=services.settings.max_body_bytes))


@route("/jobs/{job_id}")
def describe_job(job_id: str) -> Response:
    """A job's state and, when it is done, its answer (or a presigned GET of it)."""
    return _response(jobcalls.describe_job(services.jobs, job_id, exchanges.current()))


# --- images, the page, health -----------------------------------------------------------

@route("/resize", "POST", any_content_type=True)
def resize() -> Response:
    """Resize one image to exactly the width and height asked for."""
    return _response(resizing.resize_answer(exchanges.current(), services.settings))


def _jobs_bucket() -> str:
    """The stage's jobs bucket, which the page's CSP names (raises when misconfigured)."""
    return services.settings.jobs_bucket


@route("/", open_route=True)  # open: the page itself holds nothing secret
def web_page() -> Response:
    """The web page: pick, drop, paste or photograph an image; see the top-k."""
    from chalicelib.http import pages
    path = str(exchanges.request().context.get("path") or "/")
    return _response(pages.web_page(path, _jobs_bucket))


@route("/static/{name}", open_route=True)  # open, as the page
def web_asset(name: str) -> Response:
    """The page's script, style sheet and icons."""
    from chalicelib.http import pages
    return _response(pages.web_asset(name, _jobs_bucket))


@route("/openapi.yaml", open_route=True)  # open: it says how to call the API, not with what
def openapi_description() -> Response:
    """The OpenAPI 3.1 description of every route."""
    from chalicelib.http import pages
    return _response(pages.openapi_description(_jobs_bucket))


@route("/health", open_route=True)  # open: no auth
def health() -> Response:
    """Cheap liveness; open, so behind auth it says ``status`` only (``/health/details``)."""
    if _ACCESS.protected:
        _ = services.settings  # a misconfigured function is not healthy
        return Response(body={"status": "ok"})
    return health_details()


@route("/health/details")
def health_details() -> Response:
    """The configuration as loaded: endpoint, model input, resize rule, label count."""
    return Response(body=catalog.configuration(services.settings))


# --- event functions: each declared only for a stage that has it (DEPLOYMENT) --------------

# The data-quality monitor (docs/MONITOR.md, "Deployed"): one scheduled function, or the three
# a Step Functions run calls (MONITOR_ENGINE=stepfunctions).
MONITOR_FUNCTION = "monitor"  # its name in .chalice/config.json's lambda_functions
MONITOR_PLAN_FUNCTION = "monitor_plan"  # the fanned-out run's: its window and prefixes
MONITOR_MAP_FUNCTION = "monitor_map"  # a Distributed Map child: objects read into a part
MONITOR_REDUCE_FUNCTION = "monitor_reduce"  # an endpoint's parts merged, checked, written
MONITOR_FUNCTIONS = (MONITOR_FUNCTION, MONITOR_PLAN_FUNCTION, MONITOR_MAP_FUNCTION,
                     MONITOR_REDUCE_FUNCTION)
if DEPLOYMENT.monitored:
    if DEPLOYMENT.monitor_fanned_out:
        @app.lambda_function(name=MONITOR_PLAN_FUNCTION)
        def monitor_plan(event: dict[str, Any], context: Any) -> dict[str, Any]:
            """The run's hour and, per endpoint, the capture prefixes its maps list."""
            from chalicelib import monitoring  # deferred: the request path loads no monitor
            return monitoring.plan_monitor(event, lambda: services.registry.models.values())

        @app.lambda_function(name=MONITOR_MAP_FUNCTION)
        def monitor_map(event: dict[str, Any], context: Any) -> dict[str, Any]:
            """A Distributed Map child: its batch of capture objects read into a part."""
            from chalicelib import monitoring
            return monitoring.map_monitor(event, lambda: services.registry.models.values())

        @app.lambda_function(name=MONITOR_REDUCE_FUNCTION)
        def monitor_reduce(event: dict[str, Any], context: Any) -> dict[str, Any]:
            """An endpoint's parts merged, checked, written (metrics named as the single's)."""
            from chalicelib import monitoring
            name = DEPLOYMENT.function_named(app.app_name, MONITOR_REDUCE_FUNCTION)
            return monitoring.reduce_monitor(event, name.removesuffix(
                MONITOR_REDUCE_FUNCTION.removeprefix(MONITOR_FUNCTION)))
    else:
        @app.schedule(DEPLOYMENT.monitor_schedule, name=MONITOR_FUNCTION,
                      description="sagegate: check each endpoint's previous hour of captures")
        def monitor(event: Any) -> dict[str, Any]:
            """Check the previous hour of every registered endpoint's captures."""
            from chalicelib import monitoring  # deferred: the request path loads no monitor
            return monitoring.run_monitor(
                event, lambda: services.registry.models.values(),
                DEPLOYMENT.function_named(app.app_name, MONITOR_FUNCTION))


# The job functions (docs/DEPLOY.md): chalicelib.jobs.functions', imported in each.
JOB_REDRIVE_FUNCTION = "job_redrive"  # runs again the queued jobs whose S3 event was lost
JOB_RUNNER_FUNCTION = "job_runner"  # runs a job when its ticket is written
JOB_RESULTS_FUNCTION = "job_results"  # finishes asynchronous jobs (the success topic)
JOB_FAILURES_FUNCTION = "job_failures"  # fails them (the error topic, when it is another)
if DEPLOYMENT.jobs_enabled:
    @app.schedule(DEPLOYMENT.job_redrive_rate, name=JOB_REDRIVE_FUNCTION,
                  description="sagegate: run again the queued jobs whose S3 event was lost")
    def job_redrive(event: Any) -> dict[str, Any]:
        """Re-deliver the tickets of the jobs still queued after their S3 event's time."""
        from chalicelib.jobs import functions
        return functions.redrive_jobs(
            services.jobs_context, str(getattr(event, "time", "") or ""),
            DEPLOYMENT.function_named(app.app_name, JOB_REDRIVE_FUNCTION))

    @app.on_s3_event(bucket=DEPLOYMENT.jobs_bucket, prefix=DEPLOYMENT.tickets_prefix,
                     events=["s3:ObjectCreated:*"], name=JOB_RUNNER_FUNCTION)
    def job_runner(event: Any) -> dict[str, Any]:
        """Run the jobs whose tickets were written."""
        from chalicelib.jobs import functions
        return functions.run_tickets(services.job_execution, event.to_dict(), event.context)

    if DEPLOYMENT.jobs_success_topic:
        @app.on_sns_message(topic=DEPLOYMENT.jobs_success_topic, name=JOB_RESULTS_FUNCTION)
        def job_results(event: Any) -> dict[str, Any]:
            """Finish the asynchronous jobs an endpoint notified (of failure too: one topic)."""
            from chalicelib.jobs import functions
            return functions.complete(services.job_execution, event.to_dict())

    if DEPLOYMENT.separate_error_topic:
        @app.on_sns_message(topic=DEPLOYMENT.jobs_error_topic, name=JOB_FAILURES_FUNCTION)
        def job_failures(event: Any) -> dict[str, Any]:
            """Fail the asynchronous jobs an endpoint notified of failure."""
            from chalicelib.jobs import functions
            return functions.complete(services.job_execution, event.to_dict())


# The monitor's functions serve no request: they skip the request path's warm-up.
if lifecycle.on_lambda() and not any(DEPLOYMENT.runs(name) for name in MONITOR_FUNCTIONS):
    services.initialise()
