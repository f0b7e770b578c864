"""The AWS prices the cost part (``bench/cost.py``) uses: every one here, nowhere else.

US East (N. Virginia), USD, on demand, first volume tier, no free tier. Taken on :data:`TAKEN`
from the project's contracts (``shared/CONTRACTS.md`` section 11: Lambda's GB-second and request
prices by architecture) and AWS's pricing pages as the documentation search returned them
(Lambda's arm64 and x86_64 GB-second rates, API Gateway's REST requests, Firehose's ingestion in
5 KB steps). Prices change: check the pricing pages before quoting a figure.
"""
from __future__ import annotations

TAKEN = "2026-12-07"
REGION = "us-east-1"

GB = 1024 ** 3
LAMBDA_GB_SECOND = {"x86_64": 0.0000166667, "arm64": 0.0000133334}
"""Lambda's duration price per GB-second (memory x billed duration, 1 ms steps), by
architecture: arm64 (Graviton) is 20% cheaper."""
LAMBDA_REQUEST = 0.20 / 1_000_000
"""Per invocation, either architecture."""
LAMBDA_STREAMED_GB = 0.008
"""Per GB a response-streaming function sends beyond :data:`LAMBDA_STREAM_FREE_BYTES` of each
response (Lambda's pricing page; a chat answer of a few KB never reaches it)."""
LAMBDA_STREAM_FREE_BYTES = 6 * 1024 * 1024
API_GATEWAY_REST_REQUEST = 3.50 / 1_000_000
"""REST API, per request, the first 333 million a month."""
FIREHOSE_INGESTED_GB = 0.029
"""Data Firehose, Direct PUT, per GB ingested, the first 500 TB a month; each record is billed
in :data:`FIREHOSE_RECORD_STEP` steps (a 3 KB record as 5 KB)."""
FIREHOSE_RECORD_STEP = 5 * 1024
NOT_PRICED = (
    "API Gateway's response streaming (its guide says streaming is billed; the rate was not in "
    "the sources read)",
    "Firehose's dynamic partitioning (the dev stage's stream: per GB delivered, per object, "
    "per JQ hour)",
    "CloudWatch Logs ingestion, DynamoDB (cache, budgets), data transfer out",
)
"""Charges the table leaves out, said under it."""
