"""The settings' names and vocabulary: every environment variable sagegate reads, the values
some of them take, and the defaults more than one reader shares. Which module reads each group
is said above it."""
from __future__ import annotations

import enum
import re

from chalicelib.core.aws import S3_SCHEME
from chalicelib.core.media import ImageFormat

ENDPOINT_NAME = "ENDPOINT_NAME"
DEFAULT_K = "DEFAULT_K"
RESIZE_MODE = "RESIZE_MODE"
RESIZE_SHORTER_SIDE = "RESIZE_SHORTER_SIDE"
INPUT_WIDTH = "INPUT_WIDTH"
INPUT_HEIGHT = "INPUT_HEIGHT"
UPSCALE = "UPSCALE"
ENCODE_FORMAT = "ENCODE_FORMAT"
JPEG_QUALITY = "JPEG_QUALITY"
PNG_COMPRESSION = "PNG_COMPRESSION"
PASSTHROUGH = "PASSTHROUGH"
ENDPOINT_CONTENT_TYPE = "ENDPOINT_CONTENT_TYPE"
ENDPOINT_ACCEPT = "ENDPOINT_ACCEPT"
LABELS = "LABELS"
MAX_BODY_BYTES = "MAX_BODY_BYTES"
MAX_IMAGE_PIXELS = "MAX_IMAGE_PIXELS"
MAX_OUTPUT_PIXELS = "MAX_OUTPUT_PIXELS"
MAX_ASPECT_RATIO = "MAX_ASPECT_RATIO"
ALLOW_CORRUPT_IMAGES = "ALLOW_CORRUPT_IMAGES"
MAX_JPEG_SCANS = "MAX_JPEG_SCANS"
ENDPOINT_MAX_CONNECTIONS = "ENDPOINT_MAX_CONNECTIONS"
ENDPOINT_CONNECT_TIMEOUT = "ENDPOINT_CONNECT_TIMEOUT"
ENDPOINT_READ_TIMEOUT = "ENDPOINT_READ_TIMEOUT"
ENDPOINT_MAX_ATTEMPTS = "ENDPOINT_MAX_ATTEMPTS"
REQUEST_BUDGET_SECONDS = "REQUEST_BUDGET_SECONDS"
CAPTURE_MODE = "CAPTURE_MODE"
CAPTURE_SAMPLING_PERCENTAGE = "CAPTURE_SAMPLING_PERCENTAGE"
CAPTURE_DESTINATION = "CAPTURE_DESTINATION"
CAPTURE_ORIGINAL = "CAPTURE_ORIGINAL"
CAPTURE_MAX_BYTES = "CAPTURE_MAX_BYTES"
CAPTURE_CACHE_HITS = "CAPTURE_CACHE_HITS"
CAPTURE_WRITER = "CAPTURE_WRITER"
CACHE_MEMORY_BYTES = "CACHE_MEMORY_BYTES"
CACHE_TABLE = "CACHE_TABLE"
CACHE_TTL_SECONDS = "CACHE_TTL_SECONDS"
TOKEN_BUDGET_TABLE = "TOKEN_BUDGET_TABLE"  # the per-key token budgets' DynamoDB table
TOKEN_BUDGET_PER_MINUTE = "TOKEN_BUDGET_PER_MINUTE"  # each key's tokens a minute, every model
TOKEN_BUDGET_PER_DAY = "TOKEN_BUDGET_PER_DAY"
TOKEN_BUDGET_KEYS = "TOKEN_BUDGET_KEYS"  # JSON: {"<apiKeyId>": {"tokens_per_minute", ...}}
JOBS_BUCKET = "JOBS_BUCKET"
JOBS_PREFIX = "JOBS_PREFIX"
JOBS_TABLE = "JOBS_TABLE"
JOBS_TTL_SECONDS = "JOBS_TTL_SECONDS"
UPLOAD_EXPIRY_SECONDS = "UPLOAD_EXPIRY_SECONDS"
JOBS_SUCCESS_TOPIC = "JOBS_SUCCESS_TOPIC"
JOBS_ERROR_TOPIC = "JOBS_ERROR_TOPIC"
JOB_MAX_IMAGE_PIXELS = "JOB_MAX_IMAGE_PIXELS"
JOB_BUDGET_SECONDS = "JOB_BUDGET_SECONDS"
# Read at import by chalicelib.core.access (Chalice fixes a route's authentication then).
SAGEGATE_AUTH = "SAGEGATE_AUTH"
CORS_ALLOW_ORIGIN = "CORS_ALLOW_ORIGIN"
COGNITO_USER_POOL_ARNS = "COGNITO_USER_POOL_ARNS"
SAGEGATE_OPEN_API = "SAGEGATE_OPEN_API"
# Powertools' own names, read by chalicelib.core.observability when it logs and flushes metrics.
POWERTOOLS_SERVICE_NAME = "POWERTOOLS_SERVICE_NAME"
POWERTOOLS_METRICS_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"
SERVICE = "sagegate"  # the default service name and metrics namespace
# Read at import by chalicelib.core.config_deployment (which event functions a stage declares)
# besides JOBS_BUCKET, JOBS_PREFIX and the topics above; the scheduled monitor reads its own
# settings itself (chalicelib.monitor.deployed_settings), the re-drive its own
# (chalicelib.jobs.redrive).
MONITOR_BASELINE = "MONITOR_BASELINE"
MONITOR_SCHEDULE = "MONITOR_SCHEDULE"
MONITOR_ENGINE = "MONITOR_ENGINE"
MONITOR_FANNED_OUT = "stepfunctions"  # MONITOR_ENGINE's; anything else: one function
JOB_REDRIVE_PERIOD_SECONDS = "JOB_REDRIVE_PERIOD_SECONDS"
# read by the jobs room when its functions run (chalicelib.jobs.redrive, chalicelib.jobs.lifetime)
JOB_REDRIVE_AFTER_SECONDS = "JOB_REDRIVE_AFTER_SECONDS"
JOB_RUNNER_TIMEOUT_SECONDS = "JOB_RUNNER_TIMEOUT_SECONDS"

# Lambda's own runtime variables (chalicelib.core.lifecycle reads them)
AWS_LAMBDA_FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"  # <app>-<stage>[-<function>]
AWS_EXECUTION_ENV = "AWS_EXECUTION_ENV"  # AWS_Lambda_python3.13
LAMBDA_TASK_ROOT = "LAMBDA_TASK_ROOT"
AWS_LAMBDA_INITIALIZATION_TYPE = "AWS_LAMBDA_INITIALIZATION_TYPE"  # on-demand, snap-start...

DEFAULT_JOBS_PREFIX = "jobs/"
JOBS_TICKETS = "tickets/"  # under JOBS_PREFIX: writing one starts the job's runner (S3 event)
DEFAULT_MONITOR_SCHEDULE = "cron(5 * * * ? *)"
"""Hourly, five minutes past. The monitor room, which imports no other room, keeps the same
value: a test holds the two equal."""
DEFAULT_JOB_REDRIVE_PERIOD_SECONDS = 300
"""The re-drive's own reader keeps the same value: a test holds the two equal."""

ENCODE_FORMATS = (ImageFormat.PNG, ImageFormat.JPEG)


class CaptureMode(enum.StrEnum):
    """``CAPTURE_MODE``: what data capture records (SageMaker's CaptureMode Input/Output)."""

    OFF = "off"
    INPUT = "input"
    OUTPUT = "output"
    BOTH = "both"


CAPTURE_MODES = tuple(CaptureMode)


class CaptureWriter(enum.StrEnum):
    """``CAPTURE_WRITER``: when a capture record is stored."""

    BACKGROUND = "background"
    """After the response, by the capture writer's thread (on Lambda before the environment
    may freeze): the request pays only the hand-over."""
    INLINE = "inline"  # before the response, within the request's time budget


CAPTURE_WRITERS = tuple(CaptureWriter)
FIREHOSE_SCHEME = "firehose://"
CAPTURE_SCHEMES = (S3_SCHEME, FIREHOSE_SCHEME)  # anything else is a local directory
# API Gateway's integration timeout: the whole request, retries included, must fit inside it.
API_GATEWAY_TIMEOUT_SECONDS = 29.0
# SageMaker endpoint and production variant names: alphanumerics and inner hyphens, 63 at
# most. Whole-string use only (fullmatch): names go into headers, paths and logs.
SAGEMAKER_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
# SageMaker's own limit for a real-time endpoint to answer; a job's read timeout is above it
SAGEMAKER_INVOKE_SECONDS = 60.0
JOB_READ_TIMEOUT_SECONDS = SAGEMAKER_INVOKE_SECONDS + 10.0
