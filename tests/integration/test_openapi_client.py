"""A person can generate a working client from openapi.yaml: openapi-python-client writes one,
and it calls the live stack as the description says."""
from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import urllib3

from tests.integration.conftest import JobsStack, Stack

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    work = tmp_path_factory.mktemp("openapi-client")
    tool = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
    assert tool, "openapi-python-client is in the dev lock"
    # --meta none: the package alone, as a person adds it to their project
    done = subprocess.run([tool, "generate", "--path", str(ROOT / "chalicelib" / "openapi.yaml"),
                           "--output-path", str(work / "sagegate_client"), "--meta", "none"],
                          cwd=work, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(work))
    try:
        yield importlib.import_module("sagegate_client")
    finally:
        sys.path.remove(str(work))
        for name in [name for name in sys.modules if name.split(".")[0] == "sagegate_client"]:
            del sys.modules[name]


def api(package: ModuleType, path: str) -> Any:
    return importlib.import_module(f"{package.__name__}.api.{path}")


def test_the_generated_client_lists_and_describes_models(generated: ModuleType,
                                                         stack: Stack) -> None:
    client = generated.Client(base_url=stack.api.url)
    listed = api(generated, "models.list_models").sync(client=client)
    assert listed.default == "efficientnet-lite0"
    assert {model.name for model in listed.models} >= {"iris", "iris-cortex", "sentiment"}
    missing = api(generated, "models.describe_model").sync_detailed("nope", client=client)
    assert missing.status_code == 404


def test_the_generated_client_runs_a_tensor_model_and_reads_its_errors(
        generated: ModuleType, stack: Stack) -> None:
    client = generated.Client(base_url=stack.api.url)
    body_type = importlib.import_module(
        f"{generated.__name__}.models.predict_model_json_body").PredictModelJsonBody
    predict = api(generated, "predict.predict_model")
    answer = predict.sync("iris", client=client, body=body_type.from_dict(
        {"instances": [[5.1, 3.5, 1.4, 0.2]]}))
    assert answer.model == "iris"
    assert answer.predictions[0][0].label == "setosa"
    refused = predict.sync_detailed("iris", client=client, body=body_type.from_dict(
        {"instances": [[5.1, 3.5, 1.4]]}))
    assert refused.status_code == 400
    assert refused.parsed.code.value == "SignatureMismatch"


def test_the_generated_client_runs_a_job_on_an_upload(generated: ModuleType,
                                                      jobs_stack: JobsStack) -> None:
    """The job routes as the description says them: a presigned POST, the form's fields then
    the file straight to S3, the job, then its state until it ends, with the answer in it."""
    client = generated.Client(base_url=jobs_stack.api.url)
    models = importlib.import_module(f"{generated.__name__}.models")
    upload = api(generated, "jobs.create_upload").sync(client=client, body=models.UploadRequest(
        model="iris", content_type="text/csv"))
    assert isinstance(upload, models.Upload), upload
    form = [*upload.fields.to_dict().items(),
            ("file", ("rows.csv", b"5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n", "text/csv"))]
    posted = urllib3.PoolManager().request("POST", upload.url, fields=form)
    assert posted.status in (200, 201, 204), posted.data
    accepted = api(generated, "jobs.create_job").sync_detailed(
        "iris", client=client, body=models.CreateJobJsonBody.from_dict(
            {"upload_id": upload.upload_id}), k=1)
    assert accepted.status_code == 202 and accepted.headers["location"] == \
        f"/jobs/{accepted.parsed.job_id}"
    describe = api(generated, "jobs.describe_job")
    deadline = time.monotonic() + 60
    job = describe.sync(accepted.parsed.job_id, client=client)
    while isinstance(job, models.Job) and job.state.value in ("queued", "running") \
            and time.monotonic() < deadline:
        time.sleep(0.2)
        job = describe.sync(accepted.parsed.job_id, client=client)
    assert isinstance(job, models.Job), job  # the description's Job, parsed
    assert job.state.value == "succeeded", job
    rows = job.to_dict()["result"]["predictions"]
    assert [row[0]["label"] for row in rows] == ["setosa", "virginica"]
    missing = describe.sync_detailed("0" * 32, client=client)
    assert missing.status_code == 404 and missing.parsed.code.value == "JobNotFound"
