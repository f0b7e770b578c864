"""chalicelib.awsclients: every boto3 client built from a named policy of core/aws.py; an
explicit endpoint or region is kept."""
from __future__ import annotations

import pytest

from chalicelib import awsclients
from chalicelib.core import aws


@pytest.fixture(autouse=True)
def _no_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.mark.parametrize("policy", [aws.CLI, aws.DEPLOY, aws.EVENTS_SQS, aws.JOBS_S3])
def test_a_client_waits_and_retries_as_its_policy_says(policy: aws.ClientPolicy) -> None:
    config = awsclients.build("s3", policy).meta.config
    assert (config.connect_timeout, config.read_timeout) == (policy.connect_timeout,
                                                             policy.read_timeout)
    assert config.retries == {"mode": policy.retry_mode,
                              "total_max_attempts": policy.total_max_attempts}


def test_an_explicit_endpoint_and_region_are_kept() -> None:
    client = awsclients.build("sqs", aws.EVENTS_SQS, endpoint_url="http://127.0.0.1:9",
                              region="eu-west-1")
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.region_name == "eu-west-1"
    assert awsclients.build("sqs", aws.CLI).meta.region_name == "us-east-1"  # boto3's lookup


def test_a_regions_clients_share_its_region_credentials_endpoint_and_policy() -> None:
    clients = awsclients.Clients(aws.DEPLOY, region="ap-south-1", credentials=("k", "s"),
                                 endpoint_url="http://127.0.0.1:9")
    assert clients.region_name == "ap-south-1"
    s3 = clients.client("s3")
    assert (s3.meta.region_name, s3.meta.endpoint_url) == ("ap-south-1", "http://127.0.0.1:9")
    assert s3._request_signer._credentials.access_key == "k"
    assert s3.meta.config.read_timeout == aws.DEPLOY.read_timeout
