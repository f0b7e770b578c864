"""The streaming function's handler: OpenAI's completion routes (``POST /v1/chat/completions``,
``POST /v1/completions``) from API Gateway REST's proxy event (version 1.0, the event Chalice's
function gets), answered in Lambda's HTTP integration streaming form: a JSON prelude
(``statusCode``, ``headers``, ``cookies``) within 16 KB, eight NUL bytes, then the body: a
stream's ``data:`` events written one by one as the model makes them, or a whole JSON body
(``stream: false``, an error).

It serves as ``app.py``'s routes do, without Chalice: the same :class:`Services` and
:class:`Exchanges`, :func:`serve_streaming` and its :class:`LoggedBody`, the CORS headers
Chalice's routes answer with, the app's body limit (OpenAI's 413). API Gateway has checked the
API key (``requestContext.identity.apiKeyId`` is the key's id). The stream's failures:

* an error event the service wrote (the container's ``ModelStreamError``, a stream broken off,
  a read timeout) or a defect of ours (then OpenAI's ``server_error`` event) ends the response
  with Lambda's error trailers, so Lambda counts a function error, their type the error
  event's code in CamelCase (``ModelError``, ``ServerError``...);
* the function's deadline: :data:`DEADLINE_MARGIN_MS` before it, the response is ended by a
  timer (a stream: OpenAI's ``deadline_exceeded`` event and the trailers; before the first
  byte: a whole 504), so the client gets a last word before Lambda stops the function.

After the response's end (the client has it all) the exchange's bookkeeping runs
(:meth:`LoggedBody.close`: the record, the cache, the log line, metrics), then the services'
handler end, before the loop asks for the next invocation.
"""
from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Protocol

from chalicelib.core import environment, lifecycle
from chalicelib.core.access import Access
from chalicelib.core.errors import SagegateError
from chalicelib.core.observability import logger
from chalicelib.http.completions import (
    JSON_HEADERS,
    LoggedBody,
    deliver,
    internal_error,
    serve_streaming,
    too_large,
)
from chalicelib.http.exchange import ALLOW_HEADERS, Exchanges, request_id
from chalicelib.http.modelcalls import MODEL_EXPOSE_HEADERS
from chalicelib.llm.errors import SERVER_ERROR, OpenAIError, from_sagegate
from chalicelib.llm.streams import DONE, sse
from chalicelib.services import Services

ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})
PRELUDE_END = b"\0" * 8
MAX_PRELUDE_BYTES = 16 * 1024
DEADLINE_MARGIN_MS = 2000
"""How long before the function's deadline its response is ended (the error event and the
trailers sent while the function may still send)."""
DEADLINE_CODE = "deadline_exceeded"
_CHALICE_ALLOW_HEADERS = ("Content-Type", "X-Amz-Date", "Authorization", "X-Api-Key",
                          "X-Amz-Security-Token")  # what Chalice's CORSConfig always allows
CORS_MAX_AGE = 600


class Stream(Protocol):
    """The response stream the runtime loop hands the handler
    (:class:`chalicelib.lambdastream.runtime.ResponseStream`)."""

    def write(self, data: bytes) -> None: ...

    def end(self) -> None: ...

    def fail(self, error_type: str, message: str) -> None: ...


class Headers(Mapping[str, str]):
    """A request's headers, read whatever their case (as Chalice's)."""

    def __init__(self, headers: Mapping[str, Any] | None) -> None:
        self._headers = {str(name).lower(): str(value)
                         for name, value in (headers or {}).items()}

    def __getitem__(self, name: str) -> str:
        return self._headers[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers)

    def __len__(self) -> int:
        return len(self._headers)


class ProxyRequest:
    """An API Gateway REST proxy event as :class:`chalicelib.http.exchange.ServedRequest`."""

    def __init__(self, event: Mapping[str, Any]) -> None:
        self._event = event
        self.method = str(event.get("httpMethod") or "")
        context = event.get("requestContext")
        self.context: MutableMapping[str, Any] = context if isinstance(context, dict) else {}
        self.path = str(self.context.get("resourcePath") or event.get("resource") or "")
        self.headers: Mapping[str, str] = Headers(event.get("headers"))
        query = event.get("queryStringParameters")
        self.query_params: Mapping[str, str] | None = query if isinstance(query, dict) else None
        body = event.get("body") or ""
        self.raw_body: bytes = base64.b64decode(body) if event.get("isBase64Encoded") \
            else str(body).encode("utf-8")

    def to_original_event(self) -> Mapping[str, Any]:
        return self._event


def cors_headers(access: Access) -> dict[str, str]:
    """The CORS headers ``app.py``'s routes answer with (none where CORS is off)."""
    if not access.cors_origin:
        return {}
    return {"Access-Control-Allow-Origin": access.cors_origin,
            "Access-Control-Allow-Headers": ",".join(sorted(
                {*ALLOW_HEADERS, *_CHALICE_ALLOW_HEADERS})),
            "Access-Control-Expose-Headers": ",".join(MODEL_EXPOSE_HEADERS),
            "Access-Control-Max-Age": str(CORS_MAX_AGE)}


def prelude(status: int, headers: Mapping[str, str]) -> bytes:
    """The metadata API Gateway reads before the body, with its eight NUL bytes.

    Raises:
        ValueError: it is over API Gateway's 16 KB.
    """
    document = json.dumps({"statusCode": status, "headers": dict(headers), "cookies": []},
                          separators=(",", ":")).encode()
    if len(document) + len(PRELUDE_END) > MAX_PRELUDE_BYTES:
        raise ValueError(f"the response's metadata is {len(document)} bytes, over 16 KB")
    return document + PRELUDE_END


def error_type(event: bytes) -> tuple[str, str]:
    """A failed stream's last event (an error event) as Lambda's function error: the type (its
    code in CamelCase) and message."""
    try:
        error = json.loads(event.removeprefix(b"data: "))["error"]
        code, message = str(error.get("code") or error.get("type")), str(error["message"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return "StreamError", "The stream ended without [DONE]."
    return "".join(part.title() for part in code.split("_")), message


class Answer:
    """The response as the handler and its deadline's timer write it: each step holds the
    answer's lock, so the timer's last word never lands inside a step of the handler's."""

    def __init__(self, stream: Stream, cors: Mapping[str, str]) -> None:
        self.stream, self.cors = stream, cors
        self.began = False
        self.expired = False
        """Whether the deadline's timer has answered (the handler serves nothing more)."""
        self.lock = threading.RLock()

    def begin(self, status: int, headers: Mapping[str, str]) -> None:
        """The prelude, the route's CORS headers under the answer's own."""
        with self.lock:
            self.stream.write(prelude(status, {**self.cors, **headers}))
            self.began = True

    def write(self, data: bytes) -> None:
        with self.lock:
            self.stream.write(data)

    def whole(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        """An answer not streamed: the prelude, the body, the end."""
        with self.lock:
            self.begin(status, headers)
            self.write(body)
            self.stream.end()

    def error(self, error: OpenAIError, request_id: str) -> None:
        """An OpenAI error document, whole."""
        self.whole(error.status, {**JSON_HEADERS, **error.headers, "X-Request-Id": request_id},
                   json.dumps(error.document()).encode())

    def ended(self, last: bytes) -> None:
        """The stream's end after its ``last`` event: [DONE] ends it, an error event fails it."""
        with self.lock:
            if last == DONE:
                self.stream.end()
            else:
                self.stream.fail(*error_type(last))

    def expire(self, request_id: str) -> None:
        """The deadline came: the last word said, the response ended."""
        error = OpenAIError(504, "The answer took longer than the function may run.",
                            code=DEADLINE_CODE, kind=SERVER_ERROR)
        try:
            with self.lock:
                self.expired = True
                if not self.began:
                    self.error(error, request_id)
                    return
                event = sse(error.document())
                self.stream.write(event)
                logger.error("the function's deadline is near: its stream ended")
                self.stream.fail(*error_type(event))
        except ConnectionError:  # already ended: the handler finished first
            return


services = Services()
exchanges = Exchanges(lambda: None)
ACCESS = Access.from_env(environment.variables(), deployed=lifecycle.on_lambda())
CORS = cors_headers(ACCESS)


def handle(event: Mapping[str, Any], context: Any, stream: Stream) -> None:
    """Answer one API Gateway proxy event on ``stream`` (see the module)."""
    request = ProxyRequest(event)
    answer = Answer(stream, CORS)
    identity = request_id(request.context)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    timer = None
    if callable(remaining):
        left = remaining() - DEADLINE_MARGIN_MS
        if left <= 0:  # no time to serve: the deadline's 504 now, nothing reserved or called
            answer.expire(identity)
        else:
            timer = threading.Timer(left / 1000.0, answer.expire, (identity,))
            timer.daemon = True
            timer.start()
    try:
        if not answer.expired:
            _serve(request, answer, identity)
    except ConnectionError:  # ended by the deadline's timer, or its connection lost
        logger.info("the response could not be written on: its stream was left")
    finally:
        if timer is not None:
            timer.cancel()
        services.handler_ended(context)


def _serve(request: ProxyRequest, answer: Answer, identity: str) -> None:
    refusal = _refusal(request)
    if refusal is not None:
        answer.error(refusal, identity)
        return
    if answer.expired:  # the deadline's timer answered meanwhile: no tokens reserved, no call
        return
    try:
        status, headers, body = serve_streaming(lambda: services.llm, exchanges, request)
    except Exception:  # a defect: answered as Chalice answers a view's, a 500
        logger.exception("the streaming route failed")
        answer.error(internal_error("internal_error"), identity)
        return
    _send(answer, status, headers, body)


def _refusal(request: ProxyRequest) -> OpenAIError | None:
    """What is refused before the service reads the request: another route, a body over the
    app's limit."""
    if request.method != "POST" or request.path not in ROUTES:
        return OpenAIError(404, f"This function does not serve {request.method} "
                           f"{request.path[:64]}.", code="unknown_url")
    try:
        limit = services.settings.max_body_bytes
    except SagegateError as error:
        return from_sagegate(error)
    return too_large(len(request.raw_body), limit) if len(request.raw_body) > limit else None


def _send(answer: Answer, status: int, headers: Mapping[str, str], body: LoggedBody) -> None:
    """The answer written, ended, then its body closed (the exchange's bookkeeping)."""
    try:
        if not headers.get("Content-Type", "").startswith("text/event-stream"):
            answer.whole(status, headers, b"".join(body))
            return
        answer.begin(status, headers)
        answer.ended(deliver(body, answer.write))
    finally:
        body.close()


if lifecycle.on_lambda():  # the init phase: the registry and the endpoint's client built
    try:
        _ = services.llm
    except SagegateError as failure:  # each request answers it, in OpenAI's shape
        logger.error("the llm service could not be built: %s", failure.message)
