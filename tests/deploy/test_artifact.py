"""The packaged function runs as Lambda would run it: only its zip, the layer and boto3.

The function zip and the layer zip that ``sagegate package --stage prod`` leaves for upload
are extracted into a Lambda-like tree (``var/task``, ``opt/python``, ``var/runtime``); a bare
interpreter (``python -I -S -B``, see ``sagegate/deploy/sandbox_child.py``) imports ``app``
from there with the function's environment variables as the SAM template sets them, and
replays the API Gateway events in ``tests/events`` against the emulator standing in for SageMaker.
"""
from __future__ import annotations

import base64
import copy
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from emulator.process import free_port, start_emulator
from sagegate.deploy import sandbox as lambda_sandbox
from sagegate.deploy.sandbox import DUMMY_CREDENTIALS, LambdaTree
from tests.deploy.conftest import ROOT, Package, load_event

pytestmark = pytest.mark.deploy

EMULATOR_CONFIG = ROOT / "tests" / "integration" / "emulator-config.json"
CATS = {281, 282, 283, 284, 285, 287}  # tabby, tiger cat, Persian, Siamese, Egyptian cat, lynx
EVENTS = ("predict-json", "predict-binary", "predict-bad-json", "predict-unsupported-type",
          "resize-binary", "health")


@dataclass(frozen=True)
class Run:
    answers: dict[str, dict[str, Any]]
    report: dict[str, Any]
    logs: str


@pytest.fixture(scope="module")
def prod(package: Callable[[str], Package]) -> Package:
    return package("prod")


@pytest.fixture(scope="module")
def tree(prod: Package, tmp_path_factory: pytest.TempPathFactory) -> LambdaTree:
    return LambdaTree.build(tmp_path_factory.mktemp("lambda"), prod.function_zip,
                            prod.layer_zip)


def function_env(prod: Package, endpoint_url: str, snapstart: bool = False) -> dict[str, str]:
    """The environment Lambda gives the function: the template's variables, the runtime's."""
    function = prod.resource("APIHandler")["Properties"]
    return lambda_sandbox.lambda_env(function["Environment"]["Variables"],
                                     f"sagegate-{prod.stage}", function["Runtime"],
                                     endpoint_url, snapstart)


def invoke(tree: LambdaTree, env: dict[str, str], names: tuple[str, ...],
           workdir: Path) -> Run:
    """Replay stored events through the packaged handler in a bare interpreter."""
    run = lambda_sandbox.invoke(tree, env, [load_event(name) for name in names], workdir)
    return Run(dict(zip(names, run.answers, strict=True)), run.report, run.logs)


@pytest.fixture(scope="module")
def run(prod: Package, tree: LambdaTree, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with start_emulator(EMULATOR_CONFIG) as emulator:
        yield invoke(tree, function_env(prod, emulator.url), EVENTS,
                     tmp_path_factory.mktemp("invoke"))


@pytest.fixture(scope="module")
def restored(prod: Package, tree: LambdaTree,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The same events after SnapStart's hooks ran, as in a copy restored from a snapshot."""
    with start_emulator(EMULATOR_CONFIG) as emulator:
        yield invoke(tree, function_env(prod, emulator.url, snapstart=True),
                     ("predict-binary", "health"), tmp_path_factory.mktemp("restored"))


def model_event(name: str, document: Any, content_type: str = "application/json") -> dict[str, Any]:
    """An API Gateway event for ``POST /models/{name}/predict``."""
    event = copy.deepcopy(load_event("predict-json"))
    event.update(resource="/models/{name}/predict", path=f"/models/{name}/predict",
                 pathParameters={"name": name}, isBase64Encoded=False,
                 body=document if isinstance(document, str) else json.dumps(document))
    event["headers"]["Content-Type"] = content_type
    event["multiValueHeaders"]["Content-Type"] = [content_type]
    event["requestContext"].update(resourcePath="/models/{name}/predict",
                                   path=f"/api/models/{name}/predict")
    return event


MODEL_EVENTS = {
    "iris": model_event("iris", {"instances": "[[6.7, 3.0, 5.2, 2.3]]"}),
    "iris-cortex": model_event("iris-cortex", {"sepal_length": 5.1, "sepal_width": 3.5,
                                               "petal_length": 1.4, "petal_width": 0.2}),
    "sentiment-positive": model_event("sentiment", {"text": "I loved this film"}),
    "sentiment-negative": model_event("sentiment", {"text": "This was awful and boring"}),
    "sentiment-refused": model_event("sentiment", "plain text", "text/plain"),
}


@pytest.fixture(scope="module")
def models_run(prod: Package, tree: LambdaTree,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Every pipeline's handler files as packaged, through the layer's dependencies."""
    with start_emulator(EMULATOR_CONFIG) as emulator:
        run = lambda_sandbox.invoke(tree, function_env(prod, emulator.url),
                                    list(MODEL_EVENTS.values()),
                                    tmp_path_factory.mktemp("models"))
        yield Run(dict(zip(MODEL_EVENTS, run.answers, strict=True)), run.report, run.logs)


def test_every_pipeline_runs_from_the_packaged_artifact(models_run: Run, tree: LambdaTree) -> None:
    answers = {name: (answer["statusCode"], json.loads(answer["body"]))
               for name, answer in models_run.answers.items()}
    assert answers["iris"][0] == 200, answers["iris"]
    assert answers["iris"][1]["predictions"][0][0]["label"] == "virginica"
    assert answers["iris-cortex"] == (200, answers["iris-cortex"][1])
    assert answers["iris-cortex"][1]["class"] == "setosa"
    positive, negative = (answers[f"sentiment-{kind}"] for kind in ("positive", "negative"))
    assert positive[0] == negative[0] == 200, (positive, negative)
    assert positive[1]["predictions"][0][0] > 0.5 > negative[1]["predictions"][0][0]
    status, refused = answers["sentiment-refused"]
    assert (status, refused["Code"]) == (400, "InvalidInput")
    # the TF Serving handler's tokenizer came from the layer, without huggingface-hub
    assert models_run.report["modules"]["tokenizers"].startswith(str(tree.layer / "python"))
    assert models_run.report["dev_packages"]["huggingface_hub"] is False
    assert "Traceback" not in models_run.logs


def body_of(answer: dict[str, Any]) -> dict[str, Any]:
    # Chalice leaves out Content-Type for JSON bodies; API Gateway then sends application/json
    assert answer["headers"].get("Content-Type", "application/json") == "application/json"
    assert not answer.get("isBase64Encoded")
    return json.loads(answer["body"])  # type: ignore[no-any-return]


def test_the_handler_imports_only_from_the_zips_and_the_runtime(run: Run, tree: LambdaTree) -> None:
    modules = run.report["modules"]
    for name in ("app", "chalice", "chalicelib"):
        assert modules[name].startswith(str(tree.task)), (name, modules[name])
    for name in ("numpy", "cv2"):
        assert modules[name].startswith(str(tree.layer / "python")), (name, modules[name])
    for name in ("boto3", "botocore", "snapshot_restore_py"):
        assert modules[name].startswith(str(tree.runtime)), (name, modules[name])
    assert run.report["dev_packages"] == {"onnxruntime": False, "skimage": False,
                                          "pytest": False, "PIL": False,
                                          "huggingface_hub": False}
    assert not run.report["site_loaded"]
    assert not any("site-packages" in entry for entry in run.report["sys_path"])


def test_the_function_zip_holds_no_heavy_or_runtime_packages(prod: Package) -> None:
    with zipfile.ZipFile(prod.function_zip) as zipped:
        tops = {name.split("/", 1)[0] for name in zipped.namelist()}
    assert not tops & {"numpy", "cv2", "boto3", "botocore", "onnxruntime"}, tops


def test_the_layer_holds_numpy_and_opencv_and_not_boto3(prod: Package) -> None:
    with zipfile.ZipFile(prod.layer_zip) as zipped:
        names = zipped.namelist()
    tops = {name.split("/", 2)[1] for name in names if name.count("/") >= 2}
    assert {"numpy", "cv2"} <= tops
    assert not tops & {"boto3", "botocore", "s3transfer"}
    assert all(name.startswith("python/") for name in names)
    assert not any("/tests/" in name for name in names)


@pytest.mark.parametrize("name", ["predict-json", "predict-binary"])
def test_a_cat_is_a_cat(run: Run, name: str) -> None:
    answer = run.answers[name]
    assert answer["statusCode"] == 200, answer["body"]
    predictions = body_of(answer)["predictions"]
    assert len(predictions) == 3
    assert predictions[0]["index"] in CATS, predictions


@pytest.mark.parametrize("name,status,code", [
    ("predict-bad-json", 400, "InvalidJSON"),
    ("predict-unsupported-type", 415, "UnsupportedMediaType"),
])
def test_bad_requests_get_their_error_codes(run: Run, name: str, status: int, code: str) -> None:
    answer = run.answers[name]
    assert answer["statusCode"] == status
    body = body_of(answer)
    assert body["Code"] == code
    assert body["request_id"] == answer["headers"]["X-Request-Id"]


def test_a_binary_answer_is_base64_for_api_gateway(run: Run) -> None:
    answer = run.answers["resize-binary"]
    assert answer["statusCode"] == 200
    assert answer["isBase64Encoded"] is True
    assert answer["headers"]["Content-Type"] == "image/png"
    image = cv2.imdecode(np.frombuffer(base64.b64decode(answer["body"]), np.uint8),
                         cv2.IMREAD_UNCHANGED)
    assert image.shape[:2] == (48, 64)


def test_health_answers_without_calling_the_endpoint(run: Run) -> None:
    answer = run.answers["health"]
    assert answer["statusCode"] == 200
    assert body_of(answer)["status"] == "ok"


def test_no_answer_or_log_line_holds_the_api_key_credentials_or_image(run: Run) -> None:
    api_key = load_event("predict-json")["headers"]["x-api-key"]
    image_b64 = load_event("predict-binary")["body"]
    answers = json.dumps(run.answers)
    for secret in (api_key, *DUMMY_CREDENTIALS.values()):
        assert secret not in answers
        assert secret not in run.logs
    for fragment in (image_b64[:64], image_b64[len(image_b64) // 2:][:64]):
        assert fragment not in run.logs
    assert "Traceback" not in answers and "Traceback" not in run.logs


def test_an_unreachable_endpoint_is_503_without_its_address(
        prod: Package, tree: LambdaTree, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    gone = invoke(tree, function_env(prod, f"http://127.0.0.1:{port}"), ("predict-json",),
                  tmp_path)
    answer = gone.answers["predict-json"]
    assert answer["statusCode"] == 503
    assert body_of(answer)["Code"] == "EndpointUnavailable"
    for leak in ("127.0.0.1", str(port), "Traceback", "botocore", "Errno"):
        assert leak not in answer["body"], leak


def test_the_runtime_is_the_one_the_project_python_selects(prod: Package, run: Run) -> None:
    version = (ROOT / ".python-version").read_text().strip()
    assert prod.resource("APIHandler")["Properties"]["Runtime"] == f"python{version}"
    assert run.report["python"] == version


def test_the_pipeline_is_built_during_init_not_by_the_first_request(run: Run) -> None:
    assert run.report["built_at_import"] is True
    assert '"message":"initialised"' in run.logs.replace(" ", "")


def test_a_copy_restored_from_a_snapshot_answers_correctly(restored: Run) -> None:
    snapstart = restored.report["snapstart"]
    assert snapstart["before_snapshot_hooks"] == 1
    assert snapstart["after_restore_hooks"] == 1
    assert "restored from snapshot" in restored.logs
    answer = restored.answers["predict-binary"]
    assert answer["statusCode"] == 200, answer["body"]
    assert body_of(answer)["predictions"][0]["index"] in CATS
    assert restored.answers["health"]["statusCode"] == 200
