"""Settings: what requests use, read from the environment once and validated.

Explicit arguments beat environment variables, which beat the defaults below;
``.chalice/config.json`` sets only what differs from them, per stage. A bad value raises a
:class:`~chalicelib.core.config_parsing.SettingError` naming the variable. The access variables
and those that decide a stage's event functions are read elsewhere, at import, because Chalice
fixes routes and functions when ``app.py`` is imported.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from chalicelib.core.aws import S3_SCHEME, S3Uri, valid_bucket_name
from chalicelib.core.config_names import (
    API_GATEWAY_TIMEOUT_SECONDS,
    CACHE_MEMORY_BYTES,
    CACHE_TABLE,
    CACHE_TTL_SECONDS,
    CAPTURE_DESTINATION,
    CAPTURE_MAX_BYTES,
    CAPTURE_MODE,
    CAPTURE_MODES,
    CAPTURE_SAMPLING_PERCENTAGE,
    CAPTURE_SCHEMES,
    CAPTURE_WRITER,
    CAPTURE_WRITERS,
    DEFAULT_JOBS_PREFIX,
    DEFAULT_K,
    ENCODE_FORMAT,
    ENCODE_FORMATS,
    ENDPOINT_ACCEPT,
    ENDPOINT_CONNECT_TIMEOUT,
    ENDPOINT_CONTENT_TYPE,
    ENDPOINT_MAX_ATTEMPTS,
    ENDPOINT_MAX_CONNECTIONS,
    ENDPOINT_NAME,
    ENDPOINT_READ_TIMEOUT,
    FIREHOSE_SCHEME,
    INPUT_HEIGHT,
    INPUT_WIDTH,
    JOB_BUDGET_SECONDS,
    JOB_MAX_IMAGE_PIXELS,
    JOB_READ_TIMEOUT_SECONDS,
    JOBS_BUCKET,
    JOBS_ERROR_TOPIC,
    JOBS_PREFIX,
    JOBS_SUCCESS_TOPIC,
    JOBS_TABLE,
    JOBS_TTL_SECONDS,
    JPEG_QUALITY,
    LABELS,
    MAX_ASPECT_RATIO,
    MAX_BODY_BYTES,
    MAX_IMAGE_PIXELS,
    MAX_JPEG_SCANS,
    MAX_OUTPUT_PIXELS,
    PNG_COMPRESSION,
    REQUEST_BUDGET_SECONDS,
    RESIZE_MODE,
    RESIZE_SHORTER_SIDE,
    SAGEMAKER_NAME,
    TOKEN_BUDGET_KEYS,
    TOKEN_BUDGET_PER_DAY,
    TOKEN_BUDGET_PER_MINUTE,
    TOKEN_BUDGET_TABLE,
    UPLOAD_EXPIRY_SECONDS,
    CaptureMode,
    CaptureWriter,
)
from chalicelib.core.config_parsing import check, check_type, listed, parse
from chalicelib.core.errors import ConfigurationError
from chalicelib.core.media import (
    ENDPOINT_ANSWER_TYPES,
    ENDPOINT_IMAGE_TYPES,
    ImageFormat,
    MediaType,
    ResizeMode,
)
from chalicelib.core.media import MODES as RESIZE_MODES

_LABELS_RE = re.compile(r"^[A-Za-z0-9_.-]*\Z")
_TABLE_RE = re.compile(r"^[A-Za-z0-9_.-]{3,255}\Z")  # DynamoDB's table name rule
# S3's safe key characters, "/"-separated non-empty segments, ending in "/" (or empty)
_KEY_PREFIX_RE = re.compile(r"^([A-Za-z0-9!_.*'()-]+/)*\Z")
# an SNS topic's ARN, or its bare name (1-256 letters, digits, '-', '_'; ".fifo" for FIFO)
_TOPIC_RE = re.compile(r"^(arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:)?[A-Za-z0-9_-]{1,256}"
                       r"(\.fifo)?\Z")


BUDGET_LIMITS = ("tokens_per_minute", "tokens_per_day")
"""A token budget's windows, as ``TOKEN_BUDGET_KEYS`` and model.json's ``llm.budgets`` name
them."""
MAX_BUDGET_TOKENS = 10**12


def budget_overrides(text: str) -> dict[str, dict[str, int]]:
    """``TOKEN_BUDGET_KEYS`` read: API key ids, each with its own limits (``{"tokens_per_minute":
    N, "tokens_per_day": M}``, either left out: the stage's; 0: no such window).

    Raises:
        SettingError: not such an object; the message names the variable and the key.
    """
    if not text:
        return {}
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        found = None
    check(isinstance(found, dict), TOKEN_BUDGET_KEYS,
          'must be a JSON object: {"<apiKeyId>": {"tokens_per_minute": N, "tokens_per_day": M}}')
    overrides = {}
    for key_id, limits in found.items():
        where = f"{TOKEN_BUDGET_KEYS}[{key_id!r}]"
        check(bool(key_id) and isinstance(limits, dict), where,
              f"must be an object of {listed(BUDGET_LIMITS)}")
        unknown = sorted(set(limits) - set(BUDGET_LIMITS))
        check(not unknown, where, f"has {unknown[:1]}: its keys are {listed(BUDGET_LIMITS)}")
        for name, value in limits.items():
            check(isinstance(value, int) and not isinstance(value, bool)
                  and 0 <= value <= MAX_BUDGET_TOKENS, f"{where}.{name}",
                  f"must be a whole number from 0 to {MAX_BUDGET_TOKENS}, not {value!r}")
        overrides[key_id] = dict(limits)
    return overrides


def _strict_s3_uri(text: str) -> bool:
    try:
        S3Uri.parse(text, strict=True)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything configurable about sagegate, validated.

    Attributes mirror the environment variables of the same name, lower-cased.
    """

    endpoint_name: str
    default_k: int = 5
    resize_mode: str = ResizeMode.SHORTER_SIDE
    resize_shorter_side: int = 256
    input_width: int = 224
    input_height: int = 224
    upscale: bool = False
    encode_format: str = ImageFormat.PNG
    jpeg_quality: int = 95
    png_compression: int = 0
    passthrough: bool = True
    endpoint_content_type: str = MediaType.X_IMAGE
    endpoint_accept: str = MediaType.JSON
    labels: str = "imagenet1k"
    max_body_bytes: int = 6 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    max_output_pixels: int = 16_777_216
    # Real panoramas pass (a phone's 360-degree sweep is about 9:1, equirectangular 2:1); at
    # 20:1 the endpoint's own shorter-side resize to 256 yields at most 5120x256.
    max_aspect_ratio: float = 20.0
    allow_corrupt_images: bool = False
    # Each scan of a progressive JPEG is a decoder pass over the whole image: 64 passes real
    # files (6 to about 20 scans) and bounds a crafted one (bench/worstcase.py measures it).
    max_jpeg_scans: int = 64
    # botocore's connection pool: 0 sizes it to the server (see endpoint_config.pool_size).
    endpoint_max_connections: int = 0
    endpoint_connect_timeout: float = 2.0
    endpoint_read_timeout: float = 20.0
    endpoint_max_attempts: int = 3
    request_budget_seconds: float = 25.0
    capture_mode: str = CaptureMode.OFF
    capture_sampling_percentage: float = 100.0
    capture_destination: str = ""
    capture_original: bool = False
    capture_max_bytes: int = 0  # a directory destination's cap (oldest files dropped)
    capture_cache_hits: bool = True  # marked sagegateCacheHit
    capture_writer: str = CaptureWriter.BACKGROUND
    cache_memory_bytes: int = 4 * 1024 * 1024  # bodies and keys; 0 turns that tier off
    cache_table: str = ""  # the shared tier's; empty for none
    cache_ttl_seconds: int = 86_400
    token_budget_table: str = ""  # the per-key token budgets' counters; empty: budgets off
    token_budget_per_minute: int = 100_000  # each API key's, across models (0: no window)
    token_budget_per_day: int = 2_000_000
    token_budget_keys: str = ""  # JSON: some keys' own limits (budget_overrides)
    jobs_bucket: str = ""  # uploads, tickets and results; empty turns jobs off
    jobs_prefix: str = DEFAULT_JOBS_PREFIX
    jobs_table: str = ""  # empty keeps job records in memory (one process only)
    jobs_ttl_seconds: int = 7 * 86_400
    upload_expiry_seconds: int = 900
    jobs_success_topic: str = ""  # the SNS topics asynchronous endpoints notify; empty: none
    jobs_error_topic: str = ""
    job_max_image_pixels: int = 200_000_000  # the synchronous routes keep max_image_pixels
    job_budget_seconds: float = 840.0  # Lambda's 900 s less a margin

    def __post_init__(self) -> None:
        # types first: "false" is truthy and 100.7 reaches OpenCV, so neither may get past here
        for field in dataclasses.fields(self):
            check_type(field.name, field.type, getattr(self, field.name))
        check(bool(SAGEMAKER_NAME.fullmatch(self.endpoint_name)), ENDPOINT_NAME,
              "must be a SageMaker endpoint name (1-63 letters, digits, hyphens)")
        check(self.resize_mode in RESIZE_MODES, RESIZE_MODE,
              f"must be one of {listed(RESIZE_MODES)}")
        check(self.endpoint_content_type in ENDPOINT_IMAGE_TYPES, ENDPOINT_CONTENT_TYPE,
              f"must be one of {listed(ENDPOINT_IMAGE_TYPES)}")
        check(self.encode_format in ENCODE_FORMATS, ENCODE_FORMAT,
              f"must be one of {listed(ENCODE_FORMATS)}")
        # a declared image type must match the bytes; application/x-image carries either
        declared = ImageFormat.for_media_type(self.endpoint_content_type)
        check(declared in (None, self.encode_format), ENCODE_FORMAT,
              f"must match {ENDPOINT_CONTENT_TYPE}={self.endpoint_content_type}")
        check(self.endpoint_accept in ENDPOINT_ANSWER_TYPES, ENDPOINT_ACCEPT,
              f"must be one of {listed(ENDPOINT_ANSWER_TYPES)}")
        check(bool(_LABELS_RE.match(self.labels)), LABELS,
              "must be a file name in chalicelib/labels")
        for name, value, low, high in self._ranges():
            check(low <= value <= high, name, f"must be between {low} and {high}")
        # one whole endpoint attempt must fit in the budget with time left before it: that
        # rest is preprocessing's share (see retries.RetryPolicy.preprocessing_deadline)
        check(self.endpoint_connect_timeout + self.endpoint_read_timeout
              < self.request_budget_seconds, ENDPOINT_READ_TIMEOUT,
              f"plus {ENDPOINT_CONNECT_TIMEOUT} must be below {REQUEST_BUDGET_SECONDS} (what is "
              "left of the budget is the time to preprocess a request)")
        self._check_capture()
        for name, table in ((CACHE_TABLE, self.cache_table),
                            (TOKEN_BUDGET_TABLE, self.token_budget_table)):
            check(table == "" or bool(_TABLE_RE.match(table)), name, "must be a DynamoDB "
                  "table name (3-255 letters, digits, '_', '-', '.') or empty")
        budget_overrides(self.token_budget_keys)
        self._check_jobs()

    def _check_jobs(self) -> None:
        check(self.jobs_bucket == "" or valid_bucket_name(self.jobs_bucket), JOBS_BUCKET,
              "must be an S3 bucket name (3-63 lowercase letters, digits, '.', '-') or empty")
        check(len(self.jobs_prefix) <= 256 and bool(_KEY_PREFIX_RE.match(self.jobs_prefix))
              and "/../" not in f"/{self.jobs_prefix}" and "/./" not in f"/{self.jobs_prefix}",
              JOBS_PREFIX, "must be a key prefix ending in '/' (segments of letters, digits "
              "and !_.*'()-; no '.' or '..' segment; at most 256 characters)")
        check(self.jobs_table == "" or bool(_TABLE_RE.match(self.jobs_table)), JOBS_TABLE,
              "must be a DynamoDB table name (3-255 letters, digits, '_', '-', '.') or empty")
        for name, topic in ((JOBS_SUCCESS_TOPIC, self.jobs_success_topic),
                            (JOBS_ERROR_TOPIC, self.jobs_error_topic)):
            check(topic == "" or bool(_TOPIC_RE.match(topic)), name,
                  "must be an SNS topic's ARN or name (letters, digits, '-', '_') or empty")
        # one whole endpoint attempt must fit in a job's budget, as in a request's
        check(self.endpoint_connect_timeout + self.job_read_timeout < self.job_budget_seconds,
              JOB_BUDGET_SECONDS, f"must be above {ENDPOINT_CONNECT_TIMEOUT} plus a job's "
              f"endpoint read timeout ({self.job_read_timeout:g} s)")

    @property
    def job_read_timeout(self) -> float:
        """The endpoint read timeout inside a job: past SageMaker's own 60 s limit for a
        real-time endpoint, unless ``ENDPOINT_READ_TIMEOUT`` is larger still."""
        return max(JOB_READ_TIMEOUT_SECONDS, self.endpoint_read_timeout)

    @property
    def jobs_enabled(self) -> bool:
        return self.jobs_bucket != ""

    def _check_capture(self) -> None:
        check(self.capture_mode in CAPTURE_MODES, CAPTURE_MODE,
              f"must be one of {listed(CAPTURE_MODES)}")
        check(self.capture_writer in CAPTURE_WRITERS, CAPTURE_WRITER,
              f"must be one of {listed(CAPTURE_WRITERS)}")
        if self.capture_mode == CaptureMode.OFF:
            return
        destination = self.capture_destination
        check(bool(destination), CAPTURE_DESTINATION,
              f"must be set when {CAPTURE_MODE} is {self.capture_mode!r} (a directory, "
              "s3://bucket/prefix or firehose://delivery-stream)")
        if destination.startswith(S3_SCHEME):
            check(_strict_s3_uri(destination), CAPTURE_DESTINATION,
                  "must be s3://bucket[/prefix] with a valid bucket name")
        elif destination.startswith(FIREHOSE_SCHEME):
            check(bool(re.match(r"^firehose://[a-zA-Z0-9_.-]{1,64}\Z", destination)),
                  CAPTURE_DESTINATION, "must be firehose://<delivery stream name>")
        else:
            check("://" not in destination, CAPTURE_DESTINATION,
                  f"must be a directory or start with one of {CAPTURE_SCHEMES}")

    def _ranges(self) -> list[tuple[str, float, float, float]]:
        return [
            (DEFAULT_K, self.default_k, 1, 100_000),
            (RESIZE_SHORTER_SIDE, self.resize_shorter_side, 8, 8192),
            (INPUT_WIDTH, self.input_width, 8, 8192),
            (INPUT_HEIGHT, self.input_height, 8, 8192),
            (JPEG_QUALITY, self.jpeg_quality, 1, 100),
            (PNG_COMPRESSION, self.png_compression, 0, 9),
            (MAX_BODY_BYTES, self.max_body_bytes, 1024, 10 * 1024 * 1024),
            (MAX_IMAGE_PIXELS, self.max_image_pixels, 64, 1_000_000_000),
            (MAX_OUTPUT_PIXELS, self.max_output_pixels, 64, 100_000_000),
            (MAX_ASPECT_RATIO, self.max_aspect_ratio, 1, 10_000),
            (MAX_JPEG_SCANS, self.max_jpeg_scans, 1, 10_000),
            (ENDPOINT_MAX_CONNECTIONS, self.endpoint_max_connections, 0, 1000),
            (ENDPOINT_CONNECT_TIMEOUT, self.endpoint_connect_timeout, 0.1, 10),
            (ENDPOINT_READ_TIMEOUT, self.endpoint_read_timeout, 0.1, 60),
            (ENDPOINT_MAX_ATTEMPTS, self.endpoint_max_attempts, 1, 10),
            (REQUEST_BUDGET_SECONDS, self.request_budget_seconds, 0.5,
             API_GATEWAY_TIMEOUT_SECONDS),
            (CAPTURE_SAMPLING_PERCENTAGE, self.capture_sampling_percentage, 0, 100),
            (CAPTURE_MAX_BYTES, self.capture_max_bytes, 0, 2**50),
            (CACHE_MEMORY_BYTES, self.cache_memory_bytes, 0, 2**40),
            (CACHE_TTL_SECONDS, self.cache_ttl_seconds, 60, 31_536_000),
            (TOKEN_BUDGET_PER_MINUTE, self.token_budget_per_minute, 0, MAX_BUDGET_TOKENS),
            (TOKEN_BUDGET_PER_DAY, self.token_budget_per_day, 0, MAX_BUDGET_TOKENS),
            (JOBS_TTL_SECONDS, self.jobs_ttl_seconds, 3600, 31_536_000),
            (UPLOAD_EXPIRY_SECONDS, self.upload_expiry_seconds, 60, 3600),
            (JOB_MAX_IMAGE_PIXELS, self.job_max_image_pixels, 64, 1_000_000_000),
            (JOB_BUDGET_SECONDS, self.job_budget_seconds, 10, 900),
        ]

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> Settings:
        """Settings from ``env``; ``overrides`` (field names) win over it.

        Raises:
            ConfigurationError: a variable is missing or has a bad value; the message names it.
        """
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            var = field.name.upper()
            if field.name in overrides:
                values[field.name] = overrides[field.name]
            elif env.get(var, "") != "" or (field.name == "labels" and var in env):
                values[field.name] = parse(var, env[var], field.type)
        if "endpoint_name" not in values:
            raise ConfigurationError(f"{ENDPOINT_NAME} is not set: name the SageMaker endpoint")
        return cls(**values)
