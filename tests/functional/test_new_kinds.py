"""A pipeline kind and a job backend sagegate does not ship, each one module
(``tests/functional/toys``) and one registration line, serve a request and a job through the
real routes, registry, jobs service and runner."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from chalice.test import Client
from moto import mock_aws

import app as app_module
from chalicelib.capture import Capturer
from chalicelib.core.config import Settings
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient
from chalicelib.jobs.records import JobState
from chalicelib.jobs.store import MemoryJobStore
from chalicelib.registry import kinds
from chalicelib.registry.loading import Registered, load_registry
from chalicelib.services import Services
from tests.functional.conftest import endpoint_response
from tests.functional.toys import toy_backend, toy_kind

BUCKET, PREFIX = "sagegate-jobs", "jobs/"
KINDS = (*kinds.KINDS, toy_kind.RULES)  # the kind's one registration line
BACKENDS = (*kinds.BACKENDS, toy_backend.RULES)  # the backend's


@pytest.fixture
def toy_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "summer"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps({
        "endpoint": "summer", "pipeline": "csv-sum", "content_type": "text/csv",
        "jobs": {"backend": "outbox"}}))
    settings = Settings.from_env({"ENDPOINT_NAME": "summer"}, jobs_bucket=BUCKET,
                                 jobs_prefix=PREFIX)
    env = {"ENDPOINT_NAME": "summer", "DEFAULT_MODEL": "summer"}
    registry = load_registry(settings, env, root=tmp_path,
                             known=Registered.of(KINDS, BACKENDS))
    runtime = boto3.client("sagemaker-runtime", region_name="us-east-1")
    endpoint = EndpointClient(runtime, RetryPolicy(max_attempts=1, budget_seconds=10))
    toy_backend.OUTBOX.clear()
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        services = Services(settings, registry=registry, endpoint=endpoint,
                            job_endpoint=endpoint, job_store=MemoryJobStore(), s3=s3,
                            capturer=Capturer("off", None), env=env, kinds=KINDS,
                            job_backends=BACKENDS)
        monkeypatch.setattr(app_module, "services", services)
        with Stubber(runtime) as stubber, Client(app_module.app) as client:
            yield client, stubber
            stubber.assert_no_pending_responses()


def test_a_new_kind_serves_a_request_through_the_model_route(toy_stage: Any) -> None:
    client, stubber = toy_stage
    stubber.add_response("invoke_endpoint", endpoint_response(b"6.5", "application/json"),
                         {"EndpointName": "summer", "Body": b"1.0,2.5,3.0",
                          "ContentType": "text/csv", "Accept": "application/json",
                          "InferenceId": stubber_any()})
    answer = client.http.post("/models/summer/predict", body=b"1,2.5,3",
                              headers={"Content-Type": "text/csv"})
    assert answer.status_code == 200, answer.body
    assert json.loads(answer.body) == {"sum": 6.5, "count": 3, "model": "summer"}
    refused = client.http.post("/models/summer/predict", body=b"{}",
                               headers={"Content-Type": "application/json"})
    assert refused.status_code == 415  # what the kind accepts is the kind's
    bad = client.http.post("/models/summer/predict", body=b"1,two",
                           headers={"Content-Type": "text/csv"})
    assert (bad.status_code, json.loads(bad.body)["Code"]) == (400, "InvalidInput")
    described = json.loads(client.http.get("/models/summer").body)
    assert described["pipeline"] == "csv-sum" and described["content_types"] == ["text/csv"]
    assert described["example"] == "1,2,3" and described["csv"] == {"row": "numbers"}
    assert described["jobs"]["backend"] == "outbox"


def test_a_new_backend_runs_and_completes_a_job_of_the_new_kind(toy_stage: Any) -> None:
    client, stubber = toy_stage
    created = client.http.post("/models/summer/jobs", body=b"4,5",
                               headers={"Content-Type": "text/csv"})
    assert created.status_code == 202, created.body
    job_id = json.loads(created.body)["job_id"]
    services = app_module.services
    stubber.add_response("invoke_endpoint", endpoint_response(b"9", "application/json"))
    running = services.job_execution.run_ticket(f"{PREFIX}tickets/{job_id}", "request-1")
    assert running is not None and running.state is JobState.RUNNING
    assert running.lease_expires_at == pytest.approx(running.updated_at
                                                     + toy_backend.LEASE_SECONDS, abs=5)
    assert json.loads(client.http.get(f"/jobs/{job_id}").body)["state"] == "running"
    assert services.job_execution.complete({"unrelated": True}) is None  # no backend's
    [notice] = toy_backend.OUTBOX
    done = services.job_execution.complete(notice)
    assert done is not None and done.state is JobState.SUCCEEDED
    view = json.loads(client.http.get(f"/jobs/{job_id}").body)
    assert view["state"] == "succeeded"
    assert view["result"] == {"sum": 9.0, "count": 2, "model": "summer"}


def test_a_model_naming_an_unregistered_kind_or_backend_fails_start_up(tmp_path: Path) -> None:
    from chalicelib.core.errors import ConfigurationError

    folder = tmp_path / "summer"
    folder.mkdir()
    settings = Settings(endpoint_name="summer")
    env = {"DEFAULT_MODEL": "summer"}
    for document, key in (({"endpoint": "summer", "pipeline": "csv-sum"}, "'pipeline'"),
                          ({"endpoint": "summer", "pipeline": "tensor",
                            "signature": {"inputs": [{"name": "x", "dtype": "float32",
                                                      "shape": [-1, 1]}]},
                            "jobs": {"backend": "outbox"}}, "'jobs.backend'")):
        (folder / "model.json").write_text(json.dumps(document))
        with pytest.raises(ConfigurationError, match=key):
            load_registry(settings, env, root=tmp_path)  # the built-in kinds and backends


def stubber_any() -> Any:
    from botocore.stub import ANY

    return ANY
