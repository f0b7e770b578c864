"""The model routes through the real app and a real botocore client with stubbed answers: the
registry, the tensor pipeline's coercion, the handler pipelines, per-request options, errors,
capture and metrics."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY

import app as app_module
from chalicelib.capture import Capturer
from chalicelib.capture.sinks import DirectorySink
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.loading import load_model, load_registry
from chalicelib.services import Services
from tests.corpus import models
from tests.corpus.generate import Case
from tests.functional.conftest import AnsweringApp, Harness, endpoint_response, make_settings
from tests.functional.test_corpus import check_answer

IRIS_ROW = [5.1, 3.5, 1.4, 0.2]
TFS_ROW = b'{"signature_name":"serving_default","instances":[[5.1,3.5,1.4,0.2]]}'
SETOSA = json.dumps({"predictions": [[0.97, 0.02, 0.01]]}).encode()
MODEL_CASES = models.cases()


def expect_iris(harness: Harness, body: bytes = TFS_ROW, answer: bytes = SETOSA,
                **params: Any) -> None:
    harness.stubber.add_response(
        "invoke_endpoint", endpoint_response(answer),
        {"EndpointName": "iris", "Body": body, "ContentType": "application/json",
         "Accept": "application/json", "InferenceId": ANY, **params})


def post_json(harness: Harness, path: str, document: Any, **headers: str) -> Any:
    return harness.post(path, json.dumps(document), "application/json", **headers)


def test_the_catalog_lists_every_model_and_describes_one(harness: Harness) -> None:
    listed = json.loads(harness.client.http.get("/models").body)
    pipelines = {model["name"]: model["pipeline"] for model in listed["models"]}
    assert pipelines == {"efficientnet-lite0": "image-classification", "iris": "tensor",
                         "iris-cortex": "cortex", "sentiment": "sagemaker-tfs",
                         "slow": "tensor", "efficientnet-lite0-ab": "image-classification",
                         "efficientnet-lite0-shadow": "image-classification",
                         "smollm2": "llm"}
    assert listed["default"] == "efficientnet-lite0"
    # this stage serves no jobs (no JOBS_BUCKET): the catalog offers none (test_jobs_routes
    # reads a jobs stage's entries)
    assert {model["jobs"] for model in listed["models"]} == {None}
    iris = json.loads(harness.client.http.get("/models/iris").body)
    assert iris["signature"]["inputs"] == [{"name": "features", "dtype": "float32",
                                            "shape": [-1, 4]}]
    assert iris["example"] == {"instances": [[0.0, 0.0, 0.0, 0.0]]}
    assert "text/csv" in iris["content_types"]
    cortex = json.loads(harness.client.http.get("/models/iris-cortex").body)
    assert cortex["example"]["sepal_length"] == 5.1  # model.json's own example


def test_an_unknown_model_is_a_404_naming_the_known_ones(harness: Harness) -> None:
    for response in (harness.client.http.get("/models/resnet"),
                     post_json(harness, "/models/resnet/predict", {})):
        body = json.loads(response.body)
        assert response.status_code == 404 and body["Code"] == "ModelNotFound"
        assert "iris" in body["models"]


@pytest.mark.parametrize("document", [
    {"instances": [IRIS_ROW]}, {"instances": json.dumps([IRIS_ROW])}, IRIS_ROW, [IRIS_ROW],
    {"features": [str(x) for x in IRIS_ROW]}, {"inputs": {"features": [IRIS_ROW]}},
])
def test_a_tensor_request_is_coerced_to_the_signature_and_labelled(
        harness: Harness, document: Any) -> None:
    expect_iris(harness)
    response = post_json(harness, "/models/iris/predict", document)
    assert response.status_code == 200, response.body
    answer = json.loads(response.body)
    assert answer["outputs"] == {"probabilities": [[0.97, 0.02, 0.01]]}
    assert answer["predictions"][0][0] == {"index": 0, "label": "setosa", "probability": 0.97}
    assert len(answer["predictions"][0]) == 3  # default_k of iris
    assert (answer["model"], answer["endpoint"], answer["variant"]) == ("iris", "iris",
                                                                         "AllTraffic")


def test_csv_rows_and_k_from_the_query(harness: Harness) -> None:
    expect_iris(harness, b'{"signature_name":"serving_default","instances":'
                         b'[[5.1,3.5,1.4,0.2],[6.7,3.0,5.2,2.3]]}',
                json.dumps({"predictions": [[0.9, 0.05, 0.05], [0.01, 0.1, 0.89]]}).encode())
    response = harness.post("/models/iris/predict?k=1", "5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n",
                            "text/csv")
    assert [row[0]["label"] for row in json.loads(response.body)["predictions"]] == \
        ["setosa", "virginica"]
    assert all(len(row) == 1 for row in json.loads(response.body)["predictions"])


def test_a_mismatch_is_a_400_naming_the_input_and_never_reaches_the_endpoint(
        harness: Harness) -> None:
    response = post_json(harness, "/models/iris/predict", {"instances": [[5.1, 3.5, 1.4]]})
    body = json.loads(response.body)
    assert response.status_code == 400 and body["Code"] == "SignatureMismatch"
    assert body["Message"] == ("input 'features': expected float32 of shape (-1, 4), "
                               "got 1 row of 3")
    assert body["expected"] == {"dtype": "float32", "shape": [-1, 4]}
    # (the harness asserts no stubbed call is left over, and none was made)


def test_variant_and_target_model_travel_per_request(harness: Harness) -> None:
    expect_iris(harness, TargetVariant="Challenger", TargetModel="iris-v2.tar.gz",
                CustomAttributes="trace=1")
    response = post_json(harness, "/models/iris/predict?target_model=iris-v2.tar.gz",
                         {"instances": [IRIS_ROW]},
                         **{"X-Target-Variant": "Challenger", "X-Custom-Attributes": "trace=1"})
    assert response.status_code == 200, response.body


@pytest.mark.parametrize("query,says", [("?colour=red", "Unknown query parameter"),
                                        ("?k=0", '"k" must be a whole number'),
                                        ("?variant=bad%20name", '"variant"')])
def test_bad_options_are_400(harness: Harness, query: str, says: str) -> None:
    response = post_json(harness, "/models/iris/predict" + query, [IRIS_ROW])
    body = json.loads(response.body)
    assert response.status_code == 400 and says in body["Message"]


def test_the_endpoints_own_refusal_is_a_model_error(harness: Harness) -> None:
    harness.stubber.add_client_error(
        "invoke_endpoint", "ModelError", '{"error": "bad input"}', 424,
        response_meta={"OriginalStatusCode": 400})
    response = post_json(harness, "/models/iris/predict", [IRIS_ROW])
    assert response.status_code == 502 and json.loads(response.body)["Code"] == "ModelError"


def test_the_cortex_handler_runs_unchanged(harness: Harness) -> None:
    expect_iris(harness)
    response = post_json(harness, "/models/iris-cortex/predict",
                         {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4,
                          "petal_width": 0.2})
    assert response.status_code == 200, response.body
    answer = json.loads(response.body)
    assert answer["class"] == "setosa"
    assert answer["probabilities"]["setosa"] == pytest.approx(0.97)
    assert response.headers["X-Amzn-Invoked-Production-Variant"] == "AllTraffic"


def test_the_tf_serving_inference_py_runs_unchanged(harness: Harness) -> None:
    sent: list[dict[str, Any]] = []
    harness.stubber.client.meta.events.register_first(
        "before-parameter-build.sagemaker-runtime.InvokeEndpoint",
        lambda params, **_: sent.append(params))
    harness.stubber.add_response("invoke_endpoint",
                                 endpoint_response(b'{"predictions": [[0.93]]}'))
    response = post_json(harness, "/models/sentiment/predict", {"text": "I loved this film"})
    assert response.status_code == 200, response.body
    assert json.loads(response.body) == {"predictions": [[0.93]]}
    body = json.loads(sent[0]["Body"])
    assert body["signature_name"] == "serving_default"
    (instance,) = body["instances"]
    assert len(instance["input_ids"]) == len(instance["input_mask"]) == 64
    assert instance["input_ids"][0] == 101 and instance["input_mask"][:3] == [1, 1, 1]


def test_a_handlers_value_error_is_a_400_and_any_other_failure_a_generic_500(
        harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "fragile"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps(
        {"endpoint": "iris", "pipeline": "cortex",
         "signature": {"inputs": [{"name": "features", "dtype": "float32",
                                   "shape": [-1, 4]}]}}))
    (folder / "handler.py").write_text(
        "def pre_inference(sample, signature, metadata):\n"
        "    if sample.get('bad'):\n        raise ValueError('bad must be false')\n"
        "    raise KeyError('secret-internal-detail')\n"
        "def post_inference(prediction, signature, metadata):\n    return {}\n")
    settings = make_settings()
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    registry.models["fragile"] = load_model(folder, settings, {})
    harness.use(settings)
    app_module.services._registry = registry  # the registry, with one test model more
    refused = post_json(harness, "/models/fragile/predict", {"bad": True})
    assert refused.status_code == 400
    assert json.loads(refused.body)["Message"] == "bad must be false"
    failed = post_json(harness, "/models/fragile/predict", {"bad": False})
    assert failed.status_code == 500 and json.loads(failed.body)["Code"] == "HandlerError"
    assert "secret-internal-detail" not in failed.body.decode()
    assert "secret-internal-detail" in caplog.text  # the traceback is in the log


def test_default_model_can_be_a_tensor_model(harness: Harness,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings()
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name,
                                        "DEFAULT_MODEL": "iris"})
    harness.use(settings)
    monkeypatch.setattr(app_module, "services", Services(
        settings, endpoint=app_module.services.endpoint, registry=registry))
    expect_iris(harness)
    response = post_json(harness, "/predict", [IRIS_ROW])
    assert json.loads(response.body)["model"] == "iris"


def test_a_tensor_inference_is_captured_and_counted_per_model(
        harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    harness.use(capturer=Capturer("both", DirectorySink(tmp_path)))
    expect_iris(harness)
    assert post_json(harness, "/models/iris/predict", [IRIS_ROW]).status_code == 200
    (record_file,) = tmp_path.glob("iris/AllTraffic/**/*.jsonl")
    record = json.loads(record_file.read_text())
    assert record["captureData"]["endpointInput"]["data"] == TFS_ROW.decode()
    assert record["captureData"]["endpointInput"]["encoding"] == "JSON"
    assert json.loads(record["captureData"]["endpointOutput"]["data"]) == json.loads(SETOSA)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    (log,) = [line for line in lines if line.get("message") == "request"]
    assert (log["model"], log["endpoint"], log["capture"]) == ("iris", "iris", "written")
    assert "model" in log["stages_ms"]
    metrics = [line for line in lines if "_aws" in line and "Requests" in line]
    assert metrics[0]["model"] == "iris"
    assert ["route", "model", "service"] in metrics[0]["_aws"]["CloudWatchMetrics"][0][
        "Dimensions"]


def test_a_broken_handler_file_fails_start_up_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Lambda the import builds everything (services.warm_up): a handler file that does
    not load stops the init, with the file named, before any request."""
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps(
        {"endpoint": "iris", "pipeline": "sagemaker-tfs"}))
    (folder / "inference.py").write_text("def input_handler(data):\n    return data\n")
    settings = make_settings()
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    registry.models["broken"] = load_model(folder, settings, {})
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # as the stage sets it
    services = Services(settings, registry=registry)
    with pytest.raises(ConfigurationError) as caught:
        services.warm_up(prime_codecs=False)
    assert "models/broken/inference.py" in caught.value.message
    assert str(tmp_path) not in caught.value.message


# --- handler models: failures, hostile bodies (issue 18) ------------------------------------

FAKE_SECRET = "AKIAFAKESECRET0123456789"


def fragile_model(harness: Harness, tmp_path: Path, **keys: Any) -> None:
    """Register ``fragile``, a Cortex model whose pre_inference raises with a secret in the
    message, beside the real registry's models."""
    folder = tmp_path / "fragile"
    folder.mkdir(exist_ok=True)
    (folder / "model.json").write_text(json.dumps(
        {"endpoint": "iris", "pipeline": "cortex",
         "signature": {"inputs": [{"name": "features", "dtype": "float32",
                                   "shape": [-1, 4]}]}, **keys}))
    (folder / "handler.py").write_text(
        "def pre_inference(sample, signature, metadata):\n"
        f"    raise ConnectionError('cannot reach db with password {FAKE_SECRET}')\n")
    settings = make_settings()
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    registry.models["fragile"] = load_model(folder, settings, {})
    harness.use(settings)
    app_module.services._registry = registry


def test_a_handler_failure_names_the_request_id_and_hides_the_exception(
        harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fragile_model(harness, tmp_path)
    response = post_json(harness, "/models/fragile/predict", {})
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (500, "HandlerError")
    assert answer["request_id"] == response.headers["X-Request-Id"]
    assert "request_id" in answer["Message"] and "log" in answer["Message"]
    assert answer["function"] == "pre_inference" and "exception" not in answer
    assert FAKE_SECRET not in response.body.decode()
    assert "ConnectionError" not in response.body.decode()
    (logged,) = [record for record in caplog.records if record.exc_info]
    assert answer["request_id"] in logged.getMessage()  # the log line the answer points to
    assert logged.request_id == answer["request_id"]  # type: ignore[attr-defined]
    assert FAKE_SECRET in caplog.text  # the traceback is in the log


def test_a_model_opting_in_shows_the_exceptions_type_and_message(
        harness: Harness, tmp_path: Path) -> None:
    fragile_model(harness, tmp_path, expose_handler_errors=True)
    response = post_json(harness, "/models/fragile/predict", {})
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (500, "HandlerError")
    assert answer["exception"] == {
        "type": "ConnectionError", "message": f"cannot reach db with password {FAKE_SECRET}"}
    assert answer["request_id"] == response.headers["X-Request-Id"]
    assert "Traceback" not in response.body.decode()


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_expose_handler_errors_is_validated_at_start_up(tmp_path: Path, value: Any) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps(
        {"endpoint": "iris", "pipeline": "tensor", "expose_handler_errors": value,
         "signature": {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 1]}]}}))
    with pytest.raises(ConfigurationError) as caught:
        load_model(folder, make_settings(), {})
    assert caught.value.message == ("models/m/model.json: key 'expose_handler_errors' must be "
                                    "true or false")


def test_1025_json_lines_to_sentiment_are_a_400_before_the_endpoint(harness: Harness) -> None:
    body = b'{"text": "fine"}\n' * 1025
    response = harness.post("/models/sentiment/predict", body, "application/jsonlines")
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (400, "SignatureMismatch")
    assert "1025 instances; at most 1024" in answer["Message"]
    # no endpoint answer was queued: a call would have failed the stubber


def test_1024_json_lines_to_sentiment_reach_the_endpoint(harness: Harness) -> None:
    harness.stubber.add_response("invoke_endpoint", endpoint_response(
        json.dumps({"predictions": [[0.5]] * 1024}).encode()))
    response = harness.post("/models/sentiment/predict", b'{"text": "fine"}\n' * 1024,
                            "application/jsonlines")
    assert response.status_code == 200, response.body


@pytest.mark.parametrize("path", ["/models/sentiment/predict", "/models/iris-cortex/predict"])
def test_100000_deep_json_to_a_handler_model_is_a_400(harness: Harness, path: str) -> None:
    response = harness.post(path, b"[" * 100_000 + b"]" * 100_000, "application/json")
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (400, "InvalidJSON")
    assert "deeper than 512 levels" in answer["Message"]


def test_cortex_v09_handler_runs_through_the_route(harness: Harness, tmp_path: Path) -> None:
    folder = tmp_path / "old-cortex"
    folder.mkdir()
    (folder / "model.json").write_text((
        Path(app_module.__file__).parent / "chalicelib/models/iris-cortex/model.json"
    ).read_text())
    (folder / "handler.py").write_text(
        "import numpy as np\n"
        "def pre_inference(sample, metadata):\n"
        "    return {metadata[0].name: [sample[k] for k in ('sl', 'sw', 'pl', 'pw')]}\n"
        "def post_inference(prediction, metadata):\n"
        "    return {'output': metadata[0].name, 'best': int(np.argmax(prediction[0][0]))}\n")
    settings = make_settings()
    registry = load_registry(settings, {"ENDPOINT_NAME": settings.endpoint_name})
    registry.models["old-cortex"] = load_model(folder, settings, {})
    harness.use(settings)
    app_module.services._registry = registry
    expect_iris(harness)
    response = post_json(harness, "/models/old-cortex/predict",
                         {"sl": 5.1, "sw": 3.5, "pl": 1.4, "pw": 0.2})
    assert response.status_code == 200, response.body
    assert json.loads(response.body) == {"output": "probabilities", "best": 0}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", MODEL_CASES, ids=[case.name for case in MODEL_CASES])
def test_every_model_route_corpus_case_is_answered_before_the_endpoint(
        answering_app: AnsweringApp, case: Case) -> None:
    calls = answering_app.endpoint.calls
    response = answering_app.client.http.post(case.path, body=case.body,
                                              headers=case.request_headers())
    check_answer(case, response.status_code, response.body, response.headers)
    assert answering_app.endpoint.calls == calls  # refused before the endpoint was called


def test_the_model_corpus_covers_issue_18s_reproducers() -> None:
    names = {case.name for case in MODEL_CASES}
    assert {"model-float32-overflow-instances", "model-float32-overflow-csv",
            "model-float32-overflow-cortex", "model-csv-field-over-limit",
            "model-batch-1025-npy", "model-npy-dtype-datetime64", "model-npy-dtype-complex",
            "model-npy-dtype-structured", "model-npy-dtype-bool",
            "model-number-text-underscore"} <= names
    assert all(400 <= case.status < 500 for case in MODEL_CASES)


@pytest.mark.parametrize("error", [RecursionError, MemoryError])
def test_a_recursion_or_memory_error_escaping_a_handler_is_a_handler_error(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, error: type[Exception]) -> None:
    def fail(*args: Any) -> None:
        raise error("deep inside")

    monkeypatch.setattr("chalicelib.inference.userfiles.tfs.TfsHandler.__call__", fail)
    response = post_json(harness, "/models/sentiment/predict", {"text": "fine"})
    answer = json.loads(response.body)
    assert (response.status_code, answer["Code"]) == (500, "HandlerError")
    assert "Traceback" not in response.body.decode() and "deep inside" not in answer["Message"]
