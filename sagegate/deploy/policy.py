"""Render a stage's least-privilege IAM policy (``.chalice/policy-<stage>.json``).

Chalice's ``autogen_policy`` is off: it would grant ``sagemaker:InvokeEndpoint`` on ``*``.
Instead the role gets exactly what the function does, each action on its own resource:

* ``sagemaker:InvokeEndpoint`` on the stage's endpoints only, and on the inference components its
  models name: a call naming a component is authorized against the component's ARN as well as the
  endpoint's, so a component no ``model.json`` names is refused by IAM;
* ``logs:CreateLogStream`` / ``logs:PutLogEvents`` in the function's own log group (the
  deployment creates the group, with its retention);
* with ``CACHE_TABLE``: ``dynamodb:GetItem`` and ``PutItem`` on that table only (one item read
  and written by key; DynamoDB's TTL deletes the expired);
* with ``TOKEN_BUDGET_TABLE``: ``dynamodb:UpdateItem`` (the atomic counters) and ``GetItem`` (a
  key's usage) on that table only;
* with data capture on: ``s3:PutObject`` under ``CAPTURE_DESTINATION``, or
  ``firehose:PutRecordBatch`` on its stream;
* with ``JOBS_BUCKET``: what the job routes write and read
  (:func:`sagegate.deploy.jobs_policy.api_statements`);
* with X-Ray on: ``xray:PutTraceSegments`` and ``PutTelemetryRecords``, which AWS only grants on
  ``"*"`` (no resource-level permissions), so X-Ray is opt-in and the prod test refuses it until
  someone decides to.

The scheduled monitor (or a fanned-out one's three functions), each job function and the
streaming function (:func:`render_stream`) get roles of their own, written beside it as
``policy-<stage>-<function>.json``.

ARNs hold the account and region, so the committed files are rendered for the documentation
account ``123456789012`` / ``us-east-1``; ``sagegate policy`` (and the deploy commands) render
them for the real account::

    sagegate policy --stage prod --account 111122223333 --region eu-west-1
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sagegate.deploy import jobs, jobs_policy, stream_template
from sagegate.deploy.iam import (
    allow,
    capture_statement,
    check_account_and_region,
    llm_models,
    log_statement,
    models,
    partition_of,
)
from sagegate.deploy.shell import DeployError, add_stage_option, guarded, stage_for
from sagegate.deploy.stage import (
    MONITOR_FUNCTION,
    MONITOR_MAP,
    MONITOR_PLAN,
    MONITOR_REDUCE,
    Stage,
)
from sagegate.deploy.stages import ROOT

if TYPE_CHECKING:
    from chalicelib.core.aws import S3Uri

JOBS, PARTS, RESULTS = "jobs", "parts", "results"
"""A fanned-out run's folders (:mod:`chalicelib.monitor.fanout`'s, which a test holds equal)."""
EXAMPLE_ACCOUNT = "123456789012"
EXAMPLE_REGION = "us-east-1"


def policy_path(stage: str, root: Path = ROOT) -> Path:
    """Where Chalice looks for the stage's policy (``iam_policy_file`` in the config)."""
    return root / ".chalice" / f"policy-{stage}.json"


def render(stage: Stage, account: str, region: str) -> dict[str, Any]:
    """The IAM policy document for ``stage`` in ``account`` / ``region``.

    Raises:
        ValueError: a malformed account id or region.
    """
    check_account_and_region(account, region)
    arn = f"arn:{partition_of(region)}"
    statements = [
        allow("InvokeOwnEndpoint", ["sagemaker:InvokeEndpoint"],
              _invoked(arn, account, region, endpoints(stage), inference_components(stage))),
        log_statement(arn, account, region, stage.function_name),
        *_shared_statements(stage, arn, account, region),
    ]
    statements += jobs_policy.api_statements(stage, account, region)
    return {"Version": "2012-10-17", "Statement": statements + _traces(stage)}


def render_stream(stage: Stage, account: str, region: str) -> dict[str, Any] | None:
    """The streaming function's IAM policy; None for a stage without a language model.

    ``sagemaker:InvokeEndpoint`` (which ``InvokeEndpointWithResponseStream`` is authorized as) on
    the language models' endpoints only, their experiments' arms and shadows and inference
    components; its own log group; the prediction cache, the capture and the token budgets as
    the API function's. Nothing of jobs or of the other models.

    Raises:
        ValueError: a malformed account id or region, or a model.json invalid for the stage.
    """
    check_account_and_region(account, region)
    chosen = llm_models(stage)
    if not chosen:
        return None
    arn = f"arn:{partition_of(region)}"
    statements = [
        allow("InvokeLanguageModels", ["sagemaker:InvokeEndpoint"],
              _invoked(arn, account, region, _model_endpoints(chosen),
                       _model_components(chosen))),
        log_statement(arn, account, region, stream_template.function_name(stage)),
        *_shared_statements(stage, arn, account, region),
    ]
    return {"Version": "2012-10-17", "Statement": statements + _traces(stage)}


def stream_policy_path(stage: Stage, root: Path = ROOT) -> Path:
    return root / ".chalice" / stream_template.policy_file(stage)


def _invoked(arn: str, account: str, region: str, endpoint_names: list[str],
             components: list[str]) -> list[str]:
    sagemaker = f"{arn}:sagemaker:{region}:{account}"
    return [f"{sagemaker}:endpoint/{endpoint}" for endpoint in endpoint_names] + [
        f"{sagemaker}:inference-component/{name}" for name in components]


def _shared_statements(stage: Stage, arn: str, account: str,
                       region: str) -> list[dict[str, Any]]:
    """What both functions of the API do besides calling endpoints and logging: the cache, the
    token budgets and the capture."""
    table = f"{arn}:dynamodb:{region}:{account}:table"
    statements = []
    if stage.cache_table:
        statements.append(allow("ReadWritePredictionCache",
                                 ["dynamodb:GetItem", "dynamodb:PutItem"],
                                 f"{table}/{stage.cache_table}"))
    if stage.budget_table:
        statements.append(allow("CountTokenBudgets", ["dynamodb:UpdateItem", "dynamodb:GetItem"],
                                 f"{table}/{stage.budget_table}"))
    capture = capture_statement(stage.env, arn, account, region)
    return statements if capture is None else [*statements, capture]


def _traces(stage: Stage) -> list[dict[str, Any]]:
    if not stage.xray:
        return []
    return [allow("WriteTraces", ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], "*")]


def monitor_policy_path(stage: str, root: Path = ROOT) -> Path:
    """The scheduled monitor's own policy (``lambda_functions.monitor.iam_policy_file``)."""
    return root / ".chalice" / f"policy-{stage}-{MONITOR_FUNCTION}.json"


def render_monitor(stage: Stage, account: str, region: str) -> dict[str, Any] | None:
    """The scheduled monitor's IAM policy; None without ``MONITOR_BASELINE`` or when fanned out.

    Its own role: read the capture and baseline prefixes, list those two only (so a missing
    baseline is a 404 it can report, not a 403), write the monitoring prefix and its own log
    group (metrics are EMF lines: no ``cloudwatch:PutMetricData``). No
    ``sagemaker:InvokeEndpoint``.

    Raises:
        ValueError: a malformed account id or region, or bad monitor settings.
    """
    render(stage, account, region)  # the same account, region and stage checks
    settings = stage.monitor
    if settings is None or settings.fanned_out:
        return None
    arn = f"arn:{partition_of(region)}"
    statements = _listings(arn, "ListCapturesAndBaselines",
                           (settings.captures, settings.baseline))
    statements += [
        allow("ReadCaptures", ["s3:GetObject"], _objects(arn, settings.captures)),
        allow("ReadBaselines", ["s3:GetObject"], _objects(arn, settings.baseline)),
        allow("WriteMonitoringReports", ["s3:PutObject"], _objects(arn, settings.output)),
        log_statement(arn, account, region, stage.monitor_function_name),
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def render_monitor_functions(stage: Stage, account: str,
                             region: str) -> dict[str, dict[str, Any]]:
    """A fanned-out monitor's functions' IAM policies, by function; empty for any other stage.
    Each may do its own step only, every object statement on one prefix, under the run prefix
    ``<MONITOR_OUTPUT>-runs``:

    * ``monitor_plan``: list the capture and baseline prefixes (a missing baseline is a 404),
      read the baselines, write ``jobs/``;
    * ``monitor_map``: read the captures and ``jobs/``, write ``parts/``;
    * ``monitor_reduce``: list the baseline prefix, read the baselines, ``parts/`` and
      ``results/``, write the monitoring prefix.

    Each writes its own log group. None may invoke an endpoint or delete anything.

    Raises:
        ValueError: a malformed account id or region, or bad monitor settings.
    """
    render(stage, account, region)  # the same account, region and stage checks
    settings = stage.monitor
    if settings is None or not settings.fanned_out:
        return {}
    arn = f"arn:{partition_of(region)}"
    runs = settings.runs

    def run_folder(folder: str) -> str:
        return f"{arn}:s3:::{runs.bucket}/{runs.child(folder).key}/*"

    def logs(function: str) -> dict[str, Any]:
        return log_statement(arn, account, region, f"{stage.function_name}-{function}")

    return {
        MONITOR_PLAN: {"Version": "2012-10-17", "Statement": [
            *_listings(arn, "ListCapturesAndBaselines", (settings.captures, settings.baseline)),
            allow("ReadBaselines", ["s3:GetObject"], _objects(arn, settings.baseline)),
            allow("WriteTheRunsJobs", ["s3:PutObject"], run_folder(JOBS)),
            logs(MONITOR_PLAN)]},
        MONITOR_MAP: {"Version": "2012-10-17", "Statement": [
            allow("ReadCaptures", ["s3:GetObject"], _objects(arn, settings.captures)),
            allow("ReadTheRunsJobs", ["s3:GetObject"], run_folder(JOBS)),
            allow("WriteTheRunsParts", ["s3:PutObject"], run_folder(PARTS)),
            logs(MONITOR_MAP)]},
        MONITOR_REDUCE: {"Version": "2012-10-17", "Statement": [
            *_listings(arn, "ListBaselines", (settings.baseline,)),
            allow("ReadBaselines", ["s3:GetObject"], _objects(arn, settings.baseline)),
            allow("ReadTheRunsPartsAndResults", ["s3:GetObject"],
                  [run_folder(PARTS), run_folder(RESULTS)]),
            allow("WriteMonitoringReports", ["s3:PutObject"], _objects(arn, settings.output)),
            logs(MONITOR_REDUCE)]},
    }


def monitor_function_policy_path(stage: str, function: str, root: Path = ROOT) -> Path:
    """A fanned-out monitor function's own policy (``lambda_functions.<function>.
    iam_policy_file``)."""
    return root / ".chalice" / f"policy-{stage}-{function}.json"


def _listings(arn: str, sid: str, reads: Sequence[S3Uri]) -> list[dict[str, Any]]:
    listed: dict[str, list[str]] = {}
    for location in reads:
        listed.setdefault(location.bucket, []).append(
            f"{location.prefix}/*" if location.prefix else "*")
    return [{**allow(sid, ["s3:ListBucket"], f"{arn}:s3:::{bucket}"),
             "Condition": {"StringLike": {"s3:prefix": prefixes}}}
            for bucket, prefixes in listed.items()]


def _objects(arn: str, location: S3Uri) -> str:
    return f"{arn}:s3:::{location.bucket}/{location.prefix}/*" if location.prefix \
        else f"{arn}:s3:::{location.bucket}/*"


def endpoints(stage: Stage) -> list[str]:
    """Every endpoint the stage's function calls (each model's, ``$VARIABLE`` ones read from the
    stage; the flat ``ENDPOINT_NAME``), lower-cased: SageMaker lower-cases names in its ARNs and
    IAM compares ARNs case-sensitively.

    Raises:
        ValueError: a model.json is invalid for this stage (an endpoint variable it lacks).
    """
    return sorted({stage.endpoint_name.lower(), *_model_endpoints(models(stage))})


def _model_endpoints(chosen: Sequence[Any]) -> list[str]:
    return sorted({endpoint.lower() for model in chosen
                   for endpoint in (model.endpoint, *_experiment_endpoints(model))})


def _experiment_endpoints(model: Any) -> list[str]:
    experiment = model.experiment
    if experiment is None:
        return []
    return [target.endpoint for target in (*experiment.arms, *experiment.shadows)]


def inference_components(stage: Stage) -> list[str]:
    """Every inference component the stage's models name, lower-cased as the endpoints are.

    Raises:
        ValueError: a model.json is invalid for this stage.
    """
    return _model_components(models(stage))


def _model_components(chosen: Sequence[Any]) -> list[str]:
    named = [model.inference_component for model in chosen]
    named += [target.inference_component for model in chosen
              if model.experiment is not None
              for target in (*model.experiment.arms, *model.experiment.shadows)]
    return sorted({name.lower() for name in named if name})


def write(stage: Stage, account: str, region: str, root: Path = ROOT) -> Path:
    """Render the stage's policy into ``.chalice/policy-<stage>.json``; return the path.

    Raises:
        DeployError: (status 2) a malformed account id or region.
    """
    try:
        document = render(stage, account, region)
    except ValueError as error:
        raise DeployError(str(error), status=2) from None
    path = policy_path(stage.name, root)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(root)} for account {account}, region {region}")
    try:
        monitor = render_monitor(stage, account, region)
    except ValueError as error:
        raise DeployError(str(error), status=2) from None
    if monitor is not None:
        monitor_path = monitor_policy_path(stage.name, root)
        monitor_path.write_text(json.dumps(monitor, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {monitor_path.relative_to(root)} (the scheduled monitor's role)")
    try:
        fanout = render_monitor_functions(stage, account, region)
    except ValueError as error:
        raise DeployError(str(error), status=2) from None
    for function, document in fanout.items():
        function_path = monitor_function_policy_path(stage.name, function, root)
        function_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {function_path.relative_to(root)} ({function}'s role)")
    try:
        stream = render_stream(stage, account, region)
    except ValueError as error:
        raise DeployError(str(error), status=2) from None
    if stream is not None:
        stream_path = stream_policy_path(stage, root)
        stream_path.write_text(json.dumps(stream, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {stream_path.relative_to(root)} (the streaming function's role)")
    for function in jobs.roles(stage):
        try:
            role = jobs_policy.render_function(stage, function, account, region)
        except ValueError as error:
            raise DeployError(str(error), status=2) from None
        function_path = root / ".chalice" / jobs.policy_file(stage, function)
        function_path.write_text(json.dumps(role, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {function_path.relative_to(root)} ({function}'s role)")
    return path


def render_for_session(stage: Stage, session: Any, account: str | None = None,
                       root: Path = ROOT) -> Path:
    """:func:`write` for ``account`` (default: the session's) in the session's region."""
    from sagegate.deploy.aws import account_of

    chosen = (account or "").strip() or account_of(session.client("sts"))
    return write(stage, chosen, session.region_name, root)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Render .chalice/policy-<stage>.json, the function's "
        "least-privilege IAM policy, for an account and region. Without --account it asks "
        "STS for the credentials' account (needs AWS); with both given it runs offline "
        f"(the committed files: --account {EXAMPLE_ACCOUNT} --region {EXAMPLE_REGION}).")
    add_stage_option(parser, default="prod")
    parser.add_argument("--account", help="12-digit account id (default: the credentials')")
    parser.add_argument("--region", help="AWS region (default: AWS_REGION, "
                                         "AWS_DEFAULT_REGION or the AWS configuration)")
    args = parser.parse_args(argv)

    def body() -> None:
        stage = stage_for(args.stage)
        if args.account and args.region:
            write(stage, args.account.strip(), args.region.strip())
            return
        from sagegate.deploy.aws import session

        render_for_session(stage, session(args.region), args.account)

    return guarded(body)

