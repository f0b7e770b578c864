"""Users' own pre/post-processing files, run unchanged.

Two contracts people already have files for (CONTRACTS.md section 5):

* ``sagemaker-tfs``: the SageMaker TensorFlow Serving container's ``inference.py``, either
  ``handler(data, context)`` or the pair ``input_handler(data, context)`` /
  ``output_handler(response, context)`` (when ``handler`` exists the pair is ignored, as in the
  container). :class:`TfsHandler` gives them what the container gives: ``data`` a stream,
  ``context`` the container's ``Context`` namedtuple, ``response`` an object shaped like
  ``requests.Response``; their ``(body, content_type)`` is the answer. A ``handler`` posts to
  ``context.rest_uri`` itself (with ``requests``, as in the container): that URL is a loopback
  forwarder in this process which calls the endpoint (:class:`_Forwarder`). ``data`` is a
  stream in every release of the container that runs ``inference.py`` (v1.2.0 of April 2019,
  the first, to v1.8.4, the last tag): its ``python_service.py`` always passed the request's
  stream, though the README's ``input_handler`` docstring (v1.3.1.post1 on) calls ``data``
  "the request data, in format of dict or string" while its code calls ``data.read()``. A file
  that treats ``data`` as ``bytes`` never ran there and is not accepted here either: its
  failure is logged with the advice to read the stream.
* ``cortex``: Cortex's ``handler.py`` for its ONNX runtime (:class:`CortexHandler`), in both
  forms Cortex ran: ``pre_inference(sample, signature, metadata)`` and
  ``post_inference(prediction, signature, metadata)`` (v0.10 and v0.11; ``metadata`` the API's
  own dict, ``signature`` the model's input ``NodeArg`` list for ``pre_inference`` and its
  output list for ``post_inference``), and the earlier ``pre_inference(sample, metadata)`` and
  ``post_inference(prediction, metadata)`` (v0.6, the first with ONNX, to v0.9; ``metadata``
  then the input, resp. output, ``NodeArg`` list). Which form a function has is read from its
  signature when the file is loaded. Each function is optional, as in Cortex: without
  ``pre_inference`` the body goes to the model as it came, without ``post_inference`` the
  model's outputs are the answer. From v0.12 Cortex replaced these functions by predictor
  classes, which are not read here.

Failures: a file that does not import or lacks a function stops start-up with a
:class:`~chalicelib.core.errors.ConfigurationError` naming the file. At request time a
``ValueError``/``TypeError`` from the input side (``input_handler``, ``pre_inference``, a
``handler`` before it called the model) is the client's :class:`InvalidInputError` (400) with its
message, a ``RecursionError`` there a 400 and a ``MemoryError`` a 413; anything else the user's
code raises is a :class:`HandlerError` (500) saying that the log has the traceback under the
answer's ``request_id``, with the exception's type and message only for a model whose
``model.json`` says ``"expose_handler_errors": true``. sagegate's own errors (the endpoint's)
pass through unchanged.

Hostile bodies are bounded before user code runs and after it: a JSON body nesting deeper than
:data:`MAX_JSON_DEPTH` is refused before a handler sees it, and a request the user's code builds
for the endpoint may hold at most :data:`~chalicelib.inference.tensors.MAX_INSTANCES`
instances, as the tensor pipeline's.
"""
from __future__ import annotations

import contextlib
import contextvars
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

from chalicelib.calls import Answer, Call, Invoke
from chalicelib.core.errors import (
    ConfigurationError,
    HandlerError,
    InvalidInputError,
    InvalidJSONError,
    PayloadTooLargeError,
    SagegateError,
    SignatureMismatchError,
)
from chalicelib.core.media import MediaType, bare
from chalicelib.inference import tensors
from chalicelib.registry.loading import DType, ModelSpec, Pipeline, TensorSpec

logger = logging.getLogger("sagegate.handlers")

JSON = "application/json"
MODULE_PREFIX = "sagegate_models"
"""User files are imported as ``sagegate_models.<model name, hyphens as _>.<file stem>``."""
HANDLER_FAILED = ("The model's handler failed; the service's log has the details under this "
                  "answer's request_id.")
MAX_MESSAGE = 512
"""The longest message taken from a user's exception (InvalidInput, or an exposed failure)."""
MAX_JSON_DEPTH = 512
"""The deepest JSON nesting a handler model's body may have: below every common parser's own
limit (orjson's 1024, a pure-Python parser's 1000 frames), so a handler parsing the body
itself never meets a RecursionError for it."""
FREE_AXIS = "N"
"""What a Cortex signature's shape shows for a free (-1) axis; ONNX shows a symbolic name."""
MAX_FORWARD_BYTES = 10 * 1024 * 1024
"""The largest body a ``handler`` may post to ``context.rest_uri``."""
FORWARD_SOCKET_TIMEOUT = 30.0
"""Seconds the forwarder waits on a silent connection (the endpoint call has its own budget)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("sagegate_handler_request",
                                                                  default="")


@contextlib.contextmanager
def request_scope(request_id: str) -> Iterator[None]:
    """Name the request the user's code runs for: a failure's log line carries its id, the
    one the client's answer shows (Lambda's own request id is another)."""
    token = _REQUEST_ID.set(request_id)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)


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
    found = _form(module, name, (arguments,), where)
    return found[0] if found else None


def _form(module: types.ModuleType, name: str, forms: tuple[str, ...], where: str
          ) -> tuple[Callable[..., Any], int] | None:
    """``module.name`` and how many arguments it takes: the first of ``forms`` (argument lists,
    most arguments first) its signature accepts positionally; None when it is not defined.

    Raises:
        ConfigurationError: it is not a function, or takes none of the forms.
    """
    function = getattr(module, name, None)
    if function is None:
        return None
    accepted = " or ".join(f"{name}({arguments})" for arguments in forms)
    if not callable(function):
        raise ConfigurationError(f"{where}: {name} must be a function {accepted}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trust the first form
        return function, forms[0].count(",") + 1
    for arguments in forms:
        try:
            signature.bind(*arguments.split(", "))
        except TypeError:
            continue
        return function, arguments.count(",") + 1
    counts = " or ".join(str(arguments.count(",") + 1) for arguments in forms)
    raise ConfigurationError(f"{where}: {name} must take {counts} positional arguments "
                             f"{accepted}, not {name}{signature}")


def _required(module: types.ModuleType, name: str, arguments: str, where: str
              ) -> Callable[..., Any]:
    function = _function(module, name, arguments, where)
    if function is None:
        raise ConfigurationError(f"{where} defines no {name}({arguments})")
    return function


# --- calling user code --------------------------------------------------------------------


def _run(where: str, name: str, function: Callable[..., Any], *args: Any,
         refusal: Callable[[], bool] = lambda: False, expose: bool = False) -> Any:
    """``function(*args)``, its failures translated (see the module docstring).

    Args:
        refusal: whether an error raised now is the client's (the input side).
        expose: whether a HandlerError shows the exception's type and message.
    """
    try:
        return function(*args)
    except SagegateError:
        raise
    except (ValueError, TypeError) as error:
        if refusal():
            message = _text(error) or f"The model's {name} refused the input."
            logger.info("%s: %s refused the request: %s", where, name, message)
            raise InvalidInputError(message) from None
        raise _failed(where, name, error, expose) from None
    except (RecursionError, MemoryError) as error:
        if refusal():  # the request's size or depth: the client's
            logger.warning("%s: %s raised %s (request_id %s)", where, name,
                           type(error).__name__, _REQUEST_ID.get() or "unknown")
            raise _too_complex(name, error) from None
        raise _failed(where, name, error, expose) from None
    except (Exception, SystemExit) as error:
        raise _failed(where, name, error, expose) from None


def _text(error: BaseException) -> str:
    """An exception's message, bounded (a broken ``__str__`` gives none)."""
    try:
        return str(error).strip()[:MAX_MESSAGE]
    except Exception:
        return ""


def _failed(where: str, name: str, error: BaseException, expose: bool) -> HandlerError:
    """The HandlerError for an exception the user's code raised, logged with its traceback
    (call it in the ``except`` block)."""
    request_id = _REQUEST_ID.get()
    logger.exception("%s: %s raised (request_id %s)%s", where, name, request_id or "unknown",
                     _advice(error), extra={"request_id": request_id})
    details: dict[str, object] = {"function": name}
    if expose:  # the model's owner chose to show it: type and message only, never a traceback
        details["exception"] = {"type": type(error).__name__, "message": _text(error)}
    return HandlerError(HANDLER_FAILED, details=details)


def _advice(error: BaseException) -> str:
    """For the log: the container's ``data`` is a stream, not the ``bytes`` a file expected."""
    if isinstance(error, AttributeError) and "'_io.BytesIO' object" in _text(error):
        return (" (data is a stream, as in every release of the SageMaker TF Serving "
                "container: read the body with data.read())")
    return ""


def _too_complex(name: str, error: BaseException) -> SagegateError:
    if isinstance(error, MemoryError):
        return PayloadTooLargeError(f"The model's {name} ran out of memory reading the "
                                    "request: send a smaller one.")
    return InvalidInputError(f"The model's {name} could not read the request: it is nested "
                             "too deeply.")


def bound_json_depth(body: bytes) -> None:
    """Refuse a JSON (or JSON lines) body nesting deeper than :data:`MAX_JSON_DEPTH`, without
    parsing it: strings are cut out, the brackets left are counted (no recursion, no Python
    loop over the body).

    Raises:
        InvalidJSONError: it nests deeper (the image route's error for a body too deep).
    """
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    if len(brackets) <= MAX_JSON_DEPTH:
        return
    codes = np.frombuffer(brackets, dtype=np.uint8)
    # an opening bracket goes one level down, a closing one up: the deepest point is the peak
    opening = (codes == ord("[")) | (codes == ord("{"))
    steps = opening.astype(np.int32) * 2 - 1
    if int(np.cumsum(steps, dtype=np.int32).max()) > MAX_JSON_DEPTH:
        raise InvalidJSONError(f"The request body is not valid JSON for this model: it nests "
                               f"deeper than {MAX_JSON_DEPTH} levels.")


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(code for code in range(256) if code not in b"[]{}")


def _check_batch(body: bytes, content_type: str, name: str) -> None:
    """Refuse a TF Serving REST body the user's code built with more than
    :data:`~chalicelib.inference.tensors.MAX_INSTANCES` instances (the endpoint's own bound).

    Raises:
        SignatureMismatchError: it has more.
    """
    if bare(content_type) != MediaType.JSON or body.lstrip()[:1] != b"{":
        return
    try:
        document = json.loads(body)
    except Exception:  # not JSON (or too deep to read): the endpoint's to refuse
        return
    count = _batch_size(document)
    if count > tensors.MAX_INSTANCES:
        raise SignatureMismatchError(
            f"The model's {name} made a request of {count} instances; at most "
            f"{tensors.MAX_INSTANCES} per request: send fewer records.")


def _batch_size(document: Any) -> int:
    """How many instances a TF Serving REST body holds (``instances`` rows, or ``inputs``
    columns' first axis); 0 when it is not one."""
    if not isinstance(document, dict):
        return 0
    for key in ("instances", "inputs"):
        value = document.get(key)
        if isinstance(value, list):
            return len(value)
        if isinstance(value, dict):
            return max((len(column) for column in value.values()
                        if isinstance(column, list)), default=0)
    return 0


def _shape(value: Any) -> str:
    """What a handler returned, for the log: types, never contents."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(item).__name__ for item in value)})"
    return f"a {type(value).__name__}"


def _wrong_return(where: str, name: str, value: Any, required: str) -> HandlerError:
    logger.error("%s: %s returned %s; it must return %s", where, name, _shape(value), required)
    return HandlerError(HANDLER_FAILED, details={"function": name})


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
        except (TypeError, ValueError, RecursionError):
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
        if "json" in bare(call.content_type):
            bound_json_depth(call.body)
        expose = model.expose_handler_errors
        with FORWARDER.session(invoke, model) as session:
            context = make_context(call, model, session.rest_uri)
            data = io.BytesIO(call.body)
            if self.handler is not None:
                return self._handler(self.handler, data, context, session, expose)
            assert self.input_handler is not None and self.output_handler is not None
            returned = _run(self.where, "input_handler", self.input_handler, data, context,
                            refusal=lambda: True, expose=expose)
            body = _request_body(returned, self.where)
            _check_batch(body, model.content_type, "input_handler")
            result = invoke(body, model.content_type, model.accept)
            response = Response(result.body, result.content_type)
            returned = _run(self.where, "output_handler", self.output_handler, response, context,
                            expose=expose)
            return _answer(returned, self.where, "output_handler")

    def _handler(self, handler: Callable[..., Any], data: io.BytesIO, context: Context,
                 session: _Session, expose: bool) -> Answer:
        try:
            returned = _run(self.where, "handler", handler, data, context,
                            refusal=lambda: session.forwarded == 0, expose=expose)
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
            _check_batch(body, model.content_type, "handler")
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
    """One model input (or output) as Cortex's ONNX runtime shows it (onnxruntime's ``NodeArg``):
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
    """A model's ``handler.py``, loaded (pipeline ``cortex``).

    Attributes:
        where: ``models/<name>/handler.py``.
        pre_inference, post_inference: the functions (None when the file lacks one).
        pre_arguments, post_arguments: how many arguments each takes: 3 (Cortex v0.10 to
            v0.11: ``(value, signature, metadata)``) or 2 (v0.6 to v0.9: ``(value,
            metadata)``, ``metadata`` then the signature).
    """

    where: str
    pre_inference: Callable[..., Any] | None
    post_inference: Callable[..., Any] | None
    pre_arguments: int = 3
    post_arguments: int = 3

    @classmethod
    def load(cls, model: ModelSpec) -> CortexHandler:
        """Import and check ``models/<name>/handler.py``, reading each function's form.

        Raises:
            ConfigurationError: it does not import, defines neither function, one takes
                neither form's arguments, or the model declares no inputs.
        """
        where = _where(model, "handler.py")
        if not model.signature.inputs:
            raise ConfigurationError(f"models/{model.name}/model.json: the cortex pipeline "
                                     "needs signature.inputs (the handler's signature)")
        module = import_user_file(model, "handler.py")
        pre = _form(module, "pre_inference", ("sample, signature, metadata",
                                              "sample, metadata"), where)
        post = _form(module, "post_inference", ("prediction, signature, metadata",
                                                "prediction, metadata"), where)
        if pre is None and post is None:
            raise ConfigurationError(
                f"{where} defines neither pre_inference(sample, signature, metadata) nor "
                "post_inference(prediction, signature, metadata)")
        return cls(where, pre[0] if pre else None, post[0] if post else None,
                   pre[1] if pre else 3, post[1] if post else 3)

    def __call__(self, sample: Any, invoke: Invoke, model: ModelSpec) -> Any:
        """One parsed request body through ``pre_inference``, the endpoint (TF Serving's REST
        body) and ``post_inference``; the result as plain JSON values.

        Raises:
            InvalidInputError: pre_inference raised ValueError / TypeError (its message).
            SignatureMismatchError: what pre_inference returned does not fit an input, or
                holds more than ``MAX_INSTANCES`` instances.
            HandlerError: the user's code failed or returned something unusable.
            SagegateError: the endpoint's errors, unchanged.
        """
        inputs = [InputSignature.of(spec) for spec in model.signature.inputs]
        outputs = [InputSignature.of(spec) for spec in model.signature.outputs]
        metadata = copy.deepcopy(dict(model.metadata))
        returned = sample
        if self.pre_inference is not None:
            returned = _run(self.where, "pre_inference", self.pre_inference,
                            *_arguments(sample, inputs, metadata, self.pre_arguments),
                            refusal=lambda: True, expose=model.expose_handler_errors)
        arrays = self._arrays(returned, model)
        result = invoke(tensors.tfs_request(arrays, model.signature), model.content_type,
                        model.accept)
        returned = prediction = _prediction(result.body, model)
        if self.post_inference is not None:
            returned = _run(self.where, "post_inference", self.post_inference,
                            *_arguments(prediction, outputs, metadata, self.post_arguments),
                            expose=model.expose_handler_errors)
        try:
            document = tensors.to_json(returned)
            json.dumps(document, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
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
            if self.pre_inference is None:  # the client's body goes to the model as it came
                raise SignatureMismatchError(f"The body must be an object of the inputs {names}"
                                             f"{' or a list' if len(inputs) == 1 else ''}.")
            keys = f" with the keys {sorted(map(str, returned))[:10]}" \
                if isinstance(returned, dict) else ""
            logger.error("%s: pre_inference returned %s%s; it must return a dict of the inputs "
                         "%s%s", self.where, _shape(returned), keys, names,
                         " or a list for the single input" if len(inputs) == 1 else "")
            raise HandlerError(HANDLER_FAILED, details={"function": "pre_inference"})
        try:  # coerce refuses more than MAX_INSTANCES rows, as for the tensor pipeline
            return {spec.name: tensors.coerce(spec, _plain(returned[spec.name]))
                    for spec in inputs}
        except RecursionError:
            raise SignatureMismatchError("The model's inputs are nested too deeply.") from None


def _arguments(value: Any, signature: list[InputSignature], metadata: dict[str, Any],
               count: int) -> tuple[Any, ...]:
    """A Cortex function's arguments in its form: v0.10's ``(value, signature, metadata)`` or
    v0.6's ``(value, metadata)``, whose ``metadata`` was the signature."""
    return (value, signature, metadata) if count == 3 else (value, signature)


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


__all__ = ["FORWARDER", "MAX_JSON_DEPTH", "Context", "CortexHandler", "InputSignature",
           "Response", "TfsHandler", "bound_json_depth", "import_user_file", "load_handler",
           "make_context", "request_scope"]
