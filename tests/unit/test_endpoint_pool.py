"""botocore's connection pool is as big as the server's concurrency."""
from __future__ import annotations

import pytest

from chalicelib.core.config import Settings
from chalicelib.inference import endpoint_config as endpoint


def settings(**overrides: object) -> Settings:
    return Settings.from_env({"ENDPOINT_NAME": "ep"}, **overrides)


def test_lambda_needs_one_connection_per_container() -> None:
    assert endpoint.pool_size(settings(), on_lambda=True) == 1


def test_a_threaded_local_server_gets_a_pool_for_its_concurrency() -> None:
    assert endpoint.pool_size(settings(), on_lambda=False) == endpoint.LOCAL_POOL_CONNECTIONS
    assert endpoint.LOCAL_POOL_CONNECTIONS > 16  # botocore's default of 10, sagegate's old 16


def test_the_setting_wins() -> None:
    assert endpoint.pool_size(settings(endpoint_max_connections=7), on_lambda=True) == 7


def test_the_client_is_built_with_that_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = endpoint.make_client(settings(endpoint_max_connections=48))
    assert client.meta.config.max_pool_connections == 48
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sagegate")
    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.13")
    assert endpoint.make_client(settings()).meta.config.max_pool_connections == 1


def test_botocore_does_not_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's own policy and quota are the only retries (chalicelib.core.retries)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert endpoint.make_client(settings()).meta.config.retries["total_max_attempts"] == 1
