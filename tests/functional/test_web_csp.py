"""The web page's Content-Security-Policy when jobs are on: the page posts uploads to the jobs
bucket's S3 endpoint and reads job results from it, so its connect-src names that endpoint,
and only it."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from chalice.test import Client

import app as app_module
from chalicelib.core.config import Settings
from chalicelib.http import static
from chalicelib.services import Services


def connect_src(policy: str) -> list[str]:
    directive = next(part.strip() for part in policy.split(";")
                     if part.strip().startswith("connect-src"))
    return directive.split()[1:]


@pytest.mark.parametrize(("bucket", "environ", "expected"), [
    ("", {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:5123"}, ()),  # jobs off: nothing more
    ("b", {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:5123/", "AWS_REGION": "eu-west-1"},
     ("http://127.0.0.1:5123",)),
    ("b", {"AWS_ENDPOINT_URL": "http://localhost:4566"}, ("http://localhost:4566",)),
    ("jobs-bucket", {"AWS_REGION": "eu-west-1"},
     ("https://jobs-bucket.s3.amazonaws.com", "https://jobs-bucket.s3.eu-west-1.amazonaws.com")),
    ("jobs-bucket", {"AWS_DEFAULT_REGION": "us-east-1"},
     ("https://jobs-bucket.s3.amazonaws.com", "https://jobs-bucket.s3.us-east-1.amazonaws.com")),
    ("jobs-bucket", {"AWS_REGION": "*; script-src *"}, ("https://jobs-bucket.s3.amazonaws.com",)),
    ("b", {"AWS_ENDPOINT_URL_S3": "http://*.example.com"}, ()),  # never a wildcard
    ("b", {"AWS_ENDPOINT_URL_S3": "http://h:1 'unsafe-eval'"}, ()),
])
def test_the_upload_origins_are_the_buckets_endpoint_and_nothing_else(
        bucket: str, environ: dict[str, str], expected: tuple[str, ...]) -> None:
    assert static.upload_origins(bucket, environ) == expected


def test_the_policy_adds_the_origins_to_connect_src_only() -> None:
    plain = static.security_headers()
    assert plain == static.SECURITY_HEADERS
    policy = static.security_headers(("http://127.0.0.1:5123",))["Content-Security-Policy"]
    assert connect_src(policy) == ["'self'", "http://127.0.0.1:5123"]
    assert policy.replace(" http://127.0.0.1:5123", "") == plain["Content-Security-Policy"]


@pytest.fixture
def jobs_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5123")
    monkeypatch.setattr(app_module, "services", Services(
        Settings.from_env({"ENDPOINT_NAME": "e"}, jobs_bucket="sagegate-local-jobs")))
    with Client(app_module.app, stage_name="local") as client:
        yield client


def test_the_page_served_with_jobs_on_may_connect_to_the_bucket(jobs_on: Client) -> None:
    for path in ("/", "/static/app.js"):
        response = jobs_on.http.get(path)
        assert response.status_code == 200
        policy = response.headers["Content-Security-Policy"]
        assert connect_src(policy) == ["'self'", "http://127.0.0.1:5123"], path
        assert "script-src 'self';" in policy and "default-src 'self';" in policy
