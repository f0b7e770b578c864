"""chalicelib/openapi.yaml against the running stack: schemathesis generates requests for every
operation it describes (examples, coverage and fuzzing phases, valid and invalid data) and
checks each answer: no 5xx, a documented status, content type, headers and body.

The emulator's fault injection needs a header the description does not name, so no request
here triggers it. Bounded: at most 25 fuzzed examples per operation, derandomized, no deadline.
"""
from __future__ import annotations

import json
import re

import pytest
import schemathesis
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sagegate.local.processes import ROOT
from tests.integration.conftest import JobsStack, Stack

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# A TargetModel sagegate accepts and sends on (the description's pattern, options.py's rule).
_TARGET_MODEL = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,1023}\Z")

# Bodies of the types schemathesis has no serializer for go as generated: the binary ones as
# bytes, JSON lines as the text generated for them (the description declares both so).
schemathesis.serializer.alias(["application/x-image", "application/x-npy"],
                              "application/octet-stream")
schemathesis.serializer.alias("application/jsonlines", "text/plain")

SCHEMA = schemathesis.openapi.from_path(ROOT / "chalicelib" / "openapi.yaml")
SCHEMA.config.update(request_timeout=30)
SCHEMA.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True, database="none")
# Methods a route lacks are tried too, but not TRACE and QUERY: chalice local's HTTP server
# answers those itself (501), where API Gateway refuses them before sagegate sees them.
SCHEMA.config.phases.coverage.unexpected_methods = {"get", "put", "post", "delete", "patch",
                                                    "options"}


# The job operations run against the stack with jobs on (moto's S3, the event pump): on the
# other, a stage without JOBS_BUCKET, they answer 501 JobsDisabled by design.
_JOB_PATHS = r"^/(uploads|jobs/|models/\{name\}/jobs)"


@SCHEMA.exclude(path_regex=_JOB_PATHS).parametrize()
def test_the_stack_answers_as_its_description_says(case: Case, stack: Stack) -> None:
    case.call_and_validate(base_url=stack.api.url, checks=CHECKS)


@SCHEMA.include(path_regex=_JOB_PATHS).parametrize()
def test_the_jobs_stack_answers_as_its_description_says(case: Case,
                                                         jobs_stack: JobsStack) -> None:
    case.call_and_validate(base_url=jobs_stack.api.url, checks=CHECKS)


def test_the_job_operations_answer_501_where_jobs_are_off(stack: Stack) -> None:
    upload = json.dumps({"model": "iris", "content_type": "text/csv"}).encode()
    job = json.dumps({"upload_id": "0" * 32}).encode()
    for method, path, body in (("POST", "/uploads", upload), ("POST", "/models/iris/jobs", job),
                               ("GET", "/jobs/" + "0" * 32, None)):
        response = stack.http.request(method, stack.api.url + path, body=body,
                                      headers={"Content-Type": "application/json"})
        assert response.status == 501, (path, response.data)
        assert json.loads(response.data)["Code"] == "JobsDisabled"


def test_the_served_description_is_the_file(stack: Stack) -> None:
    response = stack.http.request("GET", stack.api.url + "/openapi.yaml")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/yaml"
    assert response.data == (ROOT / "chalicelib" / "openapi.yaml").read_bytes()


@pytest.mark.parametrize("path", ["/predict", "/models/iris/predict"])
def test_a_target_model_for_a_single_model_endpoint_is_the_clients_error(
        stack: Stack, path: str) -> None:
    body = b"5.1,3.5,1.4,0.2" if path != "/predict" else json.dumps({
        "image": SCHEMA.raw_schema["paths"]["/predict"]["post"]["requestBody"]["content"]
        ["application/json"]["examples"]["image"]["value"]["image"]}).encode()
    response = stack.post(path, body, "text/csv" if path != "/predict" else "application/json",
                          **{"X-Target-Model": "model-a.tar.gz"})
    assert response.status == 400, response.data
    answer = json.loads(response.data)
    assert answer["Code"] == "InvalidParameter" and "multi-model" in answer["Message"]
