"""Users' handler files run unchanged: SageMaker TF Serving inference.py and Cortex handler.py."""
from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import shutil
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from chalicelib.calls import Answer, Call, InvokeResult
from chalicelib.core.config import Settings
from chalicelib.core.errors import (
    ConfigurationError,
    EndpointUnavailableError,
    HandlerError,
    InvalidInputError,
    InvalidJSONError,
    ModelError,
    PayloadTooLargeError,
    SignatureMismatchError,
)
from chalicelib.inference.userfiles import failures, forwarder
from chalicelib.inference.userfiles.cortex import CortexHandler
from chalicelib.inference.userfiles.tfs import TfsHandler
from chalicelib.registry.kinds import Pipeline
from chalicelib.registry.loading import load_model
from chalicelib.registry.specs import DType, ModelSpec, Signature, TensorSpec

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "chalicelib" / "models"
FEATURES = Signature(
    inputs=(TensorSpec("features", DType.FLOAT32, (-1, 4)),),
    outputs=(TensorSpec("probabilities", DType.FLOAT32, (-1, 3)),))


class FakeInvoke:
    """The endpoint: records each call and answers ``answer`` (or raises ``error``)."""

    def __init__(self, answer: Any = None, error: Exception | None = None,
                 content_type: str = "application/json") -> None:
        self.answer = {"predictions": [[0.1, 0.7, 0.2]]} if answer is None else answer
        self.error = error
        self.content_type = content_type
        self.calls: list[tuple[bytes, str, str]] = []
        self.threads: list[str] = []

    def __call__(self, body: bytes, content_type: str, accept: str) -> InvokeResult:
        self.calls.append((body, content_type, accept))
        self.threads.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error
        data = self.answer if isinstance(self.answer, bytes) else json.dumps(self.answer).encode()
        return InvokeResult(data, self.content_type, "AllTraffic", None, 1)

    @property
    def sent(self) -> Any:
        return json.loads(self.calls[-1][0])


def model_folder(tmp_path: Path, files: dict[str, str], name: str = "my-model") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    for filename, text in files.items():
        (folder / filename).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def tfs_model(tmp_path: Path, source: str | None, name: str = "my-model",
              extra: dict[str, str] | None = None) -> ModelSpec:
    files = dict(extra or {})
    if source is not None:
        files["inference.py"] = source
    folder = model_folder(tmp_path, files, name)
    return ModelSpec(name=name, folder=folder, endpoint="ep", pipeline=Pipeline.SAGEMAKER_TFS,
                     content_type="application/json", accept="application/json",
                     signature=Signature())


def cortex_model(tmp_path: Path, source: str, signature: Signature = FEATURES,
                 metadata: dict[str, Any] | None = None) -> ModelSpec:
    folder = model_folder(tmp_path, {"handler.py": source}, "cx")
    return ModelSpec(name="cx", folder=folder, endpoint="ep", pipeline=Pipeline.CORTEX,
                     content_type="application/json", accept="application/json",
                     signature=signature, metadata=metadata or {})


def call(body: bytes = b'{"x": 1}', content_type: str = "application/json",
         accept: str | None = None, custom_attributes: str | None = None) -> Call:
    return Call(body, content_type, accept, custom_attributes)


def run_tfs(tmp_path: Path, source: str, the_call: Call | None = None,
            invoke: FakeInvoke | None = None) -> tuple[Answer, FakeInvoke]:
    model = tfs_model(tmp_path, source)
    invoke = invoke or FakeInvoke()
    answer = TfsHandler.load(model)(the_call or call(), invoke, model)
    return answer, invoke


PAIR = """
    import json

    def input_handler(data, context):
        return data.read()

    def output_handler(response, context):
        return response.content, context.accept_header
"""

# --- loading: every problem is a ConfigurationError naming the file ------------------------


def load_error(tmp_path: Path, source: str | None) -> str:
    with pytest.raises(ConfigurationError) as caught:
        TfsHandler.load(tfs_model(tmp_path, source))
    message = caught.value.message
    assert "models/my-model/inference.py" in message
    assert str(tmp_path) not in message and "Traceback" not in message
    return message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    assert "is missing" in load_error(tmp_path, None)


def test_an_import_error_is_one_line_naming_the_file(tmp_path: Path) -> None:
    message = load_error(tmp_path, "import no_such_module_for_sagegate\n")
    assert "failed to import" in message and "no_such_module_for_sagegate" in message
    assert "\n" not in message


def test_an_exception_at_import_does_not_show_this_machines_paths(tmp_path: Path) -> None:
    message = load_error(tmp_path, "open(__file__ + '.missing')\n")
    assert "FileNotFoundError" in message and "models/my-model/inference.py.missing" in message


def test_a_syntax_error_is_named(tmp_path: Path) -> None:
    assert "SyntaxError" in load_error(tmp_path, "def input_handler(:\n")


def test_a_file_without_any_handler_is_refused(tmp_path: Path) -> None:
    message = load_error(tmp_path, "x = 1\n")
    assert "neither handler(data, context)" in message


def test_half_a_pair_is_refused_naming_the_missing_half(tmp_path: Path) -> None:
    message = load_error(tmp_path, "def input_handler(data, context):\n    return data\n")
    assert "defines input_handler but not output_handler" in message
    message = load_error(tmp_path, "def output_handler(response, context):\n    return 1\n")
    assert "defines output_handler but not input_handler" in message


@pytest.mark.parametrize("source, named", [
    ("def handler(data):\n    pass\n", "handler"),
    ("def handler(data, context, extra):\n    pass\n", "handler"),
    ("def handler(data, context, *, key):\n    pass\n", "handler"),
    (PAIR.replace("output_handler(response, context)", "output_handler(response)"),
     "output_handler"),
    (PAIR.replace("input_handler(data, context)", "input_handler()"), "input_handler"),
])
def test_a_wrong_arity_is_refused(tmp_path: Path, source: str, named: str) -> None:
    message = load_error(tmp_path, textwrap.dedent(source))
    assert f"{named} must take 2 positional arguments" in message


def test_a_handler_that_is_not_a_function_is_refused(tmp_path: Path) -> None:
    assert "handler must be a function" in load_error(tmp_path, "handler = 3\n")


@pytest.mark.parametrize("definition", [
    "def handler(*args):", "def handler(data, *rest):", "def handler(data, context=None):",
])
def test_star_args_and_defaults_are_accepted(tmp_path: Path, definition: str) -> None:
    source = f"{definition}\n    return b'ok', 'text/plain'\n"
    answer, _ = run_tfs(tmp_path, source)
    assert answer == Answer(b"ok", "text/plain")


def test_handler_wins_over_the_pair_which_is_not_even_checked(tmp_path: Path) -> None:
    source = """
        def handler(data, context):
            return b"from handler", "text/plain"

        def input_handler(data):  # wrong arity: ignored, as in the container
            raise AssertionError

        def output_handler(response, context):
            raise AssertionError
    """
    model = tfs_model(tmp_path, source)
    handler = TfsHandler.load(model)
    assert handler.input_handler is None and handler.output_handler is None
    invoke = FakeInvoke()
    assert handler(call(), invoke, model) == Answer(b"from handler", "text/plain")
    assert invoke.calls == []


def test_the_module_has_its_own_name_and_reads_files_beside_it(tmp_path: Path) -> None:
    source = """
        import os
        VOCAB = open(os.path.join(os.path.dirname(__file__), "vocab.txt")).read().split()

        def input_handler(data, context):
            return " ".join(VOCAB)

        def output_handler(response, context):
            return __name__, "text/plain"
    """
    model = tfs_model(tmp_path, source, name="my-model",
                      extra={"vocab.txt": "[PAD]\nhello\n"})
    invoke = FakeInvoke()
    answer = TfsHandler.load(model)(call(), invoke, model)
    assert answer.body == b"sagegate_models.my_model.inference"
    assert "sagegate_models.my_model.inference" in sys.modules
    assert invoke.calls[0][0] == b"[PAD] hello"
    assert str(model.folder) not in sys.path


def test_each_kind_loads_its_own_handler_file(tmp_path: Path) -> None:
    """The handler kinds load their file into the shared server; the tensor kind loads none."""
    from chalicelib.inference.serving import ModelServer
    from chalicelib.kinds import kind_of

    server = ModelServer(None)  # type: ignore[arg-type]  # loads files; calls no endpoint
    model = tfs_model(tmp_path, PAIR)
    kind_of(model).load(model, server)
    assert isinstance(server.handler(model, _unused), TfsHandler)
    cortex = cortex_model(tmp_path, CORTEX_ECHO)
    kind_of(cortex).load(cortex, server)
    assert isinstance(server.handler(cortex, _unused), CortexHandler)
    tensor = ModelSpec(name="t", folder=tmp_path, endpoint="ep", pipeline=Pipeline.TENSOR,
                       content_type="application/json", accept="application/json",
                       signature=FEATURES)
    kind_of(tensor).load(tensor, server)
    assert server.handler(tensor, lambda model: None) is None


def _unused(model: ModelSpec) -> None:
    raise AssertionError("the handler was loaded already")


# --- the container's request objects ------------------------------------------------------

CONTEXT_ECHO = """
    import json

    def input_handler(data, context):
        return "{}"

    def output_handler(response, context):
        document = dict(context._asdict(), fields=list(context._fields),
                        type=type(context).__name__, is_tuple=isinstance(context, tuple))
        return json.dumps(document), "application/json"
"""


def context_of(tmp_path: Path, the_call: Call) -> dict[str, Any]:
    answer, _ = run_tfs(tmp_path, CONTEXT_ECHO, the_call)
    document: dict[str, Any] = json.loads(answer.body)
    return document


def test_the_context_has_exactly_the_containers_fields(tmp_path: Path) -> None:
    context = context_of(tmp_path, call(b"12345", "text/csv", "text/csv", "trace=1"))
    assert context.pop("fields") == [
        "model_name", "model_version", "method", "rest_uri", "grpc_port", "custom_attributes",
        "request_content_type", "accept_header", "content_length"]
    assert context.pop("type") == "Context" and context.pop("is_tuple") is True
    rest_uri = context.pop("rest_uri")
    assert rest_uri.startswith("http://127.0.0.1:")
    assert rest_uri.endswith("/v1/models/my-model:predict")
    assert context == {"model_name": "my-model", "model_version": "1", "method": "predict",
                       "grpc_port": None, "custom_attributes": "trace=1",
                       "request_content_type": "text/csv", "accept_header": "text/csv",
                       "content_length": 5}


@pytest.mark.parametrize("accept, expected", [
    (None, "application/json"), ("", "application/json"), ("*/*", "application/json"),
    ("application/jsonlines", "application/jsonlines"),
])
def test_the_accept_header_defaults_to_json(tmp_path: Path, accept: str | None,
                                            expected: str) -> None:
    assert context_of(tmp_path, call(accept=accept))["accept_header"] == expected


def test_the_context_defaults(tmp_path: Path) -> None:
    context = context_of(tmp_path, call(b"", "", None, ""))
    assert context["request_content_type"] == "application/json"
    assert context["custom_attributes"] is None
    assert context["content_length"] == 0


def test_data_is_a_stream_of_the_request_body(tmp_path: Path) -> None:
    source = """
        def input_handler(data, context):
            first = data.read(3)
            return first + b"|" + data.read()

        def output_handler(response, context):
            return response.content, "application/json"
    """
    _, invoke = run_tfs(tmp_path, source, call(b'{"text": "hi"}'))
    assert invoke.calls == [(b'{"t|ext": "hi"}', "application/json", "application/json")]


def test_the_response_looks_like_requests_response(tmp_path: Path) -> None:
    source = """
        import json

        def input_handler(data, context):
            return data.read()

        def output_handler(response, context):
            response.raise_for_status()
            return json.dumps({
                "status_code": response.status_code, "ok": response.ok,
                "content": response.content.decode(), "text": response.text,
                "json": response.json(), "type": response.headers["content-type"],
                "get": response.headers.get("Content-Type"),
                "has": "CONTENT-TYPE" in response.headers,
                "is_bytes": isinstance(response.content, bytes)}), "application/json"
    """
    answer, _ = run_tfs(tmp_path, source, invoke=FakeInvoke({"predictions": [[1.5]]}))
    assert json.loads(answer.body) == {
        "status_code": 200, "ok": True, "content": '{"predictions": [[1.5]]}',
        "text": '{"predictions": [[1.5]]}', "json": {"predictions": [[1.5]]},
        "type": "application/json", "get": "application/json", "has": True,
        "is_bytes": True}
    assert answer.content_type == "application/json"


def test_the_pair_sends_what_input_handler_returns_with_the_models_types(
        tmp_path: Path) -> None:
    source = """
        import json

        def input_handler(data, context):
            text = json.loads(data.read().decode("utf-8"))["text"]
            return json.dumps({"signature_name": "serving_default", "instances": [[len(text)]]})

        def output_handler(response, context):
            return response.content, context.accept_header
    """
    model = tfs_model(tmp_path, source)
    model = ModelSpec(**{**model.__dict__, "content_type": "application/jsonlines",
                         "accept": "application/jsonlines"})
    invoke = FakeInvoke({"predictions": [[0.9]]})
    answer = TfsHandler.load(model)(call(b'{"text": "abcd"}', accept="text/plain"), invoke, model)
    body, content_type, accept = invoke.calls[0]
    assert json.loads(body) == {"signature_name": "serving_default", "instances": [[4]]}
    assert (content_type, accept) == ("application/jsonlines", "application/jsonlines")
    assert answer == Answer(b'{"predictions": [[0.9]]}', "text/plain")


def test_a_dict_from_input_handler_is_sent_as_json(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", "return {'instances': [[1, 2]]}")
    _, invoke = run_tfs(tmp_path, source)
    assert invoke.sent == {"instances": [[1, 2]]}


def test_nothing_from_input_handler_is_invalid_input(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", "return None")
    with pytest.raises(InvalidInputError, match="the input_handler returned nothing"):
        run_tfs(tmp_path, source)


def test_a_number_from_input_handler_is_a_handler_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = PAIR.replace("return data.read()", "return 42")
    with caplog.at_level(logging.ERROR, "sagegate.handlers"), \
            pytest.raises(HandlerError):
        run_tfs(tmp_path, source)
    assert "input_handler returned a int" in caplog.text


@pytest.mark.parametrize("returned, shape", [
    ("{'predictions': [1]}", "a dict"),
    ("response.content", "a bytes"),
    ("(response.content,)", "a tuple of 1 (bytes)"),
    ("(response.content, 'application/json', 200)", "a tuple of 3 (bytes, str, int)"),
    ("(response.json(), 'application/json')", "a tuple of 2 (dict, str)"),
    ("(response.content, None)", "a tuple of 2 (bytes, NoneType)"),
    ("(response.content, 'text/plain\\r\\nX-Evil: 1')", "a tuple of 2 (bytes, str)"),
])
def test_output_handler_must_return_body_and_content_type(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, returned: str, shape: str) -> None:
    source = PAIR.replace("return response.content, context.accept_header", f"return {returned}")
    with caplog.at_level(logging.ERROR, "sagegate.handlers"), \
            pytest.raises(HandlerError) as caught:
        run_tfs(tmp_path, source)
    assert caught.value.message == failures.HANDLER_FAILED
    assert f"output_handler returned {shape}; it must return (body: str | bytes" in caplog.text
    assert "models/my-model/inference.py" in caplog.text


def test_a_str_body_is_encoded(tmp_path: Path) -> None:
    source = PAIR.replace("return response.content, context.accept_header",
                          "return 'café', 'text/plain; charset=utf-8'")
    answer, _ = run_tfs(tmp_path, source)
    assert answer == Answer("café".encode(), "text/plain; charset=utf-8")


# --- failures in user code ------------------------------------------------------------------


@pytest.mark.parametrize("error", ["ValueError", "TypeError"])
def test_a_value_or_type_error_in_input_handler_is_the_clients(tmp_path: Path,
                                                                error: str) -> None:
    source = PAIR.replace("return data.read()", f"raise {error}('Unsupported content type x')")
    with pytest.raises(InvalidInputError) as caught:
        run_tfs(tmp_path, source)
    assert caught.value.message == "Unsupported content type x"
    assert caught.value.STATUS_CODE == 400


def test_the_input_message_is_bounded(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", "raise ValueError('x' * 5000)")
    with pytest.raises(InvalidInputError) as caught:
        run_tfs(tmp_path, source)
    assert caught.value.message == "x" * 512


def test_an_empty_value_error_still_says_something(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", "raise ValueError()")
    with pytest.raises(InvalidInputError, match="input_handler refused the input"):
        run_tfs(tmp_path, source)


def test_other_exceptions_are_handler_errors_with_the_traceback_logged_only(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = PAIR.replace("return data.read()", "raise KeyError('secret-detail')")
    with caplog.at_level(logging.ERROR, "sagegate.handlers"), \
            pytest.raises(HandlerError) as caught:
        run_tfs(tmp_path, source)
    assert caught.value.message == failures.HANDLER_FAILED
    assert caught.value.STATUS_CODE == 500
    assert "secret-detail" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "Traceback" in caplog.text and "KeyError: 'secret-detail'" in caplog.text
    assert "models/my-model/inference.py: input_handler raised" in caplog.text


def test_a_value_error_in_output_handler_is_a_handler_error(tmp_path: Path) -> None:
    source = PAIR.replace("return response.content, context.accept_header",
                          "raise ValueError('bad answer')")
    with pytest.raises(HandlerError):
        run_tfs(tmp_path, source)


def test_sys_exit_in_user_code_is_a_handler_error(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", "import sys; sys.exit(3)")
    with pytest.raises(HandlerError):
        run_tfs(tmp_path, source)


@pytest.mark.parametrize("error", [
    ModelError("the model said no"),
    EndpointUnavailableError("throttled", retry_after=2),
])
def test_endpoint_errors_propagate_unchanged(tmp_path: Path, error: Exception) -> None:
    with pytest.raises(type(error)) as caught:
        run_tfs(tmp_path, PAIR, invoke=FakeInvoke(error=error))
    assert caught.value is error


# --- handler(data, context) through context.rest_uri ------------------------------------------

POSTING = """
    import requests

    def handler(data, context):
        body = data.read()
        response = requests.post(context.rest_uri, data=body, timeout=10)
        if response.status_code != 200:
            raise Exception(response.content.decode("utf-8"))
        return response.content, context.accept_header
"""


def test_a_handler_posting_to_rest_uri_reaches_the_endpoint(tmp_path: Path) -> None:
    __import__("requests")  # in the dev lock: a missing one fails
    invoke = FakeInvoke({"predictions": [[0.25]]})
    answer, _ = run_tfs(tmp_path, POSTING, call(b'{"instances": [[1]]}'), invoke)
    assert answer == Answer(b'{"predictions": [[0.25]]}', "application/json")
    assert invoke.calls == [(b'{"instances": [[1]]}', "application/json", "application/json")]
    assert invoke.threads != [threading.current_thread().name]  # served by the forwarder


def test_the_forwarder_answers_endpoint_errors_as_tf_serving_and_keeps_them(
        tmp_path: Path) -> None:
    source = """
        import json
        import urllib.error
        import urllib.request

        seen = []

        def handler(data, context):
            request = urllib.request.Request(context.rest_uri, data=b"{}", method="POST")
            try:
                urllib.request.urlopen(request, timeout=10)
            except urllib.error.HTTPError as error:
                seen.append((error.code, json.loads(error.read())))
                raise RuntimeError("the model failed")
            return b"unreachable", "text/plain"
    """
    error = EndpointUnavailableError("throttled", retry_after=3)
    model = tfs_model(tmp_path, source)
    handler = TfsHandler.load(model)
    with pytest.raises(EndpointUnavailableError) as caught:
        handler(call(), FakeInvoke(error=error), model)
    assert caught.value is error
    seen = sys.modules["sagegate_models.my_model.inference"].seen
    assert seen == [(503, {"error": "throttled"})]


def test_a_handler_may_answer_an_endpoint_error_itself(tmp_path: Path) -> None:
    source = """
        import urllib.error
        import urllib.request

        def handler(data, context):
            try:
                urllib.request.urlopen(urllib.request.Request(
                    context.rest_uri, data=b"{}", method="POST"), timeout=10)
            except urllib.error.HTTPError as error:
                return error.read(), "application/json"
            return b"no error", "text/plain"
    """
    answer, _ = run_tfs(tmp_path, source, invoke=FakeInvoke(error=ModelError("broken")))
    assert json.loads(answer.body) == {"error": "broken"}


def test_a_value_error_before_posting_is_invalid_input_and_after_it_a_handler_error(
        tmp_path: Path) -> None:
    before = """
        def handler(data, context):
            raise ValueError("not JSON")
    """
    with pytest.raises(InvalidInputError, match="not JSON"):
        run_tfs(tmp_path / "before", before)
    after = """
        import urllib.request

        def handler(data, context):
            urllib.request.urlopen(urllib.request.Request(
                context.rest_uri, data=b"{}", method="POST"), timeout=10).read()
            raise ValueError("cannot read the answer")
    """
    with pytest.raises(HandlerError):
        run_tfs(tmp_path / "after", after)


def post(port: int, path: str, body: bytes = b"{}",
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def test_the_forwarder_serves_only_registered_requests_of_their_model(tmp_path: Path) -> None:
    model = tfs_model(tmp_path, PAIR)
    invoke = FakeInvoke()
    with forwarder.FORWARDER.session(invoke, model) as session:
        uri = session.rest_uri
        port = int(uri.split(":")[2].split("/")[0])
        path = uri.split(str(port), 1)[1]
        assert post(port, path) == (200, {"predictions": [[0.1, 0.7, 0.2]]})
        assert post(port, path.replace("my-model", "other"))[0] == 404
        assert post(port, "/v1/models/my-model:predict")[0] == 404
        assert post(port, path.replace(session.token, "A" * 32))[0] == 404
        assert post(port, path.replace(":predict", "/versions/1:predict"))[0] == 200
        status, document = post(port, path, headers={
            "Content-Length": str(forwarder.MAX_FORWARD_BYTES + 1)}, body=b"")
        assert status == 413 and "larger than" in document["error"]
        assert session.forwarded == 2
    assert post(port, path)[0] == 404  # the request is over: its URL is gone
    assert len(invoke.calls) == 2


def test_concurrent_requests_reach_their_own_endpoint_calls(tmp_path: Path) -> None:
    __import__("requests")  # in the dev lock: a missing one fails
    model = tfs_model(tmp_path, POSTING)
    handler = TfsHandler.load(model)
    results: dict[int, bytes] = {}

    def one(index: int) -> None:
        invoke = FakeInvoke({"predictions": [[index]]})
        results[index] = handler(call(), invoke, model).body

    threads = [threading.Thread(target=one, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {index: json.dumps({"predictions": [[index]]}).encode()
                       for index in range(8)}


# --- Cortex --------------------------------------------------------------------------------

CORTEX_ECHO = """
    import numpy as np

    def pre_inference(sample, signature, metadata):
        return sample["returned"]

    def post_inference(prediction, signature, metadata):
        return {
            "signature": [[s.name, s.shape, s.type] for s in signature],
            "shapes": [list(p.shape) for p in prediction],
            "dtypes": [str(p.dtype) for p in prediction],
            "first": prediction[0][0],
            "metadata": metadata,
        }
"""


def run_cortex(tmp_path: Path, sample: Any, source: str = CORTEX_ECHO,
               signature: Signature = FEATURES, invoke: FakeInvoke | None = None,
               metadata: dict[str, Any] | None = None) -> tuple[Any, FakeInvoke]:
    model = cortex_model(tmp_path, source, signature, metadata)
    invoke = invoke or FakeInvoke()
    return CortexHandler.load(model)(sample, invoke, model), invoke


def cortex_load_error(tmp_path: Path, source: str,
                      signature: Signature = FEATURES) -> str:
    with pytest.raises(ConfigurationError) as caught:
        CortexHandler.load(cortex_model(tmp_path, source, signature))
    return caught.value.message


def test_cortex_needs_one_function_in_one_of_its_forms(tmp_path: Path) -> None:
    message = cortex_load_error(tmp_path, "def predict(sample):\n    pass\n")
    assert message == ("models/cx/handler.py defines neither pre_inference(sample, signature, "
                       "metadata) nor post_inference(prediction, signature, metadata)")
    message = cortex_load_error(tmp_path, CORTEX_ECHO.replace(
        "post_inference(prediction, signature, metadata)", "post_inference(prediction)"))
    assert message.startswith("models/cx/handler.py: post_inference must take 3 or 2 positional "
                              "arguments post_inference(prediction, signature, metadata) or "
                              "post_inference(prediction, metadata), not ")
    assert "failed to import" in cortex_load_error(tmp_path, "raise RuntimeError('x')\n")


# Cortex v0.6 to v0.9 (ONNX): two arguments, ``metadata`` the inputs' / outputs' NodeArg list.
CORTEX_V09 = """
    def pre_inference(sample, metadata):
        return {metadata[0].name: [sample["a"], sample["b"], sample["c"], sample["d"]]}

    def post_inference(prediction, metadata):
        return {"output": metadata[0].name, "type": metadata[0].type,
                "first": prediction[0][0].tolist()}
"""


def test_cortex_v09_two_argument_functions_run(tmp_path: Path) -> None:
    model = cortex_model(tmp_path, CORTEX_V09, metadata={"ignored": True})
    handler = CortexHandler.load(model)
    assert (handler.pre_arguments, handler.post_arguments) == (2, 2)
    result = handler({"a": 5.1, "b": 3.5, "c": 1.4, "d": 0.2}, invoke := FakeInvoke(), model)
    assert invoke.sent["instances"] == [[5.1, 3.5, 1.4, 0.2]]
    assert result == {"output": "probabilities", "type": "tensor(float)",
                      "first": [pytest.approx(0.1), pytest.approx(0.7), pytest.approx(0.2)]}


def test_cortex_forms_may_be_mixed_and_star_args_take_the_newest(tmp_path: Path) -> None:
    source = CORTEX_V09.replace("def post_inference(prediction, metadata)",
                                "def post_inference(prediction, *rest)").replace(
        'return {"output": metadata[0].name', 'metadata = rest[0]\n        return {"output": '
                                             'metadata[0].name')
    handler = CortexHandler.load(cortex_model(tmp_path, source))
    assert (handler.pre_arguments, handler.post_arguments) == (2, 3)


def test_cortex_functions_are_optional_as_in_cortex(tmp_path: Path) -> None:
    only_post = "def post_inference(prediction, signature, metadata):\n    return 'ok'\n"
    result, invoke = run_cortex(tmp_path, {"features": [1, 2, 3, 4]}, only_post)
    assert (result, invoke.sent["instances"]) == ("ok", [[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(SignatureMismatchError):
        run_cortex(tmp_path, {"petals": [1, 2, 3, 4]}, only_post)
    only_pre = "def pre_inference(sample, signature, metadata):\n    return [1, 2, 3, 4]\n"
    result, _ = run_cortex(tmp_path, {}, only_pre)
    assert result == [[[pytest.approx(0.1), pytest.approx(0.7), pytest.approx(0.2)]]]


def test_post_inference_gets_the_outputs_signature(tmp_path: Path) -> None:
    source = CORTEX_ECHO.replace('"signature": [', '"outputs": [')
    result, _ = run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, source)
    assert result["outputs"] == [["probabilities", ["N", 3], "tensor(float)"]]


def test_cortex_needs_declared_inputs(tmp_path: Path) -> None:
    message = cortex_load_error(tmp_path, CORTEX_ECHO, Signature())
    assert message.startswith("models/cx/model.json") and "signature.inputs" in message


def test_the_signature_shows_onnx_names_shapes_and_types(tmp_path: Path) -> None:
    signature = Signature(inputs=(TensorSpec("ids", DType.INT64, (-1, 8)),
                                  TensorSpec("scale", DType.FLOAT64, (-1, 2, 2)),
                                  TensorSpec("flag", DType.BOOL, (-1,))))
    sample = {"returned": {"ids": list(range(8)), "scale": [[1, 2], [3, 4]], "flag": [True]}}
    source = CORTEX_ECHO.replace('return sample["returned"]',
                                'global SEEN\n        SEEN = signature\n'
                                '        return sample["returned"]').replace(
        '"signature": [[s.name, s.shape, s.type] for s in signature]',
        '"signature": [[s.name, s.shape, s.type] for s in SEEN]')
    result, invoke = run_cortex(tmp_path, sample, source, signature=signature)
    assert result["signature"] == [["ids", ["N", 8], "tensor(int64)"],
                                   ["scale", ["N", 2, 2], "tensor(double)"],
                                   ["flag", ["N"], "tensor(bool)"]]
    assert invoke.sent["instances"] == [{"ids": list(range(8)), "scale": [[1.0, 2.0], [3.0, 4.0]],
                                         "flag": True}]


def test_one_sample_without_the_batch_axis_gets_it(tmp_path: Path) -> None:
    result, invoke = run_cortex(tmp_path, {"returned": {"features": [5.1, 3.5, 1.4, 0.2]}})
    assert invoke.sent == {"signature_name": "serving_default",
                           "instances": [[5.1, 3.5, 1.4, 0.2]]}
    assert invoke.calls[0][1:] == ("application/json", "application/json")
    assert result["shapes"] == [[1, 3]] and result["dtypes"] == ["float32"]
    assert result["first"] == pytest.approx([0.1, 0.7, 0.2])


def test_a_batch_is_sent_as_it_is(tmp_path: Path) -> None:
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
    _, invoke = run_cortex(tmp_path, {"returned": {"features": rows}})
    assert invoke.sent["instances"] == rows


@pytest.mark.parametrize("returned", [
    [5.1, 3.5, 1.4, 0.2], [[5.1, 3.5, 1.4, 0.2]],
])
def test_a_bare_list_is_the_single_inputs_value(tmp_path: Path, returned: Any) -> None:
    _, invoke = run_cortex(tmp_path, {"returned": returned})
    assert invoke.sent["instances"] == [[5.1, 3.5, 1.4, 0.2]]


def test_numpy_values_from_pre_inference_are_read(tmp_path: Path) -> None:
    source = CORTEX_ECHO.replace(
        'return sample["returned"]',
        'return {"features": [np.float32(v) for v in sample["returned"]]}')
    _, invoke = run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, source)
    assert invoke.sent["instances"] == [[1.0, 2.0, 3.0, 4.0]]
    source = CORTEX_ECHO.replace('return sample["returned"]',
                                 'return np.array([sample["returned"]] * 2, dtype=np.float64)')
    _, invoke = run_cortex(tmp_path / "array", {"returned": [1, 2, 3, 4]}, source)
    assert invoke.sent["instances"] == [[1.0, 2.0, 3.0, 4.0]] * 2


def test_a_value_that_does_not_fit_is_a_signature_mismatch_naming_the_input(
        tmp_path: Path) -> None:
    with pytest.raises(SignatureMismatchError, match="input 'features'"):
        run_cortex(tmp_path, {"returned": {"features": [1, 2, 3]}})


@pytest.mark.parametrize("returned, logged", [
    ({"other": [1, 2, 3, 4]}, "pre_inference returned a dict with the keys ['other']"),
    (None, "pre_inference returned a NoneType"),
    ("1,2,3,4", "pre_inference returned a str"),
])
def test_pre_inference_must_return_the_inputs(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                              returned: Any, logged: str) -> None:
    with caplog.at_level(logging.ERROR, "sagegate.handlers"), pytest.raises(HandlerError):
        run_cortex(tmp_path, {"returned": returned})
    assert logged in caplog.text


def test_a_bare_list_cannot_say_which_of_several_inputs(tmp_path: Path) -> None:
    signature = Signature(inputs=(TensorSpec("a", DType.FLOAT32, (-1, 2)),
                                  TensorSpec("b", DType.FLOAT32, (-1, 2))))
    with pytest.raises(HandlerError):
        run_cortex(tmp_path, {"returned": [1, 2]}, signature=signature)


def test_several_outputs_come_as_onnxruntime_gives_them(tmp_path: Path) -> None:
    signature = Signature(
        inputs=FEATURES.inputs,
        outputs=(TensorSpec("label", DType.INT64, (-1,)),
                 TensorSpec("probabilities", DType.FLOAT32, (-1, 3))))
    answer = {"predictions": [{"label": 1, "probabilities": [0.1, 0.7, 0.2]},
                              {"label": 2, "probabilities": [0.0, 0.1, 0.9]}]}
    result, _ = run_cortex(tmp_path, {"returned": [[1, 2, 3, 4], [5, 6, 7, 8]]},
                           signature=signature, invoke=FakeInvoke(answer))
    assert result["shapes"] == [[2], [2, 3]]
    assert result["dtypes"] == ["int64", "float32"]
    assert result["first"] == 1


def test_numpy_in_the_result_is_plain_json(tmp_path: Path) -> None:
    source = CORTEX_ECHO.replace(
        'return {\n            "signature"',
        'return {"scalar": np.float32(0.5), "array": np.arange(3), "nested": [np.int64(2)],\n'
        '            "nan": float("nan"), 7: np.bool_(True)}\n'
        '        return {\n            "signature"')
    result, _ = run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, source)
    assert result == {"scalar": 0.5, "array": [0, 1, 2], "nested": [2], "nan": None,
                      "7": True}
    assert json.loads(json.dumps(result)) == result


def test_a_result_that_is_not_json_is_a_handler_error(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    source = CORTEX_ECHO.replace('return {\n            "signature"',
                                 'return {1, 2}\n        return {\n            "signature"')
    with caplog.at_level(logging.ERROR, "sagegate.handlers"), pytest.raises(HandlerError):
        run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, source)
    assert "post_inference returned a set" in caplog.text


def test_the_metadata_is_the_models_and_a_handler_cannot_change_it(tmp_path: Path) -> None:
    source = CORTEX_ECHO.replace('return sample["returned"]',
                                 'metadata["classes"].append("x")\n'
                                 '        return sample["returned"]')
    metadata = {"classes": ["a", "b"]}
    model = cortex_model(tmp_path, textwrap.dedent(source), metadata=metadata)
    handler = CortexHandler.load(model)
    for _ in range(2):
        result = handler({"returned": [1, 2, 3, 4]}, FakeInvoke(), model)
        assert result["metadata"] == {"classes": ["a", "b", "x"]}
    assert model.metadata == {"classes": ["a", "b"]}


@pytest.mark.parametrize("raised, expected", [
    ("ValueError('sepal_length is missing')", InvalidInputError),
    ("TypeError('not a number')", InvalidInputError),
    ("KeyError('sepal_length')", HandlerError),
])
def test_pre_inference_failures(tmp_path: Path, raised: str, expected: type) -> None:
    source = CORTEX_ECHO.replace('return sample["returned"]', f"raise {raised}")
    with pytest.raises(expected) as caught:
        run_cortex(tmp_path, {}, source)
    if expected is InvalidInputError:
        assert caught.value.message == raised.split("'")[1]


def test_post_inference_failures_are_handler_errors(tmp_path: Path) -> None:
    source = CORTEX_ECHO.replace('"signature": [', '"signature": 1 / 0 or [')
    with pytest.raises(HandlerError, match=r"^The model's handler failed; "):
        run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, source)


def test_cortex_endpoint_errors_propagate(tmp_path: Path) -> None:
    error = ModelError("model failed")
    with pytest.raises(ModelError) as caught:
        run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, invoke=FakeInvoke(error=error))
    assert caught.value is error


# --- the example models ---------------------------------------------------------------------


def registered(name: str, tmp_path: Path | None = None) -> ModelSpec:
    folder = MODELS / name
    if tmp_path is not None:
        folder = Path(shutil.copytree(folder, tmp_path / name))
    return load_model(folder, Settings(endpoint_name="x"), {})


@pytest.mark.parametrize("name, pipeline", [
    ("iris", Pipeline.TENSOR), ("iris-cortex", Pipeline.CORTEX),
    ("sentiment", Pipeline.SAGEMAKER_TFS),
])
def test_the_example_models_register(name: str, pipeline: Pipeline) -> None:
    model = registered(name)
    assert model.pipeline == pipeline
    assert model.content_type == model.accept == "application/json"
    if name.startswith("iris"):
        assert model.endpoint == "iris" and model.signature == FEATURES
    if name == "iris":
        assert model.labels == ("setosa", "versicolor", "virginica") and model.default_k == 3


def test_the_iris_cortex_handler_end_to_end() -> None:
    model = registered("iris-cortex")
    handler = CortexHandler.load(model)
    invoke = FakeInvoke({"predictions": [[0.05, 0.15, 0.8]]})
    sample = {"sepal_length": 6.7, "sepal_width": 3.0, "petal_length": 5.2, "petal_width": 2.3}
    result = handler(sample, invoke, model)
    assert invoke.sent == {"signature_name": "serving_default",
                           "instances": [[6.7, 3.0, 5.2, 2.3]]}
    assert result["class"] == "virginica"
    assert result["probabilities"] == pytest.approx(
        {"setosa": 0.05, "versicolor": 0.15, "virginica": 0.8})
    assert json.loads(json.dumps(result)) == result
    with pytest.raises(InvalidInputError, match="missing features: petal_width"):
        handler({key: 1 for key in list(sample)[:3]}, invoke, model)


def test_the_sentiment_inference_py_unchanged(tmp_path: Path) -> None:
    __import__("tokenizers")  # in the layer lock: a missing one fails
    __import__("requests")  # in the dev lock: a missing one fails
    model = registered("sentiment", tmp_path)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "great", "movie", "bad"]
    (model.folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    handler = TfsHandler.load(model)
    invoke = FakeInvoke({"predictions": [[0.97], [0.02]]})
    body = b'{"text": "Great movie"}\n{"text": "' + b"bad " * 100 + b'"}\n'
    answer = handler(call(body), invoke, model)
    assert answer == Answer(b'{"predictions": [[0.97], [0.02]]}', "application/json")
    first, second = invoke.sent["instances"]
    assert first["input_ids"] == [2, 5, 6, 3] + [0] * 60
    assert first["input_mask"] == [1] * 4 + [0] * 60
    assert second["input_ids"] == [2] + [7] * 62 + [3]
    assert second["input_mask"] == [1] * 64
    assert invoke.sent["signature_name"] == "serving_default"
    with pytest.raises(InvalidInputError, match="Unsupported content type text/csv"):
        handler(call(b"a,b", "text/csv"), invoke, model)


# --- a failed handler: the request id always, the exception when the model opts in --------

SECRET = "sk-live-0123456789abcdef"


def test_a_failure_hides_the_exception_and_points_to_the_log(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", f"raise KeyError('db password {SECRET}')")
    with pytest.raises(HandlerError) as caught:
        run_tfs(tmp_path, source)
    assert "request_id" in caught.value.message and "log" in caught.value.message
    assert caught.value.details == {"function": "input_handler"}
    assert SECRET not in json.dumps([caught.value.message, caught.value.details])


def test_a_model_may_expose_the_exceptions_type_and_bounded_message(tmp_path: Path) -> None:
    source = PAIR.replace("return response.content, context.accept_header",
                          "raise RuntimeError('vocab missing: ' + 'x' * 5000)")
    model = dataclasses.replace(tfs_model(tmp_path, source), expose_handler_errors=True)
    with pytest.raises(HandlerError) as caught:
        TfsHandler.load(model)(call(), FakeInvoke(), model)
    exposed = caught.value.details["exception"]
    assert caught.value.details["function"] == "output_handler"
    assert exposed == {"type": "RuntimeError", "message": "vocab missing: " + "x" * 497}


def test_an_exposed_exception_with_a_broken_str_still_answers(tmp_path: Path) -> None:
    source = CORTEX_ECHO.replace('return sample["returned"]', textwrap.indent(textwrap.dedent("""
        class Odd(Exception):
            def __str__(self):
                raise RuntimeError("no")
        raise Odd()"""), "        "))
    model = dataclasses.replace(cortex_model(tmp_path, source), expose_handler_errors=True)
    with pytest.raises(HandlerError) as caught:
        CortexHandler.load(model)({}, FakeInvoke(), model)
    assert caught.value.details["exception"] == {"type": "Odd", "message": ""}


def test_a_file_reading_data_as_bytes_is_told_to_read_the_stream(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = PAIR.replace("return data.read()", "return json.loads(data.decode('utf-8'))")
    with caplog.at_level(logging.ERROR, "sagegate.handlers"), pytest.raises(HandlerError):
        run_tfs(tmp_path, source)
    assert "data is a stream" in caplog.text and "data.read()" in caplog.text


# --- hostile bodies: depth before user code, the batch after it ----------------------------


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 600 + b"1" + b"}" * 600,
    b'{"text": "ok"}\n' + b"[" * 513 + b"]" * 513,  # one JSON line too deep
])
def test_a_json_body_nesting_too_deep_is_refused_before_the_handler(
        tmp_path: Path, body: bytes) -> None:
    source = PAIR.replace("return data.read()", "raise AssertionError('reached the handler')")
    with pytest.raises(InvalidJSONError, match="deeper than 512 levels"):
        run_tfs(tmp_path, source, call(body))


@pytest.mark.parametrize("body", [
    b"[" * 512 + b"]" * 512,
    b'{"text": "' + b"[" * 100_000 + b'"}',  # brackets inside a string are text
    b'{"text": "\\"' + b"{" * 1000 + b'"}',  # an escaped quote does not end the string
    b"not json at all",
])
def test_deep_looking_text_and_the_limit_itself_reach_the_handler(tmp_path: Path,
                                                                  body: bytes) -> None:
    _, invoke = run_tfs(tmp_path, PAIR, call(body))
    assert invoke.calls[0][0] == body


def test_the_depth_bound_applies_to_json_types_only(tmp_path: Path) -> None:
    body = b"[" * 600 + b"]" * 600
    _, invoke = run_tfs(tmp_path, PAIR, call(body, "text/csv"))
    assert invoke.calls[0][0] == body
    with pytest.raises(InvalidJSONError):
        run_tfs(tmp_path, PAIR, call(body, "application/jsonlines"))


@pytest.mark.parametrize("request_body, count", [
    ({"instances": [[1]] * 1025}, 1025),
    ({"signature_name": "serving_default", "inputs": [[1]] * 2000}, 2000),
    ({"inputs": {"ids": [[1]] * 1025, "mask": [[1]] * 3}}, 1025),
])
def test_an_input_handler_may_not_build_more_than_the_batch_limit(
        tmp_path: Path, request_body: dict[str, Any], count: int) -> None:
    source = PAIR.replace("return data.read()", f"return {request_body!r}")
    invoke = FakeInvoke()
    with pytest.raises(SignatureMismatchError) as caught:
        run_tfs(tmp_path, source, invoke=invoke)
    assert caught.value.message == (f"The model's input_handler made a request of {count} "
                                    "instances; at most 1024 per request: send fewer records.")
    assert invoke.calls == []


@pytest.mark.parametrize("request_body", [
    {"instances": [[1]] * 1024}, {"inputs": {"ids": [[1]] * 1024}}, {"other": [1] * 5000},
])
def test_the_batch_limit_itself_and_other_bodies_are_sent(
        tmp_path: Path, request_body: dict[str, Any]) -> None:
    source = PAIR.replace("return data.read()", f"return {request_body!r}")
    _, invoke = run_tfs(tmp_path, source)
    assert invoke.sent == request_body


def test_a_handler_posting_more_than_the_batch_limit_gets_the_4xx(tmp_path: Path) -> None:
    invoke = FakeInvoke()
    body = json.dumps({"instances": [[1]] * 1025}).encode()
    with pytest.raises(SignatureMismatchError, match="handler made a request of 1025"):
        run_tfs(tmp_path, POSTING, call(body), invoke)
    assert invoke.calls == []


def test_pre_inference_may_not_build_more_than_the_batch_limit(tmp_path: Path) -> None:
    invoke = FakeInvoke()
    with pytest.raises(SignatureMismatchError, match=r"got 1025 rows \(at most 1024 a request"):
        run_cortex(tmp_path, {"returned": [[1, 2, 3, 4]] * 1025}, invoke=invoke)
    assert invoke.calls == []
    _, invoke = run_cortex(tmp_path, {"returned": [[1, 2, 3, 4]] * 1024})
    assert len(invoke.sent["instances"]) == 1024


RECURSING = """
    import json

    def _walk(value):
        return [_walk(item) for item in value] if isinstance(value, list) else value

    def input_handler(data, context):
        return json.dumps(_walk(json.loads(data.read())))

    def output_handler(response, context):
        return response.content, context.accept_header
"""


def test_a_recursion_error_on_the_input_side_is_the_clients(tmp_path: Path) -> None:
    body = b"[" * 500 + b"]" * 500  # within the depth bound, but too deep for a Python walk
    with pytest.raises(InvalidInputError, match="nested too deeply"):
        run_tfs(tmp_path, RECURSING.replace("_walk(item)", "_walk([_walk(item)])"), call(body))


def test_a_memory_error_on_the_input_side_is_a_413(tmp_path: Path) -> None:
    source = PAIR.replace("return data.read()", "raise MemoryError()")
    with pytest.raises(PayloadTooLargeError, match="input_handler ran out of memory"):
        run_tfs(tmp_path, source)


@pytest.mark.parametrize("statement", ["raise RecursionError('deep')", "raise MemoryError()"])
def test_recursion_and_memory_errors_on_the_output_side_are_handler_errors(
        tmp_path: Path, statement: str) -> None:
    source = PAIR.replace("return response.content, context.accept_header", statement)
    with pytest.raises(HandlerError):
        run_tfs(tmp_path, source)


def test_a_returned_value_too_deep_to_read_is_a_handler_error(tmp_path: Path) -> None:
    deep = "value = []\n        for _ in range(100_000):\n            value = [value]\n"
    source = CORTEX_ECHO.replace('return {\n            "signature"',
                                 f'{deep}        return value\n        return {{\n'
                                 '            "signature"')
    with pytest.raises(HandlerError):
        run_cortex(tmp_path, {"returned": [1, 2, 3, 4]}, source)
    source = PAIR.replace("return data.read()", "value = []\n        for _ in range(100_000):\n"
                          "            value = [value]\n        return {'instances': value}")
    with pytest.raises(HandlerError):
        run_tfs(tmp_path, source)
