"""Users' own pre/post-processing files, run unchanged.

Two contracts people already have files for (CONTRACTS.md section 5):

* ``sagemaker-tfs``: the SageMaker TensorFlow Serving container's ``inference.py``, either
  ``handler(data, context)`` or the pair ``input_handler(data, context)`` /
  ``output_handler(response, context)`` (when ``handler`` exists the pair is ignored, as in the
  container). :class:`TfsHandler` gives them what the container gives: ``data`` a stream,
  ``context`` the container's ``Context`` namedtuple, ``response`` an object shaped like
  ``requests.Response``; their ``(body, content_type)`` is the answer. A ``handler`` posts to
  ``context.rest_uri`` itself (with ``requests``, as in the container): that URL is a loopback
  forwarder in this process which calls the endpoint (:class:`_Forwarder`).
* ``cortex``: Cortex's ``handler.py`` with ``pre_inference(sample, signature, metadata)`` and
  ``post_inference(prediction, signature, metadata)``, in Cortex's ONNX runtime conventions
  (:class:`CortexHandler`).

Failures: a file that does not import or lacks a function stops start-up with a
:class:`~chalicelib.errors.ConfigurationError` naming the file. At request time a
``ValueError``/``TypeError`` from the input side (``input_handler``, ``pre_inference``, a
``handler`` before it called the model) is the client's :class:`InvalidInputError` (400) with its
message; anything else the user's code raises is a :class:`HandlerError` (500) with a generic
message and the traceback in the log only. sagegate's own errors (the endpoint's) pass through
unchanged.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib.util
import inspect
import io
import json
import logging
import re
import secrets
import sys
import threading
import types
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import numpy as np

from chalicelib import tensors
from chalicelib.errors import (
    ConfigurationError,
    HandlerError,
    InvalidInputError,
    SagegateError,
)
from chalicelib.registry import DType, ModelSpec, Pipeline, TensorSpec
from chalicelib.serving import Answer, Call, Invoke

logger = logging.getLogger("sagegate.handlers")

JSON = "application/json"
MODULE_PREFIX = "sagegate_models"
"""User files are imported as ``sagegate_models.<model name, hyphens as _>.<file stem>``."""
HANDLER_FAILED = "The model's handler failed."
MAX_MESSAGE = 512
"""The longest InvalidInput message taken from a user's ValueError / TypeError."""
FREE_AXIS = "N"
"""What a Cortex signature's shape shows for a free (-1) axis; ONNX shows a symbolic name."""
MAX_FORWARD_BYTES = 10 * 1024 * 1024
"""The largest body a ``handler`` may post to ``context.rest_uri``."""
FORWARD_SOCKET_TIMEOUT = 30.0
"""Seconds the forwarder waits on a silent connection (the endpoint call has its own budget)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --- importing user files -----------------------------------------------------------------


def _where(model: ModelSpec, filename: str) -> str:
    return f"models/{model.name}/{filename}"


def import_user_file(model: ModelSpec, filename: str) -> types.ModuleType:
    """Import ``model.folder / filename`` under a module name of its own.

    The folder is not put on ``sys.path``; the file may read files beside it (``__file__``).

    Raises:
        ConfigurationError: the file is missing or raises on import (the message names the
            file and the error in one line; the traceback is logged).
    """
    where = _where(model, filename)
    path = model.folder / filename
    if not path.is_file():
        raise ConfigurationError(f"{where} is missing")
    stem = filename.rsplit(".", 1)[0]
    name = f"{MODULE_PREFIX}.{model.name.replace('-', '_')}.{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"{where} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as import does: dataclasses, pickle and typing look there
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        sys.modules.pop(name, None)
        logger.exception("%s failed to import", where)
        # one line, without this machine's paths
        text = f"{type(error).__name__}: {error}"
        for folder in {str(model.folder.resolve()), str(model.folder)}:
            text = text.replace(folder, f"models/{model.name}")
        raise ConfigurationError(f"{where} failed to import: {text[:300]}") from None
    return module


def _function(module: types.ModuleType, name: str, arguments: str, where: str
              ) -> Callable[..., Any] | None:
    """``module.name`` if defined, checked to take ``arguments`` positionally; else None."""
    function = getattr(module, name, None)
    if function is None:
        return None
    if not callable(function):
        raise ConfigurationError(f"{where}: {name} must be a function {name}({arguments})")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return function
    try:
        signature.bind(*arguments.split(", "))
    except TypeError:
        raise ConfigurationError(
            f"{where}: {name} must take {arguments.count(',') + 1} positional arguments "
            f"{name}({arguments}), not {name}{signature}") from None
    return function


def _required(module: types.ModuleType, name: str, arguments: str, where: str
              ) -> Callable[..., Any]:
    function = _function(module, name, arguments, where)
    if function is None:
        raise ConfigurationError(f"{where} defines no {name}({arguments})")
    return function


# --- calling user code --------------------------------------------------------------------


def _run(where: str, name: str, function: Callable[..., Any], *args: Any,
         refusal: Callable[[], bool] = lambda: False) -> Any:
    """``function(*args)``, its failures translated (see the module docstring).

    Args:
        refusal: whether a ValueError / TypeError raised now is the client's (400).
    """
    try:
        return function(*args)
    except SagegateError:
        raise
    except (ValueError, TypeError) as error:
        if refusal():
            message = str(error).strip()[:MAX_MESSAGE] or f"The model's {name} refused the input."
            logger.info("%s: %s refused the request: %s", where, name, message)
            raise InvalidInputError(message) from None
        logger.exception("%s: %s raised", where, name)
        raise HandlerError(HANDLER_FAILED) from None
    except (Exception, SystemExit):
        logger.exception("%s: %s raised", where, name)
        raise HandlerError(HANDLER_FAILED) from None


def _shape(value: Any) -> str:
    """What a handler returned, for the log: types, never contents."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(item).__name__ for item in value)})"
    return f"a {type(value).__name__}"


def _wrong_return(where: str, name: str, value: Any, required: str) -> HandlerError:
    logger.error("%s: %s returned %s; it must return %s", where, name, _shape(value), required)
    return HandlerError(HANDLER_FAILED)


# --- sagemaker-tfs ------------------------------------------------------------------------


class Context(NamedTuple):
    """The SageMaker TF Serving container's request context, field for field.

    ``grpc_port`` is None: there is no gRPC port here; ``rest_uri`` works (the forwarder).
    """

    model_name: str
    model_version: str
    method: str
    rest_uri: str
    grpc_port: int | None
    custom_attributes: str | None
    request_content_type: str
    accept_header: str
    content_length: int


class _Headers(dict[str, str]):
    """Response headers, looked up regardless of case as ``requests`` allows."""

    def __getitem__(self, key: str) -> str:
        for name, value in self.items():
            if name.lower() == key.lower():
                return value
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None


class Response:
    """The endpoint's answer as ``output_handler`` expects it: the parts of
    ``requests.Response`` handlers use (``status_code``, ``content``, ``text``, ``json()``,
    ``headers``, ``ok``, ``raise_for_status()``). Only successful answers get here: an endpoint
    error is sagegate's own error, answered with its status."""

    status_code = 200
    reason = "OK"
    ok = True
    encoding = "utf-8"

    def __init__(self, content: bytes, content_type: str) -> None:
        self.content = content
        self.headers = _Headers({"Content-Type": content_type})

    @property
    def text(self) -> str:
        """The body as text."""
        return self.content.decode("utf-8", errors="replace")

    def json(self, **kwargs: Any) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.content, **kwargs)

    def raise_for_status(self) -> None:
        """Nothing to raise: the status is 200."""


def _request_body(value: Any, where: str) -> bytes:
    """What ``input_handler`` returned, as the endpoint's request body."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if value is None:
        raise InvalidInputError("the input_handler returned nothing")
    if isinstance(value, (dict, list)):
        try:
            return json.dumps(tensors.to_json(value), separators=(",", ":")).encode()
        except (TypeError, ValueError):
            pass
    raise _wrong_return(where, "input_handler", value, "the request body (str or bytes)")


def _answer(value: Any, where: str, name: str) -> Answer:
    """A ``(body, content_type)`` return as the answer."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        body, content_type = value
        if isinstance(body, (str, bytes, bytearray)) and isinstance(content_type, str) \
                and content_type.strip() and len(content_type) <= 256 \
                and not _CONTROL.search(content_type):
            data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
            return Answer(data, content_type.strip())
    raise _wrong_return(where, name, value, "(body: str | bytes, content_type: str)")


@dataclasses.dataclass(frozen=True)
class TfsHandler:
    """A model's ``inference.py``, loaded (pipeline ``sagemaker-tfs``).

    Attributes:
        where: ``models/<name>/inference.py``.
        handler: ``handler(data, context)``, or None when the file uses the pair.
        input_handler, output_handler: the pair (None when ``handler`` is defined).
    """

    where: str
    handler: Callable[..., Any] | None
    input_handler: Callable[..., Any] | None = None
    output_handler: Callable[..., Any] | None = None

    @classmethod
    def load(cls, model: ModelSpec) -> TfsHandler:
        """Import and check ``models/<name>/inference.py``.

        Raises:
            ConfigurationError: it does not import, or lacks ``handler(data, context)`` and
                the pair, or one takes the wrong arguments.
        """
        where = _where(model, "inference.py")
        module = import_user_file(model, "inference.py")
        handler = _function(module, "handler", "data, context", where)
        if handler is not None:  # as in the container: the pair is then ignored
            return cls(where, handler)
        pair = {name: _function(module, name, arguments, where) for name, arguments in
                (("input_handler", "data, context"), ("output_handler", "response, context"))}
        missing = [name for name, function in pair.items() if function is None]
        if len(missing) == 2:
            raise ConfigurationError(
                f"{where} defines neither handler(data, context) nor input_handler(data, "
                "context) and output_handler(response, context)")
        if missing:
            (defined,) = set(pair) - set(missing)
            raise ConfigurationError(f"{where} defines {defined} but not {missing[0]}: without "
                                     "handler(data, context), both are needed")
        return cls(where, None, pair["input_handler"], pair["output_handler"])

    def __call__(self, call: Call, invoke: Invoke, model: ModelSpec) -> Answer:
        """One request through the user's functions.

        Raises:
            InvalidInputError: the input side refused the request (its message).
            HandlerError: the user's code failed or returned the wrong shape.
            SagegateError: the endpoint's errors, unchanged.
        """
        with FORWARDER.session(invoke, model) as session:
            context = make_context(call, model, session.rest_uri)
            data = io.BytesIO(call.body)
            if self.handler is not None:
                return self._handler(self.handler, data, context, session)
            assert self.input_handler is not None and self.output_handler is not None
            body = _run(self.where, "input_handler", self.input_handler, data, context,
                        refusal=lambda: True)
            result = invoke(_request_body(body, self.where), model.content_type, model.accept)
            response = Response(result.body, result.content_type)
            returned = _run(self.where, "output_handler", self.output_handler, response, context)
            return _answer(returned, self.where, "output_handler")

    def _handler(self, handler: Callable[..., Any], data: io.BytesIO, context: Context,
                 session: _Session) -> Answer:
        try:
            returned = _run(self.where, "handler", handler, data, context,
                            refusal=lambda: session.forwarded == 0)
        except (HandlerError, InvalidInputError):
            if session.error is not None:  # the endpoint failed first: that is the answer
                raise session.error from None
            raise
        return _answer(returned, self.where, "handler")


def make_context(call: Call, model: ModelSpec, rest_uri: str) -> Context:
    """The container's ``Context`` for one request."""
    accept = (call.accept or "").strip() or JSON
    return Context(
        model_name=model.name,
        model_version="1",
        method="predict",
        rest_uri=rest_uri,
        grpc_port=None,
        custom_attributes=call.custom_attributes or None,
        request_content_type=call.content_type or JSON,
        accept_header=JSON if accept == "*/*" else accept,
        content_length=len(call.body),
    )


# --- the loopback forwarder behind context.rest_uri ---------------------------------------


@dataclasses.dataclass
class _Session:
    """One request's registration with the forwarder: its URL's token, its endpoint call, and
    what happened (how many posts; the endpoint's error, re-raised for the client)."""

    token: str
    invoke: Invoke
    model: ModelSpec
    rest_uri: str = ""
    forwarded: int = 0
    error: BaseException | None = None


_PATH = re.compile(r"/(?P<token>[\w-]{16,64})/v1/models/(?P<name>[^/:?]+)"
                   r"(?:/versions/\d+)?:predict")


class _Forwarder:
    """TF Serving's REST predict URL on 127.0.0.1, for ``handler(data, context)`` files.

    Started on first use (one ``ThreadingHTTPServer`` on a free port, a daemon thread). Each
    request registers a session whose ``rest_uri`` is
    ``http://127.0.0.1:<port>/<token>/v1/models/<name>:predict``: the random token ties a post
    to its request's endpoint call (endpoint, variant, time budget) and keeps other local
    processes out. A post calls the endpoint with the model's content type and accept and
    answers its body (200), or an endpoint error's status with TF Serving's
    ``{"error": message}`` (the error is also kept for the client's answer).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[str, _Session] = {}

    def port(self) -> int:
        """The forwarder's port, starting it if needed."""
        with self._lock:
            if self._server is None or self._thread is None or not self._thread.is_alive():
                server = ThreadingHTTPServer(("127.0.0.1", 0), _ForwardRequest)
                server.daemon_threads = True
                thread = threading.Thread(target=server.serve_forever, name="sagegate-forwarder",
                                          daemon=True)
                thread.start()
                self._server, self._thread = server, thread
            return int(self._server.server_address[1])

    @contextlib.contextmanager
    def session(self, invoke: Invoke, model: ModelSpec) -> Iterator[_Session]:
        """A registration for one request, removed when the request ends."""
        port = self.port()
        session = _Session(secrets.token_urlsafe(24), invoke, model)
        session.rest_uri = f"http://127.0.0.1:{port}/{session.token}/v1/models/{model.name}:predict"
        with self._lock:
            self._sessions[session.token] = session
        try:
            yield session
        finally:
            with self._lock:
                self._sessions.pop(session.token, None)

    def find(self, token: str) -> _Session | None:
        with self._lock:
            return self._sessions.get(token)

    def close(self) -> None:
        """Stop the server (tests); the next request starts another."""
        with self._lock:
            server, self._server, self._thread = self._server, None, None
        if server is not None:
            server.shutdown()
            server.server_close()


FORWARDER = _Forwarder()


class _ForwardRequest(BaseHTTPRequestHandler):
    """One post to ``context.rest_uri``."""

    server_version = "sagegate-forwarder"
    timeout = FORWARD_SOCKET_TIMEOUT

    def do_POST(self) -> None:
        match = _PATH.fullmatch(self.path.split("?", 1)[0])
        session = FORWARDER.find(match["token"]) if match else None
        if match is None or session is None or match["name"] != session.model.name:
            name = match["name"] if match else "?"
            self._error(404, f"Servable not found for request: Latest({name[:64]})")
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            self._error(411, "Content-Length is required")
            return
        if int(length) > MAX_FORWARD_BYTES:
            self.close_connection = True
            self._error(413, f"The body is larger than {MAX_FORWARD_BYTES} bytes")
            return
        body = self.rfile.read(int(length))
        session.forwarded += 1
        model = session.model
        try:
            result = session.invoke(body, model.content_type, model.accept)
        except SagegateError as error:
            session.error = error
            self._error(error.STATUS_CODE, error.message)
            return
        except Exception as error:  # sagegate's own failure: kept, re-raised for the client
            logger.exception("the forwarder's endpoint call failed")
            session.error = error
            self._error(500, "sagegate failed to call the endpoint")
            return
        self._send(200, result.body, result.content_type)

    def _error(self, status: int, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode(), JSON)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("forwarder: " + format, *args)


# --- cortex -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InputSignature:
    """One model input as Cortex's ONNX runtime shows it (onnxruntime's ``NodeArg``):
    ``name``, ``shape`` (a list; a free axis, -1 in ``model.json``, shows as ``"N"``) and
    ``type`` (``tensor(float)``...)."""

    name: str
    shape: list[int | str]
    type: str

    @classmethod
    def of(cls, spec: TensorSpec) -> InputSignature:
        return cls(spec.name, [FREE_AXIS if size == -1 else size for size in spec.shape],
                   spec.dtype.onnx_type)


@dataclasses.dataclass(frozen=True)
class CortexHandler:
    """A model's ``handler.py``, loaded (pipeline ``cortex``)."""

    where: str
    pre_inference: Callable[..., Any]
    post_inference: Callable[..., Any]

    @classmethod
    def load(cls, model: ModelSpec) -> CortexHandler:
        """Import and check ``models/<name>/handler.py``.

        Raises:
            ConfigurationError: it does not import, lacks ``pre_inference(sample, signature,
                metadata)`` or ``post_inference(prediction, signature, metadata)``, or the
                model declares no inputs.
        """
        where = _where(model, "handler.py")
        if not model.signature.inputs:
            raise ConfigurationError(f"models/{model.name}/model.json: the cortex pipeline "
                                     "needs signature.inputs (the handler's signature)")
        module = import_user_file(model, "handler.py")
        return cls(where,
                   _required(module, "pre_inference", "sample, signature, metadata", where),
                   _required(module, "post_inference", "prediction, signature, metadata",
                             where))

    def __call__(self, sample: Any, invoke: Invoke, model: ModelSpec) -> Any:
        """One parsed request body through ``pre_inference``, the endpoint (TF Serving's REST
        body) and ``post_inference``; the result as plain JSON values.

        Raises:
            InvalidInputError: pre_inference raised ValueError / TypeError (its message).
            SignatureMismatchError: what pre_inference returned does not fit an input.
            HandlerError: the user's code failed or returned something unusable.
            SagegateError: the endpoint's errors, unchanged.
        """
        signature = [InputSignature.of(spec) for spec in model.signature.inputs]
        metadata = copy.deepcopy(dict(model.metadata))
        returned = _run(self.where, "pre_inference", self.pre_inference, sample, signature,
                        metadata, refusal=lambda: True)
        arrays = self._arrays(returned, model)
        result = invoke(tensors.tfs_request(arrays, model.signature), model.content_type,
                        model.accept)
        prediction = _prediction(result.body, model)
        returned = _run(self.where, "post_inference", self.post_inference, prediction,
                        signature, metadata)
        try:
            document = tensors.to_json(returned)
            json.dumps(document, allow_nan=False)
        except (TypeError, ValueError):
            raise _wrong_return(self.where, "post_inference", returned,
                                "JSON values (numpy arrays and scalars allowed)") from None
        return document

    def _arrays(self, returned: Any, model: ModelSpec) -> dict[str, np.ndarray]:
        """pre_inference's result as one array per input: a dict by input name, or a bare
        list / array for a single-input model; with or without the batch axis."""
        inputs = model.signature.inputs
        if isinstance(returned, (list, tuple, np.ndarray)) and len(inputs) == 1:
            returned = {inputs[0].name: returned}
        names = [spec.name for spec in inputs]
        if not isinstance(returned, dict) or sorted(map(str, returned)) != sorted(names):
            keys = f" with the keys {sorted(map(str, returned))[:10]}" \
                if isinstance(returned, dict) else ""
            logger.error("%s: pre_inference returned %s%s; it must return a dict of the inputs "
                         "%s%s", self.where, _shape(returned), keys, names,
                         " or a list for the single input" if len(inputs) == 1 else "")
            raise HandlerError(HANDLER_FAILED)
        return {spec.name: tensors.coerce(spec, _plain(returned[spec.name])) for spec in inputs}


def _plain(value: Any) -> Any:
    """Lists of numpy scalars as plain lists (coerce reads Python numbers)."""
    if isinstance(value, np.ndarray):
        return value
    return tensors.to_json(list(value) if isinstance(value, tuple) else value)


def _prediction(body: bytes, model: ModelSpec) -> list[np.ndarray]:
    """The endpoint's TF Serving answer as onnxruntime's ``session.run()`` result: one array
    per output with the batch axis, in the declared dtype."""
    outputs = tensors.tfs_outputs(body, model.signature)
    specs = model.signature.outputs
    if len(specs) != len(outputs):
        return outputs
    typed = []
    for spec, array in zip(specs, outputs, strict=True):
        if spec.dtype != DType.STRING and array.dtype.kind in "biuf":
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                array = array.astype(np.dtype(str(spec.dtype)))
        typed.append(array)
    return typed


def load_handler(model: ModelSpec) -> TfsHandler | CortexHandler | None:
    """The loaded handler file a model's pipeline runs, or None when it runs none."""
    if model.pipeline == Pipeline.SAGEMAKER_TFS:
        return TfsHandler.load(model)
    if model.pipeline == Pipeline.CORTEX:
        return CortexHandler.load(model)
    return None


__all__ = ["FORWARDER", "Context", "CortexHandler", "InputSignature", "Response", "TfsHandler",
           "import_user_file", "load_handler", "make_context"]
