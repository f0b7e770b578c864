"""The SageMaker TensorFlow Serving container's contract: ``inference.py``'s ``handler`` or
``input_handler``/``output_handler``, its ``Context`` and its ``requests``-like ``Response``."""
from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from chalicelib.calls import Answer, Call, Invoke
from chalicelib.core.errors import (
    ConfigurationError,
    HandlerError,
    InvalidInputError,
)
from chalicelib.core.media import bare
from chalicelib.inference import tensors
from chalicelib.inference.userfiles.failures import (
    CONTROL_CHARACTERS,
    bound_json_depth,
    check_batch,
    run_user_code,
    wrong_return,
)
from chalicelib.inference.userfiles.forwarder import FORWARDER, ForwardSession
from chalicelib.inference.userfiles.importing import file_label, import_user_file, user_function
from chalicelib.registry.specs import ModelSpec

logger = logging.getLogger("sagegate.handlers")

JSON = "application/json"


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
    raise wrong_return(where, "input_handler", value, "the request body (str or bytes)")


def _answer(value: Any, where: str, name: str) -> Answer:
    """A ``(body, content_type)`` return as the answer."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        body, content_type = value
        if isinstance(body, (str, bytes, bytearray)) and isinstance(content_type, str) \
                and content_type.strip() and len(content_type) <= 256 \
                and not CONTROL_CHARACTERS.search(content_type):
            data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
            return Answer(data, content_type.strip())
    raise wrong_return(where, name, value, "(body: str | bytes, content_type: str)")


@dataclasses.dataclass(frozen=True)
class TfsHandler:
    """A model's ``inference.py``, loaded (pipeline ``sagemaker-tfs``): ``handler``, or the
    pair when it is None."""

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
        where = file_label(model, "inference.py")
        module = import_user_file(model, "inference.py")
        handler = user_function(module, "handler", "data, context", where)
        if handler is not None:  # as in the container: the pair is then ignored
            return cls(where, handler)
        pair = {name: user_function(module, name, arguments, where) for name, arguments in
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
            returned = run_user_code(self.where, "input_handler", self.input_handler, data,
                                     context, refusal=lambda: True, expose=expose)
            body = _request_body(returned, self.where)
            check_batch(body, model.content_type, "input_handler")
            result = invoke(body, model.content_type, model.accept)
            response = Response(result.body, result.content_type)
            returned = run_user_code(self.where, "output_handler", self.output_handler,
                                     response, context, expose=expose)
            return _answer(returned, self.where, "output_handler")

    def _handler(self, handler: Callable[..., Any], data: io.BytesIO, context: Context,
                 session: ForwardSession, expose: bool) -> Answer:
        try:
            returned = run_user_code(self.where, "handler", handler, data, context,
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
