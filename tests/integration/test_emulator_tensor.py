"""Tensor models (TF Serving's contract over ONNX graphs) through boto3's InvokeEndpoint.

One emulator process for the module, serving three tiny graphs written by
``tests/unit/emulator/onnxbuild.py``: ``iris`` (``features`` float32 (-1, 4) ->
``probabilities`` (-1, 3)), ``tokens`` (``input_ids``, ``input_mask`` int32 (-1, 8) ->
``outputs`` (-1, 1)) and ``pairs`` (``x`` int64 (-1, 2) -> ``doubled``, ``total``), plus
``iris-small`` (the iris graph, at most 4 instances per request). Every body format goes over
the real wire, and refusals arrive as botocore's ``ModelError`` with the container's answer.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from emulator.process import EmulatorProcess, start_emulator
from tests.integration.test_emulator import make_client, raw_request
from tests.unit.emulator import onnxbuild

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

IRIS = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]]


def variants(model: str) -> dict[str, Any]:
    return {"variants": [{"name": "AllTraffic", "model": model}]}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    directory = tmp_path_factory.mktemp("tensor-emulator")
    paths = onnxbuild.write_models(directory / "models")
    config = {
        "default_endpoint": "iris",
        "models": {
            "iris": {"kind": "tensor", "path": str(paths["classifier"])},
            "iris-small": {"kind": "tensor", "path": str(paths["classifier"]),
                           "max_instances": 4},
            "tokens": {"kind": "tensor", "path": str(paths["two-inputs"])},
            "pairs": {"kind": "tensor", "path": str(paths["two-outputs"]), "threads": 1},
        },
        "endpoints": {name: variants(name) for name in ("iris", "iris-small", "tokens", "pairs")},
    }  # fmt: skip
    path = directory / "config.json"
    path.write_text(json.dumps(config))
    with start_emulator(path, timeout=60) as process:
        yield process


@pytest.fixture(scope="module")
def client(emulator: EmulatorProcess) -> Any:
    return make_client(emulator.url)


def invoke(client: Any, endpoint: str, body: object, **options: Any) -> dict[str, Any]:
    options.setdefault("ContentType", "application/json")
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    response: dict[str, Any] = client.invoke_endpoint(EndpointName=endpoint, Body=body, **options)
    response["Payload"] = response["Body"].read()
    return response


def reference(rows: list[list[float]]) -> np.ndarray:
    return onnxbuild.classifier_reference(np.array(rows, dtype=np.float32))


def predictions(response: dict[str, Any]) -> Any:
    return json.loads(response["Payload"])["predictions"]


def test_row_format_over_invoke_endpoint(client: Any) -> None:
    body = {"signature_name": "serving_default", "instances": IRIS}

    response = invoke(client, "iris", body)

    assert response["ContentType"] == "application/json"
    assert response["InvokedProductionVariant"] == "AllTraffic"
    rows = np.array(predictions(response), dtype=np.float32)
    assert np.array_equal(rows, reference(IRIS))  # float32 survives the JSON round trip


def test_columnar_format_over_invoke_endpoint(client: Any) -> None:
    response = invoke(client, "iris", {"inputs": IRIS})

    outputs = json.loads(response["Payload"])["outputs"]
    assert np.array_equal(np.array(outputs, dtype=np.float32), reference(IRIS))


def test_jsonlines_in_and_out(client: Any) -> None:
    body = "\n".join(json.dumps(row) for row in IRIS)

    response = invoke(client, "iris", body, ContentType="application/jsonlines",
                      Accept="application/jsonlines")  # fmt: skip

    assert response["ContentType"] == "application/jsonlines"
    assert response["Payload"].count(b"\n") == 0
    np.testing.assert_allclose(predictions(response), reference(IRIS), rtol=1e-6)


def test_csv_rows_over_invoke_endpoint(client: Any) -> None:
    body = "\n".join(",".join(str(value) for value in row) for row in IRIS)

    response = invoke(client, "iris", body, ContentType="text/csv")

    np.testing.assert_allclose(predictions(response), reference(IRIS), rtol=1e-6)


def test_npy_over_invoke_endpoint(client: Any) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array(IRIS, dtype=np.float32))

    response = invoke(client, "iris", buffer.getvalue(), ContentType="application/x-npy")

    assert response["ContentType"] == "application/json"
    np.testing.assert_allclose(predictions(response), reference(IRIS), rtol=1e-6)


def test_named_int32_inputs_over_invoke_endpoint(client: Any) -> None:
    body = {"instances": [
        {"input_ids": list(range(8)), "input_mask": [1] * 8},
        {"input_ids": [5] * 8, "input_mask": [1, 1, 0, 0, 0, 0, 0, 0]},
    ]}  # fmt: skip

    assert predictions(invoke(client, "tokens", body)) == [[28.0], [10.0]]


def test_several_outputs_over_invoke_endpoint(client: Any) -> None:
    rows = invoke(client, "pairs", {"instances": [[1, 2], [3, 4]]})
    columns = invoke(client, "pairs", {"inputs": {"x": [[1, 2], [3, 4]]}})

    assert predictions(rows) == [{"doubled": [2, 4], "total": 3.0},
                                 {"doubled": [6, 8], "total": 7.0}]  # fmt: skip
    assert json.loads(columns["Payload"]) == {
        "outputs": {"doubled": [[2, 4], [6, 8]], "total": [3.0, 7.0]}
    }


@pytest.mark.parametrize(
    ("endpoint", "body", "options", "message"),
    [
        ("iris", {"instances": [[1, 2, 3]]}, {},
         "each instance of input 'features' must have shape (4,)"),
        ("iris", {"instances": [["a", "b", "c", "d"]]}, {}, "takes numbers, got a string"),
        ("iris", {"instances": []}, {}, "no instances: send at least one"),
        ("iris", {"instances": [{"b64": "AAAA"}]}, {}, '{"b64": ...} values'),
        ("tokens", {"instances": [{"input_ids": [1] * 8}]}, {},
         "instance 0 is missing input 'input_mask'"),
        ("tokens", {"instances": [{"input_ids": [1] * 8, "input_mask": [1] * 8, "x": [0]}]}, {},
         "instance 0 has unknown input 'x'"),
        ("tokens", "1,2,3,4,5,6,7,8", {"ContentType": "text/csv"},
         "text/csv feeds a single input, but this model takes 2"),
        ("iris", "{not json", {}, "JSON parse error"),
        ("iris-small", {"instances": IRIS * 2}, {},
         "6 instances is over this endpoint's limit of 4 per request"),
    ],
    ids=["rank", "strings", "empty", "b64", "missing", "unknown", "csv-multi", "json", "bound"],
)  # fmt: skip
def test_refusals_are_model_errors_with_the_tf_serving_answer(
    client: Any, endpoint: str, body: object, options: dict[str, str], message: str
) -> None:
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, endpoint, body, **options)

    response = raised.value.response
    assert response["Error"]["Code"] == "ModelError"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert response["OriginalStatusCode"] == 400
    assert message in json.loads(response["OriginalMessage"])["error"]
    assert response["LogStreamArn"].endswith(f"/aws/sagemaker/Endpoints/{endpoint}")


def test_unsupported_content_type_is_a_model_error_415(client: Any) -> None:
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, "iris", "5.1 3.5 1.4 0.2", ContentType="text/plain")

    response = raised.value.response
    assert response["OriginalStatusCode"] == 415
    assert json.loads(response["OriginalMessage"])["error"].startswith(
        "Unsupported Media Type: text/plain"
    )


def test_unsupported_accept_is_a_model_error_406(client: Any) -> None:
    with pytest.raises(client.exceptions.ModelError) as raised:
        invoke(client, "iris", {"instances": IRIS}, Accept="text/csv")

    assert raised.value.response["OriginalStatusCode"] == 406


def test_container_route_answers_tf_servings_own_400(emulator: EmulatorProcess) -> None:
    good = raw_request(emulator, "POST", "/invocations", json.dumps({"instances": IRIS}).encode(),
                       {"Content-Type": "application/json"})  # fmt: skip
    bad = raw_request(emulator, "POST", "/invocations", b'{"instances": [[1]]}',
                      {"Content-Type": "application/json"})  # fmt: skip

    assert good[0] == 200
    assert len(json.loads(good[2])["predictions"]) == 3
    assert bad[0] == 400
    assert bad[1]["Content-Type"] == "application/json"
    assert list(json.loads(bad[2])) == ["error"]


def test_hostile_bodies_leave_the_process_serving(client: Any, emulator: EmulatorProcess) -> None:
    bodies = [
        ("[" * 200_000, "application/json"),
        ('{"instances": [' + "[1,2,3,4]," * 200_000 + "[1,2,3,4]]}", "application/json"),
        (b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + b"{'descr': '<f4', "
         b"'fortran_order': False, 'shape': (10000000000000, 4), }".ljust(117) + b"\n",
         "application/x-npy"),
        ("1," * 500_000 + "1", "text/csv"),
        (b"\xff" * 1000, "application/jsonlines"),
    ]  # fmt: skip
    for body, content_type in bodies:
        with pytest.raises(client.exceptions.ModelError) as raised:
            invoke(client, "iris", body, ContentType=content_type)
        assert raised.value.response["OriginalStatusCode"] == 400

    assert len(predictions(invoke(client, "iris", {"instances": IRIS}))) == 3
    assert "Traceback" not in emulator.stderr_tail()
