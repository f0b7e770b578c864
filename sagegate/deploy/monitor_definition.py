"""The fanned-out monitor's state machine definition (Amazon States Language, JSONPath):
:func:`definition`, with its limits and retries; :mod:`sagegate.deploy.monitor_template` puts it
in the template. The states:

1. ``Plan``: ``monitor_plan`` with the execution's input (the scheduled event's ``time``) and
   name: the window and the hour prefixes to read;
2. ``ReadPrefixes``: a Distributed Map over those prefixes (STANDARD children, a few at once),
   each running ``ReadPrefix``, a Distributed Map whose ``ItemReader`` lists the prefix, whose
   ``ItemBatcher`` hands each EXPRESS child :data:`MAX_ITEMS_PER_BATCH` objects for
   ``monitor_map``, and whose ``ResultWriter`` writes the children's outputs under ``results/``;
   it tolerates no failed child: a prefix whose Map fails is caught and marked ``lost``. (The
   outer Map is Distributed because the nesting LocalStack's tests, recorded against AWS, show is
   a Distributed Map in a STANDARD child of another; an Inline Map holding one is shown nowhere
   found.)
3. ``Reduce``: an Inline Map running ``monitor_reduce`` per endpoint (:data:`REDUCE_CONCURRENCY`
   at once);
4. ``Verdict``: once every endpoint is reduced, fails the run (``MonitorPartsLost``) when one was
   lost, so an alarm on ``ExecutionsFailed`` sees it; else succeeds with each outcome.

:func:`check_monitor_fanout` refuses a stage whose ``monitor_map`` could not run as an EXPRESS
child.
"""
from __future__ import annotations

from typing import Any

from sagegate.deploy.stage import MONITOR_MAP, MONITOR_PLAN, MONITOR_REDUCE, Stage

PREFIX_CONCURRENCY = 4
"""Prefixes whose Distributed Maps run at once (each variant's three hours of each endpoint)."""
REDUCE_CONCURRENCY = 2
DEFAULT_MAP_CONCURRENCY = 10
"""Children of one prefix's Map at once, unless ``monitor_map`` has a reserved concurrency (then
that: more would be throttled, and retried)."""
MAX_ITEMS_PER_BATCH = 16
"""Capture objects per child. A Firehose object holds one 64 MiB buffer: 16 are about 1 GiB, some
2.5 million records of 400 bytes, read in about 40 s at the 70,000 records/s measured here, far
inside an EXPRESS child's 5 minutes."""
MAX_INPUT_BYTES_PER_BATCH = 128 * 1024
"""A batch's input at most (Step Functions' limit is 256 KiB): 16 items are about 4 KB."""
MAX_MAP_SECONDS = 280
"""The longest ``monitor_map`` timeout: an EXPRESS child runs 5 minutes at most."""
TASK_RETRY = [{
    "ErrorEquals": ["Lambda.ServiceException", "Lambda.AWSLambdaException",
                    "Lambda.SdkClientException", "Lambda.TooManyRequestsException"],
    "IntervalSeconds": 2, "MaxAttempts": 6, "BackoffRate": 2, "JitterStrategy": "FULL"}]
"""Lambda's own failures and throttles: retried (the guide's advice for Lambda tasks)."""
WORK_RETRY = {"ErrorEquals": ["States.TaskFailed"], "IntervalSeconds": 5, "MaxAttempts": 2,
              "BackoffRate": 2}
"""A function that raised (S3 refused, a timeout): tried twice more before the part is lost."""
PLACEHOLDERS = {MONITOR_PLAN: "MonitorPlanArn", MONITOR_MAP: "MonitorMapArn",
                MONITOR_REDUCE: "MonitorReduceArn"}


def map_concurrency(stage: Stage) -> int:
    reserved = stage.lambda_functions.get(MONITOR_MAP, {}).get("reserved_concurrency")
    return int(reserved) if reserved else DEFAULT_MAP_CONCURRENCY


def map_timeout(stage: Stage) -> int:
    """``monitor_map``'s timeout (Chalice's default, 60 s, unless set)."""
    return int(stage.lambda_functions.get(MONITOR_MAP, {}).get("lambda_timeout") or 60)


def check_monitor_fanout(stage: Stage) -> None:
    """Refuse a fanned-out monitor that could not run.

    Raises:
        ValueError: ``monitor_map``'s timeout is over :data:`MAX_MAP_SECONDS`, or its reserved
            concurrency is not a whole number of at least 1.
    """
    where = f"stages.{stage.name}.lambda_functions.{MONITOR_MAP}"
    if map_timeout(stage) > MAX_MAP_SECONDS:
        raise ValueError(f"{where}.lambda_timeout is {map_timeout(stage)} s: a Distributed "
                         f"Map's EXPRESS child runs 5 minutes at most, give it at most "
                         f"{MAX_MAP_SECONDS} s")
    reserved = stage.lambda_functions.get(MONITOR_MAP, {}).get("reserved_concurrency")
    if reserved is not None and (not isinstance(reserved, int) or isinstance(reserved, bool)
                                 or reserved < 1):
        raise ValueError(f"{where}.reserved_concurrency must be a whole number of at least 1, "
                         f"not {reserved!r}")


def _lambda_task(function: str, payload: dict[str, Any] | str, *, work_retry: bool,
                 timeout: int | None = None) -> dict[str, Any]:
    parameters: dict[str, Any] = {"FunctionName": f"${{{PLACEHOLDERS[function]}}}"}
    if isinstance(payload, str):
        parameters["Payload.$"] = payload
    else:
        parameters["Payload"] = payload
    state: dict[str, Any] = {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Parameters": parameters,
        "OutputPath": "$.Payload",
        "Retry": [*TASK_RETRY, *([WORK_RETRY] if work_retry else [])]}
    if timeout is not None:
        state["TimeoutSeconds"] = timeout
    return state


def definition(stage: Stage) -> dict[str, Any]:
    """The definition, the functions' ARNs as ``${MonitorPlanArn}``, ``${MonitorMapArn}``,
    ``${MonitorReduceArn}`` (``DefinitionSubstitutions``)."""
    read_objects = _lambda_task(MONITOR_MAP, "$", work_retry=True,
                                timeout=map_timeout(stage) + 15)
    read_prefix = {
        "Type": "Map",
        "Comment": "One hour prefix: its objects listed, read by EXPRESS children a batch "
                   "each, each batch's part written to S3 and its key returned",
        "ItemReader": {"Resource": "arn:aws:states:::s3:listObjectsV2",
                       "Parameters": {"Bucket.$": "$.run.captures_bucket",
                                      "Prefix.$": "$.read.prefix"}},
        "ItemBatcher": {"MaxItemsPerBatch": MAX_ITEMS_PER_BATCH,
                        "MaxInputBytesPerBatch": MAX_INPUT_BYTES_PER_BATCH,
                        "BatchInput": {"run.$": "$.run", "read.$": "$.read"}},
        "MaxConcurrency": map_concurrency(stage),
        "ToleratedFailurePercentage": 0,
        "Label": "ReadPrefix",
        "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "EXPRESS"},
                          "StartAt": "ReadObjects",
                          "States": {"ReadObjects": {**read_objects, "End": True}}},
        # its paths on the state's input, as the CDK guide's ResultWriterV2 example has them
        # (moto's interpreter evaluates them on the Map's results instead)
        "ResultWriter": {"Resource": "arn:aws:states:::s3:putObject",
                         "Parameters": {"Bucket.$": "$.run.runs_bucket",
                                        "Prefix.$": "$.read.results"}},
        "ResultSelector": {"Bucket.$": "$.ResultWriterDetails.Bucket",
                           "Key.$": "$.ResultWriterDetails.Key"},
        "ResultPath": "$.read.manifest",
        "OutputPath": "$.read",
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.read.lost",
                   "Next": "PrefixLost"}],
        "End": True,
    }
    reduce_endpoint = _lambda_task(MONITOR_REDUCE, "$", work_retry=True)
    return {
        "Comment": f"sagegate {stage.name}: the data quality monitor's scheduled run, each "
                   "endpoint's hour of captures read by a Distributed Map per prefix, then "
                   "merged, checked and written per endpoint",
        "StartAt": "Plan",
        "States": {
            "Plan": {**_lambda_task(MONITOR_PLAN, {"event.$": "$",
                                                   "execution.$": "$$.Execution.Name"},
                                    work_retry=True), "Next": "ReadPrefixes"},
            "ReadPrefixes": {
                "Type": "Map",
                "ItemsPath": "$.reads",
                "ItemSelector": {"run.$": "$.run", "read.$": "$$.Map.Item.Value"},
                "MaxConcurrency": PREFIX_CONCURRENCY,
                "ToleratedFailurePercentage": 0,
                "Label": "ReadPrefixes",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                    "StartAt": "ReadPrefix",
                    "States": {"ReadPrefix": read_prefix,
                               "PrefixLost": {"Type": "Pass", "OutputPath": "$.read",
                                              "End": True}}},
                "ResultPath": "$.reads",
                "Next": "Reduce",
            },
            "Reduce": {
                "Type": "Map",
                "ItemsPath": "$.endpoints",
                "ItemSelector": {"run.$": "$.run", "endpoint.$": "$$.Map.Item.Value",
                                 "reads.$": "$.reads"},
                "MaxConcurrency": REDUCE_CONCURRENCY,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "ReduceEndpoint",
                    "States": {
                        "ReduceEndpoint": {
                            **reduce_endpoint,
                            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.failure",
                                       "Next": "ReduceLost"}],
                            "End": True},
                        "ReduceLost": {"Type": "Pass",
                                       "Parameters": {"endpoint.$": "$.endpoint.endpoint",
                                                      "status": "lost",
                                                      "error.$": "$.failure.Cause"},
                                       "End": True}}},
                "Next": "Verdict",
            },
            "Verdict": {
                "Type": "Map",
                "Comment": "Once every endpoint is reduced: the run fails if one was lost",
                "ItemsPath": "$",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "WasItLost",
                    "States": {
                        "WasItLost": {"Type": "Choice",
                                      "Choices": [{"Variable": "$.status",
                                                   "StringEquals": "lost",
                                                   "Next": "PartsLost"}],
                                      "Default": "Whole"},
                        "PartsLost": {"Type": "Fail", "Error": "MonitorPartsLost",
                                      "Cause": "a part of an endpoint's window could not be "
                                               "read, so nothing was written for it: see the "
                                               "reduce's log line (status lost) and the "
                                               "failed Map Run"},
                        "Whole": {"Type": "Succeed"}}},
                "ResultPath": None,
                "End": True,
            },
        },
    }
