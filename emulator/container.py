"""The model container: SageMaker's built-in image classifier behaviour over a model.

A container answers ``(status, body, content type)`` like the process behind
``POST /invocations`` would; the runtime wraps non-2xx answers into a ModelError.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from emulator import imaging
from emulator.models import Model

JSON = "application/json"
JSONLINES = "application/jsonlines"
IMAGE_CONTENT_TYPES = frozenset(
    {
        "application/x-image",
        "image/jpeg",
        "image/png",
        "image/webp",
        "application/octet-stream",
    }
)
DEFAULT_CONTENT_TYPE = "application/octet-stream"
"""What an HTTP request without ``Content-Type`` carries (RFC 9110)."""

UNEVALUABLE = "unable to evaluate payload provided"


@dataclass(frozen=True)
class ContainerReply:
    """What the container answered."""

    status: int
    body: bytes
    content_type: str


class Container(Protocol):
    """Anything that answers an invocation like a model container."""

    def invoke(self, body: bytes, content_type: str | None, accept: str | None) -> ContainerReply:
        """Answers one invocation."""
        ...


class ContainerStream(Protocol):
    """An answer being made: its content type, then its bytes as they come."""

    content_type: str

    def parts(self) -> Iterator[bytes]:
        """The answer's pieces, each sent as it is made."""
        ...

    def close(self) -> None:
        """Stops making the answer (the caller went away, or it was sent)."""
        ...


@runtime_checkable
class StreamingContainer(Protocol):
    """A container that answers as it generates (InvokeEndpointWithResponseStream), and
    counts its generations."""

    def invoke(self, body: bytes, content_type: str | None, accept: str | None,
               cancel: threading.Event | None = None) -> ContainerReply:
        """Answers whole; ``cancel``, set from another thread, stops the generation."""
        ...

    def stream(self, body: bytes, content_type: str | None,
               accept: str | None) -> ContainerStream | ContainerReply:
        """Starts an answer; a refusal is a whole (non-2xx) reply."""
        ...

    def generations(self) -> dict[str, int]:
        """How many generations started, run, completed, were cancelled; tokens made."""
        ...


class SlowContainer:
    """A container that thinks for a fixed time before each answer: a model slower than
    InvokeEndpoint's 60 s, which only a job (Asynchronous Inference) can wait for."""

    def __init__(
        self, inner: Container, seconds: float, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.inner = inner
        self.seconds = seconds
        self.sleep = sleep

    def invoke(self, body: bytes, content_type: str | None, accept: str | None) -> ContainerReply:
        """Waits ``seconds``, then answers as the wrapped container."""
        self.sleep(self.seconds)
        return self.inner.invoke(body, content_type, accept)


def format_floats(values: np.ndarray) -> str:
    """Formats floats as a JSON array, each with the shortest repr that round-trips.

    Args:
        values: a 1-D float array (a float32 prints as ``1.4e-05``, not ``1.3999999e-05``).

    Returns:
        ``[p0, p1, ...]``; non-finite values (which a softmax never gives) as in ``json``.
    """
    if not np.all(np.isfinite(values)):
        return json.dumps([float(value) for value in values])
    return "[" + ", ".join(str(value) for value in values) + "]"


def encode_json(probabilities: np.ndarray) -> bytes:
    """Encodes probabilities as the built-in classifier's ``application/json`` answer."""
    return format_floats(probabilities).encode()


def encode_jsonlines(probabilities: np.ndarray) -> bytes:
    """Encodes probabilities as the ``application/jsonlines`` answer."""
    return ('{"prediction": ' + format_floats(probabilities) + "}").encode()


ENCODERS: dict[str, Callable[[np.ndarray], bytes]] = {
    JSON: encode_json,
    JSONLINES: encode_jsonlines,
}


def media_type(header: str | None) -> str:
    """Returns the lower-case media type of a header value, without parameters."""
    return (header or "").split(";", 1)[0].strip().lower()


def choose_accept(accept: str | None) -> str | None:
    """Picks the answer's content type from an ``Accept`` header.

    Args:
        accept: the header, possibly a comma-separated list; None or empty means any.

    Returns:
        A key of :data:`ENCODERS`, or None when nothing acceptable is offered.
    """
    offered = [media_type(item) for item in (accept or "").split(",")]
    for item in offered:
        if item in ENCODERS:
            return item
        if item in ("", "*/*", "application/*"):
            return JSON
    return None


class ImageClassifier:
    """SageMaker's built-in image classifier contract over any :class:`Model`."""

    def __init__(self, model: Model, spec: imaging.PreprocessSpec, classes: int | None) -> None:
        """Builds the container.

        Args:
            model: maps a ``[N, 3, H, W]`` float32 batch to ``[N, classes]`` probabilities.
            spec: how images become the model's input.
            classes: the expected number of classes, or None to accept any.
        """
        self.model = model
        self.spec = spec
        self.classes = classes

    def invoke(self, body: bytes, content_type: str | None, accept: str | None) -> ContainerReply:
        """Classifies one image.

        Args:
            body: the encoded image.
            content_type: the request's ``Content-Type``.
            accept: the request's ``Accept``.

        Returns:
            200 with the probabilities; 415, 406 or 400 for requests the container refuses;
            500 when the model's output is not one row of probabilities.
        """
        if (media_type(content_type) or DEFAULT_CONTENT_TYPE) not in IMAGE_CONTENT_TYPES:
            return _text_reply(415, f"{UNEVALUABLE}: content type {content_type!r} not supported")
        answer_type = choose_accept(accept)
        if answer_type is None:
            return _text_reply(406, f"{UNEVALUABLE}: accept {accept!r} not supported")
        try:
            batch = imaging.preprocess(body, self.spec)
        except imaging.ImageError as error:
            return _text_reply(400, f"{UNEVALUABLE}: {error}")
        row = self._classify(batch)
        if row is None:
            return _text_reply(500, "model output is not one row of class probabilities")
        return ContainerReply(200, ENCODERS[answer_type](row), answer_type)

    def _classify(self, batch: np.ndarray) -> np.ndarray | None:
        output = np.asarray(self.model.predict(batch))
        if output.ndim != 2 or output.shape[0] != 1:
            return None
        if self.classes is not None and output.shape[1] != self.classes:
            return None
        return output[0].astype(np.float32, copy=False)


def _text_reply(status: int, message: str) -> ContainerReply:
    return ContainerReply(status, message.encode(), "text/plain; charset=utf-8")
